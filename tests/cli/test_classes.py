"""Issue 38 on the command line: one class list for every split (a class missing from one is a warning), a head of
another size refused with ``--num-classes N`` on offer, a new head that the saved model keeps with its classes' names,
and a flat folder refused unless ``--val-split`` holds out part of it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from test_cli import CLASSES, assert_one_line_error, image_folder, run
from test_every_command import MODEL

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.errors import VitpruneWarning
from vitprune.recipe import read_document
from vitprune.surgery import recorded_classes
from vitprune.training import evaluate

TRAIN = ["--epochs", "1", "--batch-size", "6"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return image_folder(tmp_path_factory.mktemp("images"))


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> Path:
    """The tiny ViT with a head of 5 classes, saved: a model made for other data than the 3-class folder."""
    torch.manual_seed(0)
    return vitprune.save(vitprune.create_model(MODEL, num_classes=5), tmp_path_factory.mktemp("five") / "model")


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_an_empty_training_class_warns_and_shifts_no_label(capsys, tmp_path, folder):
    """Issue 38: with train/cat/ empty, training labelled dog 0 and fox 1 while validation labelled them 1 and 2."""
    data = shutil.copytree(folder, tmp_path / "images")
    shutil.rmtree(data / "train" / "cat")
    (data / "train" / "cat").mkdir()
    code, out, err = run(capsys, "finetune", MODEL, "--no-pretrained", "--data", str(data), *TRAIN,
                         "--out", str(tmp_path / "run"), "--json")
    assert code == 0 and _lines(err) == [f"warning: the train split of {data} has no images of class cat"]
    summary = json.loads(out)
    assert summary["classes"] == list(CLASSES) and summary["epochs"][0]["val_count"] == 9
    assert read_document(tmp_path / "run")["metadata"]["finetune"]["classes"] == list(CLASSES)


@pytest.mark.parametrize("command, args, fix", [
    ("finetune", TRAIN, "pass --num-classes 3 to replace its head by a new one for them"),
    ("prune vbp", ["--ratio", "0.5"], "fine-tune a head for them first: vitprune finetune MODEL --data {DATA} "
                                      "--num-classes 3"),
    ("eval", [], "fine-tune a head for them first: vitprune finetune MODEL --data {DATA} --num-classes 3"),
])
def test_a_head_of_another_size_is_refused_offering_num_classes(capsys, tmp_path, folder, five, command, args, fix):
    """Issue 38: a 3-class folder trained a 1000-class head without a word."""
    extra = [] if command == "eval" else ["--out", str(tmp_path / "out")]
    code, _, err = run(capsys, *command.split(), str(five), "--data", str(folder), *args, *extra)
    assert_one_line_error(code, err, "^error: " + re.escape(f"the model predicts 5 classes but {folder} has 3; "
                                                           + fix.replace("{DATA}", str(folder))) + "$")
    assert not (tmp_path / "out").exists()


def test_num_classes_must_be_the_datas(capsys, tmp_path, folder, five):
    code, _, err = run(capsys, "finetune", str(five), "--data", str(folder), *TRAIN, "--num-classes", "4",
                       "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err, f"^error: --num-classes 4, but {re.escape(str(folder))} has 3 classes$")
    code, _, err = run(capsys, "finetune", str(five), "--data", str(folder), *TRAIN, "--num-classes", "3",
                       "--distill", "soft", "--teacher", str(five), "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err, "the teacher predicts 5 classes, the model 3: pass --teacher a model of these "
                                     "classes, or --distill none$")


def test_num_classes_replaces_the_head_and_the_save_keeps_its_classes(capsys, tmp_path, folder, five):
    code, out, err = run(capsys, "finetune", str(five), "--data", str(folder), *TRAIN, "--num-classes", "3",
                         "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    assert json.loads(out)["classes"] == list(CLASSES)
    tuned = vitprune.load(tmp_path / "run")
    assert vitprune.get_adapter(tuned).num_classes == 3 and recorded_classes(tuned) == list(CLASSES)
    # Pruning the fine-tuned model keeps the head and its classes.
    code, out, err = run(capsys, "prune", "vbp", str(tmp_path / "run"), "--data", str(folder), "--ratio", "0.5",
                         "--no-speed", "--out", str(tmp_path / "vbp"), "--json")
    assert code == 0, err
    assert recorded_classes(vitprune.load(tmp_path / "vbp")) == list(CLASSES)

    # Later data is labelled as the head was trained: without cat, dog is still 1 and fox 2 (not 0 and 1).
    later = tmp_path / "later"
    for name in CLASSES[1:]:
        shutil.copytree(folder / "val" / name, later / "val" / name)
    code, out, err = run(capsys, "eval", str(tmp_path / "run"), "--data", str(later), "--json")
    assert code == 0 and _lines(err) == [f"warning: the val split of {later} has no images of class cat"]
    with pytest.warns(VitpruneWarning, match="no images of class cat"):
        expected = build_dataset(str(later), "val", input_size=(3, 32, 32), is_training=False, classes=CLASSES)
    assert [label for _, label in expected] == [1, 1, 1, 2, 2, 2]
    assert json.loads(out)["loss"] == evaluate(tuned, build_loader(expected, 128, shuffle=False, seed=0))["loss"]


@pytest.fixture(scope="module")
def flat(tmp_path_factory, folder) -> Path:
    """Issue 38's flat folder: the 3-class folder's 6 + 3 images of each class in one class folder, no train/ and
    val/."""
    root = tmp_path_factory.mktemp("flat")
    for split in ("train", "val"):
        for name in CLASSES:
            for image in (folder / split / name).iterdir():
                (root / name).mkdir(exist_ok=True)
                shutil.copy(image, root / name / f"{split}-{image.name}")
    return root


def test_a_flat_folder_is_refused_in_one_line(capsys, flat):
    """Issue 38: a flat folder validated on its own 18 training images (val_count 18) and exited 0."""
    code, _, err = run(capsys, "eval", MODEL, "--no-pretrained", "--data", str(flat))
    assert_one_line_error(code, err, f"^error: {re.escape(str(flat))} has no train/ and val/ folders: an image "
                                     r"folder needs .*/train/<class>/<images> and .*/val/<class>/<images>, or pass "
                                     "--val-split F to hold out a fraction F of its images for validation$")


def test_val_split_holds_out_the_same_images_every_run(capsys, tmp_path, flat):
    code, out, err = run(capsys, "finetune", MODEL, "--no-pretrained", "--data", str(flat), "--val-split", "0.5",
                         *TRAIN, "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    assert json.loads(out)["epochs"][0]["val_count"] == 12  # of each class's 9 images, round(4.5) = 4 validate
    first, second = (run(capsys, "eval", str(tmp_path / "run"), "--data", str(flat), "--val-split", "0.5", "--json")
                     for _ in range(2))
    assert first[0] == 0 and json.loads(first[1])["count"] == 12 and first[1] == second[1]
