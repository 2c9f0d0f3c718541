"""``finetune_pruned``: the recovery fine-tune every method shares."""

from __future__ import annotations

import pytest
import torch

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.methods.hiap import HiAPConfig, search
from vitprune.training import TrainConfig, finetune_pruned, recover


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


class _Captured(Exception):
    """Raised by a stand-in Trainer to hand the criterion it was given back to the test."""


@pytest.mark.parametrize("mix", [{"mixup_alpha": 0.8}, {"cutmix_alpha": 1.0}, {}], ids=["mixup", "cutmix", "plain"])
@pytest.mark.parametrize("trainer", ["recovery", "hiap"])
def test_labels_are_smoothed_once(monkeypatch, mix, trainer):
    """timm's Mixup already smooths the soft targets it returns, so under mixup or cutmix the distillation loss's
    cross-entropy must not smooth them again (recovery and HiAP's search build their own loss)."""
    def capture(model, train_set, config, *, criterion=None, **kwargs):
        raise _Captured(criterion)

    model, train = _small()
    config = TrainConfig(epochs=1, lr=1e-3, batch_size=32, label_smoothing=0.1, **mix)
    with pytest.raises(_Captured) as caught:
        if trainer == "recovery":
            monkeypatch.setattr(recover, "Trainer", capture)
            finetune_pruned(model, train, None, config, teacher=vitprune.create_model("digits-vit", depth=1),
                            distill="soft")
        else:
            monkeypatch.setattr(search, "Trainer", capture)
            search.train_gates(model, train, HiAPConfig(), config)
    assert caught.value.args[0].base_criterion.label_smoothing == (0.0 if mix else 0.1)
    assert config.label_loss().label_smoothing == (0.0 if mix else 0.1)
