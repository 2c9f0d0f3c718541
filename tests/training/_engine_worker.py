"""Run by test_engine under torchrun: fine-tune the small digits model with the engine, rank 0 saves the result."""

import sys

import torch
from torch.utils.data import Subset

import vitprune
from vitprune.data import DigitsDataset
from vitprune.training import TrainConfig, Trainer
from vitprune.training.distributed import exit_distributed, init_distributed

ctx = init_distributed("cpu")
torch.manual_seed(0)
model = vitprune.create_model("digits-vit", depth=2)
config = TrainConfig(epochs=2, lr=0.05, batch_size=32, optimizer="sgd")
stats = Trainer(model, Subset(DigitsDataset("train"), range(128)), config, dist=ctx).fit()
if ctx.is_main:
    torch.save({"stats": stats, "state": model.state_dict()}, sys.argv[1])
exit_distributed()
