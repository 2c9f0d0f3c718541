"""STAR's inter-layer importance: the traced forward is the model's, relevance is conserved, rollouts share factors."""

from __future__ import annotations

import pytest
import torch
from conftest import HF_TINY, LVVIT_TINY, build, tracked

import vitprune
from vitprune.errors import UnsupportedArchitectureError
from vitprune.methods.star.lrp import (
    attention_relevance, inter_layer_scores, rollouts, smooth_on_grid, traced_forward,
)


def _small(seed=0):
    torch.manual_seed(seed)
    return vitprune.create_model("digits-vit", depth=3).eval()


def _images(model, n=3):
    return torch.randn(n, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(1))


HF_SMALL = {**HF_TINY, "num_hidden_layers": 2}
#: LV-ViT with its class head alone (as STAR's code runs it): its stem, skip_lam LayerScales and ``eps`` differ.
LVVIT_CLS = ("vitprune:lvvit-s-cls", {**LVVIT_TINY, "depth": 2})
#: And with its token-labelling head, whose maximum over the patches adds to the logits.
LVVIT = ("vitprune:lvvit-s", {**LVVIT_TINY, "depth": 2})


@pytest.mark.parametrize("name, kwargs", [("deit_tiny_patch16_224", {"depth": 2}),
                                          ("vit_small_patch14_dinov2", {"depth": 2, "img_size": 56}),
                                          ("hf:ViTForImageClassification", HF_SMALL),
                                          ("hf:DeiTForImageClassification", HF_SMALL), LVVIT_CLS, LVVIT],
                         ids=["deit", "dinov2-ls", "hf_vit", "hf_deit", "lvvit_cls", "lvvit"])
def test_traced_forward_is_the_models_forward(name, kwargs):
    model = tracked(name, kwargs)
    x = _images(model, n=2)
    with torch.no_grad():
        logits, traces, _ = traced_forward(model, x)
        torch.testing.assert_close(logits, model(x), rtol=1e-5, atol=1e-5)
    assert len(traces) == 2 and traces[0].attn.shape[-1] == traces[0].x.shape[1]


@pytest.mark.parametrize("family", ["timm", "hf", "lvvit_cls", "lvvit"])
def test_relevance_is_conserved_from_the_logit_to_the_tokens(family):
    others = {"hf": ("hf:ViTForImageClassification", {**HF_SMALL, "num_hidden_layers": 3}),
              "lvvit_cls": (LVVIT_CLS[0], {**LVVIT_CLS[1], "depth": 3}), "lvvit": (LVVIT[0], {**LVVIT[1], "depth": 3})}
    model = _small() if family == "timm" else tracked(*others[family])
    x = _images(model)
    with torch.no_grad():
        logits, traces, pooled = traced_forward(model, x)
    one_hot = torch.nn.functional.one_hot(logits.argmax(1), logits.shape[1]).float()
    maps, tokens = attention_relevance(model, traces, pooled, one_hot)
    torch.testing.assert_close(tokens.sum(dim=(1, 2)), torch.ones(3), rtol=0, atol=1e-5)
    assert not tokens.requires_grad and not any(m.requires_grad for m in maps)  # no graph kept alive
    assert [m.shape for m in maps] == [t.attn.shape for t in traces]
    assert all(torch.isfinite(m).all() for m in maps)


def test_rollouts_equal_a_separate_product_per_start_layer():
    gen = torch.Generator().manual_seed(0)
    layers = [torch.eye(5) + torch.rand(2, 5, 5, generator=gen) for _ in range(4)]
    got = rollouts(layers, num_prefix_tokens=1)
    for start in range(4):
        joint = layers[start]
        for later in layers[start + 1:]:
            joint = later @ joint
        torch.testing.assert_close(got[:, start], joint[:, 0, 1:])


def test_smoothing_is_bilinear_upsampling_then_patch_averaging():
    gen = torch.Generator().manual_seed(0)
    maps = torch.rand(2, 3, 16, generator=gen, dtype=torch.float64)
    normalised = (maps - maps.amin(-1, keepdim=True)) / (maps.amax(-1, keepdim=True) - maps.amin(-1, keepdim=True))
    up = torch.nn.functional.interpolate(normalised.reshape(6, 1, 4, 4), scale_factor=16, mode="bilinear",
                                         align_corners=False)
    reference = torch.nn.functional.avg_pool2d(up, 16).reshape(2, 3, 16)
    torch.testing.assert_close(smooth_on_grid(maps, (4, 4)), reference)


def test_inter_layer_scores_shape_and_batch_split():
    model = _small()
    x = _images(model, n=4)
    labels = torch.zeros(4, dtype=torch.long)
    whole = inter_layer_scores(model, [(x, labels)], classes=2)
    split = inter_layer_scores(model, [(x[:1], labels[:1]), (x[1:], labels[1:])], classes=2)
    patches = vitprune.get_adapter(model).num_patches
    assert whole.shape == (3, patches) and whole.dtype == torch.float64
    torch.testing.assert_close(whole, split, rtol=1e-6, atol=1e-8)
    assert (whole >= 0).all() and (whole <= 1).all()
    capped = inter_layer_scores(model, [(x, labels)], classes=2, max_images=1)
    torch.testing.assert_close(capped, inter_layer_scores(model, [(x[:1], labels[:1])], classes=2))


def test_lrp_rejects_what_it_cannot_follow():
    distilled = vitprune.track(build("deit_tiny_distilled_patch16_224", {"depth": 1}),
                               "deit_tiny_distilled_patch16_224", depth=1)
    teacher = tracked("hf:DeiTForImageClassificationWithTeacher", HF_SMALL)
    for model in (distilled, teacher):  # LV-ViT's token-labelling head is followed (test_relevance_is_conserved...)
        with pytest.raises(UnsupportedArchitectureError, match="single \\[CLS\\] token to the class head"):
            inter_layer_scores(model, [(_images(model, 1), None)])
