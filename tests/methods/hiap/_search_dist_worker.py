"""Run by test_search_distributed under torchrun: HiAP's gate search on the digits model; rank 0 saves the result.

The test imports :func:`search` to run the same search in one process.
"""

import sys

import torch
from torch.utils.data import Subset

import vitprune
from vitprune.data import DigitsDataset
from vitprune.methods.hiap import HiAPConfig, train_gates
from vitprune.training import TrainConfig
from vitprune.training.distributed import exit_distributed, init_distributed, is_main_process

#: Two steps of a global batch of 32. SGD, not Adam: Adam turns rounding-sized gradients that are zero in exact
#: arithmetic into lr-sized updates (see test_engine's 2-process test).
TRAIN = TrainConfig(epochs=1, lr=0.05, batch_size=32, optimizer="sgd", amp=False)
HIAP = HiAPConfig(gate_lr=0.5, gate_init=0.5)


def search() -> dict:
    """Train the gates and weights (in whatever process group there is); the gate logits, weights and history."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    gates, history = train_gates(model, Subset(DigitsDataset("train"), range(64)), HIAP, TRAIN, device="cpu")
    return {"gates": gates.state_dict(), "model": model.state_dict(), "history": history}


if __name__ == "__main__":
    init_distributed("cpu")
    result = search()
    if is_main_process():
        torch.save(result, sys.argv[1])
    exit_distributed()
