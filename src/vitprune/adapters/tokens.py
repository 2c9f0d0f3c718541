"""Token pruning that every family shares: which patch tokens a block keeps, and how a token-pruned block sequence
hands the kept tokens' original positions from block to block. A family's token-pruning block subclasses
:class:`TokenSelection` and adds its own attention and MLP around :meth:`TokenSelection.select`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
from timm.models._features import feature_take_indices
from torch import nn

from vitprune.errors import VitpruneError


def cls_attention_row(q: torch.Tensor, k: torch.Tensor, scale: float,
                      key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The first query's attention probabilities over all keys, ``(B, H, N)``, from ``(B, H, N, d)`` queries and keys.

    One query against the keys, so the full ``N x N`` map is never materialised; keys where
    ``key_mask`` ``(B, N)`` is ``False`` get probability 0.
    """
    # A matmul, not an elementwise product and sum (up to 3x faster on CPU, but under 1% of a DeiT forward): the
    # MAC counter and FlopCounterMode then both see these multiply-adds, and the consistency check holds.
    logits = (q[:, :, :1] * scale) @ k.transpose(-2, -1)
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return logits.softmax(dim=-1)[:, :, 0]


def keep_tokens(x: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix tokens and the patch tokens at slots ``chosen`` ``(B, k)``, with their original positions."""
    b, n, c = x.shape
    # One row copy per kept token, prefix included: a gather along dim 1 plus a concatenation cost 6-15x more on CPU.
    rows = torch.cat([torch.arange(prefix, device=x.device).expand(b, prefix), chosen + prefix], dim=1)
    rows = rows + torch.arange(0, b * n, n, device=x.device)[:, None]
    kept = x.reshape(b * n, c).index_select(0, rows.reshape(-1)).view(b, -1, c)
    return kept, positions.gather(1, chosen)


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


class TokenSelection(nn.Module):
    """The part of a token-pruning block that keeps the prefix tokens and the top-scoring patch tokens.

    After ``x + attention`` the patch tokens are scored by the fusion of the head-averaged [CLS]
    attention (``intra``, online) and the per-position prior ``inter`` (a buffer indexed by each
    token's *original* patch position; ones = no prior): ``alpha·log(intra) + (1−alpha)·log(inter)``,
    whose top-k equals the top-k of STAR's ``intra^alpha · inter^(1−alpha)``.

    Static (STAR): every image keeps ``ceil(keep_rate · n)`` of its ``n`` patch tokens, a count
    fixed by the input size, so the model exports and compiles. Adaptive (a-STAR): each image
    keeps the fewest top tokens whose share of the normalised fused score reaches ``keep_rate``,
    never more than STAR would. A batch then holds as many slots as its largest count; the
    other images' extra slots are padding that no token attends to (``valid`` is ``False``), so
    each image's output equals its output in a batch of one. Kept tokens stay in original order.

    A subclass's ``forward(x, positions, valid)`` returns ``(tokens, positions, valid)``: ``positions``
    ``(B, n)`` are the patch tokens' original indices; ``valid`` ``(B, n)`` marks the real ones where
    an adaptive block left padding (``None``: all real).
    """

    def __init__(self, *, num_prefix_tokens: int, num_patches: int, keep_rate: float = 1.0, alpha: float = 1.0,
                 adaptive: bool = False) -> None:
        super().__init__()
        self.num_prefix_tokens, self.keep_rate, self.alpha = num_prefix_tokens, keep_rate, alpha
        self.adaptive = adaptive
        self.register_buffer("inter", torch.ones(num_patches))

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

    def key_mask(self, x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor | None:
        """Which of the tokens ``x`` may be attended to, ``(B, N)`` (``None``: all)."""
        return None if valid is None else torch.cat([valid.new_ones(x.shape[0], self.num_prefix_tokens), valid], 1)

    def select(self, x: torch.Tensor, positions: torch.Tensor | None, valid: torch.Tensor | None,
               cls_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The tokens this block keeps of ``x`` (after its attention) by the [CLS] row ``(B, H, N)``, with their
        original positions and, where slots are padding, which are real."""
        prefix, patches = self.num_prefix_tokens, x.shape[1] - self.num_prefix_tokens
        if positions is None:
            positions = torch.arange(patches, device=x.device).expand(x.shape[0], patches)
        if not self.adaptive and valid is None:
            keep = self.keep_count(patches)
            if keep < patches:
                chosen = self.scores(cls_row, positions).topk(keep, dim=1).indices.sort(dim=1).values
                x, positions = keep_tokens(x, positions, chosen, prefix)
            return x, positions, valid
        return self._keep_ragged(x, positions, valid, self.scores(cls_row, positions))

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


def run_token_blocks(blocks: Iterable[nn.Module], x: torch.Tensor,
                     run: Callable[[nn.Module, torch.Tensor, torch.Tensor | None], torch.Tensor],
                     visit: Callable[[int, torch.Tensor, torch.Tensor | None, torch.Tensor | None], None] | None = None
                     ) -> torch.Tensor:
    """Run a block sequence in which some blocks prune tokens (:class:`TokenSelection`).

    Each other block runs as ``run(block, x, mask)``, ``mask`` ``(B, N)`` being ``True`` at the tokens
    that may be attended to (``None`` until an adaptive block leaves padding). ``visit(index, x, positions, valid)``
    sees each block's output with its patch tokens' original positions and real slots (``None``: all, in order).
    """
    positions = valid = None
    for index, block in enumerate(blocks):
        if isinstance(block, TokenSelection):
            x, positions, valid = block(x, positions, valid)
        elif valid is None:
            x = run(block, x, None)
        else:
            prefix = x.new_ones(x.shape[0], x.shape[1] - valid.shape[1], dtype=torch.bool)
            x = run(block, x, torch.cat([prefix, valid], dim=1))
        if visit is not None:
            visit(index, x, positions, valid)
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
    take = set(take)
    maps: list[torch.Tensor] = []
    grid = x[:, num_prefix_tokens:]

    def visit(index: int, x: torch.Tensor, positions: torch.Tensor | None, valid: torch.Tensor | None) -> None:
        nonlocal grid
        patches = x[:, num_prefix_tokens:]
        if positions is None:
            grid = patches
        else:
            grid = grid.clone()
            real = torch.ones_like(positions, dtype=torch.bool) if valid is None else valid
            rows = torch.arange(len(x), device=x.device)[:, None].expand_as(positions)
            grid[rows[real], positions[real]] = patches[real]
        if index in take:
            maps.append(grid)

    run_token_blocks(blocks, x, run, visit)
    return maps
