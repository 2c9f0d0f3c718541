"""Saves rebuild the exact model in a fresh process without pickle, and bad saves fail with one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import safetensors.torch
import torch
from conftest import HF_PREFIX, SMALL_MODELS, VITPRUNE_PREFIX, tracked
from hypothesis import note
from hypothesis import strategies as st
from strategies import EXAMPLES, draw_edits, images, property_test, small_vits

import vitprune
from vitprune.errors import RecipeError, VitpruneError
from vitprune.recipe import build_base
from vitprune.recipe import RECIPE_FILE, WEIGHTS_FILE, Recipe, replay
from vitprune.surgery import prune_heads, prune_mlp_neurons


def _pruned(name: str, **kwargs) -> torch.nn.Module:
    """A model with uneven heads (where the family has heads) and widths, so the rebuilt architecture must follow the
    recipe."""
    torch.manual_seed(0)
    # transformers models arrive as a save_pretrained directory (conftest.tracked); timm's and vitprune's by name.
    model = tracked(name, kwargs) if name.startswith(HF_PREFIX) else vitprune.create_model(
        name.removeprefix(VITPRUNE_PREFIX), **kwargs)
    adapter = vitprune.get_adapter(model)
    if "head_width" in adapter.capabilities:
        prune_heads(model, 1, list(range(adapter.block(0).attn.num_heads - 1)))
    hidden = vitprune.get_adapter(model).block(0).mlp.hidden_features
    prune_mlp_neurons(model, 3, list(range(0, hidden, 2)))
    prune_mlp_neurons(model, 3, list(range(5)))  # edits compose: the same block twice
    return model


def _input(model):
    torch.manual_seed(7)
    return torch.randn(2, *vitprune.get_adapter(model).input_size)


_FRESH_PROCESS_TEST = "test_fresh_process_reproduces_outputs_exactly"


def _reloaded_in_a_fresh_process(root: Path, cases: dict[str, dict]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per case (id: its ``name`` and ``kwargs``): the pruned model's output, and that of its save loaded in a fresh
    interpreter where pickle is forbidden. One interpreter loads every case's save (starting one costs about 4 s)."""
    expected = {}
    for case, params in cases.items():
        model = _pruned(params["name"], **params["kwargs"])
        x = _input(model)
        with torch.no_grad():
            expected[case] = model(x)
        vitprune.save(model, root / case / "saved", metadata={"note": "test"})
        torch.save(x, root / case / "x.pt")
    script = textwrap.dedent("""
        import pickle, sys, torch, vitprune
        load = vitprune.load  # the API's modules load here, before pickle goes: torch's own subclass its Unpickler
        root, cases = sys.argv[1], sys.argv[2:]
        inputs = {case: torch.load(f"{root}/{case}/x.pt", weights_only=True) for case in cases}
        save = torch.save

        def forbidden(*args, **kwargs):
            raise AssertionError("loading a vitprune save must not unpickle anything")

        torch.load = pickle.load = pickle.loads = pickle.Unpickler = forbidden
        for case, x in inputs.items():
            model = load(f"{root}/{case}/saved")
            with torch.no_grad():
                save(model(x), f"{root}/{case}/y.pt")
    """)
    subprocess.run([sys.executable, "-c", script, str(root), *cases], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return {case: (expected[case], torch.load(root / case / "y.pt", weights_only=True)) for case in cases}


@pytest.fixture(scope="module")
def fresh_process_outputs(request, tmp_path_factory):
    """``outputs(item)``: :func:`_reloaded_in_a_fresh_process` for a case of :func:`test_fresh_process_reproduces_
    outputs_exactly`, run once for every case of its lane this session runs (the fast lane's alone, the slow ones
    together)."""
    lanes: dict[bool, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}

    def outputs(item: pytest.Item) -> tuple[torch.Tensor, torch.Tensor]:
        slow = item.get_closest_marker("slow") is not None
        if slow not in lanes:
            cases = {other.callspec.id: other.callspec.params for other in request.session.items
                     if getattr(other, "originalname", None) == _FRESH_PROCESS_TEST
                     and (other.get_closest_marker("slow") is not None) == slow}
            lanes[slow] = _reloaded_in_a_fresh_process(tmp_path_factory.mktemp("fresh"), cases)
        return lanes[slow][item.callspec.id]
    return outputs


# One architecture in the fast lane, every one in the full suite.
@pytest.mark.parametrize("name, kwargs", [
    pytest.param(name, kwargs, id=mid, marks=() if mid == "deit_tiny" else pytest.mark.slow)
    for mid, name, kwargs, _ in SMALL_MODELS])
def test_fresh_process_reproduces_outputs_exactly(request, fresh_process_outputs, name, kwargs):
    expected, reloaded = fresh_process_outputs(request.node)
    assert torch.equal(reloaded, expected)


def test_recipe_file_is_versioned_json(tmp_path):
    model = _pruned("deit_tiny_patch16_224")
    vitprune.save(model, tmp_path / "m", metadata={"top1": 0.5})
    doc = json.loads((tmp_path / "m" / RECIPE_FILE).read_text())
    assert doc["format"] == "vitprune-recipe" and doc["version"] == 1
    assert doc["base"] == {"source": "timm", "name": "deit_tiny_patch16_224", "kwargs": {}, "weights": "random",
                           "sha256": None}
    assert [e["op"] for e in doc["edits"]] == ["prune_heads", "prune_mlp_neurons", "prune_mlp_neurons"]
    assert doc["edits"][0]["args"] == {"block": 1, "keep": [0, 1]}
    assert doc["metadata"] == {"top1": 0.5}
    assert set(doc["software"]) == {"vitprune", "torch", "timm"}
    loaded = vitprune.load(tmp_path / "m")
    assert vitprune.get_recipe(loaded).to_dict() == Recipe.from_dict(doc).to_dict()
    assert not loaded.training


def test_save_is_atomic_and_replaces(tmp_path, monkeypatch):
    target = tmp_path / "m"
    model = vitprune.create_model("deit_tiny_patch16_224")
    vitprune.save(model, target)
    first = (target / WEIGHTS_FILE).read_bytes()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_model", interrupted)
    prune_heads(model, 0, [0])
    with pytest.raises(KeyboardInterrupt):
        vitprune.save(model, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"], "no temporary directory may be left behind"
    assert (target / WEIGHTS_FILE).read_bytes() == first, "an interrupted save leaves the previous save intact"
    monkeypatch.undo()

    vitprune.save(model, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert vitprune.get_adapter(vitprune.load(target)).block(0).attn.num_heads == 1


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_save_follows_the_umask(tmp_path, umask):
    """A save gets the permissions a plain mkdir and open would give: 0755 and 0644 under umask 022 (readable by
    others), 0700 and 0600 under 077 (temporary directories and safetensors' files are private whatever the
    umask)."""
    previous = os.umask(umask)
    try:
        path = vitprune.save(vitprune.create_model("digits-vit", depth=1), tmp_path / "m")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o777 & ~umask
    assert {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()} == {RECIPE_FILE: 0o666 & ~umask,
                                                                          WEIGHTS_FILE: 0o666 & ~umask}


def test_a_read_only_save_is_replaced_whole(tmp_path):
    """Its owner made a save read-only: --overwrite replaces it and leaves no renamed copy behind."""
    target = vitprune.save(vitprune.create_model("digits-vit", depth=1), tmp_path / "m")
    target.chmod(0o555)
    vitprune.save(vitprune.create_model("digits-vit", depth=2), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert len(vitprune.get_adapter(vitprune.load(target)).blocks()) == 2


def test_refuses_to_overwrite_a_non_save(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("x")
    with pytest.raises(VitpruneError, match="refusing to overwrite .*not a vitprune save"):
        vitprune.save(vitprune.create_model("deit_tiny_patch16_224"), tmp_path / "data")


@pytest.fixture()
def saved(tmp_path) -> Path:
    return vitprune.save(_pruned("deit_tiny_patch16_224"), tmp_path / "saved")


def _edit_recipe(path: Path, fn) -> None:
    doc = json.loads((path / RECIPE_FILE).read_text())
    fn(doc)
    (path / RECIPE_FILE).write_text(json.dumps(doc))


def test_unknown_version(saved):
    _edit_recipe(saved, lambda d: d.update(version=99))
    with pytest.raises(RecipeError, match="unsupported recipe version 99 .*reads version 1"):
        vitprune.load(saved)


def test_unknown_edit(saved):
    _edit_recipe(saved, lambda d: d["edits"].append({"op": "teleport", "args": {}}))
    with pytest.raises(RecipeError, match="unknown edit 'teleport'"):
        vitprune.load(saved)


def test_edit_that_does_not_apply(saved):
    _edit_recipe(saved, lambda d: d["edits"].append({"op": "prune_heads", "args": {"block": 0, "keep": [7]}}))
    with pytest.raises(RecipeError, match=r"prune_heads.*does not apply.*\[0, 3\)"):
        vitprune.load(saved)


def test_corrupt_recipe(saved):
    (saved / RECIPE_FILE).write_text("{not json")
    with pytest.raises(RecipeError, match="recipe .*recipe.json is not valid JSON"):
        vitprune.load(saved)


def test_missing_weights(saved):
    (saved / WEIGHTS_FILE).unlink()
    with pytest.raises(RecipeError, match="weights file .* is missing"):
        vitprune.load(saved)


def test_corrupt_weights(saved):
    (saved / WEIGHTS_FILE).write_bytes(b"\x00garbage" * 10)
    with pytest.raises(RecipeError, match="corrupt weights file"):
        vitprune.load(saved)


def test_truncated_weights(saved):
    data = (saved / WEIGHTS_FILE).read_bytes()
    (saved / WEIGHTS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(RecipeError, match="corrupt weights file"):
        vitprune.load(saved)


def test_mismatched_weights(saved, tmp_path):
    other = vitprune.save(vitprune.create_model("deit_tiny_patch16_224"), tmp_path / "other")
    (saved / WEIGHTS_FILE).write_bytes((other / WEIGHTS_FILE).read_bytes())
    with pytest.raises(RecipeError, match=r"do not match the architecture: blocks\.1\.attn\.proj\.weight has shape "
                                          r"\(192, 192\), the model expects \(192, 128\)"):
        vitprune.load(saved)


def test_missing_directory(tmp_path):
    with pytest.raises(VitpruneError, match="no saved model at .*does not exist"):
        vitprune.load(tmp_path / "nope")


def test_model_without_recipe_cannot_be_saved(tmp_path):
    import timm

    with pytest.raises(VitpruneError, match="no vitprune recipe"):
        vitprune.save(timm.create_model("deit_tiny_patch16_224"), tmp_path / "m")


@pytest.mark.parametrize("examples", EXAMPLES)
def test_any_edit_sequence_saves_and_loads_to_identical_outputs(examples):
    """Random small ViTs after random sequences of depth, width and token edits: the loaded model gives the same
    outputs bit for bit, has the same recipe, and the recipe alone rebuilds the same parameter shapes."""
    @property_test(examples, st.data())
    def check(data):
        model = data.draw(small_vits())
        note(draw_edits(data.draw, model))
        x = images(model, batch=3)
        with tempfile.TemporaryDirectory() as tmp:
            vitprune.save(model, Path(tmp) / "m")
            loaded = vitprune.load(Path(tmp) / "m")
        with torch.no_grad():
            assert torch.equal(loaded(x), model(x))
        assert vitprune.get_recipe(loaded).to_dict() == vitprune.get_recipe(model).to_dict()
        rebuilt = build_base(vitprune.get_recipe(model).base)
        replay(rebuilt, vitprune.get_recipe(model).edits)
        assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in
                                                                         model.state_dict().items()}

    check()
