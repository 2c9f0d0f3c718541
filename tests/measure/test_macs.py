"""MAC counting: hand formulas, per-block structure, and an independent count by FlopCounterMode."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import HF_TINY, build, tracked
from hypothesis import note
from hypothesis import strategies as st
from strategies import EXAMPLES, draw_edits, images, property_test, small_vits
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from vitprune.adapters import get_adapter
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import CONVENTIONS, count_macs, flop_counter_macs, tp_macs, value_padding_macs
from vitprune.surgery import prune_depth, prune_heads, prune_mlp_neurons, prune_tokens

# timm runs attention through F.scaled_dot_product_attention, which on CPU dispatches to this fused op.
# FlopCounterMode counts it only where the installed torch has a formula for it (2.15 has, 2.14 has not);
# the reference below counts on the math backend, which every version counts.
_SDPA_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
SDPA_COUNTED = _SDPA_CPU is not None and _SDPA_CPU in flop_registry

D, N, HEAD_DIM = 384, 197, 64  # DeiT-S


def counted_flops(model: nn.Module, input_size: tuple[int, int, int]) -> int:
    """FLOPs of one forward of one image by the reference (FlopCounterMode, attention on the math backend)."""
    return 2 * flop_counter_macs(model, torch.randn(1, *input_size))


def set_fused_attention(model: nn.Module, fused: bool) -> None:
    for m in model.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = fused


def block_macs(tokens: int, heads: int, hidden: int, *, full: bool) -> int:
    """One DeiT-S block by hand: qkv + proj + fc1 + fc2, plus QK^T and A.V when ``full``."""
    attn_dim = heads * HEAD_DIM
    linear = tokens * (D * 3 * attn_dim + attn_dim * D + 2 * D * hidden)
    return linear + (2 * heads * tokens**2 * HEAD_DIM if full else 0)


PATCH_EMBED = 196 * (3 * 16 * 16) * D
HEAD = D * 1000


def test_full_macs_equal_flop_counter(model_spec):
    model = build(*model_spec)
    report = count_macs(model, convention="full")
    for fused in (True, False):
        set_fused_attention(model, fused)
        assert 2 * report.macs == counted_flops(model, report.input_size), f"fused={fused}"


def test_pruned_macs_equal_flop_counter_on_every_family(small_model_spec):
    """Each edit a family takes (neurons, a merged MLP, a removed attention, pruned heads), counted as FlopCounterMode
    counts it, and params as the parameters' numel."""
    _assert_pruned_counts(tracked(*small_model_spec))


@pytest.mark.slow
@pytest.mark.parametrize("name, kwargs", [("swin_tiny_patch4_window7_224", {}), ("convnext_tiny", {}),
                                          ("convnext_tiny", {"conv_mlp": True}), ("vitprune:lvvit-s", {})],
                         ids=["swin-t", "convnext-t", "convnext-t-conv-mlp", "lvvit-s"])
def test_pruned_macs_equal_flop_counter_at_released_sizes(name, kwargs):
    _assert_pruned_counts(tracked(name, kwargs))


def _edit(model: nn.Module) -> None:
    """The edits the family takes: half of block 1's neurons, block 2's GELU (a merged MLP), block 3's attention,
    all of block 4's heads but the first."""
    adapter = get_adapter(model)
    hidden = adapter.block(1).mlp.hidden_features
    prune_mlp_neurons(model, 1, list(range(0, hidden, 2)))
    prune_depth(model, attention=[3] if "attention_removal" in adapter.capabilities else [], activation=[2])
    if "head_width" in adapter.capabilities:
        prune_heads(model, 4, [0])


def _assert_pruned_counts(model: nn.Module) -> None:
    _edit(model)
    report = count_macs(model)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert 2 * report.macs == counted_flops(model, report.input_size)


@pytest.mark.skipif(not SDPA_COUNTED, reason="this torch's FlopCounterMode has no formula for fused CPU attention")
def test_reference_equals_flop_counter_on_the_fused_kernel():
    """Where FlopCounterMode can count the fused kernel, it agrees with the math-backend reference."""
    model = build("deit_tiny_patch16_224", {"depth": 2})
    x = torch.randn(1, 3, 224, 224)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    assert counter.get_total_flops() // 2 == flop_counter_macs(model, x) == count_macs(model).macs


def test_reference_counts_the_attention_whatever_the_torch_version():
    """DeiT-S: the reference sees QK^T and A.V (torch 2.14's FlopCounterMode alone counts the linear layers)."""
    model = build("deit_small_patch16_224", {})
    assert flop_counter_macs(model, torch.randn(1, 3, 224, 224)) == 4_598_882_304


def test_deit_small_matches_hand_formula():
    model = build("deit_small_patch16_224", {})
    linear, full = count_macs(model, convention="linear"), count_macs(model, convention="full")
    assert linear.macs == 12 * block_macs(N, 6, 1536, full=False) + PATCH_EMBED + HEAD == 4_241_218_560
    assert full.macs == linear.macs + 12 * 2 * 6 * N**2 * HEAD_DIM
    assert full.linear_macs == linear.macs and full.attn_matmul_macs == full.macs - linear.macs
    assert full.other == {"patch_embed.proj": PATCH_EMBED, "head": HEAD}
    assert [(b.tokens, b.heads, b.mlp_hidden) for b in full.blocks] == [(N, 6, 1536)] * 12
    assert full.params == sum(p.numel() for p in model.parameters()) == 22_050_664
    assert full.input_size == (3, 224, 224)


def test_uneven_blocks_count_each_block():
    model = build("deit_small_patch16_224", {})
    adapter = get_adapter(model)
    adapter.set_mlp(3, nn.Linear(D, 700), nn.Linear(700, D))
    adapter.set_attention(7, (nn.Linear(D, 3 * 2 * HEAD_DIM),), nn.Linear(2 * HEAD_DIM, D), num_heads=2)
    structure = [(6, 1536)] * 12
    structure[3], structure[7] = (6, 700), (2, 1536)

    report = count_macs(model)
    assert [(b.heads, b.mlp_hidden) for b in report.blocks] == structure
    assert report.macs == sum(block_macs(N, h, m, full=True) for h, m in structure) + PATCH_EMBED + HEAD
    assert 2 * report.macs == counted_flops(model, report.input_size)
    assert report.params == sum(p.numel() for p in model.parameters())


def test_tokens_are_counted_per_block():
    model = build("deit_small_patch16_224", {})
    # Stand-in for token pruning: keep the class token and 98 patch tokens from block 6 on.
    model.blocks[6].register_forward_pre_hook(lambda _m, args: (args[0][:, :99],))
    report = count_macs(model)
    assert [b.tokens for b in report.blocks] == [N] * 6 + [99] * 6
    expected = 6 * block_macs(N, 6, 1536, full=True) + 6 * block_macs(99, 6, 1536, full=True) + PATCH_EMBED + HEAD
    assert report.macs == expected and 2 * report.macs == counted_flops(model, report.input_size)


def test_merged_mlp_counts_one_linear():
    model = build("deit_small_patch16_224", {})
    adapter = get_adapter(model)
    adapter.merge_mlp(2, nn.Linear(D, D))
    assert adapter.block(2).mlp.merged
    report = count_macs(model)
    assert report.blocks[2].mlp == N * D * D
    assert report.macs == 11 * block_macs(N, 6, 1536, full=True) + block_macs(N, 6, 0, full=True) + N * D * D \
        + PATCH_EMBED + HEAD
    assert 2 * report.macs == counted_flops(model, report.input_size)


def test_batch_size_does_not_change_per_image_macs():
    model = build("deit_tiny_patch16_224", {})
    assert count_macs(model, batch_size=3).macs == count_macs(model).macs


def test_input_size_override():
    model = build("deit_tiny_patch16_224", {"dynamic_img_size": True})
    report = count_macs(model, input_size=(3, 112, 112))
    assert report.input_size == (3, 112, 112)
    assert [b.tokens for b in report.blocks] == [1 + 7 * 7] * 12
    assert 2 * report.macs == counted_flops(model, (3, 112, 112))
    with pytest.raises(VitpruneError, match="input size"):
        count_macs(model, input_size=(112, 112))


def test_params_count_trainable_separately():
    model = build("deit_tiny_patch16_224", {})
    model.patch_embed.requires_grad_(False)
    report = count_macs(model)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert report.trainable_params == report.params - sum(p.numel() for p in model.patch_embed.parameters())


def test_report_names_its_convention_and_serialises():
    model = build("deit_tiny_patch16_224", {"depth": 2}).train()
    for convention in CONVENTIONS:
        report = count_macs(model, convention=convention)
        data = json.loads(json.dumps(report.to_dict()))
        assert {"macs", "params", "convention", "input_size"} <= data.keys()
        assert data["convention"] == convention and data["input_size"] == [3, 224, 224]
        assert f"MACs ({convention}:" in report.summary() and str(report) == report.summary()
    assert model.training


def test_user_errors():
    model = build("deit_tiny_patch16_224", {})
    with pytest.raises(VitpruneError, match="convention"):
        count_macs(model, convention="flops")
    with pytest.raises(VitpruneError, match="batch size"):
        count_macs(model, batch_size=0)
    with pytest.raises(UnsupportedArchitectureError):
        count_macs(nn.Sequential(nn.Linear(4, 4)))


def test_totals_give_both_conventions_from_either_report():
    model = build("deit_tiny_patch16_224", {"depth": 2})
    full, linear, tp = (count_macs(model, convention=c) for c in ("full", "linear", "tp"))
    expected = {"params": full.params, "macs_full": full.macs, "macs_linear": linear.macs}
    assert full.totals() == linear.totals() == expected
    assert tp.totals() == {**expected, "macs_tp": tp.macs}  # the tp count is torch-pruning's own run, made on request
    assert full.tp_macs is None and full.to_dict()["tp_macs"] is None and tp.to_dict()["tp_macs"] == tp.macs


def test_counting_on_a_given_image():
    model = build("deit_tiny_patch16_224", {"depth": 2})
    image = torch.randn(3, 224, 224)
    assert count_macs(model, image=image).macs == count_macs(model).macs  # a dense model's cost is the image's too
    assert count_macs(model, image=image).batch_size == 1


@pytest.mark.parametrize("examples", EXAMPLES)
def test_count_equals_flop_counter_on_random_models_and_edits(examples):
    """For random small ViTs after random depth, width and token edits, the count (plus the value padding of uneven
    heads) is exactly what FlopCounterMode sees."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits())
        note(draw_edits(data.draw, model))
        x = images(model, batch=1)
        counted = count_macs(model, image=x[0]).macs + value_padding_macs(model, image=x[0])
        assert counted == flop_counter_macs(model, x)

    check()


# ---------------------------------------------------------------- the tp convention: torch-pruning's counter

def _torch_pruning(model: nn.Module, input_size: tuple[int, int, int]) -> tuple[float, int]:
    from torch_pruning.utils import count_ops_and_params

    return count_ops_and_params(model, torch.randn(1, *input_size))


def test_tp_is_what_torch_pruning_counts_on_every_family(small_model_spec):
    """Dense, then after the edits each family takes (neurons, a merged MLP, a removed attention, pruned heads)."""
    model = tracked(*small_model_spec)
    for edit in (lambda: None, lambda: _edit(model)):
        edit()
        report = count_macs(model, convention="tp")
        macs, params = _torch_pruning(model, report.input_size)
        assert (report.macs, report.params) == (macs, params)
        assert report.convention == "tp" and all(b.tp is not None for b in report.blocks)


def _tp_beyond_full(model: nn.Module, report) -> list[int]:
    """What torch-pruning's hooks count in each block of a timm ViT beyond the full convention.

    Its hook for timm's Attention counts the softmax (``heads · N²``), the query scaling (``N · A``) and
    the qkv and proj biases per token (``3 · N · A + N · A``), A the attention width; a Linear outside it
    counts its bias once per call, not per token; GELU counts one per element; timm's LayerNorm (a
    subclass of ``nn.LayerNorm``, the exact type tp's hook is keyed on) counts nothing.
    """
    extra = []
    for view, block in zip(get_adapter(model).blocks(), report.blocks, strict=True):
        n, d = block.tokens, view.mlp.fc1.in_features
        attention = view.attn.num_heads * n * n + 5 * n * view.attn.attn_dim if view.attn is not None else 0
        biases = d if view.mlp.merged else view.mlp.hidden_features + d
        gelu = (n * view.mlp.hidden_features if view.mlp.has_activation else 0) + \
            (0 if isinstance(view.act, nn.Identity) else n * d)
        extra.append(attention + biases + gelu)
    return extra


def test_tp_on_a_vit_is_full_plus_biases_softmax_scaling_and_gelu():
    """DeiT-T dense and depth-pruned (a removed attention, a merged MLP, both with the output GELU): torch-pruning
    counts each block's full-convention MACs plus the element-wise terms of :func:`_tp_beyond_full`, and outside the
    blocks the patch embedding's bias at every position and the head's bias once."""
    model = tracked("deit_tiny_patch16_224", {})
    d, patches, classes = 192, 196, 1000
    for edit in (lambda: None, lambda: prune_depth(model, attention=[1, 3], activation=[2, 3], output_gelu=True)):
        edit()
        report = count_macs(model, convention="tp")
        beyond = _tp_beyond_full(model, report)
        assert [b.tp for b in report.blocks] == [b.total("full") + e for b, e in zip(report.blocks, beyond)]
        assert report.macs == report.totals()["macs_full"] + sum(beyond) + patches * d + classes
    assert report.blocks[3].attn_linear == 0 and report.blocks[3].mlp_hidden is None  # the edits took


def test_tp_counts_a_narrowed_attention_as_if_its_projection_were_square():
    """torch-pruning's Attention hook counts proj as ``A × (A + 1)`` per token, A the attention width: right while A
    equals the embedding width D, short by ``N · A · (D - A)`` once heads are pruned."""
    model = tracked("deit_tiny_patch16_224", {"depth": 2})
    prune_heads(model, 1, [0])
    report = count_macs(model, convention="tp")
    (n, a, d), block = (197, 64, 192), report.blocks[1]
    assert block.heads == 1 and block.tp == block.total("full") + _tp_beyond_full(model, report)[1] - n * a * (d - a)


def test_tp_of_an_attention_torch_pruning_does_not_know_is_its_linear_layers():
    """Hugging Face's ViT attention has no torch-pruning hook: tp counts its q, k, v and output Linears (each bias once
    per call), no QK^T or A.V; HF's LayerNorm is ``nn.LayerNorm`` (2 per element), its GELU module has no hook."""
    model = build("hf:ViTForImageClassification", HF_TINY)
    report = count_macs(model, convention="tp")
    n, d, hidden = report.blocks[0].tokens, HF_TINY["hidden_size"], HF_TINY["intermediate_size"]
    blocks, positions = HF_TINY["num_hidden_layers"], (HF_TINY["image_size"] // HF_TINY["patch_size"]) ** 2
    per_block = 2 * (2 * n * d) + 5 * d + hidden  # two LayerNorms; q, k, v, output, intermediate, output biases
    beyond = blocks * per_block + 2 * n * d + positions * d + HF_TINY["num_labels"]  # final norm, patch conv, head
    assert report.macs == report.totals()["macs_linear"] + beyond


def test_tp_counts_one_image_whatever_the_batch():
    """torch-pruning counts a Linear's bias once per call: its per-image figure would depend on the batch."""
    model = build("deit_tiny_patch16_224", {"depth": 2})
    assert count_macs(model, batch_size=3, convention="tp").macs == count_macs(model, convention="tp").macs \
        == tp_macs(model, torch.randn(1, 3, 224, 224))


def test_tp_without_torch_pruning_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_pruning.utils", None)  # what an import of a missing package meets
    with pytest.raises(VitpruneError, match=r"pip install 'vitprune\[width\]'"):
        count_macs(build("deit_tiny_patch16_224", {"depth": 1}), convention="tp")


def test_tp_refuses_token_pruning_blocks_whose_attention_it_would_miss():
    """A token-pruning block runs its attention part by part; torch-pruning has a hook for the attention module, so
    it neither sees it run nor descends into it: it would count none of that attention."""
    from torch_pruning.utils import count_ops_and_params

    model = tracked("deit_tiny_patch16_224", {"depth": 3})
    prune_tokens(model, 1, 0.5)
    attention = get_adapter(model).block(1).attn.module
    _, _, per_module, _ = count_ops_and_params(model, torch.randn(1, 3, 224, 224), layer_wise=True)
    assert per_module[attention] == 0 < count_macs(model).blocks[1].attn_linear
    with pytest.raises(VitpruneError, match="token-reducing blocks"):
        count_macs(model, convention="tp")
