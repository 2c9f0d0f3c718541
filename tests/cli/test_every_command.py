"""Every command as a new user first runs it: on a tiny ImageFolder of their own (made here) with a timm ViT named on
the command line and ``--no-pretrained`` (a tiny one registered with timm here). Each command succeeds; each one
that writes refuses an existing target without ``--overwrite`` (saves, exports) or ``--resume`` (runs), in one
line, leaving the target byte for byte as it was, and goes ahead with it.

``vitprune demo`` runs on the embedded digits model only; tests/cli/test_demo.py drives it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_cli import CLASSES, assert_one_line_error, image_folder, run
from timm.models import build_model_with_cfg, register_model
from timm.models.vision_transformer import VisionTransformer

import vitprune
from vitprune.measure import count_macs
from vitprune.recipe import RUN_MODEL_DIR
from vitprune.surgery import prune_depth

MODEL = "vitprune_test_tiny_vit"
FAST_SPEED = ("--speed-batch", "2", "--repeats", "3")


@register_model
def vitprune_test_tiny_vit(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """A tiny timm ViT (32 px, 2 blocks of width 32) that users would name like any other timm model."""
    return build_model_with_cfg(VisionTransformer, "vitprune_test_tiny_vit", pretrained, **{
        "img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0,
        "num_classes": len(CLASSES), **kwargs})


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The user's images (resized to 32 px)."""
    return image_folder(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The tiny ViT, depth-pruned and saved: what export and info read."""
    torch.manual_seed(0)
    model = vitprune.create_model(MODEL)
    prune_depth(model, [0], [1])
    path = tmp_path_factory.mktemp("saved") / "model"
    vitprune.save(model, path)
    return path


def _chain_file(tmp_path: Path) -> str:
    steps = [{"method": "depth", "attention": [0]}, {"method": "vbp", "ratio": 0.3},
             {"method": "finetune", "epochs": 1, "batch_size": 6}]
    (tmp_path / "chain.json").write_text(json.dumps(steps))
    return str(tmp_path / "chain.json")


#: Per command: its arguments after the command words (DATA, OUT and TMP filled in), the target it writes (None: it
#: writes nothing) and the flag that lets it replace or continue that target.
COMMANDS = {
    "profile": (["{MODEL}"], None, None),
    "bench": (["{MODEL}", *FAST_SPEED], None, None),
    "eval": (["{MODEL}", "--no-pretrained", "--data", "{DATA}"], None, None),
    "info": (["{SAVED}"], None, None),
    "finetune": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--epochs", "1", "--batch-size", "6",
                  "--out", "{OUT}"], "{OUT}", "--resume"),
    "export": (["{SAVED}", "--onnx", "{OUT}", *FAST_SPEED], "{OUT}", "--overwrite"),
    "prune depth": (["{MODEL}", "--no-pretrained", "--attention", "0", "--activation", "1", *FAST_SPEED,
                     "--out", "{OUT}"], "{OUT}", "--overwrite"),
    "prune width": (["{MODEL}", "--no-pretrained", "--ratio", "0.5", *FAST_SPEED, "--out", "{OUT}"], "{OUT}",
                    "--overwrite"),
    "prune hetdpt": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--budget", "2", "--preset", "digits",
                      "--epochs", "1", "--search-epochs", "1", "--probe-epochs", "1", "--batch-size", "6",
                      *FAST_SPEED, "--out", "{OUT}"], "{OUT}", "--resume"),
    "prune vbp": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--ratio", "0.5", *FAST_SPEED,
                   "--out", "{OUT}"], "{OUT}", "--resume"),
    "prune star": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--rho", "0.5", "--acs-images", "6",
                    "--lrp-images", "6", "--classes", "2", "--anchor", "minmax", *FAST_SPEED, "--out", "{OUT}"],
                   "{OUT}", "--resume"),
    # The report: a finished HiAP run died rendering a dense top-1 of 0.
    "prune hiap": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--epochs", "2", "--batch-size", "8",
                    "--target-macs", "80%", *FAST_SPEED, "--out", "{OUT}"], "{OUT}", "--resume"),
    "prune hetdpt+": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--budget", "1", "--split", "0,1",
                       "--target-macs", "70%", "--preset", "digits", "--epochs", "1", "--search-epochs", "1",
                       "--batch-size", "6", *FAST_SPEED, "--out", "{OUT}"], "{OUT}", "--resume"),
    "chain": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--steps", "{CHAIN}", "--no-onnx", *FAST_SPEED,
               "--out", "{OUT}"], "{OUT}", "--resume"),
    "analyze gradient-disparity": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--batches", "1",
                                    "--out", "{OUT}"], "{OUT}/gradient_disparity.json", "--overwrite"),
    "analyze recovery": (["{MODEL}", "--no-pretrained", "--data", "{DATA}", "--layers", "attention:0",
                          "--batch-size", "6", "--out", "{OUT}"], "{OUT}/recovery.json", "--overwrite"),
}
#: The two that export to ONNX (export; HetDPT+'s consistency check) take 4-5 s each on 2 CPU cores.
SLOW = {"export", "prune hetdpt+"}


def _contents(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in COMMANDS])
def test_every_command_on_a_new_users_images(capsys, tmp_path, folder, saved, name):
    if name == "prune width":
        pytest.importorskip("torch_pruning")
    if name in ("export", "prune hetdpt+", "chain"):
        pytest.importorskip("onnxruntime" if name == "export" else "torch_pruning")
    words, target, replace = COMMANDS[name]
    out = tmp_path / ("model.onnx" if name == "export" else "out")
    fill = {"{MODEL}": MODEL, "{DATA}": str(folder), "{OUT}": str(out), "{SAVED}": str(saved),
            "{CHAIN}": _chain_file(tmp_path) if name == "chain" else ""}
    argv = [*name.split(), *(fill.get(word, word) for word in words)]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    if target is None:
        return
    target = Path(target.replace("{OUT}", str(out)))
    before = _contents(target.parent if target.suffix == ".json" else target)
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, f"{target if replace == '--overwrite' else out}.*(already|not empty|holds)")
    assert _contents(target.parent if target.suffix == ".json" else target) == before
    code, _, err = run(capsys, *argv, replace)
    assert code == 0, err


@pytest.mark.parametrize("name", ["profile", "bench", "eval", "info"])
def test_a_run_directory_is_read_as_its_model(capsys, tmp_path, folder, saved, name):
    """Every run keeps its result in RUN/model/, and the commands that read a model take RUN itself."""
    run_dir = tmp_path / "run"
    shutil.copytree(saved, run_dir / RUN_MODEL_DIR)
    extra = {"bench": FAST_SPEED, "eval": ("--data", str(folder))}.get(name, ())
    code, out, err = run(capsys, name, str(run_dir), *extra, "--json")
    assert code == 0, err
    if name == "info":
        assert json.loads(out)["edits"] == vitprune.recipe.read_document(saved)["edits"]
    if name == "profile":
        assert json.loads(out)["macs"] == count_macs(vitprune.load(saved)).macs
