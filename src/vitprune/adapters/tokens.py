"""Token reduction that every family shares: an operation a block runs on its tokens between its attention and its
MLP (STAR's :class:`TokenSelection` keeps the top-scoring patch tokens; a method may bring its own, as ToMe's merging
in its folder), and how a block sequence hands what the operations left (:class:`TokenState`: the patch tokens'
original positions, real slots, token sizes) from block to block. A family's host block runs its own attention and
MLP around a :class:`TokenOp` (the adapter's ``set_token_op``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import torch
from timm.models._features import feature_take_indices
from torch import nn

from vitprune.errors import VitpruneError


class TokenState(NamedTuple):
    """What a token-reduced block sequence hands from block to block besides the tokens ``(B, N, C)``."""

    #: ``(B, patches)``: each patch token's original position (STAR's prior, feature maps); ``None``: in order, all.
    positions: torch.Tensor | None = None
    #: ``(B, patches)``: ``True`` at real slots where an adaptive operation left padding; ``None``: all real.
    valid: torch.Tensor | None = None
    #: ``(B, N)``: how many input tokens each token stands for (ToMe's merges), prefix included; ``None``: one each.
    size: torch.Tensor | None = None
    #: Whether attention weighs each key by its token's size (ToMe's proportional attention: ``+ log size``).
    proportional: bool = False

    def key_bias(self, x: torch.Tensor) -> torch.Tensor | None:
        """The additive bias ``(B, 1, 1, N)`` every query's attention logits over the tokens ``x`` take: ``-inf`` at
        padding, ``log size`` under proportional attention; ``None``: none."""
        bias = None
        if self.valid is not None:
            prefix = x.new_ones(x.shape[0], x.shape[1] - self.valid.shape[1], dtype=torch.bool)
            real = torch.cat([prefix, self.valid], dim=1)
            bias = torch.zeros(real.shape, dtype=x.dtype, device=x.device).masked_fill(~real, float("-inf"))
        if self.size is not None and self.proportional:
            log_size = self.size.to(x.dtype).log()
            bias = log_size if bias is None else bias + log_size
        return None if bias is None else bias[:, None, None, :]


class TokenOp(nn.Module):
    """An operation a block runs on its tokens after its attention's residual and before its MLP.

    The host block gives it what its attention computed that :attr:`reads` names: ``"cls_row"``, the first token's
    attention probabilities over all tokens ``(B, H, N)``, or ``"keys"``, the keys ``(B, H, N, d)``. A subclass
    implements :meth:`forward` and :meth:`scoring_macs`.
    """

    #: What the operation reads of the block's attention: ``"cls_row"`` or ``"keys"``.
    reads: str = ""
    #: What a block running it does, for refusals: "prunes tokens", "merges tokens".
    does: str = ""
    #: Whether every patch token that leaves is one that entered, at a known original position (a pruned position
    #: then keeps the value it last had, so feature maps cover the patch grid): STAR's, not ToMe's.
    keeps_positions: bool = True

    @property
    def per_image(self) -> str:
        """What the operation decides per image, so that the model's structure depends on the image and cannot be
        exported (e.g. "keeps a per-image number of tokens"); empty: nothing."""
        return ""

    def forward(self, x: torch.Tensor, state: TokenState, signal: torch.Tensor) -> tuple[torch.Tensor, TokenState]:
        """The tokens leaving the operation and the state that goes with them."""
        raise NotImplementedError

    def scoring_macs(self, tokens: int, heads: int, head_dim: int) -> int:
        """Multiply-adds per image the operation spends scoring ``tokens`` tokens (matrix products, as
        ``FlopCounterMode`` counts them) in a block of ``heads`` heads of query/key width ``head_dim``."""
        raise NotImplementedError


def cls_attention_row(q: torch.Tensor, k: torch.Tensor, scale: float,
                      key_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The first query's attention probabilities over all keys, ``(B, H, N)``, from ``(B, H, N, d)`` queries and keys.

    One query against the keys, so the full ``N x N`` map is never materialised; ``key_bias`` ``(B, 1, 1, N)``
    (:meth:`TokenState.key_bias`) adds to its logits.
    """
    # A matmul, not an elementwise product and sum (up to 3x faster on CPU, but under 1% of a DeiT forward): the
    # MAC counter and FlopCounterMode then both see these multiply-adds, and the consistency check holds.
    logits = (q[:, :, :1] * scale) @ k.transpose(-2, -1)
    if key_bias is not None:
        logits = logits + key_bias
    return logits.softmax(dim=-1)[:, :, 0]


def attention_signal(reads: str, q: torch.Tensor, k: torch.Tensor, scale: float,
                     key_bias: torch.Tensor | None) -> torch.Tensor:
    """What a :class:`TokenOp` that ``reads`` this gets of an attention's normed queries and keys ``(B, H, N, d)``."""
    if reads == "keys":
        return k
    return cls_attention_row(q, k, scale, key_bias)


def keep_tokens(x: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix tokens and the patch tokens at slots ``chosen`` ``(B, k)``, with their original positions."""
    b, n, c = x.shape
    # One row copy per kept patch token from the flattened batch: a gather along dim 1 costs 6-15x more on CPU. The
    # prefix rows are sliced, not indexed: each index built in a block is a fixed cost a small model feels.
    rows = chosen + torch.arange(prefix, b * n, n, device=x.device)[:, None]
    patches = x.reshape(b * n, c).index_select(0, rows.reshape(-1)).view(b, -1, c)
    return torch.cat([x[:, :prefix], patches], dim=1), positions.gather(1, chosen)


def fused_log_scores(intra: torch.Tensor, inter: torch.Tensor | None, alpha: float,
                     eps: float = 1e-12) -> torch.Tensor:
    """``alpha·log(intra) + (1−alpha)·log(inter)``: the log of STAR's fused score, up to a per-row constant.

    ``exp`` of it, normalised, is the minimiser of ``alpha·KL(p‖intra) + (1−alpha)·KL(p‖inter)``
    over distributions ``p``. ``eps`` floors both scores: an exact zero must not veto a token. ``inter``
    may be ``None`` when ``alpha`` is 1.
    """
    fused = alpha * intra.clamp_min(eps).log()
    if alpha < 1:
        fused = fused + (1 - alpha) * inter.clamp_min(eps).log()
    return fused


class TokenSelection(TokenOp):
    """STAR's operation: keep the prefix tokens and the top-scoring patch tokens.

    After ``x + attention`` the patch tokens are scored by the fusion of the head-averaged [CLS]
    attention (``intra``, online) and the per-position prior ``inter`` (a buffer indexed by each
    token's *original* patch position; ones = no prior): ``alpha·log(intra) + (1−alpha)·log(inter)``,
    whose top-k equals the top-k of STAR's ``intra^alpha · inter^(1−alpha)``.

    Static (STAR): every image keeps ``ceil(keep_rate · n)`` of its ``n`` patch tokens, a count
    fixed by the input size, so the model exports and compiles. Adaptive (a-STAR): each image
    keeps the fewest top tokens whose share of the normalised fused score reaches ``keep_rate``,
    never more than STAR would. A batch then holds as many slots as its largest count; the
    other images' extra slots are padding that no token attends to (the state's ``valid``), so
    each image's output equals its output in a batch of one. Kept tokens stay in original order.
    """

    reads = "cls_row"
    does = "prunes tokens"

    def __init__(self, *, num_prefix_tokens: int, num_patches: int, keep_rate: float = 1.0, alpha: float = 1.0,
                 adaptive: bool = False) -> None:
        super().__init__()
        self.num_prefix_tokens, self.keep_rate, self.alpha = num_prefix_tokens, keep_rate, alpha
        self.adaptive = adaptive
        self.register_buffer("inter", torch.ones(num_patches))

    @property
    def per_image(self) -> str:
        return "keeps a per-image number of tokens (a-STAR)" if self.adaptive else ""

    def set_prior(self, prior: torch.Tensor, index: int) -> None:
        """Install the per-position prior ``inter`` (one value per patch) of block ``index``."""
        if prior.shape != self.inter.shape:
            raise VitpruneError(f"block {index}: a prior of shape {tuple(prior.shape)} for {self.inter.numel()} "
                                "patches")
        with torch.no_grad():
            self.inter.copy_(prior.to(self.inter))

    def keep_count(self, patches: int) -> int:
        """Patch tokens STAR keeps out of ``patches`` entering: ``ceil(keep_rate · patches)``, at least 1."""
        # Rounded first so that float error (0.7 * 10 = 7.000000000000001) cannot tip the ceil over.
        return max(1, math.ceil(round(self.keep_rate * patches, 9)))

    def scoring_macs(self, tokens: int, heads: int, head_dim: int) -> int:
        # The [CLS] row: one query against every key, in every head.
        return tokens * heads * head_dim

    def scores(self, cls_row: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Fused log-scores ``(B, patches)`` from the [CLS] row ``(B, H, N)`` and the tokens' original positions."""
        intra = cls_row[:, :, self.num_prefix_tokens:].mean(dim=1).detach()
        # Without a prior's weight (alpha 1) the prior is not looked up at all.
        return fused_log_scores(intra, self.inter[positions] if self.alpha < 1 else None, self.alpha)

    def adaptive_counts(self, scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """a-STAR's count per image: the fewest top tokens whose normalised fused score sums to ``keep_rate``."""
        mass = scores.masked_fill(~valid, float("-inf")).softmax(dim=1).sort(dim=1, descending=True).values
        reached = mass.cumsum(dim=1) >= self.keep_rate - 1e-6
        # The first index where the cumulative mass reaches the rate, counted inclusively (the paper's r_l).
        counts = torch.where(reached.any(dim=1), reached.float().argmax(dim=1) + 1, valid.sum(dim=1))
        return counts.clamp(min=1)

    def forward(self, x: torch.Tensor, state: TokenState, signal: torch.Tensor) -> tuple[torch.Tensor, TokenState]:
        """The tokens this block keeps of ``x`` (after its attention) by the [CLS] row ``signal`` ``(B, H, N)``, with
        their original positions and, where slots are padding, which are real."""
        prefix, patches = self.num_prefix_tokens, x.shape[1] - self.num_prefix_tokens
        positions, valid = state.positions, state.valid
        if positions is None:
            positions = torch.arange(patches, device=x.device).expand(x.shape[0], patches)
        if not self.adaptive and valid is None:
            keep = self.keep_count(patches)
            if keep < patches:
                # Unsorted top-k, then the indices sorted: a third less than a ranked top-k.
                chosen = self.scores(signal, positions).topk(keep, dim=1, sorted=False).indices.sort(dim=1).values
                x, positions = keep_tokens(x, positions, chosen, prefix)
            return x, state._replace(positions=positions)
        x, positions, valid = self._keep_ragged(x, positions, valid, self.scores(signal, positions))
        return x, state._replace(positions=positions, valid=valid)

    def _keep_ragged(self, x: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor | None,
                     scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        valid = torch.ones_like(positions, dtype=torch.bool) if valid is None else valid
        real = valid.sum(dim=1)
        if self.adaptive:
            counts = self.adaptive_counts(scores, valid)
        else:
            counts = torch.ceil(torch.round(self.keep_rate * real.double(), decimals=9)).long().clamp(min=1)
        slots = int(counts.max())
        ranked = scores.masked_fill(~valid, float("-inf")).topk(slots, dim=1).indices
        kept = torch.arange(slots, device=x.device) < counts[:, None]
        # Kept tokens first in original order, then the padding slots.
        order = torch.where(kept, ranked, ranked + positions.shape[1]).sort(dim=1).indices
        chosen, kept = ranked.gather(1, order), kept.gather(1, order)
        x, positions = keep_tokens(x, positions, chosen, self.num_prefix_tokens)
        return x, positions, kept


class TokenHost(nn.Module):
    """A family's block that runs a :class:`TokenOp` (its ``tokens`` submodule) between its attention and its MLP;
    ``forward(x, state)`` returns ``(tokens, state)``. Models saved before the operation became a submodule held
    STAR's prior as the block's own ``inter``: it loads into ``tokens.inter``."""

    tokens: TokenOp

    def __init__(self) -> None:
        super().__init__()
        self._register_load_state_dict_pre_hook(_legacy_prior)


def _legacy_prior(state_dict: dict, prefix: str, *args) -> None:
    if prefix + "inter" in state_dict:
        state_dict[prefix + "tokens.inter"] = state_dict.pop(prefix + "inter")


def run_token_blocks(blocks: Iterable[nn.Module], x: torch.Tensor,
                     run: Callable[[nn.Module, torch.Tensor, torch.Tensor | None], torch.Tensor],
                     visit: Callable[[int, torch.Tensor, TokenState], None] | None = None) -> torch.Tensor:
    """Run a block sequence in which some blocks reduce tokens (:class:`TokenHost`).

    Each other block runs as ``run(block, x, bias)``, ``bias`` ``(B, 1, 1, N)`` adding to its attention logits
    (:meth:`TokenState.key_bias`; ``None`` until an operation leaves padding or merged tokens). ``visit(index, x,
    state)`` sees each block's output with the state that goes with it.
    """
    state = TokenState()
    for index, block in enumerate(blocks):
        if isinstance(block, TokenHost):
            x, state = block(x, state)
        else:
            x = run(block, x, state.key_bias(x))
        if visit is not None:
            visit(index, x, state)
    return x


def token_feature_maps(blocks: Sequence[nn.Module], x: torch.Tensor,
                       run: Callable[[nn.Module, torch.Tensor, torch.Tensor | None], torch.Tensor],
                       indices: int | Sequence[int] | None, num_prefix_tokens: int, grid_size: tuple[int, int],
                       norm: nn.Module | None = None) -> list[torch.Tensor]:
    """The feature maps ``(B, C, rows, cols)`` after blocks ``indices`` (timm's convention) as :func:`run_token_blocks`
    runs ``blocks`` from tokens ``x``, each through ``norm`` if given. Every patch position is filled: one a block
    pruned holds its token as the last block that kept it left it (a dense head needs the whole grid; this is the
    value the pruned model last computed there)."""
    take, _ = feature_take_indices(len(blocks), indices)
    rows, cols = grid_size
    return [(y if norm is None else norm(y)).reshape(len(y), rows, cols, -1).permute(0, 3, 1, 2).contiguous()
            for y in _filled_patches(blocks, x, run, take, num_prefix_tokens)]


def _filled_patches(blocks: Sequence[nn.Module], x: torch.Tensor,
                    run: Callable[[nn.Module, torch.Tensor, torch.Tensor | None], torch.Tensor],
                    take: Iterable[int], num_prefix_tokens: int) -> list[torch.Tensor]:
    """The patch tokens ``(B, patches, C)`` after each block in ``take``, pruned positions filled as
    :func:`token_feature_maps` says."""
    merging = [index for index, block in enumerate(blocks)
               if isinstance(block, TokenHost) and not block.tokens.keeps_positions]
    if merging:
        raise VitpruneError(f"blocks {merging} merge tokens, which then stand for no one patch position: a feature "
                            "map needs a model without token merging")
    take = set(take)
    maps: list[torch.Tensor] = []
    grid = x[:, num_prefix_tokens:]

    def visit(index: int, x: torch.Tensor, state: TokenState) -> None:
        nonlocal grid
        patches = x[:, num_prefix_tokens:]
        if state.positions is None:
            grid = patches
        else:
            grid = grid.clone()
            real = torch.ones_like(state.positions, dtype=torch.bool) if state.valid is None else state.valid
            rows = torch.arange(len(x), device=x.device)[:, None].expand_as(state.positions)
            grid[rows[real], state.positions[real]] = patches[real]
        if index in take:
            maps.append(grid)

    run_token_blocks(blocks, x, run, visit)
    return maps
