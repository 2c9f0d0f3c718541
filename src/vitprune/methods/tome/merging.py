"""ToMe's token operation and its edit: the blocks of a model merge their most similar tokens by bipartite soft
matching (:class:`TokenMerging`, installed by :func:`merge_tokens`). The edit is declared to the entry-point group
``vitprune.edits``, so a saved model that merges tokens loads in a process that never imported ToMe."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.adapters import ViTAdapter
from vitprune.adapters.tokens import TokenOp, TokenState
from vitprune.errors import VitpruneError
from vitprune.recipe.edits import register_edit
from vitprune.surgery.tokens import token_operation


class TokenMerging(TokenOp):
    """ToMe's operation (Bolya et al., 2023): merge the ``r`` most similar pairs of tokens by bipartite soft matching.

    The tokens alternate between sets A (positions 0, 2, ...) and B (1, 3, ...) over the whole sequence; each A token
    points to the B token whose head-averaged key is most similar (cosine), and the ``r`` A tokens with the most
    similar partners merge into them as size-weighted means, sizes summed. Prefix tokens neither merge nor receive;
    they leave first, in order, then the A tokens that stay (in order), then the B tokens. ``r`` is capped at half
    the non-prefix tokens. Ties go to the earlier token, so the merge does not depend on the device.
    """

    reads = "keys"
    does = "merges tokens"
    keeps_positions = False

    def __init__(self, *, num_prefix_tokens: int, r: int = 0, proportional: bool = True) -> None:
        super().__init__()
        self.num_prefix_tokens, self.r, self.proportional = num_prefix_tokens, r, proportional

    def merged(self, tokens: int) -> int:
        """Pairs merged when ``tokens`` enter: ``r``, at most half the non-prefix tokens."""
        return max(0, min(self.r, (tokens - self.num_prefix_tokens) // 2))

    def scoring_macs(self, tokens: int, heads: int, head_dim: int) -> int:
        # The similarity of every A token to every B token, on head-averaged keys; none where nothing merges.
        return math.ceil(tokens / 2) * (tokens // 2) * head_dim if self.merged(tokens) else 0

    def forward(self, x: torch.Tensor, state: TokenState, signal: torch.Tensor) -> tuple[torch.Tensor, TokenState]:
        if state.valid is not None:
            raise VitpruneError("token merging cannot follow adaptive token pruning's padded slots")
        b, n, c = x.shape
        r, prefix = self.merged(n), self.num_prefix_tokens
        size = state.size if state.size is not None else x.new_ones(b, n)
        if r == 0:
            return x, state._replace(size=size, proportional=self.proportional)
        with torch.no_grad():
            metric = F.normalize(signal.mean(dim=1), dim=-1)
            a, bb = torch.arange(0, n, 2, device=x.device), torch.arange(1, n, 2, device=x.device)
            similarity = metric[:, a] @ metric[:, bb].transpose(-2, -1)
            # Prefix tokens in A merge into nothing; those in B take nothing.
            similarity = similarity.masked_fill((a < prefix)[None, :, None] | (bb < prefix)[None, None, :],
                                                float("-inf"))
            best, partner = similarity.max(dim=-1)
            # Each A token's place among them, most similar first, ties to the earlier token: a rank without ties,
            # so that the order does not rest on a stable sort (which ONNX has not).
            earlier = torch.ones(len(a), len(a), dtype=torch.bool, device=x.device).tril(-1)
            ahead = (best[:, None, :] > best[:, :, None]) | ((best[:, None, :] == best[:, :, None]) & earlier)
            order = ahead.sum(dim=-1).argsort(dim=-1)
            src, stay = order[:, :r], order[:, r:].sort(dim=-1).values
            dst = partner.gather(1, src)
        weighted = torch.cat([x * size[..., None], size[..., None]], dim=-1)
        a_part, b_part = weighted[:, a], weighted[:, bb]
        moved = a_part.gather(1, src[..., None].expand(-1, -1, c + 1))
        b_part = b_part.scatter_add(1, dst[..., None].expand(-1, -1, c + 1), moved)
        a_part = a_part.gather(1, stay[..., None].expand(-1, -1, c + 1))
        # Prefix tokens first, in their order: the even ones lead A's staying tokens, the odd ones B.
        leading = [(a_part if i % 2 == 0 else b_part)[:, i // 2:i // 2 + 1] for i in range(prefix)]
        out = torch.cat([*leading, a_part[:, math.ceil(prefix / 2):], b_part[:, prefix // 2:]], dim=1)
        size = out[..., c]
        return out[..., :c] / size[..., None], state._replace(size=size, proportional=self.proportional)


@register_edit("merge_tokens")
def merge_tokens(model: nn.Module, block: int, r: int, proportional: bool = True) -> None:
    """Make block ``block`` merge its ``r`` most similar pairs of tokens before its MLP (ToMe's bipartite soft
    matching on its head-averaged keys; at most half its non-prefix tokens), and, with ``proportional``, every later
    block weigh each key by the number of patches its token stands for. ``r`` = 0 changes nothing. Applying it again
    to the same block changes ``r``. A block with no attention head left has no keys to match by and raises
    ``ValueError``."""
    if r < 0:
        raise ValueError(f"r (tokens merged per block) must be at least 0, got {r}")
    op = token_operation(model, block, TokenMerging, _merging)
    op.r, op.proportional = r, proportional


def _merging(adapter: ViTAdapter) -> TokenMerging:
    if adapter.pools_every_token:
        raise ValueError("this model's head pools over every token, which would count a merged token as one "
                         "whatever it stands for: token merging needs a head that reads the [CLS] token")
    return TokenMerging(num_prefix_tokens=adapter.num_prefix_tokens)
