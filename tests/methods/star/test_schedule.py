"""STAR's ACS keep-rate schedule and the paper's MAC figures for hand-set and ACS schedules."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import tracked

from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import MacTarget, count_macs, format_count
from vitprune.methods.star import apply_keep_rates, average_cosine_similarity, keep_rates, rho_for_macs
from vitprune.surgery import prune_tokens


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {}
    return tracked(name, kwargs)


def test_acs_is_the_mean_pairwise_cosine_of_each_block_output():
    model = _model()
    images = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    outputs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outputs.append(out)) for b in model.blocks]
    with torch.no_grad():
        model(images)
    for h in hooks:
        h.remove()
    expected = []
    for out in outputs:
        unit = torch.nn.functional.normalize(out.double(), dim=-1)
        cos = unit @ unit.transpose(1, 2)
        t = cos.shape[1]
        upper = torch.triu_indices(t, t, offset=1)
        expected.append(cos[:, upper[0], upper[1]].mean(dim=1).mean().item())
    got = average_cosine_similarity(model, [(images[:2], None), (images[2:], None)])
    assert got == pytest.approx(expected, rel=1e-9)
    assert average_cosine_similarity(model, [(images, None)], max_images=1) == pytest.approx(
        average_cosine_similarity(model, [(images[:1], None)]), rel=1e-12)


def test_keep_rates_follow_the_linear_rule_with_both_anchors():
    acs = [0.2, 0.5, 0.4, 0.8, 0.7]
    assert keep_rates(acs, 0.6) == pytest.approx([1.0, 1 - 0.4 * 0.3 / 0.5, 1 - 0.4 * 0.2 / 0.5, 0.6, 0.6])
    # Paper anchors: layer 4 has ACS above the last layer's and is clipped to rho.
    assert keep_rates(acs, 0.6, anchor="minmax") == pytest.approx(
        [1.0, 1 - 0.4 * 0.5, 1 - 0.4 * 1 / 3, 0.6, 1 - 0.4 * 5 / 6])
    assert keep_rates(acs, 1.0) == [1.0] * 5
    with pytest.raises(VitpruneError, match=r"rho must be in \(0, 1\]"):
        keep_rates(acs, 0.0)
    with pytest.raises(VitpruneError, match="do not increase"):
        keep_rates([0.5, 0.4, 0.3], 0.7)
    with pytest.raises(VitpruneError, match="unknown anchor"):
        keep_rates(acs, 0.7, anchor="ends")


def test_rho_for_macs_meets_the_budget_tightly():
    model = _model()
    acs = [0.1 + 0.05 * math.sqrt(i) for i in range(12)]
    dense = count_macs(model).macs
    target = 0.6 * dense
    rho = rho_for_macs(model, acs, MacTarget.relative(0.6), tol=1e-3)

    def cost(r):
        pruned = _model()
        apply_keep_rates(pruned, keep_rates(acs, r), alpha=1.0)
        return count_macs(pruned).macs

    assert cost(rho) <= target < cost(rho + 2e-3)
    with pytest.raises(VitpruneError, match="is not below the model's .* there is nothing to prune"):
        rho_for_macs(model, acs, MacTarget.absolute(dense))
    with pytest.raises(UnreachableTargetError, match=rf"STAR's keep-rate schedule cannot reach .*; the nearest it "
                                                     rf"reaches is {format_count(cost(1e-4))}"):
        rho_for_macs(model, acs, MacTarget.relative(0.05))


# Paper Table 1 dense GFLOPs (MACs), printed to one decimal.
DENSE = [("deit_tiny_patch16_224", 1.3), ("deit_small_patch16_224", 4.6), ("deit_base_patch16_224", 17.6)]


@pytest.mark.parametrize("name, printed", DENSE, ids=["T", "S", "B"])
def test_dense_macs_match_the_paper(name, printed):
    assert round(count_macs(_model(name)).macs / 1e9, 1) == printed


# Paper Table 2 (DeiT-B, no fine-tuning): pruning blocks (1-based) and the per-layer rates r, r², r³.
SCHEDULES = [([4, 7, 10], 0.5, 7.8), ([5, 8, 10], 0.7, 11.0), ([4, 7, 10], 0.7, 10.2)]


@pytest.mark.parametrize("blocks, rate, printed", SCHEDULES, ids=["4-7-10@0.5", "5-8-10@0.7", "4-7-10@0.7"])
def test_hand_set_schedules_match_table2_within_2_percent(blocks, rate, printed):
    model = _model("deit_base_patch16_224")
    for power, block in enumerate(blocks, start=1):
        prune_tokens(model, block - 1, rate**power)
    assert abs(count_macs(model).macs / 1e9 - printed) / printed < 0.02


def test_apply_keep_rates_installs_the_prior_in_pruning_blocks_only():
    from vitprune.surgery import token_ops

    model = _model()
    prior = torch.rand(12, 196, generator=torch.Generator().manual_seed(0))
    rates = [1.0, 1.0, 0.9] + [0.7] * 9
    apply_keep_rates(model, rates, alpha=0.15, prior=prior)
    blocks = token_ops(model)
    assert sorted(blocks) == list(range(2, 12))
    assert all(torch.equal(b.inter, prior[i]) and b.alpha == 0.15 and b.keep_rate == rates[i]
               for i, b in blocks.items())
    with pytest.raises(VitpruneError, match="11 keep rates for a model of 12 blocks"):
        apply_keep_rates(_model(), rates[:11], alpha=0.15)
    with pytest.raises(VitpruneError, match="inter-layer table of 3 rows"):
        apply_keep_rates(_model(), rates, alpha=0.15, prior=prior[:3])


def test_apply_keep_rates_skips_blocks_whose_attention_depth_pruning_removed():
    from vitprune.surgery import prune_depth, token_ops

    model = _model()
    prune_depth(model, attention=[3, 7])
    with pytest.raises(ValueError, match=r"blocks\.3 has no attention head left"):
        prune_tokens(copy.deepcopy(model), 3, 0.8)
    apply_keep_rates(model, [0.8] * 12, alpha=1.0)
    assert sorted(token_ops(model)) == [i for i in range(12) if i not in (3, 7)]
    assert [b.tokens for b in count_macs(model).blocks][3:5] == [1 + 101, 1 + 101]  # 196 -> 157 -> 126 -> 101
