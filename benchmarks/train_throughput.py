"""Training throughput of vitprune's engine on DeiT-S/B, dense and depth-pruned, with and without distillation.

What a fine-tuning stage costs is images per second of one optimisation step: forward, loss, backward and
AdamW, in the engine (:class:`vitprune.training.Trainer`) exactly as a recovery run takes it, with a frozen
dense teacher run on every batch when the stage distils (the papers' hard distillation from the unpruned
model). docs/reproduce.md turns these figures into wall-time estimates per paper stage.

Each configuration trains on a synthetic dataset held on the device (the data pipeline is not timed: a real
run's decoding and augmentation must keep up on its own CPU cores). Configurations take turns, one round of
``--steps`` timed steps each after ``--warmup`` untimed ones, for ``--rounds`` rounds; a round's throughput is
its images over its wall time (the engine reads each batch's loss, so every step ends synchronised), and the
table gives the median over rounds with the min-max spread. Weights are random (nothing is downloaded).

    python benchmarks/train_throughput.py --device cuda                      # batch 256 per step, AMP
    python benchmarks/train_throughput.py --batch-size 8 --steps 2 --rounds 1  # a CPU smoke run
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from depth_speed import CONFIGS
from torch import nn
from torch.utils.data import TensorDataset

import vitprune
from vitprune.measure import collect_context, count_macs
from vitprune.surgery import prune_depth
from vitprune.training import TrainConfig, Trainer
from vitprune.training.distill import DistillationLoss, make_teacher

#: Model -> the depth-pruned configuration (``depth_speed.CONFIGS``) timed beside it.
MODELS = {"DeiT-S": "DeiT-S, 8 layers", "DeiT-B": "DeiT-B, 10 layers"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    parser.add_argument("--batch-size", type=int, default=None, help="images per step (default: 256 on CUDA, 16 on CPU)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = 256 if torch.device(args.device).type == "cuda" else 16
    return args


@dataclass
class _Config:
    label: str
    model: nn.Module
    teacher: nn.Module | None
    macs: int


def _configs(models: list[str]) -> list[_Config]:
    configs = []
    for label in models:
        name, attention, activation, _ = CONFIGS[MODELS[label]]
        dense = vitprune.create_model(name)
        pruned = copy.deepcopy(dense)
        prune_depth(pruned, attention, activation)
        depth = f"{label}, {len(attention) + len(activation)} layers removed"
        for text, model in ((f"{label} dense", dense), (depth, pruned)):
            macs = count_macs(model).macs
            configs.append(_Config(text, model, None, macs))
            configs.append(_Config(f"{text} + hard KD from dense", copy.deepcopy(model), make_teacher(dense), macs))
    return configs


def _round(config: _Config, device: torch.device, batch: int, warmup: int, steps: int, seed: int) -> float:
    """Images per second over ``steps`` engine steps after ``warmup`` untimed ones."""
    g = torch.Generator().manual_seed(seed)
    n = batch * (warmup + steps)
    size = vitprune.get_adapter(config.model).input_size
    data = TensorDataset(torch.randn(n, *size, generator=g).to(device),
                         torch.randint(0, config.model.num_classes, (n,), generator=g).to(device))
    train = TrainConfig(epochs=1, lr=5e-5, batch_size=batch, weight_decay=0.05, seed=seed)
    criterion = None
    if config.teacher is not None:
        criterion = DistillationLoss(train.label_loss(), config.teacher.to(device), kind="hard", alpha=0.5, tau=1.0)
    trainer = Trainer(config.model, data, train, criterion=criterion, device=device)
    stamps: list[float] = []
    trainer.fit(on_batch=lambda *_: stamps.append(time.perf_counter()))
    return batch * steps / (stamps[-1] - stamps[warmup - 1])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        raise SystemExit("error: --warmup and --steps must be at least 1")
    device = torch.device(args.device)
    configs = _configs(args.models)
    samples: dict[str, list[float]] = {c.label: [] for c in configs}
    for r in range(args.rounds):
        for config in configs:
            samples[config.label].append(_round(config, device, args.batch_size, args.warmup, args.steps, seed=r))
            print(f"round {r + 1}/{args.rounds} {config.label}: {samples[config.label][-1]:.1f} img/s", flush=True)
    rows = [{"config": c.label, "macs_full": c.macs, "images_per_s": statistics.median(samples[c.label]),
             "min": min(samples[c.label]), "max": max(samples[c.label]), "rounds": samples[c.label]}
            for c in configs]
    # The engine trains under autocast on CUDA (bfloat16 where supported), in float32 on a CPU.
    context = asdict(collect_context(device, "amp" if device.type == "cuda" else "float32", args.batch_size))
    report: dict[str, Any] = {"context": context, "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                              "optimizer": "adamw", "rows": rows}
    stem = f"train_throughput_{device.type}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out_dir / f"{stem}.md").write_text(to_markdown(report))
    print(to_markdown(report))


def to_markdown(report: dict[str, Any]) -> str:
    """The results page of one run's JSON."""
    ctx = report["context"]
    lines = [f"# Training throughput ({ctx['device_name']}, batch {ctx['batch_size']}, {ctx['dtype']})", "",
             (f"torch {ctx['torch']}, timm {ctx['timm']}, vitprune {ctx['vitprune']}. Engine steps (forward, loss, "
             "backward, AdamW; `amp` = the engine's autocast, bfloat16 where supported) on random weights and "
             f"synthetic data held on the device; median images/s of {report['rounds']} rounds of "
             f"{report['steps']} steps after {report['warmup']} untimed ones, min-max in brackets. The depth-pruned "
             "rows are HetDPT's layer sets (`depth_speed.CONFIGS`), merged."), "",
             "| configuration | GMACs (full) | images/s |", "|---|---:|---:|"]
    lines += [f"| {row['config']} | {row['macs_full'] / 1e9:.2f} | {row['images_per_s']:.0f} "
              f"({row['min']:.0f}-{row['max']:.0f}) |" for row in report["rows"]]
    return "\n".join(lines) + "\n"

if __name__ == "__main__":
    main()
