"""benchmarks/stage_splits.py on the tiny Swin and ConvNeXt: the per-stage costs it measures add up to what surgery
gives, a split built to known counts is among those it finds, and the VBP shares it infers bracket the split that
produced them."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import CONVNEXT_TINY, SWIN_TINY, benchmark_module, tracked

from vitprune.measure import count_macs
from vitprune.surgery import prune_mlp_neurons


@pytest.fixture(scope="module")
def st() -> ModuleType:
    return benchmark_module("stage_splits")


@pytest.fixture(scope="module")
def model():
    return tracked("swin_tiny_patch4_window7_224", SWIN_TINY)


def test_stage_costs_add_up_to_the_surgery(st, model):
    stages = st.stages(model)
    assert [s.blocks for s in stages] == [(0, 1), (2, 3), (4, 5, 6, 7, 8, 9), (10, 11)]
    assert [(s.neurons, s.neuron_params, s.neuron_macs) for s in stages] == [
        (128, 33, 32 * 256), (256, 65, 64 * 64), (1536, 129, 128 * 16), (1024, 257, 256 * 4)]
    split = st.Split((1, 0, 2, 1), (0, 2, 1, 0), (0, 0, 0))
    built = st.build_split(model, stages, split)
    dense = count_macs(model).totals()
    expected = [sum(a * s.attention[i] + g * s.activation[i] for a, g, s in zip(split.attention, split.activation,
                                                                                 stages)) for i in range(3)]
    assert [dense[k] - built[k] for k in ("params", "macs_full", "macs_linear")] == expected


def test_depth_splits_find_a_split_from_its_printed_counts(st, model):
    stages = st.stages(model)
    dense = count_macs(model).totals()
    split = st.Split((0, 1, 3, 0), (1, 0, 0, 2), (0, 0, 0))
    built = st.build_split(model, stages, split)
    found = st.depth_splits(stages, dense, f"{built['params'] / 1e6:.6f}", f"{built['macs_full'] / 1e9:.6f}",
                            "full", layers=7)
    assert found and (found[0].attention, found[0].activation) == (split.attention, split.activation)
    assert st.depth_splits(stages, dense, f"{built['params'] / 1e6:.6f}", f"{built['macs_full'] / 1e9:.6f}",
                           "full", layers=6) == []


@pytest.mark.slow
def test_vbp_shares_bracket_the_split_that_produced_the_counts(st, model):
    stages = st.stages(model)
    dense = count_macs(model).totals()
    ratio = 0.5
    k = 1472  # ceil(0.5 · 2944 neurons): 50% of stage 1, 80% of stage 2, 40% of stage 3, 60% of stage 4
    removed = [64, 205, 589, 614]
    assert sum(removed) == k
    pruned = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    for stage, n in zip(stages, removed):
        per_block, extra = divmod(n, len(stage.blocks))
        for j, block in enumerate(stage.blocks):
            drop = per_block + (j < extra)
            hidden = stage.neurons // len(stage.blocks)
            prune_mlp_neurons(pruned, block, list(range(drop, hidden)))
    after = count_macs(pruned).totals()
    shares = st.vbp_stage_shares(stages, ratio, _printed(dense), _printed(after))
    truth = [n / s.neurons for n, s in zip(removed, stages)]
    assert shares is not None
    assert all(lo - 0.01 <= t <= hi + 0.01 for (lo, hi), t in zip(shares, truth)), (shares, truth)


def _printed(totals: dict[str, int]) -> tuple[str, str]:
    """Params (M) and GMACs as a paper would print them, to six decimals."""
    return f"{totals['params'] / 1e6:.6f}", f"{totals['macs_full'] / 1e9:.6f}"


def test_a_family_without_attention_has_neuron_and_gelu_costs_only(st):
    model = tracked("convnext_tiny", CONVNEXT_TINY)
    stages = st.stages(model)
    assert [s.blocks for s in stages] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11)]
    assert all(s.attention is None for s in stages)
    # 32 px through a stride-4 stem: 8x8, 4x4, 2x2, 1x1 positions at widths 8, 16, 32, 64.
    assert [(s.neurons, s.neuron_params, s.neuron_macs) for s in stages] == [
        (96, 17, 16 * 64), (192, 33, 32 * 16), (384, 65, 64 * 4), (768, 129, 128 * 1)]
