"""timm's ConvNeXt: counted as FlopCounterMode counts it at the released sizes, and everything it cannot do (attention,
tokens, stage-spanning widths, the 1x1-conv MLP, ConvNeXt-V2's GRN) refused in one line. Its exactness tests are the
shared ones (its row ``convnext_tiny`` in tests/conftest.py)."""

from __future__ import annotations

import pytest
import timm
import torch
from conftest import CONVNEXT_TINY, tracked

import vitprune
from vitprune.errors import UnsupportedArchitectureError
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.surgery import prune_depth, prune_embed_dims, prune_heads, prune_tokens


@pytest.mark.parametrize("kwargs, message", [
    ({"conv_mlp": True}, r"stages\.0\.blocks\.0\.mlp is Mlp \(the 1x1-convolution MLP \(conv_mlp=True\) is not "
                         r"supported yet"),
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
    (lambda m: prune_tokens(m, 0, 0.5), "timm-convnext models have no tokens"),
    (lambda m: prune_embed_dims(m, [0]), "timm-convnext models have no single embedding width"),
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
def test_released_sizes_count_as_flop_counter_mode(name, params, macs):
    """VBP's Table 8 prints 28.59 / 50.22 / 88.59 M params (ours to the last unit) and 4.47 / 8.71 / 15.38 GMACs,
    0.2-0.3% above ours (benchmarks/results/paper_tables.md). No attention: both conventions agree."""
    model = vitprune.create_model(name)
    report = count_macs(model)
    assert (report.params, report.totals()["macs_full"], report.totals()["macs_linear"]) == (params, macs, macs)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert flop_counter_macs(model, torch.randn(1, 3, 224, 224)) == macs
