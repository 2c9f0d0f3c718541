"""The projection view: a fused ``[q | k | v]`` Linear and three separate Linears behave as one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from vitprune.adapters import QKV
from vitprune.linear import slice_linear

WIDTH, IN = 6, 5


def _pair(seed: int) -> tuple[QKV, QKV]:
    """The same projections fused and separate."""
    torch.manual_seed(seed)
    fused = nn.Linear(IN, 3 * WIDTH)
    parts = tuple(slice_linear(fused, out_idx=list(range(p * WIDTH, (p + 1) * WIDTH))) for p in range(3))
    return QKV((fused,), (WIDTH,) * 3), QKV(parts, (WIDTH,) * 3)


rows = st.lists(st.integers(0, WIDTH - 1), min_size=1, max_size=WIDTH, unique=True).map(sorted)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), q=rows, k=rows, v=rows, keep=st.lists(st.integers(0, IN - 1), min_size=1,
                                                                          max_size=IN, unique=True).map(sorted))
def test_fused_and_separate_projections_select_the_same_rows(seed, q, k, v, keep) -> None:
    fused, separate = _pair(seed)
    x = torch.randn(2, 3, IN)
    # One matmul or three may round differently in the last bit.
    for a, b in zip(fused(x), separate(x), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    widths = (len(q), len(k), len(v))
    small_fused, small_separate = QKV(fused.select(q, k, v), widths), QKV(separate.select(q, k, v), widths)
    assert small_fused.fused and not small_separate.fused
    for a, b, full, idx in zip(small_fused(x), small_separate(x), fused(x), (q, k, v), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(a, full[..., idx], rtol=1e-6, atol=1e-6)
    narrow = [QKV(view.select_inputs(keep), (WIDTH,) * 3) for view in (fused, separate)]
    assert all(view.in_features == len(keep) for view in narrow)
    for a, b in zip(narrow[0](x[..., keep]), narrow[1](x[..., keep]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_pieces_pair_each_linear_with_its_rows() -> None:
    fused, separate = _pair(0)
    q, k, v = (torch.full((1, WIDTH), float(i)) for i in range(3))
    (linear, joined), = fused.pieces(q, k, v)
    assert linear is fused.linears[0] and torch.equal(joined, torch.cat([q, k, v], dim=-1))
    assert [(lin, t) for lin, t in separate.pieces(q, k, v)] == list(zip(separate.linears, (q, k, v)))


def test_projections_must_hold_their_widths() -> None:
    with pytest.raises(ValueError, match=r"projections of \[18\] rows do not hold q, k and v of \[6, 6, 5\] rows"):
        QKV((nn.Linear(IN, 3 * WIDTH),), (WIDTH, WIDTH, 5))
    with pytest.raises(ValueError, match="do not hold"):
        QKV((nn.Linear(IN, WIDTH), nn.Linear(IN, WIDTH), nn.Linear(IN, 4)), (WIDTH,) * 3)
