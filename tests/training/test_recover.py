"""``finetune_pruned``: the recovery fine-tune every method shares."""

from __future__ import annotations

import pytest
import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.training import TrainConfig, finetune_pruned


def _small():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=1)
    train = balanced_subset(build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size),
                            128, seed=0)
    return model, train


def test_distillation_needs_a_teacher():
    model, train = _small()
    with pytest.raises(VitpruneError, match="soft distillation needs a teacher model"):
        finetune_pruned(model, train, None, TrainConfig(epochs=1, lr=1e-3), distill="soft")


def test_distilled_fine_tune_trains_the_student_only(tmp_path):
    student, train = _small()
    teacher = vitprune.create_model("digits-vit", depth=1)
    teacher_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student_before = {k: v.clone() for k, v in student.state_dict().items()}
    history = finetune_pruned(student, train, train, TrainConfig(epochs=2, lr=1e-3, batch_size=32), teacher=teacher,
                              distill="soft", alpha=0.5, tau=2.0, run_dir=tmp_path, device="cpu")
    assert [h["epoch"] for h in history] == [1, 2] and all("val_top1" in h for h in history)
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in teacher_before.items())
    assert any(not torch.equal(v, student.state_dict()[k]) for k, v in student_before.items())
    assert (tmp_path / "checkpoint").is_dir()
