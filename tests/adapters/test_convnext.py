"""timm's ConvNeXt: counted as FlopCounterMode counts it at the released sizes, and everything it cannot do (attention,
tokens, stage-spanning widths, the 1x1-conv MLP, ConvNeXt-V2's GRN) refused in one line. Its exactness tests are the
shared ones (its row ``convnext_tiny`` in tests/conftest.py)."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
from conftest import CONVNEXT_TINY, tracked
from timm.layers import LayerNorm2d
from torch import nn

import vitprune
from vitprune.adapters import prepare_model
from vitprune.errors import UnsupportedArchitectureError
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.surgery import prune_depth, prune_embed_dims, prune_heads, prune_tokens


@pytest.mark.parametrize("kwargs, message", [
    # Built by timm directly, not prepared: the message says how to prepare it.
    ({"conv_mlp": True}, r"stages\.0\.blocks\.0\.mlp is Mlp \(the 1x1-convolution MLP \(conv_mlp=True\) is edited as "
                         r"the Linear MLP it equals: build the model with vitprune.create_model, or call "
                         r"vitprune.adapters.prepare_model\(model\) first\)"),
    ({"use_grn": True}, r"stages\.0\.blocks\.0\.mlp is GlobalResponseNormMlp \(ConvNeXt-V2's global response norm"),
], ids=["conv-mlp", "grn"])
def test_what_the_adapter_cannot_represent_is_one_line(kwargs, message):
    model = timm.create_model("convnext_tiny", pretrained=False, **{**CONVNEXT_TINY, **kwargs})
    with pytest.raises(UnsupportedArchitectureError, match=message):
        vitprune.get_adapter(model)


@pytest.mark.parametrize("edit, message", [
    (lambda m: prune_depth(m, attention=[0]), "depth pruning needs to remove attention sublayers, which vitprune "
                                              "cannot do on timm-convnext models"),
    (lambda m: prune_heads(m, 0, [0]), "block 0 has no attention to prune"),
    (lambda m: prune_tokens(m, 0, 0.5), "token reduction needs to prune or merge tokens, which vitprune cannot do "
                                        "on timm-convnext models"),
    (lambda m: prune_embed_dims(m, [0]), "embedding pruning needs to prune embedding channels, which vitprune "
                                         "cannot do on timm-convnext models"),
], ids=["attention", "heads", "tokens", "embedding"])
def test_edits_a_convnext_cannot_take_are_refused(edit, message):
    model = tracked("convnext_tiny", CONVNEXT_TINY)
    with pytest.raises((UnsupportedArchitectureError, ValueError), match=message):
        edit(model)


@pytest.mark.slow
@pytest.mark.parametrize("name, params, macs", [
    ("convnext_tiny", 28_589_128, 4_455_531_264),
    ("convnext_small", 50_223_688, 8_683_712_256),
    ("convnext_base", 88_591_464, 15_354_729_472),
])
@pytest.mark.parametrize("conv_mlp", [False, True], ids=["linear-mlp", "conv-mlp"])
def test_released_sizes_count_as_flop_counter_mode(name, params, macs, conv_mlp):
    """VBP's Table 8 prints 28.59 / 50.22 / 88.59 M params (ours to the last unit) and 4.47 / 8.71 / 15.38 GMACs,
    0.2-0.3% above ours (benchmarks/results/paper_tables.md). No attention: both conventions agree. The 1x1-conv MLP,
    prepared, counts the same."""
    model = vitprune.create_model(name, conv_mlp=conv_mlp)
    report = count_macs(model)
    assert (report.params, report.totals()["macs_full"], report.totals()["macs_linear"]) == (params, macs, macs)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert flop_counter_macs(model, torch.randn(1, 3, 224, 224)) == macs


def test_the_conv_mlp_is_prepared_into_the_linear_mlp_it_equals(tmp_path):
    """timm's conv_mlp=True block (LayerNorm2d, 1x1 convolutions on channels-first maps) becomes the channels-last
    Linear MLP with the same weights: the same function, parameters and FlopCounterMode MACs; and a checkpoint in
    the convolutional layout loads into the prepared model."""
    kwargs = {**CONVNEXT_TINY, "conv_mlp": True}
    torch.manual_seed(0)
    raw = timm.create_model("convnext_tiny", pretrained=False, **kwargs).eval()
    assert isinstance(raw.stages[0].blocks[0].norm, LayerNorm2d)
    prepared = prepare_model(copy.deepcopy(raw))
    block = prepared.stages[0].blocks[0]
    assert not block.use_conv_mlp and type(block.norm) is nn.LayerNorm and type(block.mlp.fc1) is nn.Linear
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(prepared(x), raw(x), rtol=1e-5, atol=1e-5)
    report = count_macs(prepared)
    assert report.params == sum(p.numel() for p in raw.parameters())
    assert report.macs == flop_counter_macs(raw, x[:1]) == flop_counter_macs(prepared, x[:1])
    torch.save(raw.state_dict(), tmp_path / "conv.pth")
    loaded = vitprune.create_model("convnext_tiny", checkpoint=tmp_path / "conv.pth", **kwargs)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), raw(x), rtol=1e-5, atol=1e-5)
