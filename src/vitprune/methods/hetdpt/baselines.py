"""The layer choices HetDPT is compared against (paper Fig. 7 and Tables 11-13), as ``(attention, activation)`` lists.

* :func:`greedy_te` — single-type pruning by transfer entropy (NOSE-style): remove the layer of
  least TE of one type, recompute, repeat; ``attention-only`` and ``activation-only`` in Fig. 7.
* :func:`te_static` — one TE ranking of every layer of both types from the dense model, the
  ``budget`` lowest removed together (Table 13).
* The learnable-importance baseline across types without the predictor (Table 11) is
  :func:`~vitprune.methods.hetdpt.importance.select_layers_across_types`.

None of them fine-tunes while choosing; the comparison fine-tunes every choice the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.entropy import rank_layers, transfer_entropy
from vitprune.surgery import prune_depth, remaining_layers

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]


def greedy_te(model: nn.Module, kind: str, budget: int, loader: Batches, *,
              identity: str = "norm") -> tuple[list[int], list[int]]:
    """Remove ``budget`` layers of ``kind`` one at a time, each the least-TE one of what is left."""
    available = len(remaining_layers(model)[kind])
    if not 0 < budget <= available:
        raise VitpruneError(f"cannot remove {budget} {kind} layers: the model has {available}")
    work = copy.deepcopy(model)
    batches = list(loader)  # one fixed image set for every round
    removed: list[int] = []
    for _ in range(budget):
        scores = transfer_entropy(work, kind, batches, identity=identity)
        block = min(scores, key=lambda b: (scores[b], b))
        prune_depth(work, **{kind: [block]}, identity=identity, merge=False)
        removed.append(block)
    return (sorted(removed), []) if kind == "attention" else ([], sorted(removed))


def te_static(model: nn.Module, budget: int, loader: Batches, *, identity: str = "norm") -> tuple[list[int], list[int]]:
    """The ``budget`` layers of least TE in one joint ranking of both types, from ``model`` as it is."""
    ranking = rank_layers(model, list(loader), identity=identity)[:budget]
    return (sorted(b for kind, b, _ in ranking if kind == "attention"),
            sorted(b for kind, b, _ in ranking if kind == "activation"))
