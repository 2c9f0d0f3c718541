"""A table of user mistakes: each ends in one ``error:`` line that names the problem, with its exit status, and leaves
nothing written or changed in the workspace it ran in.

The workspace (:func:`workspace`) holds what a new user brings: a small saved model, an image folder of three classes
with its train/ and val/ splits, a flat folder, a Swin and an uneven Hugging Face model, a save whose weights were cut
short, chain files and a directory this process may not write to. Every case runs the command in-process; the
workspace's files (names, sizes, modification times, permissions) are compared before and after.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from test_cli import CLASSES, image_folder, run

import vitprune
from vitprune.models import resolve_model
from vitprune.surgery import prune_heads


@dataclass(frozen=True)
class Case:
    """A mistake: the command's words (``{ws}`` is the workspace), its exit status and a pattern of its one line."""

    id: str
    argv: str
    code: int
    pattern: str
    #: Run with the read-only directory closed to this process (:func:`unwritable`).
    read_only: bool = False


CASES = [
    # Models and weights.
    Case("unknown-model", "profile deit_tiny_patch16_22", 2, r"unknown model 'deit_tiny_patch16_22'.*did you mean: "
                                                            r"deit_tiny_patch16_224"),
    Case("unsupported-architecture", "profile resnet10t", 2, r"unsupported architecture: ResNet"),
    Case("missing-model-path", "profile {ws}/no/such/model", 2, r"model path .*/no/such/model does not exist"),
    Case("offline-pretrained", "eval deit_tiny_patch16_224 --data digits", 2,
         r"could not load pretrained weights for deit_tiny_patch16_224 \(offline, and not in the local Hugging Face "
         r"cache\); pass --checkpoint PATH for local weights, --no-pretrained for random init, or fetch them once "
         r"online$"),
    Case("missing-checkpoint", "eval deit_tiny_patch16_224 --checkpoint {ws}/none.pth --data digits", 2,
         r"checkpoint .*/none.pth does not exist"),
    Case("corrupt-checkpoint", "eval deit_tiny_patch16_224 --checkpoint {ws}/junk.pth --data digits", 2,
         r"cannot read checkpoint .*junk\.pth"),
    Case("mismatched-checkpoint", "eval digits-vit --checkpoint {ws}/other.safetensors --data digits", 2,
         r"weights in .*other\.safetensors do not match the architecture"),
    Case("missing-save", "info {ws}/no-save", 2, r"no saved model at .*/no-save"),
    Case("info-truncated-weights", "info {ws}/truncated", 2, r"corrupt weights file .*truncated/model\.safetensors: "
                                                            r".*incomplete metadata"),
    Case("profile-truncated-weights", "profile {ws}/truncated", 2,
         r"corrupt weights file .*truncated/model\.safetensors"),
    Case("eval-truncated-weights", "eval {ws}/truncated --data digits", 2, r"corrupt weights file"),
    Case("no-cuda", "bench {ws}/model --device cuda:0", 2, r"CUDA is not available"),
    Case("bad-device", "bench {ws}/model --device tpu", 2, r"tpu"),
    # Data.
    Case("missing-data", "eval {ws}/model --data {ws}/no/such/data", 2, r"data path .*/no/such/data does not exist"),
    Case("unknown-dataset", "eval {ws}/model --data imagenette", 2, r"unknown dataset 'imagenette'"),
    Case("data-is-a-file", "eval {ws}/model --data {ws}/junk.pth", 2, r"data path .*/junk.pth is not a directory"),
    Case("folder-of-no-images", "eval {ws}/model --data {ws}/empty", 2,
         r"no images found in the val split of data path .*/empty"),
    Case("flat-folder", "eval {ws}/model --data {ws}/images/train", 2,
         r"images/train has no train/ and val/ folders: an image folder needs .*/train/<class>/<images> and "
         r".*/val/<class>/<images>, or pass --val-split F"),
    Case("cifar-offline", "eval {ws}/model --data cifar10 --data-root {ws}/cifar", 2,
         r"CIFAR-10 not found under .*/cifar; pass --download"),
    Case("head-of-other-classes", "prune vbp {ws}/five --data {ws}/images --ratio 0.3 --out {ws}/run", 2,
         r"the model predicts 5 classes but .*images has 3; fine-tune a head for them first: vitprune finetune MODEL "
         r"--data .*images --num-classes 3$"),
    Case("finetune-head-of-other-classes", "finetune {ws}/five --data {ws}/images --epochs 1 --out {ws}/run", 2,
         r"the model predicts 5 classes but .*images has 3; pass --num-classes 3 to replace its head"),
    Case("num-classes-not-the-data-s", "finetune {ws}/five --data {ws}/images --epochs 1 --num-classes 4 --out "
                                       "{ws}/run", 2, r"--num-classes 4, but .*images has 3 classes$"),
    Case("val-split-of-a-split-folder", "eval {ws}/model --data {ws}/images --val-split 0.2", 2,
         r"--val-split splits a flat folder of class folders, but .*images has split folders"),
    # Settings.
    Case("vbp-ratio-all", "prune vbp {ws}/model --data digits --ratio 1.0 --out {ws}/run", 2,
         r"the pruning ratio must be in \(0, 1\), got 1\.0: 1 would remove every MLP neuron of the network"),
    Case("vbp-ratio-zero", "prune vbp {ws}/model --data digits --ratio 0 --out {ws}/run", 2,
         r"the pruning ratio must be in \(0, 1\)"),
    Case("vbp-two-targets", "prune vbp {ws}/model --data digits --ratio 0.2 --target-macs 1M --out {ws}/run", 2,
         r"give exactly one of ratio and target_macs"),
    Case("compare-target-above-one", "compare {ws}/model --data digits --target-macs 1.5 --out {ws}/run", 2,
         r"'1.5' is neither a share \(below 1\) nor a whole count of MACs; for GMACs write 1.5G"),
    Case("compare-target-above-the-model", "compare {ws}/model --data digits --target-macs 1G --out {ws}/run", 2,
         r"the MAC target 1G is not below the model's .* MACs per image \(full convention\): there is "
         r"nothing to prune"),
    Case("compare-unknown-arm", "compare {ws}/model --data digits --target-macs 0.6 --arms vbp,depth --out {ws}/run",
         2, r"unknown arm\(s\) depth; known: hetdpt, hiap, star, tome, vbp, width, hetdpt\+, hetdpt\+star, "
         r"hetdpt\+tome"),
    Case("hetdpt-budget-too-large", "prune hetdpt {ws}/model --data digits --budget 9 --out {ws}/run", 2,
         r"budget 9 is out of range: the model has 2 attention and 2 activation layers \(4 in all\)"),
    Case("hetdpt-split-off-budget", "prune hetdpt {ws}/model --data digits --budget 2 --split 2,1 --out {ws}/run", 2,
         r"split 2,1 removes 3 layers, not the budget of 2"),
    Case("hetdpt-split-unreadable", "prune hetdpt {ws}/model --data digits --budget 2 --split two --out {ws}/run", 2,
         r"split takes 'auto' or two counts 'A,G'"),
    Case("depth-block-out-of-range", "prune depth {ws}/model --attention 7 --out {ws}/out --no-speed", 2,
         r"attention index 7 is out of range: the model has 2 blocks \(0-1\)"),
    Case("depth-list-unreadable", "prune depth {ws}/model --attention a,b --out {ws}/out", 2,
         r"--attention takes comma-separated integers such as 0,3,7; got 'a,b'"),
    Case("width-taylor-without-data", "prune width {ws}/model --ratio 0.2 --importance taylor --out {ws}/out", 2,
         r"taylor importance needs training images \(--data\)"),
    Case("width-two-targets", "prune width {ws}/model --ratio 0.2 --target-macs 1M --out {ws}/out", 2,
         r"give exactly one of ratio and target_macs"),
    Case("hiap-without-epochs", "prune hiap {ws}/model --data digits --target-macs 1M --out {ws}/run", 2,
         r"give --epochs, or --preset"),
    Case("star-rho-out-of-range", "prune star {ws}/model --data digits --rho 1.5 --out {ws}/run", 2,
         r"rho must be in \(0, 1\], got 1\.5"),
    Case("unknown-preset", "prune vbp {ws}/model --data digits --ratio 0.3 --preset imagenet-nope --out {ws}/run", 2,
         r"unknown .*preset 'imagenet-nope'"),
    Case("finetune-zero-lr", "finetune {ws}/model --data digits --epochs 1 --lr 0 --out {ws}/run", 2,
         r"learning rate must be positive, got 0\.0"),
    Case("mixup-odd-batch", "finetune {ws}/model --data digits --epochs 1 --mixup 0.8 -b 3 --out {ws}/run", 2,
         r"mixup/cutmix need an even batch per process, got 3"),
    # Families.
    Case("star-lrp-on-distilled-deit", "prune star {ws}/distilled --data {ws}/images --rho 0.5 --out {ws}/run "
                                       "--no-speed", 2,
         r"LRP importance follows a single \[CLS\] token to the class head; --attention-weight 1 \(alpha 1 in a "
         r"chain file\) ranks tokens by the online \[CLS\] attention alone, without the LRP prior$"),
    Case("swin-width-embed", "prune width {ws}/swin --ratio 0.2 --out {ws}/out --no-speed", 2,
         r"width pruning needs to prune embedding channels, which vitprune cannot do on timm-swin models; "
         r"--no-embed \(\"embed\": false in a chain file\) keeps the residual stream whole$"),
    Case("convnext-width-heads", "prune width {ws}/convnext --ratio 0.2 --no-embed --out {ws}/out --no-speed", 2,
         r"width pruning needs to prune heads and head dimensions, which vitprune cannot do on timm-convnext models; "
         r"--heads 0 --head-dims 0 \(\"heads\": 0, \"head_dims\": 0\) keeps every head whole$"),
    Case("hf-native-uneven", "export {ws}/hf-uneven --native {ws}/native", 2,
         r"transformers cannot describe layers of different widths .*VBP, width pruning and HiAP rank across layers "
         r"and leave each its own width\)"),
    # Chains.
    Case("chain-missing-file", "chain {ws}/model --steps {ws}/none.json --data digits --out {ws}/run", 2,
         r"chain file .*none.json does not exist"),
    Case("chain-not-json", "chain {ws}/model --steps {ws}/junk.pth --data digits --out {ws}/run", 2,
         r"chain file .*junk.pth is not valid JSON"),
    Case("chain-fails-in-step-1", "chain {ws}/model --steps {ws}/chain.json --data digits --out {ws}/run --no-onnx "
                                  "--no-speed --json", 2, r"step 1 \(hetdpt\): budget 9 is out of range"),
    # Outputs.
    Case("out-exists", "prune depth {ws}/model --attention 0 --out {ws}/model --no-speed", 2,
         r"model already exists; pass --overwrite to replace it"),
    Case("run-dir-not-empty", "prune vbp {ws}/model --data digits --ratio 0.3 --out {ws}/images --no-speed", 2,
         r"images is not empty; pass --resume to continue the run there"),
    Case("out-under-a-file", "prune depth {ws}/model --attention 0 --out {ws}/junk.pth/out --no-speed", 2,
         r"cannot write .*junk\.pth/out: .*junk\.pth is not a directory"),
    Case("read-only-depth", "prune depth {ws}/model --attention 0 --out {ws}/ro/out --no-speed", 2,
         r"cannot write .*/ro/out: .*/ro is not writable \(Permission denied\)", read_only=True),
    Case("read-only-vbp", "prune vbp {ws}/model --data digits --ratio 0.3 --out {ws}/ro/run --no-speed", 2,
         r"cannot write .*/ro/run: .*/ro is not writable", read_only=True),
    Case("read-only-finetune", "finetune {ws}/model --data digits --epochs 1 --out {ws}/ro/run", 2,
         r"cannot write .*/ro/run: .*/ro is not writable", read_only=True),
    Case("read-only-export", "export {ws}/model --onnx {ws}/ro/model.onnx", 2,
         r"cannot write .*/ro/model\.onnx: .*/ro is not writable", read_only=True),
    Case("read-only-overwrite", "prune depth {ws}/model --attention 0 --out {ws}/ro/save --overwrite --no-speed", 2,
         r"cannot write .*/ro/save: .*/ro is not writable", read_only=True),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """What the cases run on (see the module docstring); nothing in it is meant to change."""
    ws = tmp_path_factory.mktemp("workspace")
    torch.manual_seed(0)
    vitprune.save(vitprune.create_model("digits-vit", depth=2), ws / "model")
    vitprune.save(vitprune.create_model("digits-vit", depth=3), ws / "other")
    (ws / "other" / "model.safetensors").rename(ws / "other.safetensors")
    (ws / "other" / "recipe.json").unlink()
    (ws / "other").rmdir()
    vitprune.save(vitprune.create_model("digits-vit", depth=2), ws / "truncated")
    weights = ws / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    image_folder(ws / "images")
    for split in ("train", "val"):
        (ws / "empty" / split / "cat").mkdir(parents=True)
    (ws / "junk.pth").write_bytes(b"not a checkpoint")
    (ws / "chain.json").write_text(json.dumps([{"method": "hetdpt", "budget": 9, "split": [5, 4]}]))
    vitprune.save(vitprune.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=2, embed_dim=16,
                                        depths=(1, 1, 1, 1), num_heads=(1, 2, 2, 4), window_size=4,
                                        num_classes=len(CLASSES)), ws / "swin")
    vitprune.save(vitprune.create_model("convnext_tiny", depths=(1, 1, 1, 1), dims=(8, 8, 8, 8),
                                        num_classes=len(CLASSES)), ws / "convnext")
    vitprune.save(vitprune.create_model("deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, embed_dim=32,
                                        depth=2, num_heads=2, num_classes=len(CLASSES)), ws / "distilled")
    vitprune.save(vitprune.create_model("digits-vit", depth=2, num_classes=5), ws / "five")
    _uneven_hf(ws)
    (ws / "ro").mkdir()
    vitprune.save(vitprune.create_model("digits-vit", depth=2), ws / "ro" / "save")
    (ws / "ro").chmod(0o555)
    return ws


def _uneven_hf(ws: Path) -> None:
    """A Hugging Face ViT, saved with save_pretrained, whose first layer lost a head: transformers cannot describe
    it."""
    pytest.importorskip("transformers")
    import transformers

    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, image_size=16, patch_size=8, num_labels=3,
                                    architectures=["ViTForImageClassification"])
    transformers.ViTForImageClassification(config).save_pretrained(ws / "hf")
    uneven = resolve_model(str(ws / "hf"))
    prune_heads(uneven, 0, [0])
    vitprune.save(uneven, ws / "hf-uneven")


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_mistake_is_one_line_and_changes_nothing(capsys, monkeypatch, workspace, case):
    if case.id == "no-cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("COLUMNS", "400")
    before = _snapshot(workspace)
    argv = case.argv.format(ws=workspace).split()
    with unwritable() if case.read_only else nullcontext():
        code, _, err = run(capsys, *argv)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == case.code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.search(case.pattern, lines[0]), lines[0]
    assert _snapshot(workspace) == before


def test_the_table_covers_forty_mistakes():
    assert len(CASES) >= 40 and len({case.id for case in CASES}) == len(CASES)


#: Linux capabilities that let root write where permissions say no: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
#: CAP_FOWNER.
_OVERRIDES = (1 << 1) | (1 << 2) | (1 << 3)


@contextmanager
def unwritable():
    """Permissions apply to this thread as to any user: root (as in CI) writes into a 0555 directory unless its
    capabilities to override them are dropped from its effective set, which is what happens here, and undone."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    def capset(effective: int) -> None:
        header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
        assert libc.capget(ctypes.byref(header), data) == 0
        data[0].effective = effective
        assert libc.capset(ctypes.byref(header), data) == 0, os.strerror(ctypes.get_errno())

    header, data = Header(0x20080522, 0), (Data * 2)()
    assert libc.capget(ctypes.byref(header), data) == 0
    saved = data[0].effective
    capset(saved & ~_OVERRIDES)
    try:
        yield
    finally:
        capset(saved)
