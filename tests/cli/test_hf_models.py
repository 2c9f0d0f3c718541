"""Hugging Face transformers classifiers as a command's MODEL: a save_pretrained directory, or hf:owner/name (which
needs the network and says so in one line without it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from conftest import HF_TINY, save_hf
from PIL import Image
from test_cli import assert_one_line_error, run

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.measure import count_macs
from vitprune.models.factory import resolve_model
from vitprune.surgery import prune_depth
from vitprune.training import evaluate

SMALL = {**HF_TINY, "num_hidden_layers": 2}


def _saved(tmp_path, architecture="ViTForImageClassification", **config):
    return save_hf(tmp_path / "hf", architecture, {**SMALL, **config})


def test_a_save_pretrained_directory_is_a_model_argument(tmp_path, capsys):
    directory = _saved(tmp_path)
    code, out, err = run(capsys, "prune", "depth", str(directory), "--attention", "1", "--activation", "0",
                         "--no-speed", "--json", "--out", str(tmp_path / "run"))
    assert code == 0, err
    pruned = vitprune.load(tmp_path / "run")
    recipe = vitprune.get_recipe(pruned)
    assert (recipe.base.source, recipe.base.name) == ("hf", "ViTForImageClassification")
    assert recipe.base.weights == f"hf-dir:{directory.resolve()}"
    expected = resolve_model(str(directory))
    prune_depth(expected, attention=[1], activation=[0])
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(pruned(x), expected(x))
    assert json.loads(out)["after"]["params"] == count_macs(expected).params
    code, out, _ = run(capsys, "info", str(tmp_path / "run"))
    base = next(line for line in out.splitlines() if line.startswith("base: "))
    assert code == 0 and base.startswith("base: hf:ViTForImageClassification config={") and len(base) < 200


def test_a_hub_id_without_network_is_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "prune", "depth", "hf:nobody/no-such-vit", "--attention", "0", "--out",
                       str(tmp_path / "run"))
    assert_one_line_error(code, err, r"cannot read the Hugging Face config of nobody/no-such-vit .*save_pretrained")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_for_a_hugging_face_directory_is_refused(tmp_path, capsys):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    code, _, err = run(capsys, "prune", "depth", str(_saved(tmp_path)), "--checkpoint", str(weights), "--attention",
                       "0", "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err, r"is a Hugging Face model, which takes its weights from its own directory")


def test_other_transformers_models_are_refused(tmp_path, capsys):
    directory = _saved(tmp_path, "ViTForMaskedImageModeling", encoder_stride=8)
    code, _, err = run(capsys, "prune", "depth", str(directory), "--attention", "0", "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err, r"unsupported architecture: .* is a ViTForMaskedImageModeling \(vitprune supports "
                                     r"ViTForImageClassification, DeiTForImageClassification")


@pytest.mark.parametrize("processor, expected", [
    (transformers.ViTImageProcessor(), {"mean": (0.5,) * 3, "std": (0.5,) * 3, "interpolation": "bilinear",
                                        "crop_pct": 1.0}),
    (transformers.DeiTImageProcessor(image_mean=[0.4, 0.4, 0.4], image_std=[0.2, 0.2, 0.2]),
     {"mean": (0.4,) * 3, "std": (0.2,) * 3, "interpolation": "bicubic", "crop_pct": 0.875}),
])
def test_images_are_prepared_as_the_image_processor_says(tmp_path, capsys, processor, expected):
    """A directory's preprocessor_config.json sets the normalisation and crop every command uses (a weight trained on
    [-1, 1] inputs evaluated with ImageNet's mean and std would lose accuracy for nothing), and the recipe keeps it."""
    directory = _saved(tmp_path, num_labels=2)
    processor.save_pretrained(directory)
    model = resolve_model(str(directory))
    config = vitprune.get_adapter(model).data_config
    assert config == expected
    vitprune.save(model, tmp_path / "saved")
    assert vitprune.get_adapter(vitprune.load(tmp_path / "saved")).data_config == expected
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "images" / "val" / label).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (40, 40, 3)).astype(np.uint8)).save(
                tmp_path / "images" / "val" / label / f"{i}.png")
    code, out, err = run(capsys, "eval", str(directory), "--data", str(tmp_path / "images"), "--json")
    assert code == 0, err
    for data_config, same in ((config, True), (None, False)):
        dataset = build_dataset(str(tmp_path / "images"), "val", input_size=(3, 32, 32), is_training=False,
                                data_config=data_config)
        loss = evaluate(model, build_loader(dataset, 6, shuffle=False, seed=0))["loss"]
        assert (loss == json.loads(out)["loss"]) == same


def test_export_native_writes_what_from_pretrained_loads(tmp_path, capsys):
    directory = _saved(tmp_path)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    model = resolve_model(str(directory))
    for block in range(2):
        vitprune.surgery.prune_heads(model, block, [1, 2])
        vitprune.surgery.prune_mlp_neurons(model, block, list(range(0, 256, 2)))
    vitprune.save(model, tmp_path / "pruned")
    code, out, err = run(capsys, "export", str(tmp_path / "pruned"), "--native", str(tmp_path / "plain"), "--json")
    assert code == 0, err
    assert json.loads(out)["max_abs_diff"] <= 1e-4
    loaded = transformers.ViTForImageClassification.from_pretrained(tmp_path / "plain").eval()
    assert (loaded.config.num_attention_heads, loaded.config.intermediate_size) == (2, 128)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=x).logits, model(x), rtol=1e-5, atol=1e-5)
    # The image processor goes along, and a second export needs --overwrite.
    assert transformers.ViTImageProcessor.from_pretrained(tmp_path / "plain").size == {"height": 32, "width": 32}
    code, _, err = run(capsys, "export", str(tmp_path / "pruned"), "--native", str(tmp_path / "plain"))
    assert_one_line_error(code, err, r"already exists")


@pytest.mark.parametrize("argv, pattern", [
    (["--native", "{tmp}/plain"], r"vitprune writes timm-vit models only as its own save \(recipe and weights\) or "
                                  r"as ONNX"),
    ([], r"give one target: --onnx FILE or --native DIR"),
    (["--native", "{tmp}/plain", "--onnx", "{tmp}/m.onnx"], r"give one target"),
])
def test_export_native_mistakes_are_one_line(tmp_path, capsys, argv, pattern):
    code, _, err = run(capsys, "export", "deit_tiny_patch16_224", "--no-pretrained",
                       *[a.format(tmp=tmp_path) for a in argv])
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "plain").exists()


def test_export_native_refuses_depth_pruning(tmp_path, capsys):
    model = resolve_model(str(_saved(tmp_path)))
    prune_depth(model, attention=[0])
    vitprune.save(model, tmp_path / "pruned")
    code, _, err = run(capsys, "export", str(tmp_path / "pruned"), "--native", str(tmp_path / "plain"))
    assert_one_line_error(code, err, r"transformers cannot describe layers without attention or activation, or that "
                                     r"prune tokens \(depth or token pruning\) in a config")

