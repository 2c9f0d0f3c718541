"""Token pruning blocks: keep-all is the identity, positions stay aligned, fusion is the KL minimiser, MACs are real."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import SMALL_MODELS, tracked
from hypothesis import note
from hypothesis import strategies as st
from strategies import EXAMPLES, draw_edits, headed_blocks, images, property_test, small_vits

import vitprune
from vitprune.adapters.timm_blocks import TokenBlock
from vitprune.adapters.tokens import fused_log_scores
from vitprune.errors import VitpruneError
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.surgery import prune_tokens, set_token_prior, token_ops, token_pruning_blocks


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {}
    return tracked(name, kwargs)


def _images(model, n=2, seed=0):
    return torch.randn(n, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.needs("token_reduction")
def test_keep_rate_one_is_the_identity(small_model_spec):
    model = _model(*small_model_spec)
    x = _images(model)
    with torch.no_grad():
        dense = model(x)
        blocks = range(len(vitprune.get_adapter(model).blocks()))
        for block in blocks:
            prune_tokens(model, block, 1.0, alpha=0.15)
        torch.testing.assert_close(model(x), dense, rtol=1e-5, atol=1e-5)
    assert set(token_pruning_blocks(model)) == set(blocks)


def _positions_seen(model, x):
    """The original patch positions each pruning block hands on, captured from its output."""
    seen = {}
    hooks = [b.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out[1].positions[0].tolist()))
             for i, b in token_pruning_blocks(model).items()]
    with torch.no_grad():
        model.eval()(x)
    for h in hooks:
        h.remove()
    return seen


def test_positions_follow_the_tokens_through_several_blocks():
    """Prior-only scores with a different, non-monotone prior per block: every kept set is known in advance.

    Pairing the prior with tokens by rank or by their current slot instead of their original
    position (the reference code's misalignment) picks other tokens from the second block on.
    """
    model = _model()
    patches = vitprune.get_adapter(model).num_patches
    gen = torch.Generator().manual_seed(1)
    rates = {2: 0.5, 5: 0.6, 9: 0.3}
    priors = {b: torch.rand(patches, generator=gen) + 0.01 for b in rates}
    for block, rate in rates.items():
        prune_tokens(model, block, rate, alpha=0.0)
        set_token_prior(model, block, priors[block])
    expected, alive = {}, list(range(patches))
    for block, rate in rates.items():
        keep = math.ceil(rate * len(alive))
        alive = sorted(sorted(alive, key=lambda p: -priors[block][p].item())[:keep])
        expected[block] = alive
    assert _positions_seen(model, _images(model, n=1)) == expected


def test_pruned_forward_equals_running_the_kept_tokens_by_hand():
    model = _model("deit_small_distilled_patch16_224")
    dense = _model("deit_small_distilled_patch16_224")
    patches, prefix = vitprune.get_adapter(model).num_patches, model.num_prefix_tokens
    prior = torch.linspace(1.0, 2.0, patches).roll(50)
    prune_tokens(model, 4, 0.4, alpha=0.0)
    set_token_prior(model, 4, prior)
    kept = sorted(prior.topk(math.ceil(0.4 * patches)).indices.tolist())
    x = _images(model, n=2)
    with torch.no_grad():
        tokens = dense._pos_embed(dense.patch_embed(x))
        for i, block in enumerate(dense.blocks):
            if i == 4:
                tokens = tokens + block.drop_path1(block.ls1(block.attn(block.norm1(tokens))))
                tokens = torch.cat([tokens[:, :prefix], tokens[:, prefix:][:, kept]], dim=1)
                tokens = tokens + block.drop_path2(block.ls2(block.mlp(block.norm2(tokens))))
            else:
                tokens = block(tokens)
        reference = dense.forward_head(dense.norm(tokens))
        torch.testing.assert_close(model.eval()(x), reference, rtol=1e-5, atol=1e-5)


def test_fusion_is_the_weighted_kl_minimiser():
    gen = torch.Generator().manual_seed(0)
    p1, p2 = (torch.rand(20, generator=gen, dtype=torch.float64).softmax(0) for _ in range(2))
    alpha = 0.3
    closed = fused_log_scores(p1, p2, alpha).softmax(0)

    def objective(p):
        return alpha * (p * (p / p1).log()).sum() + (1 - alpha) * (p * (p / p2).log()).sum()

    logits = torch.zeros(20, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([logits], max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16)

    def step():
        optimiser.zero_grad()
        loss = objective(logits.softmax(0))
        loss.backward()
        return loss

    optimiser.step(step)
    torch.testing.assert_close(logits.detach().softmax(0), closed, rtol=1e-6, atol=1e-9)
    assert objective(closed) <= objective(logits.detach().softmax(0)) + 1e-12
    # The endpoints are the single scores; an exact zero is floored, not a veto.
    assert torch.equal(fused_log_scores(p1, p2, 1.0).argsort(), p1.argsort())
    assert torch.equal(fused_log_scores(p1, p2, 0.0).argsort(), p2.argsort())
    assert torch.isfinite(fused_log_scores(torch.zeros(3), torch.ones(3), 0.5)).all()


@pytest.mark.parametrize("fused", [True, False])
def test_macs_of_a_token_pruned_model_equal_flop_counter(fused):
    model = _model("deit_small_patch16_224")
    for block, rate in {1: 0.9, 3: 0.7, 6: 0.5, 10: 1.0}.items():
        prune_tokens(model, block, rate, alpha=0.5)
    for m in model.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = fused
    report = count_macs(model)
    assert report.macs == flop_counter_macs(model, _images(model, n=1))
    tokens = [b.tokens for b in report.blocks]
    assert tokens[:3] == [197, 197, 1 + 177] and tokens[4] == 1 + 124 and tokens[7] == 1 + 62
    assert count_macs(model, convention="linear").macs < count_macs(_model("deit_small_patch16_224"),
                                                                     convention="linear").macs


def test_save_load_keeps_rates_and_priors(tmp_path):
    model = _model()
    prune_tokens(model, 3, 0.5, alpha=0.25)
    set_token_prior(model, 3, torch.arange(1.0, 197.0))
    x = _images(model)
    with torch.no_grad():
        out = model.eval()(x)
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    block = token_pruning_blocks(loaded)[3]
    assert isinstance(block, TokenBlock) and (block.tokens.keep_rate, block.tokens.alpha) == (0.5, 0.25)
    assert torch.equal(block.tokens.inter, torch.arange(1.0, 197.0))
    with torch.no_grad():
        assert torch.equal(loaded(x), out)
    assert [e.op for e in vitprune.get_recipe(loaded).edits] == ["prune_tokens"]


def test_token_pruning_mistakes():
    model = _model()
    with pytest.raises(ValueError, match=r"keep rate must be in \(0, 1\]"):
        prune_tokens(model, 0, 0.0)
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]"):
        prune_tokens(model, 0, 0.5, alpha=2.0)
    with pytest.raises(ValueError, match="block 12 is out of range"):
        prune_tokens(model, 12, 0.5)
    with pytest.raises(VitpruneError, match="block 2 does not prune tokens"):
        set_token_prior(model, 2, torch.ones(196))
    prune_tokens(model, 2, 0.5)
    with pytest.raises(VitpruneError, match=r"prior of shape \(10,\) for 196 patches"):
        set_token_prior(model, 2, torch.ones(10))
    gap = _model("vit_small_patch16_224", {"class_token": False, "global_pool": "avg"})
    with pytest.raises(ValueError, match="this model has none"):
        prune_tokens(gap, 0, 0.5)


def _counts_seen(model, x):
    """Real patch tokens each pruning block hands on, per image."""
    seen = {}

    def record(i):
        def hook(_m, _a, out):
            _, state = out
            positions, valid = state.positions, state.valid
            seen[i] = (valid.sum(1) if valid is not None else torch.full((positions.shape[0],), positions.shape[1]))
        return hook

    hooks = [b.register_forward_hook(record(i)) for i, b in token_pruning_blocks(model).items()]
    with torch.no_grad():
        out = model.eval()(x)
    for h in hooks:
        h.remove()
    return seen, out


def test_adaptive_count_is_the_inclusive_weighted_percentile():
    block = token_ops(_pruned(adaptive=True))[3]
    scores = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]).log()
    valid = torch.ones(2, 4, dtype=torch.bool)
    block.keep_rate = 0.8
    assert block.adaptive_counts(scores, valid).tolist() == [2, 2]
    block.keep_rate = 0.81
    assert block.adaptive_counts(scores, valid).tolist() == [3, 3]
    valid[1, 3] = False  # padding carries no mass: 0.05, 0.15, 0.3 renormalised
    assert block.adaptive_counts(scores, valid).tolist() == [3, 2]
    gen = torch.Generator().manual_seed(0)
    for rate in (0.3, 0.55, 0.9, 1.0):
        block.keep_rate = rate
        random = torch.randn(50, 40, generator=gen)
        counts = block.adaptive_counts(random, torch.ones(50, 40, dtype=torch.bool))
        assert (counts <= block.keep_count(40)).all() and (counts >= 1).all()  # never more than STAR


def _pruned(adaptive, name="deit_tiny_patch16_224"):
    model = _model(name)
    for block, rate in {3: 0.8, 6: 0.7, 9: 0.6}.items():
        prune_tokens(model, block, rate, alpha=0.5, adaptive=adaptive)
        set_token_prior(model, block, torch.linspace(0.5, 1.5, 196).roll(block * 7))
    return model


def test_a_star_keeps_no_more_tokens_than_star_in_any_block():
    x = _images(_model(), n=3, seed=4)
    adaptive, _ = _counts_seen(_pruned(True), x)
    static, _ = _counts_seen(_pruned(False), x)
    for block in adaptive:
        assert (adaptive[block] <= static[block]).all(), block
    assert (adaptive[9] < static[9]).any()  # and it does prune more somewhere


@pytest.mark.parametrize("fused", [True, False])
def test_a_batch_with_padding_gives_each_image_its_own_output(fused):
    model = _pruned(True, "deit_small_distilled_patch16_224")
    for m in model.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = fused
    x = _images(model, n=3, seed=4)
    counts, batched = _counts_seen(model, x)
    assert len(set(counts[9].tolist())) > 1  # the images really kept different numbers of tokens
    with torch.no_grad():
        alone = torch.cat([model(x[i:i + 1]) for i in range(3)])
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-4)


def test_adaptive_setting_saves_and_loads(tmp_path):
    model = _pruned(True)
    x = _images(model, n=2)
    with torch.no_grad():
        out = model.eval()(x)
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    assert all(op.adaptive for op in token_ops(loaded).values())
    with torch.no_grad():
        assert torch.equal(loaded(x), out)


@pytest.mark.slow
def test_static_token_pruning_compiles_and_exports_to_onnx(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")  # torch's exporter needs it
    model = _pruned(False)
    x = _images(model, n=1)
    with torch.no_grad():
        expected = model.eval()(x)
        compiled = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: no graph breaks allowed
        torch.testing.assert_close(compiled(x), expected, rtol=1e-6, atol=1e-6)
    torch.onnx.export(model, (x,), dynamo=True).save(str(tmp_path / "star.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "star.onnx"))
    got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    assert (got - expected).abs().max().item() <= 1e-4


def test_intra_score_keeps_the_patches_the_cls_token_attends_to_most():
    model = _model()
    dense = _model()
    prune_tokens(model, 0, 0.25)  # alpha 1: attention only
    x = _images(model, n=2, seed=7)
    with torch.no_grad():
        block = dense.blocks[0]
        attn = block.attn
        h = block.norm1(dense._pos_embed(dense.patch_embed(x)))
        q, k, _ = attn.qkv(h).reshape(2, 197, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        cls = ((q @ k.transpose(-2, -1)) * attn.scale).softmax(-1)[:, :, 0, 1:].mean(1)  # (B, 196), full map
    expected = [sorted(row.topk(49).indices.tolist()) for row in cls]
    seen = {}
    hook = token_pruning_blocks(model)[0].register_forward_hook(
        lambda m, a, out: seen.update(pos=out[1].positions.tolist()))
    with torch.no_grad():
        model.eval()(x)
    hook.remove()
    assert seen["pos"] == expected


@pytest.mark.parametrize("examples", EXAMPLES)
def test_keeping_every_token_changes_nothing_after_any_edits(examples):
    """Random small ViTs after random depth and width edits: static token pruning at keep rate 1 in any blocks that
    have a head, with any fusion weight, leaves the outputs as they were."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits(class_token=True))
        note(draw_edits(data.draw, model, tokens=False))
        x = images(model)
        with torch.no_grad():
            before = model(x)
        headed = headed_blocks(model)
        blocks = data.draw(st.sets(st.sampled_from(headed))) if headed else set()
        for block in blocks:
            prune_tokens(model, block, 1.0, alpha=data.draw(st.floats(0.0, 1.0)))
        assert set(token_pruning_blocks(model)) == blocks
        with torch.no_grad():
            torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)

    check()


@pytest.mark.needs("token_reduction")
def test_star_gives_the_outputs_and_macs_it_gave_before_token_reduction_became_one_capability(small_model_spec):
    """tests/fixtures/star_outputs.safetensors holds the logits and MACs that STAR's edits gave on each family before
    its blocks moved onto the token-reduction capability (tests/star_reference.py)."""
    from safetensors.torch import load_file
    from star_reference import FIXTURE, star_outputs

    mid = next(m for m, name, kwargs, _ in SMALL_MODELS if (name, kwargs) == small_model_spec)
    stored = load_file(str(FIXTURE))
    for adaptive in (False, True):
        model = _model(*small_model_spec)
        mode = "adaptive" if adaptive else "static"
        torch.testing.assert_close(star_outputs(model, adaptive), stored[f"{mid}.{mode}"], rtol=1e-6, atol=1e-6)
        if not adaptive:
            totals = count_macs(model).totals()
            assert [totals["macs_full"], totals["macs_linear"]] == stored[f"{mid}.macs"].tolist()
