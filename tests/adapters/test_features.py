"""Feature maps for dense heads: every family gives them (``vitprune.intermediates``, ``FeatureMaps``), a pruned and
reloaded model gives those of the masked dense model where the edit is exact, and token pruning fills the grid."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import build, shallow, tracked

import vitprune
from vitprune import FeatureMaps, intermediates
from vitprune.errors import UnsupportedArchitectureError
from vitprune.surgery import prune_depth, prune_mlp_neurons, prune_tokens


def _images(model: torch.nn.Module, batch: int = 2, seed: int = 1) -> torch.Tensor:
    size = vitprune.get_adapter(model).input_size
    return torch.randn(batch, *size, generator=torch.Generator().manual_seed(seed))


def _randomise_biases(model: torch.nn.Module) -> None:
    """timm starts biases at 0, which would hide the bias paths a masked reference must match."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def _maps(model: torch.nn.Module, x: torch.Tensor, indices=None, norm: bool = False) -> list[torch.Tensor]:
    with torch.no_grad():
        return intermediates(model, x, indices, norm=norm)


def _close(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert [a.shape for a in actual] == [e.shape for e in expected]
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def _reloaded(model: torch.nn.Module, directory) -> torch.nn.Module:
    vitprune.save(model, directory)
    return vitprune.load(directory).eval()


@pytest.mark.needs("dense_features")
def test_every_family_gives_maps_on_its_grid(small_model_spec):
    name, kwargs = small_model_spec
    model = build(name, shallow(name, kwargs, 3), seed=0)
    x = _images(model)
    maps = _maps(model, x)
    adapter = vitprune.get_adapter(model)
    staged = not hasattr(adapter, "grid_size")
    assert len(maps) == (len(kwargs["depths"]) if staged else len(adapter.blocks()))
    assert all(m.dim() == 4 and m.shape[0] == 2 for m in maps)
    if not staged:  # one grid, the patch grid, at every block
        assert {m.shape[2:] for m in maps} == {torch.Size(adapter.grid_size)}
    # Indices as timm takes them: the last n, or those named (negative from the end).
    assert [m.shape for m in _maps(model, x, 2)] == [m.shape for m in maps[-2:]]
    _close(_maps(model, x, [0, -1], norm=True), [_maps(model, x, None, norm=True)[i] for i in (0, -1)])
    backbone = FeatureMaps(model, [0, -1])
    assert backbone.channels == [maps[0].shape[1], maps[-1].shape[1]]
    assert backbone.reductions == [x.shape[-1] // maps[0].shape[-1], x.shape[-1] // maps[-1].shape[-1]]
    with torch.no_grad():
        _close(backbone(x), [maps[0], maps[-1]])


def test_hugging_face_maps_are_transformers_hidden_states():
    from conftest import HF_TINY

    model = build("hf:DeiTForImageClassificationWithTeacher", {**HF_TINY, "num_hidden_layers": 3})
    x = _images(model)
    with torch.no_grad():
        hidden = model.hf(pixel_values=x, output_hidden_states=True).hidden_states
    rows, cols = vitprune.get_adapter(model).grid_size
    # hidden_states[0] is the embedding; [i + 1] follows layer i. Two prefix tokens: [CLS] and distillation.
    expected = [h[:, 2:].reshape(2, rows, cols, -1).permute(0, 3, 1, 2) for h in hidden[1:]]
    _close(_maps(model, x), expected)


@pytest.mark.parametrize("used_before", [True, False], ids=["run-then-pruned", "pruned-reloaded"])
def test_transformers_hidden_states_keep_the_layers_vitprune_converted(used_before, tmp_path):
    """transformers 5 records hidden states with hooks on its own layer class; a layer that lost its attention
    (converted) keeps them, whether transformers installed them before the edit (the model had run) or not (a
    fresh load replays the edit first). The states equal vitprune's maps."""
    from conftest import HF_TINY

    model = tracked("hf:ViTForImageClassification", {**HF_TINY, "num_hidden_layers": 3})
    x = _images(model)
    if used_before:
        with torch.no_grad():
            model(x)
    prune_depth(model, attention=[1])
    if not used_before:
        model = _reloaded(model, tmp_path / "pruned")
    with torch.no_grad():
        hidden = model.hf(pixel_values=x, output_hidden_states=True).hidden_states
    assert len(hidden) == 4
    rows, cols = vitprune.get_adapter(model).grid_size
    _close(_maps(model, x), [h[:, 1:].reshape(2, rows, cols, -1).permute(0, 3, 1, 2) for h in hidden[1:]])


@pytest.mark.needs("dense_features", "ffn_width")
def test_a_pruned_reloaded_model_gives_the_masked_models_maps(small_model_spec, tmp_path):
    """Removing FFN neurons equals zeroing their columns of fc2; the maps of every block agree after a save/load."""
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 3))
    _randomise_biases(model)
    x = _images(model)
    masked = copy.deepcopy(model)
    for index in (0, 2):
        hidden = vitprune.get_adapter(model).block(index).mlp.hidden_features
        removed = list(range(1, hidden, 3))
        with torch.no_grad():
            vitprune.get_adapter(masked).block(index).mlp.fc2.weight[:, removed] = 0
        prune_mlp_neurons(model, index, [i for i in range(hidden) if i not in removed])
    _close(_maps(_reloaded(model, tmp_path / "pruned"), x), _maps(masked, x))


@pytest.mark.needs("dense_features", "attention_removal")
def test_a_depth_pruned_block_still_counts_for_indices(small_model_spec, tmp_path):
    """Removing block 1's attention (leaving the skip) equals zeroing its output projection; the block keeps its place
    in the maps."""
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 3))
    _randomise_biases(model)
    x = _images(model)
    masked = copy.deepcopy(model)
    proj = vitprune.get_adapter(masked).block(1).attn.proj
    with torch.no_grad():
        proj.weight.zero_()
        proj.bias.zero_()
    prune_depth(model, attention=[1], identity="skip")
    reloaded = _reloaded(model, tmp_path / "pruned")
    _close(_maps(reloaded, x), _maps(masked, x))
    _close(_maps(reloaded, x, [1, 2], norm=True), _maps(masked, x, [1, 2], norm=True))


@pytest.mark.needs("dense_features", "token_reduction")
def test_keeping_every_token_gives_the_dense_maps(small_model_spec, tmp_path):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 3))
    x = _images(model)
    dense = _maps(model, x)
    prune_tokens(model, 1, 1.0)
    _close(_maps(_reloaded(model, tmp_path / "pruned"), x), dense)


@pytest.mark.needs("dense_features", "token_reduction")
@pytest.mark.parametrize("adaptive", [False, True], ids=["static", "adaptive"])
def test_a_pruned_token_keeps_its_last_value_on_the_grid(small_model_spec, adaptive):
    """STAR's blocks drop patch tokens; the maps still cover the grid, each dropped position holding the token as the
    block before the drop left it, through every later block."""
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 4))
    x = _images(model, batch=3)
    dense = _maps(model, x)
    rate = 0.5
    prune_tokens(model, 2, rate, adaptive=adaptive)
    maps = _maps(model, x)
    _close(maps[:2], dense[:2])  # before the pruning block, nothing changes
    patches = maps[0].shape[2] * maps[0].shape[3]

    def unchanged(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a == b).all(dim=1).flatten(1).sum(dim=1)  # positions per image whose whole feature vector is equal

    dropped = unchanged(maps[2], maps[1])
    if adaptive:  # a-STAR keeps at most what STAR keeps, at least one token, per image
        assert bool(((dropped >= patches - math.ceil(rate * patches)) & (dropped < patches)).all())
    else:
        assert dropped.tolist() == [patches - math.ceil(rate * patches)] * 3
    # The next block leaves the dropped positions where they were and moves every kept one.
    assert torch.equal(unchanged(maps[3], maps[2]), dropped)


def test_a_family_without_feature_maps_refuses_in_one_line():
    with pytest.raises(UnsupportedArchitectureError, match="unsupported architecture"):
        intermediates(torch.nn.Linear(2, 2), torch.zeros(1, 2))
