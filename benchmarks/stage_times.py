"""Expected wall time of each stage of each paper row on 8 GPUs, from measured throughput, MACs and the presets.

A stage's cost is the images it passes over times MACs per image: a training pass costs three forward
passes of the student (forward and backward) plus one of the teacher when it distils, a statistics pass
one forward pass (LRP's relevance pass about three). The MAC rate a GPU sustains comes from
``results/train_throughput_<device>.json`` (``train_throughput.py``): for each measured configuration of a
model, images/s x (3 x student MACs + teacher MACs), the median over that model's configurations. The
rows' MACs come from ``results/structural_cpu.json`` (``structural.py``, the same architectures as the
paper tables), the epochs, images and batches from vitprune's presets (``vitprune.training.presets``,
``vitprune.methods.hetdpt.preset``) and the methods' config defaults.

The estimate assumes compute-bound training that scales linearly to 8 GPUs: a lower bound. A real run
also waits for JPEG decoding and augmentation on the CPUs (about 2,500-6,000 images/s per GPU here, which
needs dozens of CPU cores per node) and for the gradient all-reduce. Where a paper prints its own budget,
the table sets it beside ours.

    python benchmarks/stage_times.py    # writes results/stage_times.json and the table in docs/reproduce.md
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitprune.methods.hetdpt.pipeline import preset as hetdpt_preset
from vitprune.methods.star.pipeline import STARConfig
from vitprune.training.presets import get_preset

HERE = Path(__file__).resolve().parent
#: ImageNet-1k's training split.
IMAGENET_TRAIN = 1_281_167
GPUS = 8
#: Where docs/reproduce.md holds the generated table.
START, END = "<!-- stage-times:start -->", "<!-- stage-times:end -->"
#: Forward-pass equivalents of one image in a training step (forward + backward) and in an LRP relevance pass.
TRAIN_PASSES, LRP_PASSES = 3, 3


@dataclass(frozen=True)
class Stage:
    """One stage: ``images`` passes of a student of ``macs`` (``passes`` forward equivalents each), plus a teacher."""

    name: str
    images: int
    macs: int
    passes: int = TRAIN_PASSES
    teacher_macs: int = 0

    def cost(self) -> int:
        """MACs the stage computes."""
        return self.images * (self.passes * self.macs + self.teacher_macs)


@dataclass(frozen=True)
class Row:
    """A paper row: its model, its command's preset and its stages, and the budget its paper prints."""

    label: str
    model: str
    preset: str
    stages: tuple[Stage, ...]
    paper_budget: str = ""
    note: str = ""


def _macs(structural: dict[str, Any]) -> dict[tuple[str, str], int]:
    return {(r["model"], r["variant"]): r["macs_full"] for r in structural["results"]}


def _hetdpt(model: str, macs: dict, budget: int, paper: str) -> Row:
    config = hetdpt_preset("imagenet-hetdpt")
    dense, pruned = macs[(model, "dense")], macs[(model, "depth")]
    rounds = config.interleaved_rounds if config.interleaved_rounds is not None else budget // 2
    # Algorithm 1's two sweeps of `budget` points each, Algorithm 2's 2 x rounds less the first (shared) one.
    points = 2 * budget + 2 * rounds - 1
    stages = (
        Stage(f"Step 1: transfer entropy ({config.te_images} images per removal, {2 * budget} removals)",
              config.te_images * 2 * budget, dense, passes=1),
        Stage(f"Step 1: {points} predictor points x {config.probe.epochs} epochs on {config.probe_images:,} images "
              "(dense cost: an upper bound)", points * config.probe.epochs * config.probe_images, dense),
        Stage(f"Step 2: importance search, {config.search.epochs} epochs (dense model with gates)",
              config.search.epochs * IMAGENET_TRAIN, dense),
        Stage(f"Stage 2: fine-tune, {config.finetune.epochs} epochs, {config.distill} distillation from the dense "
              "model",
              config.finetune.epochs * IMAGENET_TRAIN, pruned, teacher_macs=dense if config.distill != "none" else 0),
    )
    return Row(f"HetDPT {model}, {budget} layers", model, "imagenet-hetdpt", stages, paper)


def _finetuned(label: str, model: str, variant: str, macs: dict, preset: str, first: tuple[Stage, ...],
               note: str = "") -> Row:
    recipe = get_preset(preset)
    dense = macs[(model, "dense")]
    teacher = dense if recipe.distill is not None and recipe.distill.distill != "none" else 0
    kd = recipe.distill.distill if recipe.distill is not None else "HiAP's own KD"
    if preset == "imagenet-hiap":  # the gated model trains at the dense cost, with HiAP's KD teacher
        return Row(label, model, preset, (*first, Stage(f"gate search + fine-tune, {recipe.train.epochs} epochs, {kd}",
                                                         recipe.train.epochs * IMAGENET_TRAIN, dense,
                                                         teacher_macs=dense)), note=note)
    return Row(label, model, preset, (*first, Stage(f"fine-tune, {recipe.train.epochs} epochs, {kd} distillation",
                                                     recipe.train.epochs * IMAGENET_TRAIN, macs[(model, variant)],
                                                     teacher_macs=teacher)), note=note)


def rows(structural: dict[str, Any]) -> list[Row]:
    """Every paper row docs/reproduce.md gives a command for."""
    macs = _macs(structural)
    star = STARConfig()
    out = [_hetdpt("DeiT-B", macs, 10, "1.5 h + 0.5 h + 28 h on 8 A100 (paper); Stage 2 43.6 h in the official log"),
           _hetdpt("DeiT-S", macs, 8, "")]
    for model in ("DeiT-S", "DeiT-B"):
        out.append(_finetuned(f"VBP {model}, 50% of FFN neurons", model, "vbp", macs, "imagenet-vbp",
                              (Stage("statistics: one pass over the training set", IMAGENET_TRAIN,
                                     macs[(model, "dense")], passes=1),),
                              note="the paper's global batch of 32 leaves GPUs far below the measured rate: "
                                   "expect several times longer, or run it on one GPU"))
    for model in ("DeiT-S", "DeiT-B"):
        out.append(_finetuned(f"STAR {model}, rho 0.7", model, "star", macs, "imagenet-star",
                              (Stage(f"ACS ({star.acs_images} images)", star.acs_images, macs[(model, "dense")],
                                     passes=1),
                               Stage(f"LRP prior ({star.lrp_images} images)", star.lrp_images,
                                     macs[(model, "dense")], passes=LRP_PASSES))))
    out.append(_finetuned("HiAP DeiT-S (the described architecture)", "DeiT-S", "hiap", macs, "imagenet-hiap", ()))
    return out


def mac_rates(throughput: dict[str, Any], structural: dict[str, Any]) -> dict[str, float]:
    """MACs per second one GPU sustained in training, per model (median over its measured configurations)."""
    dense = {m: v for (m, variant), v in _macs(structural).items() if variant == "dense"}
    rates: dict[str, list[float]] = {}
    for row in throughput["rows"]:
        model = row["config"].split(",")[0].split(" ")[0]
        teacher = dense[model] if "KD" in row["config"] else 0
        rates.setdefault(model, []).append(row["images_per_s"] * (TRAIN_PASSES * row["macs_full"] + teacher))
    return {model: statistics.median(values) for model, values in rates.items()}


def estimate(throughput: dict[str, Any], structural: dict[str, Any]) -> dict[str, Any]:
    """Every row's stages with their MACs and hours on ``GPUS`` GPUs."""
    rates = mac_rates(throughput, structural)
    table = []
    for row in rows(structural):
        stages = [{"stage": s.name, "images": s.images, "tera_macs": s.cost() / 1e12,
                   "hours": s.cost() / (GPUS * rates[row.model]) / 3600} for s in row.stages]
        table.append({"row": row.label, "model": row.model, "preset": row.preset, "stages": stages,
                      "hours": sum(s["hours"] for s in stages), "paper_budget": row.paper_budget, "note": row.note})
    ctx = throughput["context"]
    return {"gpus": GPUS, "device": ctx["device_name"], "dtype": ctx["dtype"], "batch_per_gpu": ctx["batch_size"],
            "tmacs_per_s": {m: r / 1e12 for m, r in rates.items()}, "imagenet_train": IMAGENET_TRAIN, "rows": table}


def to_markdown(report: dict[str, Any]) -> str:
    """The table docs/reproduce.md embeds."""
    rates = ", ".join(f"{m} {r:.0f}" for m, r in report["tmacs_per_s"].items())
    lines = [(f"Estimated on {report['gpus']} x {report['device']} ({report['dtype']}, batch {report['batch_per_gpu']} "
             f"per GPU) from the training MAC rate measured on one of them (TMAC/s: {rates}; "
             "[train_throughput_cuda.md](../benchmarks/results/train_throughput_cuda.md)), assuming compute-bound "
             "linear scaling: a lower bound (`benchmarks/stage_times.py`)."), "",
             "| paper row | preset | stage | images | time on 8 GPUs | the paper's budget, notes |",
             "|---|---|---|---:|---:|---|"]
    for row in report["rows"]:
        notes = "; ".join(text for text in (row["paper_budget"], row["note"]) if text)
        for i, stage in enumerate(row["stages"]):
            lines.append(f"| {row['row'] if i == 0 else ''} | {'`' + row['preset'] + '`' if i == 0 else ''} | "
                         f"{stage['stage']} | {stage['images']:,} | {_duration(stage['hours'])} | "
                         f"{notes if i == 0 else ''} |")
        lines.append(f"| | | **total** | | **{_duration(row['hours'])}** | |")
    return "\n".join(lines) + "\n"


def _duration(hours: float) -> str:
    return f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.1f} min" if hours * 60 >= 0.1 else "< 0.1 min"


def embed(page: str, table: str) -> str:
    """``page`` with the text between its markers replaced by ``table``."""
    if START not in page or END not in page:
        raise SystemExit(f"error: the page lacks the markers {START} ... {END}")
    head, rest = page.split(START, 1)
    return f"{head}{START}\n{table}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughput", type=Path, default=HERE / "results" / "train_throughput_cuda.json")
    parser.add_argument("--structural", type=Path, default=HERE / "results" / "structural_cpu.json")
    parser.add_argument("--docs", type=Path, default=HERE.parent / "docs" / "reproduce.md")
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    report = estimate(json.loads(args.throughput.read_text()), json.loads(args.structural.read_text()))
    (args.out_dir / "stage_times.json").write_text(json.dumps(report, indent=2) + "\n")
    args.docs.write_text(embed(args.docs.read_text(), to_markdown(report)))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
