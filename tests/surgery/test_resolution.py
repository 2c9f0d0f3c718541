"""Another input size (``set_input_size``) on every family: a timm ViT takes the new size with timm's resampled
position embedding, a Hugging Face one as transformers interpolates its own, Swin keeps its windows and ConvNeXt its
weights; the edit composes with pruning exactly, saves and reloads, and a size it cannot serve is refused in one
line."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import shallow, tracked
from timm.layers import resample_abs_pos_embed

import vitprune
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.surgery import prune_mlp_neurons, set_input_size


def _larger(model: torch.nn.Module) -> tuple[int, int]:
    """A plain ViT: one more row and two more columns of patches than the model takes; a staged family (no single
    grid): twice the height and three times the width, which keeps every stage's grid a whole number of windows."""
    adapter = vitprune.get_adapter(model)
    _, height, width = adapter.input_size
    if not hasattr(adapter, "grid_size"):
        return 2 * height, 3 * width
    rows, cols = adapter.grid_size
    return height + height // rows, width + 2 * (width // cols)


@pytest.mark.needs("input_resize")
def test_a_resized_model_takes_the_new_size(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 2))
    adapter = vitprune.get_adapter(model)
    _, old_height, _ = adapter.input_size
    with torch.no_grad():
        out_shape = model(torch.zeros(2, *adapter.input_size)).shape  # dinov2's row has no head: its features
        old_map = vitprune.intermediates(model, torch.zeros(1, *adapter.input_size), [-1])[0].shape[2:]
    old_pos = model.pos_embed.detach().clone() if hasattr(model, "pos_embed") else None
    height, width = _larger(model)
    set_input_size(model, height, width)
    assert adapter.input_size[1:] == (height, width)
    x = torch.randn(2, *adapter.input_size)
    reduction = old_height // old_map[0]
    with torch.no_grad():
        assert model(x).shape == out_shape
        assert [m.shape[2:] for m in vitprune.intermediates(model, x, [-1])] == [(height // reduction,
                                                                                   width // reduction)]
    assert vitprune.get_recipe(model).edits[-1].op == "set_input_size"
    if old_pos is not None:  # a timm ViT: timm's own resampling of the position embedding
        prefix = 0 if model.no_embed_class else adapter.num_prefix_tokens
        torch.testing.assert_close(model.pos_embed, resample_abs_pos_embed(
            old_pos, new_size=list(adapter.grid_size), old_size=list(old_map), num_prefix_tokens=prefix))


@pytest.mark.parametrize("name", ["hf:ViTForImageClassification", "hf:DeiTForImageClassificationWithTeacher"])
def test_a_resized_hugging_face_model_is_transformers_own_interpolation(name):
    """The resized model at the new size equals transformers' own forward with ``interpolate_pos_encoding``."""
    from conftest import HF_TINY

    model = tracked(name, shallow(name, HF_TINY, 2))
    reference = copy.deepcopy(model.hf).eval()
    set_input_size(model, 48, 64)
    x = torch.randn(2, 3, 48, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(pixel_values=x, interpolate_pos_encoding=True).logits,
                                   rtol=1e-5, atol=1e-5)


def test_a_resized_convnext_is_the_same_network_and_swin_resizes_back_exactly():
    """ConvNeXt has no grid to resample: at the new size it computes what the unresized model computes there. Swin
    keeps its windows and relative position biases: resized and resized back, it is the model it was."""
    from conftest import CONVNEXT_TINY, SWIN_TINY

    convnext = tracked("convnext_tiny", shallow("convnext_tiny", CONVNEXT_TINY, 1))
    original = copy.deepcopy(convnext)
    set_input_size(convnext, 64, 96)
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(convnext(x), original(x), rtol=0, atol=0)
    swin = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    original = copy.deepcopy(swin)
    set_input_size(swin, 64, 96)
    set_input_size(swin, 32, 32)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(swin(x), original(x), rtol=0, atol=0)


@pytest.mark.needs("input_resize", "ffn_width")
def test_resizing_a_pruned_model_equals_resizing_the_masked_one_and_reloads(small_model_spec, tmp_path):
    """FFN neurons removed vs. their fc2 columns zeroed, then both resized: the same function at the new size, and
    the saved model reloads (the resize replayed on a fresh base) to the same outputs."""
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 2))
    masked = copy.deepcopy(model)
    hidden = vitprune.get_adapter(model).block(1).mlp.hidden_features
    removed = list(range(0, hidden, 2))
    with torch.no_grad():
        vitprune.get_adapter(masked).block(1).mlp.fc2.weight[:, removed] = 0
    prune_mlp_neurons(model, 1, [i for i in range(hidden) if i not in removed])
    size = _larger(model)
    set_input_size(model, *size)
    set_input_size(masked, *size)
    vitprune.save(model, tmp_path / "resized")
    reloaded = vitprune.load(tmp_path / "resized").eval()
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), masked(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(reloaded(x), model(x), rtol=0, atol=0)


@pytest.mark.needs("input_resize")
def test_a_size_the_patches_do_not_tile_is_refused_in_one_line(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 1))
    _, height, width = vitprune.get_adapter(model).input_size
    with pytest.raises(VitpruneError, match=rf"^{height + 1}x{width} images are not tiled by the (model's \d+x\d+ "
                                            r"patches|last stage's \d+x\d+-pixel cells)$"):
        set_input_size(model, height + 1, width)
    with pytest.raises(VitpruneError, match="must be positive"):
        set_input_size(model, 0, width)
    assert vitprune.get_recipe(model).edits == []


def test_a_size_swins_windows_do_not_tile_is_refused_in_one_line():
    from conftest import SWIN_TINY

    model = tracked("swin_tiny_patch4_window7_224", SWIN_TINY)
    with pytest.raises(VitpruneError, match=r"^32x48 images give stage 2 a 4x6 grid, which its 4x4 windows do not "
                                            r"tile$"):
        set_input_size(model, 32, 48)
    assert vitprune.get_recipe(model).edits == []


def test_a_family_without_resizing_refuses_in_one_line(monkeypatch):
    from conftest import SWIN_TINY

    from vitprune.adapters import SwinAdapter

    monkeypatch.setattr(SwinAdapter, "capabilities", SwinAdapter.capabilities - {"input_resize"})
    model = tracked("swin_tiny_patch4_window7_224", shallow("swin_tiny_patch4_window7_224", SWIN_TINY, 1))
    with pytest.raises(UnsupportedArchitectureError, match="resizing the input needs to take images of another size"):
        set_input_size(model, 64, 64)
