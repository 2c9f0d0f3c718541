"""ViTAdapter.set_drop_path: timm's stochastic-depth rule on every family whose blocks have it, refused in one line on
the others; in eval mode the model computes what it did, and the model's own modules go back."""

from __future__ import annotations

import pytest
import torch
from conftest import HF_PREFIX, build
from timm.layers import DropPath

from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError


def _rates(model: torch.nn.Module) -> list[float]:
    """The drop probability at the end of each block's remaining residual branches, in order."""
    return [module.drop_prob if isinstance(module, DropPath) else 0.0
            for view in get_adapter(model).blocks() for module in (view.drop_path1, view.drop_path2)
            if module is not None]


def test_each_block_drops_its_branches_at_timms_linear_rate(small_model_spec):
    name, kwargs = small_model_spec
    model = build(name, kwargs)
    adapter = get_adapter(model)
    if name.startswith(HF_PREFIX):
        with pytest.raises(VitpruneError, match="have no stochastic depth to set: their residual branches end in a "
                                                "Dropout"):
            adapter.set_drop_path(0.1)
        return
    images = torch.randn(2, *adapter.input_size)
    with torch.no_grad():
        before = model(images)
    own = [(name, type(module)) for name, module in model.named_modules()]
    restore = adapter.set_drop_path(0.1)
    blocks = adapter.blocks()
    expected = [0.1 * i / (len(blocks) - 1) for i, view in enumerate(blocks)
                for module in (view.drop_path1, view.drop_path2) if module is not None]
    assert _rates(model) == pytest.approx(expected)
    with torch.no_grad():
        torch.testing.assert_close(model(images), before, rtol=0, atol=0)
    restore()
    assert [(name, type(module)) for name, module in model.named_modules()] == own
    adapter.set_drop_path(0.0)
    assert all(isinstance(m, torch.nn.Identity) for v in adapter.blocks() for m in (v.drop_path1, v.drop_path2)
               if m is not None)


def test_a_rate_out_of_range_is_refused():
    model = build("deit_tiny_patch16_224", {"depth": 2})
    with pytest.raises(VitpruneError, match=r"drop-path rate must lie in \[0, 1\), got 1.0"):
        get_adapter(model).set_drop_path(1.0)
