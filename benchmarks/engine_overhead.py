"""Step time of vitprune's training engine against a bare PyTorch loop on the same model, data and batch.

Both sides train the same freshly initialised model from the same synthetic dataset through a
``DataLoader`` with AdamW; the engine adds its scheduler, hooks, RNG bookkeeping, NaN check and
metrics. Runs alternate (bare, engine, engine, bare, ...) and the overhead is reported pair by pair
as engine time / bare time - 1, with the median and spread over pairs.

    python benchmarks/engine_overhead.py [--model digits-vit] [--batch-size 64] [--steps 30] [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import vitprune
from vitprune.measure import Spread, collect_context
from vitprune.training import TrainConfig, Trainer


def _data(model: nn.Module, n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    size = vitprune.get_adapter(model).input_size
    return TensorDataset(torch.randn(n, *size, generator=g), torch.randint(0, model.num_classes, (n,), generator=g))


def _bare(model: nn.Module, data: TensorDataset, batch_size: int, lr: float) -> float:
    loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    model.train()
    start = time.perf_counter()
    for images, targets in loader:
        loss = criterion(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def _engine(model: nn.Module, data: TensorDataset, batch_size: int, lr: float) -> float:
    trainer = Trainer(model, data, TrainConfig(epochs=1, lr=lr, batch_size=batch_size), device="cpu")
    start = time.perf_counter()
    trainer.fit()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="digits-vit")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30, help="Optimisation steps per timed run.")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).with_name("results"))
    args = parser.parse_args()

    def fresh() -> nn.Module:
        torch.manual_seed(0)
        return vitprune.create_model(args.model)

    data = _data(fresh(), args.steps * args.batch_size)
    _bare(fresh(), data, args.batch_size, 1e-3)  # warm-up: allocator, kernels, first-call overheads
    _engine(fresh(), data, args.batch_size, 1e-3)
    bare, engine = [], []
    for i in range(args.pairs):
        order = ((bare, _bare), (engine, _engine)) if i % 2 == 0 else ((engine, _engine), (bare, _bare))
        for samples, run in order:
            samples.append(run(fresh(), data, args.batch_size, 1e-3) / args.steps * 1e3)
    overhead = Spread.of([e / b - 1 for b, e in zip(bare, engine)])
    context = collect_context(torch.device("cpu"), torch.float32, args.batch_size).to_dict()
    result = {
        "model": args.model, "batch_size": args.batch_size, "steps": args.steps, "pairs": args.pairs,
        "bare_ms_per_step": Spread.of(bare).__dict__, "engine_ms_per_step": Spread.of(engine).__dict__,
        "overhead": overhead.__dict__, "bare_samples_ms": bare, "engine_samples_ms": engine, "context": context,
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"engine_overhead_{context['device']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"bare {Spread.of(bare).median:.2f} ms/step, engine {Spread.of(engine).median:.2f} ms/step, "
          f"overhead {100 * overhead.median:+.1f}% (IQR {100 * overhead.q1:+.1f}% to {100 * overhead.q3:+.1f}%, "
          f"{args.pairs} alternating pairs) -> {path}")


if __name__ == "__main__":
    main()
