"""``FeatureMaps`` as timm's ``features_only`` models: the same ``feature_info`` as timm's own features-only models
for unpruned timm backbones, maps as a list or an ordered dict of module names, and torchvision's FPN on top."""

from __future__ import annotations

import pytest
import timm
import torch
from conftest import build, shallow, tracked
from torchvision.ops import FeaturePyramidNetwork

import vitprune
from vitprune import FeatureMaps
from vitprune.surgery import prune_depth


def _images(model: torch.nn.Module) -> torch.Tensor:
    return torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))


@pytest.mark.needs("dense_features")
def test_feature_info_is_timms_for_a_timm_backbone(small_model_spec):
    name, kwargs = small_model_spec
    if name.startswith(("hf:", "vitprune:")):
        pytest.skip("timm builds no features-only model of it")
    kwargs = shallow(name, kwargs, 3)
    reference = timm.create_model(name, pretrained=False, features_only=True, **kwargs).feature_info
    ours = FeatureMaps(build(name, kwargs), list(reference.out_indices)).feature_info
    for field in ("channels", "reduction", "module_name"):
        assert getattr(ours, field)() == getattr(reference, field)(), field


@pytest.mark.needs("dense_features")
def test_maps_come_as_a_list_or_keyed_by_module_on_a_pruned_model(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 3))
    if "attention_removal" in vitprune.get_adapter(model).capabilities:
        prune_depth(model, attention=[0])
    images = _images(model)
    listed, keyed = FeatureMaps(model), FeatureMaps(model, output="dict")
    modules = dict(model.named_modules())
    with torch.no_grad():
        maps, by_name = listed(images), keyed(images)
    assert list(by_name) == keyed.feature_info.module_name() and all(n in modules for n in by_name)
    assert len(maps) == len(by_name) == len(listed.feature_info)
    for a, (n, b), c, r in zip(maps, by_name.items(), listed.feature_info.channels(),
                               listed.feature_info.reduction(), strict=True):
        torch.testing.assert_close(a, b)
        assert a.shape[1] == c and images.shape[-1] == r * a.shape[-1], n
    with pytest.raises(ValueError, match="unknown output"):
        FeatureMaps(model, output="tuple")


def test_torchvisions_fpn_takes_the_multi_scale_maps():
    """Swin's four stages under torchvision's ``FeaturePyramidNetwork``, wired from ``feature_info`` alone."""
    kwargs = {"img_size": 32, "patch_size": 2, "embed_dim": 16, "depths": (1, 1, 1, 1), "num_heads": (1, 2, 2, 4),
              "window_size": 4, "pretrained_cfg_overlay": {"input_size": (3, 32, 32)}}
    backbone = FeatureMaps(build("swin_tiny_patch4_window7_224", kwargs), output="dict")
    fpn = FeaturePyramidNetwork(backbone.feature_info.channels(), out_channels=8)
    pyramid = fpn(backbone(torch.randn(2, 3, 32, 32)))
    assert [tuple(p.shape) for p in pyramid.values()] == [(2, 8, 16, 16), (2, 8, 8, 8), (2, 8, 4, 4), (2, 8, 2, 2)]
    assert list(pyramid) == backbone.feature_info.module_name()
