"""The token selection every family shares: the kept rows are exactly the chosen ones, prefix first, for any shape."""

from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st
from strategies import EXAMPLES, property_test

from vitprune.adapters.tokens import keep_tokens


@st.composite
def _selections(draw):
    b, patches, c, prefix = (draw(st.integers(1, 4)), draw(st.integers(1, 12)), draw(st.integers(1, 6)),
                             draw(st.integers(0, 2)))
    kept = draw(st.integers(1, patches))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.stack([torch.randperm(patches, generator=generator)[:kept].sort().values for _ in range(b)])
    x = torch.randn(b, prefix + patches, c, generator=generator)
    positions = torch.randperm(4 * patches, generator=generator)[:patches].expand(b, patches)
    return x, positions, chosen, prefix


@pytest.mark.parametrize("examples", EXAMPLES)
def test_keep_tokens_takes_the_prefix_and_the_chosen_rows(examples):
    @property_test(examples, _selections())
    def check(selection):
        x, positions, chosen, prefix = selection
        kept, kept_positions = keep_tokens(x, positions, chosen, prefix)
        for i in range(x.shape[0]):
            assert torch.equal(kept[i], torch.cat([x[i, :prefix], x[i, prefix + chosen[i]]]))
            assert torch.equal(kept_positions[i], positions[i, chosen[i]])

    check()


def test_keep_tokens_passes_gradients_to_the_kept_rows_only():
    x = torch.randn(2, 1 + 5, 3, requires_grad=True)
    chosen = torch.tensor([[0, 3], [1, 4]])
    kept, _ = keep_tokens(x, torch.arange(5).expand(2, 5), chosen, 1)
    kept.sum().backward()
    expected = torch.zeros(2, 6, 3)
    expected[:, 0] = 1
    expected[0, [1, 4]] = 1
    expected[1, [2, 5]] = 1
    assert torch.equal(x.grad, expected)
