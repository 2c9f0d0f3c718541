"""STAR after HiAP: the LRP prior, the ACS and the keep-rate schedule on blocks with ``VariableHeadAttention``
(uneven value widths, no head left), and the chained model stays consistent."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import build, random_hiap_gates, tracked

import vitprune
from vitprune.consistency import check_consistency
from vitprune.errors import UnsupportedArchitectureError
from vitprune.methods.hiap.extract import extract
from vitprune.methods.star import apply_keep_rates, average_cosine_similarity, inter_layer_scores
from vitprune.methods.star.lrp import attention_relevance, traced_forward
from vitprune.surgery import prune_attention_dims, prune_depth, token_ops


def _with_biases(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # timm starts biases at 0, which would hide the bias paths
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def _hiap_digits():
    """digits-vit (12 blocks, 3 heads of 16) after HiAP extraction: uneven value widths, no head in block 2, no FFN
    neuron in block 6."""
    torch.manual_seed(0)
    model = _with_biases(vitprune.create_model("digits-vit"))
    gates = random_hiap_gates(model)
    with torch.no_grad():
        gates.head[2][:] = -1.0
        gates.neuron[6][:] = -1.0
    kept = extract(model, gates)
    assert kept[2]["heads"] == [] and kept[6]["neurons"] == 0
    assert any(len(set(k["value_dims"])) > 1 for k in kept)  # some block has uneven value widths
    return model.eval()


def _images(model, n=3, seed=1):
    return torch.randn(n, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(seed))


SPECS = [("deit_tiny_patch16_224", {"depth": 3}),
         ("vit_small_patch14_dinov2", {"depth": 3, "img_size": 56, "num_classes": 10})]


@pytest.mark.parametrize("name, kwargs", SPECS, ids=["deit", "dinov2-ls"])
def test_lrp_of_variable_heads_equals_lrp_of_the_zeroed_timm_attention(name, kwargs):
    """Uneven value widths are timm's attention with the removed value columns of ``proj`` zeroed: the traced forward,
    every kept head's relevance map and the token relevance are the same (the padded value slots carry nothing)."""
    model = _with_biases(tracked(name, kwargs))
    zeroed = copy.deepcopy(model)
    dims = {0: [1, 5, 7], 2: [0, 63]}  # head 1 is gone
    prune_attention_dims(model, 1, list(dims), list(dims.values()))
    with torch.no_grad():
        mask = torch.zeros(zeroed.blocks[1].attn.proj.in_features, dtype=torch.bool)
        mask[[h * 64 + j for h, d in dims.items() for j in d]] = True
        zeroed.blocks[1].attn.proj.weight[:, ~mask] = 0.0
    x = _images(model, n=2)
    results = []
    for m in (model, zeroed):
        with torch.no_grad():
            logits, traces, pooled = traced_forward(m, x)
            torch.testing.assert_close(logits, m(x), rtol=1e-5, atol=1e-5)
        one_hot = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1]).float()
        results.append((logits, *attention_relevance(m, traces, pooled, one_hot)))
    (logits, maps, tokens), (zeroed_logits, zeroed_maps, zeroed_tokens) = results
    torch.testing.assert_close(logits, zeroed_logits, rtol=1e-5, atol=1e-6)
    assert maps[1].shape[1] == 2
    torch.testing.assert_close(maps[1], zeroed_maps[1][:, list(dims)], rtol=1e-4, atol=1e-7)
    for got, expected in zip(maps[::2], zeroed_maps[::2], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(tokens, zeroed_tokens, rtol=1e-4, atol=1e-7)


def test_the_prior_treats_a_headless_block_as_the_identity():
    """A block with no head mixes no tokens (its rollout factor is I), so its importance to go is the next block's."""
    model = _hiap_digits()
    x = _images(model, n=4)
    with torch.no_grad():
        logits, traces, _ = traced_forward(model, x)
        torch.testing.assert_close(logits, model(x), rtol=1e-5, atol=1e-5)
    assert traces[2].attn is None and all(t.attn is not None for i, t in enumerate(traces) if i != 2)
    prior = inter_layer_scores(model, [(x, torch.zeros(4, dtype=torch.long))], classes=2)
    assert prior.shape == (12, 64) and torch.isfinite(prior).all() and (prior >= 0).all() and (prior <= 1).all()
    assert torch.equal(prior[2], prior[3]) and not torch.equal(prior[1], prior[2])


@pytest.mark.parametrize("identity", ["norm", "skip"])
def test_the_prior_follows_depth_pruned_blocks(identity):
    """After HetDPT's depth pruning (attention gone: x + LN1(x) or x; GELU gone: fc1·fc2 merged or apart) the traced
    forward is the model's, and a block without attention mixes no tokens: its importance to go is the next one's."""
    model = _hiap_digits()
    prune_depth(model, attention=[4, 8], activation=[5], identity=identity)
    prune_depth(model, activation=[9], merge=False)
    x = _images(model, n=4)
    with torch.no_grad():
        logits, traces, _ = traced_forward(model, x)
        torch.testing.assert_close(logits, model(x), rtol=1e-5, atol=1e-5)
    assert [i for i, t in enumerate(traces) if t.attn is None] == [2, 4, 8]
    prior = inter_layer_scores(model, [(x, torch.zeros(4, dtype=torch.long))], classes=2)
    assert prior.shape == (12, 64) and torch.isfinite(prior).all() and (prior >= 0).all() and (prior <= 1).all()
    assert torch.equal(prior[4], prior[5]) and torch.equal(prior[8], prior[9]) and not torch.equal(prior[3], prior[4])


def test_lrp_rejects_blocks_it_cannot_follow():
    model = _hiap_digits()
    prune_depth(model, attention=[4], activation=[4], output_gelu=True)
    with pytest.raises(UnsupportedArchitectureError, match="needs pre-norm blocks without gates, token reduction or "
                                                           "an output activation; blocks.4 is DepthBlock"):
        inter_layer_scores(model, [(_images(model), None)])
    headless = vitprune.track(build("deit_tiny_patch16_224", {"depth": 1}), "deit_tiny_patch16_224", depth=1)
    prune_attention_dims(headless, 0, [], [])
    with pytest.raises(UnsupportedArchitectureError, match="no block has an attention head"):
        inter_layer_scores(headless, [(_images(headless, 1), None)])


def test_acs_of_a_hiap_model_is_the_mean_pairwise_cosine():
    model = _hiap_digits()
    x = _images(model, n=2)
    outputs = []
    hooks = [b.register_forward_hook(lambda m, a, out: outputs.append(out)) for b in model.blocks]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    expected = []
    for out in outputs:
        unit = torch.nn.functional.normalize(out.double(), dim=-1)
        upper = torch.triu_indices(out.shape[1], out.shape[1], offset=1)
        expected.append((unit @ unit.transpose(1, 2))[:, upper[0], upper[1]].mean().item())
    assert average_cosine_similarity(model, [(x, None)]) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("adaptive", [pytest.param(False, id="star", marks=pytest.mark.slow),  # exports ONNX
                                      pytest.param(True, id="a-star")])
def test_hiap_then_star_skips_the_headless_block_and_stays_consistent(adaptive, tmp_path):
    model = _hiap_digits()
    x = _images(model, n=4)
    prior = inter_layer_scores(model, [(x, torch.zeros(4, dtype=torch.long))], classes=2).float()
    rates = [1.0, 0.9, 0.7, 0.8, 1.0, 0.9, 0.6, 1.0, 0.8, 1.0, 0.9, 1.0]
    apply_keep_rates(model, rates, alpha=0.5, prior=prior, adaptive=adaptive)
    blocks = token_ops(model)
    # Block 2 has no head left: it keeps its tokens although its rate is below 1.
    assert sorted(blocks) == [i for i, r in enumerate(rates) if r < 1 and i != 2]
    assert all(torch.equal(b.inter, prior[i]) and b.adaptive == adaptive for i, b in blocks.items())
    assert type(model.blocks[6].attn).__name__ == "VariableHeadAttention"  # and a block without FFN neurons prunes
    report = check_consistency(model, directory=tmp_path)
    assert report.ok, report.to_dict()
    assert report.macs_padding > 0
    assert (report.onnx_max_diff is None) == adaptive
