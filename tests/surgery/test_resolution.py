"""Another input size (``set_input_size``): a ViT takes the new size with timm's resampled position embedding, the
edit composes with pruning exactly, saves and reloads, and a size or family it cannot serve is refused in one line."""

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
    """One more row and two more columns of patches than the model takes."""
    adapter = vitprune.get_adapter(model)
    _, height, width = adapter.input_size
    rows, cols = adapter.grid_size
    return height + height // rows, width + 2 * (width // cols)


@pytest.mark.needs("input_resize")
def test_a_resized_model_takes_the_new_size_with_timms_position_embedding(small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 2))
    adapter = vitprune.get_adapter(model)
    old_grid, old_pos = adapter.grid_size, model.pos_embed.detach().clone()
    with torch.no_grad():
        out_shape = model(torch.zeros(2, *adapter.input_size)).shape  # dinov2's row has no head: its features
    prefix = 0 if model.no_embed_class else adapter.num_prefix_tokens
    height, width = _larger(model)
    set_input_size(model, height, width)
    rows, cols = old_grid[0] + 1, old_grid[1] + 2
    assert adapter.input_size[1:] == (height, width) and adapter.grid_size == (rows, cols)
    torch.testing.assert_close(model.pos_embed, resample_abs_pos_embed(old_pos, new_size=[rows, cols],
                                                                       old_size=list(old_grid),
                                                                       num_prefix_tokens=prefix))
    x = torch.randn(2, *adapter.input_size)
    with torch.no_grad():
        assert model(x).shape == out_shape
        assert [m.shape[2:] for m in vitprune.intermediates(model, x, [-1])] == [(rows, cols)]
    assert vitprune.get_recipe(model).edits[-1].op == "set_input_size"


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
    with pytest.raises(VitpruneError, match=rf"^{height + 1}x{width} images are not tiled by the model's \d+x\d+ "
                                            r"patches$"):
        set_input_size(model, height + 1, width)
    with pytest.raises(VitpruneError, match="must be positive"):
        set_input_size(model, 0, width)
    assert vitprune.get_recipe(model).edits == []


def test_a_family_without_resizing_refuses_in_one_line():
    from conftest import SWIN_TINY

    model = tracked("swin_tiny_patch4_window7_224", shallow("swin_tiny_patch4_window7_224", SWIN_TINY, 1))
    with pytest.raises(UnsupportedArchitectureError, match="resizing the input needs to take images of another size"):
        set_input_size(model, 64, 64)
