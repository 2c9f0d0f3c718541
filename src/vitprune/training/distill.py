"""Knowledge distillation for fine-tuning pruned ViTs, with DeiT's semantics.

:class:`DistillationLoss` wraps a base criterion and is called as ``criterion(images, outputs, targets)``.
``outputs`` is what the student returned in training mode: a logits tensor, or the ``(cls_logits,
dist_logits)`` pair of a distilled DeiT. The base loss reads the class head and the distillation term
reads the distillation head when there is one. :func:`make_teacher` freezes a copy of a model, e.g. the
unpruned original for self-distillation, and :func:`use_distillation_head` makes a distilled DeiT return
its two heads separately while training.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from vitprune.adapters import find_adapter
from vitprune.errors import VitpruneError
from vitprune.training.config import KINDS

StudentOutputs = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | list[torch.Tensor]


class DistillationLoss(nn.Module):
    """``(1 - alpha) * base + alpha * distill``, where the distillation term compares student and teacher logits.

    - ``"none"``: ``base_criterion(cls_logits, targets)`` only; the teacher is never run.
    - ``"soft"``: the KL divergence between the teacher's and the student's softmax at temperature ``tau``,
      times ``tau**2``, summed and divided by the number of logits (batch x classes) as DeiT does, or by
      the number of images (``per_image``: Hinton's batch-mean KL, as HiAP's KD reads).
    - ``"hard"``: cross-entropy between the student's logits and the teacher's top-1 class.

    The teacher is frozen (``requires_grad`` off) and always run in eval mode under ``torch.no_grad()``, once
    per call on the student's images. ``last`` holds the latest call's ``base`` and ``distill`` terms as
    floats, for logging.
    """

    def __init__(
        self,
        base_criterion: nn.Module,
        teacher: nn.Module | None,
        kind: str = "none",
        alpha: float = 0.5,
        tau: float = 1.0,
        per_image: bool = False,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise VitpruneError(f"unknown distillation kind {kind!r}; choose one of {', '.join(KINDS)}")
        if kind != "none" and teacher is None:
            raise VitpruneError(f"{kind} distillation needs a teacher model")
        if not 0.0 <= alpha <= 1.0:
            raise VitpruneError(f"distillation alpha must be in [0, 1], got {alpha}")
        if not tau > 0.0:
            raise VitpruneError(f"distillation temperature tau must be positive, got {tau}")
        self.base_criterion = base_criterion
        self.teacher = teacher.requires_grad_(False).eval() if teacher is not None else None
        self.kind = kind
        self.alpha = alpha
        self.tau = tau
        self.per_image = per_image
        self.last: dict[str, float] = {}

    def forward(self, images: torch.Tensor, outputs: StudentOutputs, targets: torch.Tensor) -> torch.Tensor:
        """The loss for one batch; ``targets`` are class indices or soft (mixup) targets for the base criterion."""
        cls_logits, dist_logits = _split_heads(outputs)
        base = self.base_criterion(cls_logits, targets)
        if self.kind == "none":
            self.last = {"base": float(base.detach()), "distill": 0.0}
            return base
        teacher_logits = self._teacher_logits(images)
        if teacher_logits.shape != dist_logits.shape:
            raise VitpruneError(
                f"teacher logits have shape {tuple(teacher_logits.shape)} but the student's have "
                f"{tuple(dist_logits.shape)}; teacher and student must predict the same classes"
            )
        if self.kind == "soft":
            distill = _soft_distillation(dist_logits, teacher_logits, self.tau, self.per_image)
        else:
            distill = F.cross_entropy(dist_logits, teacher_logits.argmax(dim=1))
        self.last = {"base": float(base.detach()), "distill": float(distill.detach())}
        return (1.0 - self.alpha) * base + self.alpha * distill

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, alpha={self.alpha}, tau={self.tau}, per_image={self.per_image}"

    @torch.no_grad()
    def _teacher_logits(self, images: torch.Tensor) -> torch.Tensor:
        # criterion.train() recurses into the teacher, and a training-mode teacher would apply dropout
        # (or, for a distilled DeiT, return two heads), so eval mode is re-asserted on every call.
        self.teacher.eval()
        return self.teacher(images)


def make_teacher(model: nn.Module) -> nn.Module:
    """A frozen, eval-mode deep copy of ``model``, e.g. the unpruned original before pruning it in place."""
    return copy.deepcopy(model).requires_grad_(False).eval()


def use_distillation_head(model: nn.Module, kind: str) -> bool:
    """Make a distilled DeiT return ``(cls_logits, dist_logits)`` in training mode when ``kind`` distils.

    Returns whether ``model`` now does so. Models without a distillation head (by their adapter) are left
    alone (their one head serves both terms). In eval mode a distilled DeiT always returns the mean of its two
    heads, so evaluation needs no change; with ``kind="none"`` the split is switched off so training also
    sees the mean.
    """
    if kind not in KINDS:
        raise VitpruneError(f"unknown distillation kind {kind!r}; choose one of {', '.join(KINDS)}")
    adapter = find_adapter(model)
    return adapter is not None and adapter.set_distillation_split(kind != "none") and kind != "none"


def _split_heads(outputs: StudentOutputs) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return outputs, outputs
    if isinstance(outputs, (tuple, list)) and len(outputs) == 2:
        return outputs[0], outputs[1]
    raise VitpruneError(
        f"student outputs must be a logits tensor or a (cls_logits, dist_logits) pair, got {type(outputs).__name__}"
        + (f" of length {len(outputs)}" if isinstance(outputs, (tuple, list)) else "")
    )


def _soft_distillation(student: torch.Tensor, teacher: torch.Tensor, tau: float, per_image: bool) -> torch.Tensor:
    # DeiT divides by numel (batch x classes), not the batch size; kept so alpha/tau match its recipes.
    kl = F.kl_div(
        F.log_softmax(student / tau, dim=1), F.log_softmax(teacher / tau, dim=1), reduction="sum", log_target=True
    )
    return kl * (tau * tau) / (len(student) if per_image else student.numel())


__all__ = ["KINDS", "DistillationLoss", "make_teacher", "use_distillation_head"]
