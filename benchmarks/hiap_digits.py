"""HiAP on the digits ViT: final MACs against the requested budget, accuracy against the paper's Table 3
baselines at matched MACs, and the paired CPU speedup of each extracted model against its MAC ratio.

For each budget (default 67%, 50% and 40% of the dense MACs, full convention, i.e. the paper's ~33% and
~50% reductions and one beyond) HiAP trains weights and gates in one phase with ``--target-macs`` (the λ
controller and budget hardening, an extension; note §1.7) and extracts the model, without fine-tuning
afterwards, as the paper. Then, at the MACs HiAP reached (each baseline as close as it gets from below):

* ``uniform``: every head keeps the same share of its value dimensions and every FFN the same share of
  its neurons, each ranked by ℓ1 norm (value dim: its V row + W_O column; neuron: its fc1 row + fc2
  column); the share is found by bisection (note B9's reading of "Uniform-Ratio");
* ``l1-ffn``: FFN neurons ranked globally by the ℓ1 norm of fc1 row + fc2 column, the lowest removed
  (note B9); it cannot go below the attention's share of the MACs;

both fine-tuned for as many epochs as HiAP trained, with the same KD from the dense model (α 0.7, T 4,
batch-mean) and learning rate. Speed: every model is saved, then timed in fresh processes
(``vitprune bench MODEL --vs digits-vit``, alternating pairs), five by default, reporting their median:
timed inside the process that had just trained, the same pruned model ran up to 1.4x slower while the
dense one barely changed, and from one fresh process to the next a speedup moves by up to ±20%.
Starting checkpoint: vitprune's trained ``digits-vit`` (cached; trained on first use). Writes
``<out-dir>/hiap_digits.{json,md,png}`` and each HiAP run under ``<out-dir>/hiap_digits/``.

    python benchmarks/hiap_digits.py                          # about 25 minutes on 2 CPU cores
    python benchmarks/hiap_digits.py --budgets 0.5 --epochs 5
    python benchmarks/hiap_digits.py --speed-only             # re-time the saved models
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from fresh_speed import bench_fresh, summarise
from profile_deit import write_results
from torch import nn

import vitprune
from vitprune.data import build_dataset, build_loader
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.hiap import HiAPConfig, HiAPRun, run_hiap
from vitprune.runs import MethodData, RunContext
from vitprune.surgery import prune_attention_dims, prune_mlp_neurons
from vitprune.training import TrainConfig, Trainer, evaluate
from vitprune.training.distill import DistillationLoss, make_teacher


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.67, 0.5, 0.4],
                        help="target MACs as a share of the dense model's")
    parser.add_argument("--epochs", type=int, default=20, help="HiAP's training epochs = the baselines' fine-tuning")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--speed-batch", type=int, default=64)
    parser.add_argument("--speed-pairs", type=int, default=30)
    parser.add_argument("--speed-processes", type=int, default=5,
                        help="fresh processes per model: on this machine the speedup moves by up to ±20%% from one "
                             "process to the next, far more than within one")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--speed-only", action="store_true", help="re-time the models an earlier run saved")
    return parser.parse_args(argv)


def _l1_value_dims(model: nn.Module) -> list[torch.Tensor]:
    """Per block ``(heads, head_dim)``: ℓ1 norm of each value dimension's V row and W_O column."""
    scores = []
    for view in vitprune.get_adapter(model).blocks():
        attn = view.attn
        _, _, v_weight = torch.cat([lin.weight.detach() for lin in attn.qkv.linears]).split(attn.qkv.widths)
        v_rows = v_weight.abs().sum(1)
        scores.append((v_rows + attn.proj.weight.detach().abs().sum(0)).reshape(attn.num_heads, attn.head_dim))
    return scores


def _l1_neurons(model: nn.Module) -> list[torch.Tensor]:
    """Per block: ℓ1 norm of each FFN neuron's fc1 row and fc2 column."""
    return [view.mlp.fc1.weight.detach().abs().sum(1) + view.mlp.fc2.weight.detach().abs().sum(0)
            for view in vitprune.get_adapter(model).blocks()]


def _top(scores: torch.Tensor, keep: int) -> list[int]:
    return sorted(scores.argsort(descending=True)[:keep].tolist())


def uniform(dense: nn.Module, share: float) -> nn.Module:
    """Every head keeps ``round(share·head_dim)`` value dims, every FFN ``round(share·hidden)`` neurons (ℓ1)."""
    model = copy.deepcopy(dense)
    dims, neurons = _l1_value_dims(dense), _l1_neurons(dense)
    for b, (d, n) in enumerate(zip(dims, neurons, strict=True)):
        keep = max(1, round(share * d.shape[1]))
        prune_attention_dims(model, b, list(range(d.shape[0])), [_top(row, keep) for row in d])
        prune_mlp_neurons(model, b, _top(n, max(1, round(share * len(n)))))
    return model


def l1_ffn(dense: nn.Module, removed: int) -> nn.Module:
    """The ``removed`` FFN neurons of lowest ℓ1 norm, ranked across all blocks, go."""
    model = copy.deepcopy(dense)
    scores = _l1_neurons(dense)
    flat = torch.cat(scores)
    owner = torch.cat([torch.full((len(s),), b) for b, s in enumerate(scores)])
    index = torch.cat([torch.arange(len(s)) for s in scores])
    gone = flat.argsort()[:removed]
    for b, s in enumerate(scores):
        drop = set(index[gone[owner[gone] == b]].tolist())
        prune_mlp_neurons(model, b, [i for i in range(len(s)) if i not in drop])
    return model


def _largest_within(build, low: float, high: float, target: int, steps: int = 40) -> nn.Module | None:
    """Bisection on a knob the model grows with: the largest model ``build(x)`` of at most ``target`` MACs."""
    best = None
    for _ in range(steps):
        mid = (low + high) / 2
        model = build(mid)
        if count_macs(model).macs <= target:
            best, low = model, mid
        else:
            high = mid
    return best


def _finetune(model: nn.Module, teacher: nn.Module, train, config: TrainConfig) -> None:
    criterion = DistillationLoss(nn.CrossEntropyLoss(), make_teacher(teacher), kind="soft", alpha=0.7, tau=4.0,
                                 per_image=True)
    Trainer(model, train, config, criterion=criterion).fit()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every budget: HiAP, then both baselines at HiAP's MACs."""
    from vitprune.models.zoo import trained_digits_vit

    torch.manual_seed(0)
    dense = trained_digits_vit(progress=sys.stderr.isatty())
    size = vitprune.get_adapter(dense).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    val_loader = build_loader(val, 256, shuffle=False, seed=0)
    dense_macs = count_macs(dense).macs
    dense_top1 = evaluate(dense, val_loader)["top1"]
    tune = TrainConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, weight_decay=0.05)
    runs_dir = args.out_dir / "hiap_digits"
    rows = []
    for budget in args.budgets:
        run_dir = runs_dir / f"budget_{budget:g}"
        shutil.rmtree(run_dir, ignore_errors=True)
        start = time.perf_counter()
        report = run_hiap(dense, MethodData(train, val), HiAPRun(tune, HiAPConfig(target_macs=budget * dense_macs)),
                          RunContext(run_dir, speed=SpeedConfig(enabled=False)))
        macs = report.pruned["macs_full"]
        rows.append({"budget": budget, "method": "hiap", "target_macs": budget * dense_macs, "macs": macs,
                     "params": report.pruned["params"], "top1": report.top1["extracted"],
                     "threshold": report.threshold, "seconds": time.perf_counter() - start,
                     "heads": report.heads, "neurons": report.neurons, "ffn_closed": report.ffn_closed,
                     "model_dir": str(Path(report.model_dir).relative_to(args.out_dir))})
        print(f"{budget:.0%} hiap: {macs / dense_macs:.3f} of dense MACs, top-1 {100 * rows[-1]['top1']:.2f}%",
              flush=True)
        hidden = sum(len(s) for s in _l1_neurons(dense))
        baselines = {"uniform": _largest_within(lambda s: uniform(dense, s), 0.0, 1.0, macs),
                     "l1-ffn": _largest_within(lambda k: l1_ffn(dense, hidden - round(k)), 0, hidden, macs,
                                               steps=14)}
        for method, model in baselines.items():
            if model is None:
                rows.append({"budget": budget, "method": method, "macs": None, "top1": None,
                             "note": "cannot reach HiAP's MACs"})
                print(f"{budget:.0%} {method}: cannot reach {macs / dense_macs:.3f} of the dense MACs", flush=True)
                continue
            start = time.perf_counter()
            _finetune(model, dense, train, tune)
            model_dir = run_dir / "baselines" / method
            vitprune.save(model, model_dir)
            rows.append({"budget": budget, "method": method, "macs": count_macs(model).macs,
                         "params": count_macs(model).params, "top1": evaluate(model, val_loader)["top1"],
                         "seconds": time.perf_counter() - start,
                         "model_dir": str(model_dir.relative_to(args.out_dir))})
            print(f"{budget:.0%} {method}: {rows[-1]['macs'] / dense_macs:.3f} of dense MACs, top-1 "
                  f"{100 * rows[-1]['top1']:.2f}%", flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "checkpoint": "digits-vit (vitprune, trained)",
            "dense_top1": dense_top1, "dense_macs": dense_macs, "dense_params": count_macs(dense).params,
            "train": {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "weight_decay": 0.05},
            "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}


def time_models(report: dict[str, Any], args: argparse.Namespace) -> None:
    """Each saved model against the dense one in ``args.speed_processes`` fresh processes; the median of theirs."""
    for row in report["rows"]:
        if row.get("model_dir") is None:
            continue
        runs = [bench_fresh(str(args.out_dir / row["model_dir"]), "digits-vit", batch_size=args.speed_batch,
                            pairs=args.speed_pairs, warmup=3) for _ in range(args.speed_processes)]
        row["speedup_runs"] = [run["speedup"] for run in runs]
        row["speedup"] = summarise(row["speedup_runs"])["median"]
        row["context"] = runs[0]["a"]["context"]
        print(f"{row['budget']:.0%} {row['method']}: speedup {row['speedup']:.3f} "
              f"{[round(r, 3) for r in row['speedup_runs']]} (MAC ratio {report['dense_macs'] / row['macs']:.3f})",
              flush=True)
    report["speed"] = {"batch": args.speed_batch, "pairs": args.speed_pairs, "processes": args.speed_processes,
                       "device": "cpu", "dtype": "float32",
                       "process": "fresh, per run (vitprune bench MODEL --vs digits-vit)",
                       "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def to_markdown(report: dict[str, Any]) -> str:
    """Budget, MACs reached, accuracy and speed of every row, with the recipe and starting checkpoint."""
    dense, tune, speed = report["dense_macs"], report["train"], report["speed"]
    lines = [
        "# HiAP on the digits ViT: budgets, baselines at matched MACs, speed",
        "",
        f"Starting checkpoint: {report['checkpoint']}, top-1 {100 * report['dense_top1']:.2f}% on the digits "
        f"validation split, {dense / 1e6:.2f} M MACs per image (full convention: with attention matmuls),",
        f"{report['dense_params']:,} params. HiAP: {tune['epochs']} epochs of weights + gates, AdamW lr {tune['lr']}, "
        f"batch {tune['batch_size']}, KD from the dense model (α 0.7, T 4), `--target-macs` = budget",
        "(λ controller + budget hardening), no fine-tuning after extraction. Baselines: pruned to HiAP's MACs (from",
        f"below), then fine-tuned {tune['epochs']} epochs with the same KD and lr. Speedup: each model is timed "
        f"against the dense one in {speed['processes']} fresh processes, each the median of {speed['pairs']} "
        "alternating pairs;",
        f"shown: the median over processes [lowest-highest], batch {speed['batch']}, {speed['dtype']}, CPU "
        f"({report['threads']} threads); *speedup / MAC ratio* is the share of the MAC reduction realised.",
        f"torch {report['torch']}; trained {report['date']}, timed {speed['date']}.",
        "",
        "| Budget | Method | MACs (M) | MACs / target | Top-1 (%) | Params | Speedup [range] | Speedup / MAC ratio |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        if row["macs"] is None:
            lines.append(f"| {row['budget']:.0%} | {row['method']} | - | - | - | - | - | {row['note']} |")
            continue
        target = row["budget"] * dense
        ratio = dense / row["macs"]
        lines.append(
            f"| {row['budget']:.0%} | {row['method']} | {row['macs'] / 1e6:.2f} | {row['macs'] / target:.3f} | "
            f"{100 * row['top1']:.2f} | {row['params']:,} | {row['speedup']:.3f} [{min(row['speedup_runs']):.3f}-"
            f"{max(row['speedup_runs']):.3f}] | {row['speedup'] / ratio:.3f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Top-1 against MACs, one marker per method."""
    from vitprune.plotting import figure, save_figure

    fig = figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    markers = {"hiap": "o-", "uniform": "s--", "l1-ffn": "^:"}
    for method, style in markers.items():
        rows = sorted((r for r in report["rows"] if r["method"] == method and r["macs"]), key=lambda r: r["macs"])
        ax.plot([r["macs"] / 1e6 for r in rows], [100 * r["top1"] for r in rows], style, label=method)
    ax.plot([report["dense_macs"] / 1e6], [100 * report["dense_top1"]], "k*", markersize=10, label="dense")
    ax.set(xlabel="MACs per image (M, full convention)", ylabel="top-1 (%)", title="digits-vit: HiAP vs baselines")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    """Run, then write the JSON, Markdown and plot."""
    args = parse_args(argv)
    if args.speed_only:
        report = json.loads((args.out_dir / "hiap_digits.json").read_text())
    else:
        report = run(args)
    time_models(report, args)
    write_results(args.out_dir, "hiap_digits", report, to_markdown(report))
    plot(report, args.out_dir / "hiap_digits.png")
    print((args.out_dir / "hiap_digits.md").read_text())


if __name__ == "__main__":
    main()
