"""DistillationLoss: exact soft/hard/none values by hand, DeiT's two-head path, frozen teachers, user errors."""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.loss import SoftTargetCrossEntropy
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.training.distill import DistillationLoss, make_teacher, use_distillation_head

BATCH, CLASSES = 4, 5


class FixedTeacher(nn.Module):
    """Returns fixed logits whatever the images, and records the images it was called on."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(logits.clone())
        self.calls: list[torch.Tensor] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.calls.append(images)
        return self.weight * 1.0


def _logits(seed: int) -> torch.Tensor:
    return torch.randn(BATCH, CLASSES, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3


def _soft_by_hand(student: torch.Tensor, teacher: torch.Tensor, tau: float) -> torch.Tensor:
    p_t = torch.softmax(teacher / tau, dim=1)
    kl = (p_t * (p_t.log() - torch.log_softmax(student / tau, dim=1))).sum()
    return kl * tau**2 / student.numel()


@pytest.fixture
def data():
    images = torch.zeros(BATCH, 3, 2, 2, dtype=torch.float64)
    targets = torch.tensor([0, 3, 1, 4])
    return images, _logits(1).requires_grad_(), _logits(2), targets


@pytest.mark.parametrize("tau", [1.0, 4.0])
@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_soft_matches_hand_computation(data, tau, alpha):
    images, student, teacher_logits, targets = data
    criterion = DistillationLoss(nn.CrossEntropyLoss(), FixedTeacher(teacher_logits), "soft", alpha, tau)
    loss = criterion(images, student, targets)
    base = F.cross_entropy(student, targets)
    distill = _soft_by_hand(student, teacher_logits, tau)
    torch.testing.assert_close(loss, (1 - alpha) * base + alpha * distill)
    assert criterion.last == pytest.approx({"base": base.item(), "distill": distill.item()})


def test_soft_per_image_is_the_batch_mean_kl(data):
    images, student, teacher_logits, targets = data
    criterion = DistillationLoss(nn.CrossEntropyLoss(), FixedTeacher(teacher_logits), "soft", 1.0, 4.0,
                                 per_image=True)
    expected = F.kl_div(torch.log_softmax(student / 4, dim=1), torch.log_softmax(teacher_logits / 4, dim=1),
                        reduction="batchmean", log_target=True) * 16
    torch.testing.assert_close(criterion(images, student, targets), expected)
    torch.testing.assert_close(expected, _soft_by_hand(student, teacher_logits, 4.0) * CLASSES)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_hard_matches_hand_computation(data, alpha):
    images, student, teacher_logits, targets = data
    criterion = DistillationLoss(nn.CrossEntropyLoss(), FixedTeacher(teacher_logits), "hard", alpha)
    loss = criterion(images, student, targets)
    teacher_top1 = teacher_logits.argmax(dim=1)
    assert not torch.equal(teacher_top1, targets)
    expected = (1 - alpha) * F.cross_entropy(student, targets) + alpha * F.cross_entropy(student, teacher_top1)
    torch.testing.assert_close(loss, expected)


def test_none_is_the_base_criterion_and_never_runs_the_teacher(data):
    images, student, teacher_logits, targets = data
    teacher = FixedTeacher(teacher_logits)
    criterion = DistillationLoss(nn.CrossEntropyLoss(label_smoothing=0.1), teacher)
    loss = criterion(images, student, targets)
    torch.testing.assert_close(loss, F.cross_entropy(student, targets, label_smoothing=0.1))
    assert criterion.last == {"base": pytest.approx(loss.item()), "distill": 0.0}
    assert teacher.calls == []
    without_teacher = DistillationLoss(nn.CrossEntropyLoss(label_smoothing=0.1), None)
    torch.testing.assert_close(without_teacher(images, student, targets), loss)


@pytest.mark.parametrize("kind", ["none", "soft"])
def test_mixup_soft_targets(data, kind):
    images, student, teacher_logits, _ = data
    soft_targets = torch.softmax(_logits(3), dim=1)
    criterion = DistillationLoss(SoftTargetCrossEntropy(), FixedTeacher(teacher_logits), kind, alpha=0.25)
    loss = criterion(images, student, soft_targets)
    base = (-soft_targets * torch.log_softmax(student, dim=1)).sum(dim=1).mean()
    expected = base if kind == "none" else 0.75 * base + 0.25 * _soft_by_hand(student, teacher_logits, 1.0)
    torch.testing.assert_close(loss, expected)


def test_tuple_outputs_route_cls_to_base_and_dist_to_distillation(data):
    images, cls_logits, teacher_logits, targets = data
    dist_logits = _logits(4).requires_grad_()
    for kind, distill in [("soft", _soft_by_hand(dist_logits, teacher_logits, 2.0)),
                          ("hard", F.cross_entropy(dist_logits, teacher_logits.argmax(dim=1)))]:
        criterion = DistillationLoss(nn.CrossEntropyLoss(), FixedTeacher(teacher_logits), kind, 0.5, 2.0)
        loss = criterion(images, (cls_logits, dist_logits), targets)
        torch.testing.assert_close(loss, 0.5 * F.cross_entropy(cls_logits, targets) + 0.5 * distill)
    none = DistillationLoss(nn.CrossEntropyLoss(), None)
    torch.testing.assert_close(none(images, (cls_logits, dist_logits), targets), F.cross_entropy(cls_logits, targets))
    torch.testing.assert_close(none(images, [cls_logits, dist_logits], targets), F.cross_entropy(cls_logits, targets))


def test_teacher_runs_once_on_the_student_images_frozen_and_in_eval_mode(data):
    images, student, teacher_logits, targets = data
    teacher = FixedTeacher(teacher_logits).train()
    criterion = DistillationLoss(nn.CrossEntropyLoss(), teacher, "soft").train()
    criterion(images, student, targets).backward()
    assert len(teacher.calls) == 1 and teacher.calls[0] is images
    assert not teacher.training and not teacher.weight.requires_grad and teacher.weight.grad is None
    assert student.grad is not None


def _tiny_distilled_deit(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return timm.create_model(
        "deit_tiny_distilled_patch16_224", pretrained=False, img_size=32, depth=2, embed_dim=48, num_classes=CLASSES
    )


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_distilled_deit_student_with_self_distillation(kind):
    student = _tiny_distilled_deit(0)
    with torch.no_grad():  # a random head_dist equal to head would hide a swapped routing
        student.head_dist.weight.mul_(-1)
    teacher = make_teacher(student)
    assert use_distillation_head(student, kind)
    student.train()
    images, targets = torch.randn(3, 3, 32, 32), torch.tensor([0, 2, 4])
    outputs = student(images)
    assert isinstance(outputs, tuple)
    cls_logits, dist_logits = outputs
    criterion = DistillationLoss(nn.CrossEntropyLoss(), teacher, kind, alpha=0.5, tau=2.0)
    loss = criterion(images, outputs, targets)

    with torch.no_grad():
        teacher_logits = teacher(images)
    torch.testing.assert_close(teacher_logits, (cls_logits + dist_logits).detach() / 2)  # eval mode averages heads
    if kind == "soft":
        distill = _soft_by_hand(dist_logits, teacher_logits, 2.0)
    else:
        distill = F.cross_entropy(dist_logits, teacher_logits.argmax(dim=1))
    torch.testing.assert_close(loss, 0.5 * F.cross_entropy(cls_logits, targets) + 0.5 * distill)

    loss.backward()
    assert student.head.weight.grad.abs().sum() > 0 and student.head_dist.weight.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in teacher.parameters())


@pytest.mark.parametrize("alpha, trained, untouched", [(0.0, "head", "head_dist"), (1.0, "head_dist", "head")])
def test_heads_get_gradient_only_from_their_term(alpha, trained, untouched):
    student = _tiny_distilled_deit(0)
    criterion = DistillationLoss(nn.CrossEntropyLoss(), _tiny_distilled_deit(1), "hard", alpha=alpha)
    use_distillation_head(student, "hard")
    images = torch.randn(2, 3, 32, 32)
    criterion(images, student.train()(images), torch.tensor([1, 3])).backward()
    assert getattr(student, trained).weight.grad.abs().sum() > 0
    assert torch.count_nonzero(getattr(student, untouched).weight.grad) == 0


def test_use_distillation_head():
    student = _tiny_distilled_deit(0).train()
    images = torch.randn(1, 3, 32, 32)
    assert use_distillation_head(student, "soft") and isinstance(student(images), tuple)
    assert isinstance(student.eval()(images), torch.Tensor)
    assert not use_distillation_head(student, "none") and isinstance(student.train()(images), torch.Tensor)
    plain = timm.create_model("deit_tiny_patch16_224", pretrained=False, img_size=32, depth=1, num_classes=CLASSES)
    assert not use_distillation_head(plain, "hard")


def test_make_teacher_is_a_frozen_independent_copy():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5)).train()
    teacher = make_teacher(model)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert model.training and all(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        model[0].weight.zero_()
    assert teacher[0].weight.abs().sum() > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "kd"}, "unknown distillation kind 'kd'"),
        ({"kind": "soft", "teacher": None}, "soft distillation needs a teacher"),
        ({"kind": "hard", "teacher": None}, "hard distillation needs a teacher"),
        ({"alpha": -0.1}, r"alpha must be in \[0, 1\], got -0.1"),
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\], got 1.5"),
        ({"alpha": float("nan")}, "alpha must be in"),
        ({"tau": 0.0}, "tau must be positive, got 0.0"),
        ({"tau": -1.0}, "tau must be positive"),
    ],
)
def test_invalid_arguments(kwargs, message):
    args = {"base_criterion": nn.CrossEntropyLoss(), "teacher": nn.Identity(), "kind": "soft", **kwargs}
    with pytest.raises(VitpruneError, match=message):
        DistillationLoss(**args)


def test_mismatched_classes_and_bad_outputs(data):
    images, student, _, targets = data
    criterion = DistillationLoss(nn.CrossEntropyLoss(), FixedTeacher(_logits(2)[:, :3]), "soft")
    with pytest.raises(VitpruneError, match=r"teacher logits have shape \(4, 3\) but the student's have \(4, 5\)"):
        criterion(images, student, targets)
    with pytest.raises(VitpruneError, match="pair, got tuple of length 3"):
        criterion(images, (student, student, student), targets)
    with pytest.raises(VitpruneError, match="pair, got list of length 1"):
        criterion(images, [student], targets)
    with pytest.raises(VitpruneError, match="unknown distillation kind"):
        use_distillation_head(nn.Identity(), "Soft")
