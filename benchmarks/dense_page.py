"""The page of ``dense.py``: the task, cost, both protocols' scores with their paired verdicts, the comparison with
HetDPT's gaps and the mask and box figures, rendered from the run's report alone (``python benchmarks/dense.py
--render`` renders the stored report again)."""

from __future__ import annotations

import base64
import statistics
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from profile_deit import write_results

from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset
from vitprune.data.cluttered_dense import DENSE_MAX_DIGITS, DENSE_PIECES
from vitprune.plotting import figure, save_figure

#: The report format this page renders (``dense.py`` writes it).
FORMAT = 2
#: The backbones, in table order, and their labels.
ARMS = {"dense": "dense", "hetdpt": "HetDPT (depth)", "vbp": "VBP (FFN neurons)", "width": "width (Taylor)"}
#: The protocols, the papers' first, and what each trains.
PROTOCOLS = {"joint": "the backbone's last blocks fine-tuned with the pyramid and head",
             "frozen": "the backbone frozen, the pyramid and head alone trained"}
TASKS = ("segmentation", "detection")
#: HetDPT's own gaps to the dense DeiT-B backbone, in points: Table 4 (COCO, H-Deformable-DETR 12 epochs, 10 of 24
#: layers removed: 32.4 vs 32.8 mAP) and Table 5 (ADE20K, 8 layers removed: 46.4 vs 47.0 mIoU).
PAPER_GAPS = {"map": -0.4, "miou": -0.6}
#: What the dense model must reach for the gaps to mean something (issue 55), in points.
BAR = {"miou": 60.0, "map": 40.0}
#: What the full run should take on 2 CPU cores (issue 55), in minutes.
LIMIT_MINUTES = 90
#: The first version of the task and page (commit 5fd95b6): 8 clutter crops, the digits' own 2-3 px strokes, one
#: 13x13 map under torchvision's FCN head and a single-map Faster R-CNN, backbones frozen; its dense scores.
FIRST = {"pieces": 8, "miou": 24.5, "map": 9.0, "commit": "5fd95b6"}
#: Validation canvases drawn in the page's figures, and the score a box needs to be drawn.
SHOWN, SHOWN_SCORE = 4, 0.5
_METRICS = {"miou": ("mIoU", "segmentation"), "map": ("box mAP", "detection")}
_VERDICTS = {"holds": "equivalent", "does not hold": "beyond the margin", "inconclusive": "inconclusive"}


def pack_array(array: np.ndarray) -> str:
    """``array``'s bytes, compressed, as text for the store."""
    return base64.b64encode(zlib.compress(np.ascontiguousarray(array).tobytes(), 9)).decode("ascii")


def unpack_array(text: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype).reshape(shape)


def _mean(rows: dict[Any, dict[str, Any]], protocol: str, arm: str, task: str, metric: str) -> float:
    return statistics.fmean(100 * rows[s][protocol][arm][task][metric] for s in rows)


def _per_seed(rows: dict[Any, dict[str, Any]], protocol: str, arm: str, task: str, metric: str) -> str:
    return ", ".join(f"{100 * rows[s][protocol][arm][task][metric]:.1f}" for s in rows)


def _gap(d: dict[str, Any]) -> str:
    return f"{d['effect']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"


def _relative(d: dict[str, Any]) -> str:
    return f"{d['relative']:+.1f}% [{d['relative_low']:+.1f}, {d['relative_high']:+.1f}]"


def _ranking(rows: dict[Any, dict[str, Any]], protocol: str, metric: str) -> list[str]:
    task = _METRICS[metric][1]
    return sorted(ARMS, key=lambda arm: -_mean(rows, protocol, arm, task, metric))


def _agreement(rows: dict[Any, dict[str, Any]]) -> str:
    """Whether the two protocols order the backbones alike, score by score."""
    parts = []
    for metric, (label, _) in _METRICS.items():
        ranked = {p: _ranking(rows, p, metric) for p in PROTOCOLS}
        order = {p: " > ".join(ARMS[a] for a in ranked[p]) for p in PROTOCOLS}
        alike = ranked["joint"] == ranked["frozen"]
        parts.append(f"by {label} they {'rank the backbones alike' if alike else 'rank them differently'} "
                     f"(joint: {order['joint']}; frozen: {order['frozen']})")
    return "The two protocols: " + "; ".join(parts) + "."


def _differences(stats: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """Every pruned backbone's difference from dense, as ``(protocol, arm, metric, difference)``, in page order."""
    for protocol in PROTOCOLS:
        for arm, scores in stats[protocol].items():
            for metric, d in scores.items():
                yield protocol, arm, metric, d


def _recovery(stats: dict[str, Any], b: dict[str, Any]) -> str:
    """What the pruned backbones' recovery, which the dense one does not get, means for their differences, with
    the differences it may explain: those above dense."""
    above = [f"{ARMS[arm]} by {_METRICS[metric][0]} {protocol} ({d['effect']:+.2f}"
             f"{', its interval above zero' if d['low'] > 0 else ''})"
             for protocol, arm, metric, d in _differences(stats) if d["effect"] > 0]
    where = ("Where a pruned backbone scores above dense, that training may be the reason, not the pruning: "
             + "; ".join(above) + "." if above else "No pruned backbone scores above dense.")
    return (f"**The recovery.** Every pruned backbone was fine-tuned before its heads trained ({b['tune_epochs']} "
            f"epoch{'s' * (b['tune_epochs'] != 1)} on {b['tune_images']:,} classification images, soft distillation "
            "from its dense checkpoint); the dense backbone was not, as the papers' dense rows are their original "
            "checkpoints. A Δ is therefore the pruning and the recovery together. The claims page's dense + recovery "
            "control ([claims.md](claims.md)) finds that the recovery leaves the dense classifier's top-1 where it "
            f"was, but it does not measure the patch tokens these heads read. {where}")


def _undecided(stats: dict[str, Any]) -> str:
    """The differences whose interval over seeds and images lies beyond the margin but whose verdict is not, with
    the seeds' own interval, which a verdict must also pass."""
    found = [(f"{ARMS[arm]}, {protocol} {_METRICS[metric][0]}: {_gap(d)}, and [{d['seed_low']:+.2f}, "
              f"{d['seed_high']:+.2f}] over the checkpoints alone", d["seeds"])
             for protocol, arm, metric, d in _differences(stats)
             if d["verdict"] == "inconclusive" and (d["low"] > d["margin"] or d["high"] < -d["margin"])]
    if not found:
        return ""
    return (f"Beyond the margin over seeds and images, yet inconclusive: the t-test over the {found[0][1]} "
            "checkpoints, Holm-corrected, does not show it: " + "; ".join(text for text, _ in found) + ".")


def to_markdown(report: dict[str, Any], command: str, stem: str) -> str:
    """The results page."""
    if report.get("format") != FORMAT:
        raise ValueError(f"a dense report of format {report.get('format', 1)} (this page renders format {FORMAT})")
    rows, b, stats, speed = report["rows"], report["budget"], report["stats"], report["speed"]
    seeds = list(rows)
    first = seeds[0]
    backbones = rows[first]["backbones"]
    dense_macs = backbones["dense"]["macs"]
    minutes = report["seconds"]["measurements"] / 60
    device = report.get("device", "cpu")
    reached = {metric: _mean(rows, "joint", "dense", task, metric) for metric, (_, task) in _METRICS.items()}
    met = all(reached[m] >= BAR[m] for m in BAR)
    lines = [
        "# Pruned backbones for segmentation and detection (cluttered MNIST)",
        "",
        f"Command: `{command}` · {len(seeds)} seed{'s' * (len(seeds) > 1)} ({', '.join(map(str, seeds))}) · "
        f"measured {report['date']} on {_where(report)}, torch {', '.join(report['torch'])} · "
        f"wall time of the measurements {minutes:.1f} min"
        f"{_limit(minutes) if device == 'cpu' else ''}.",
        "",
        "Starting checkpoints: `cluttered-mnist-vit` trained with seeds " + ", ".join(map(str, seeds)) +
        " (weights " + ", ".join(f"`{report['checkpoints'][s][:12]}`" for s in seeds) + "). Protocol: the docstring "
        "of [`benchmarks/dense.py`](../dense.py); the library calls it uses: [docs/dense.md](../../docs/dense.md).",
        "",
        f"**The task.** 64-px canvases with 1 to {DENSE_MAX_DIGITS} MNIST digits among {DENSE_PIECES} clutter crops "
        "of other digits, split by source digit; per-pixel digit classes and digit boxes. The first version "
        f"(commit {FIRST['commit']}) had {FIRST['pieces']} crops and the digits' own 2-3 px strokes, and put one "
        "13x13 map under torchvision's FCN head and a single-map Faster R-CNN with the backbones frozen: the dense "
        f"model reached {FIRST['miou']}% mIoU and {FIRST['map']}% box mAP, where the head and grid, not the "
        "backbone, set the score.",
        "",
        f"**The models.** Backbones at {b['size']}x{b['size']} (16x16 cells of 5 px; the canvases resized to it "
        f"inside the models), ViTDet's simple feature pyramid ({b['pyramid_channels']} channels) under smp's U-Net "
        f"decoder ({', '.join(map(str, b['decoder_channels']))} channels; the canvas's own pixels its skip at "
        "stride 2, for outlines finer than the 4-px cells) and under torchvision's Faster R-CNN. Heads trained on "
        f"{b['train_images']} canvases drawn by the seed (U-Net {b['seg_epochs']} epochs, Faster R-CNN "
        f"{b['det_epochs']}; batch {b['batch_size']}, AdamW at lr "
        f"{b['head_lr']:g}, cosine decay; the background weighted {b['background_weight']:g} in the segmentation "
        f"loss), scored on {b['val_images']} held-out canvases. Two protocols: **joint** ({PROTOCOLS['joint']}: "
        f"the last {b['tail_blocks']}, at lr {b['backbone_lr']:g}; the papers fine-tune every block) and "
        f"**frozen** ({PROTOCOLS['frozen']}).",
        "",
        f"**The bar.** Under the joint protocol the dense model reaches {reached['miou']:.1f}% mIoU and "
        f"{reached['map']:.1f}% box mAP: the gaps below are measured where the scores mean something only if these "
        f"are at least {BAR['miou']:g}% and {BAR['map']:g}%, which they {'are' if met else 'are not'}.",
        "",
        "## Cost",
        "",
        "Backbone MACs: vitprune's counter, full convention (attention matmuls included) at the dense input; whole "
        "model: torch's FlopCounterMode on one canvas (the detector after its test proposals; RoIAlign and NMS not "
        "counted). Speedup: time of the dense model / time of the pruned one, median over alternating pairs (IQR), "
        f"{device}, float32, {speed[next(iter(speed))]['backbone']['pairs']} pairs.",
        "",
        "| backbone | backbone MACs (M) | share | params (M) | segmenter MACs (M) | detector MACs (M) | "
        "speedup backbone (b 32) | segmenter (b 32) | detector (b 8) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, label in ARMS.items():
        joint = rows[first]["joint"][arm]
        cells = [label, f"{backbones[arm]['macs'] / 1e6:.1f}", f"{backbones[arm]['macs'] / dense_macs:.1%}",
                 f"{backbones[arm]['params'] / 1e6:.2f}", f"{joint['segmentation']['macs'] / 1e6:.1f}",
                 f"{joint['detection']['macs'] / 1e6:.1f}"]
        for part in ("backbone", "segmentation", "detection"):
            s = speed.get(arm, {}).get(part)
            cells.append("1 (reference)" if s is None else
                         f"{s['speedup']:.2f}x ({s['speedup_q1']:.2f}-{s['speedup_q3']:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    margin = next(iter(next(iter(stats.values())).values()))["miou"]["margin"]
    lines += [
        "",
        "## Scores",
        "",
        "Mean over seeds (per seed in brackets). Δ: pruned minus dense in points, with its 95% interval over seeds "
        "and images (a two-way bootstrap: mIoU from each drawn image's intersections and unions, box mAP a COCO "
        f"evaluation of each drawn set, {b['map_resamples']:,} resamples), and in % of dense. Verdict: equivalence "
        f"within ±{margin:g} point, fixed before the run, by two one-sided tests that the bootstrap and a t-test "
        "over the seeds must both pass (Holm over a backbone's two scores); *beyond the margin* when the difference "
        "is shown to exceed it; else *inconclusive*.",
    ]
    for protocol, what in PROTOCOLS.items():
        lines += ["", f"### {protocol.capitalize()}: {what}", "",
                  "| backbone | mIoU (%) | Δ mIoU | Δ % of dense | verdict | box mAP (%) | Δ mAP | Δ % of dense | "
                  "verdict | mAP@0.5 (%) | mAP@0.75 (%) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for arm, label in ARMS.items():
            cells = [label]
            for metric, (_, task) in _METRICS.items():
                cells.append(f"{_mean(rows, protocol, arm, task, metric):.1f} "
                             f"({_per_seed(rows, protocol, arm, task, metric)})")
                d = stats[protocol].get(arm, {}).get(metric)
                cells += ["—"] * 3 if d is None else [_gap(d), _relative(d), f"**{_VERDICTS[d['verdict']]}**"]
            cells += [f"{_mean(rows, protocol, arm, 'detection', m):.1f}" for m in ("map_50", "map_75")]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [line for part in (_undecided(stats), _agreement(rows), _recovery(stats, b)) if part
              for line in ("", part)]
    hetdpt = stats["joint"]["hetdpt"]
    lines += [
        "",
        "## Against the paper",
        "",
        f"HetDPT reports its pruned DeiT-B {-PAPER_GAPS['map']:.1f} mAP below the dense backbone on COCO (Table 4, "
        f"10 of 24 layers) and {-PAPER_GAPS['miou']:.1f} mIoU below it on ADE20K (Table 5, 8 layers), backbone and "
        "head fine-tuned together. Here, jointly fine-tuned, its backbone (at "
        f"{backbones['hetdpt']['macs'] / dense_macs:.0%} of the dense backbone's MACs on the dense input) lands at "
        f"{_gap(hetdpt['miou'])} mIoU "
        f"({_VERDICTS[hetdpt['miou']['verdict']]} at ±{margin:g}) and {_gap(hetdpt['map'])} mAP "
        f"({_VERDICTS[hetdpt['map']['verdict']]}).",
        "",
        f"![masks]({stem}_masks.png)",
        "",
        f"![boxes]({stem}_boxes.png)",
        "",
        f"Figures: the first {SHOWN} validation canvases, seed {first}, joint protocol; masks are each backbone's "
        f"per-pixel classes (background black), boxes those scored ≥ {SHOWN_SCORE} with their digit.",
        "",
    ]
    return "\n".join(lines)


def _limit(minutes: float) -> str:
    """How a CPU run's wall time stands against :data:`LIMIT_MINUTES`."""
    stands = "within" if minutes <= LIMIT_MINUTES else f"{minutes / LIMIT_MINUTES:.1f}x"
    return f", {stands} the {LIMIT_MINUTES} min the benchmark is meant to take on 2 CPU cores"


def _where(report: dict[str, Any]) -> str:
    """Where the run measured: its CPU threads, and its device where that is not the CPU."""
    threads = f"{' or '.join(map(str, report['threads']))} CPU threads"
    device = report.get("device", "cpu")
    return threads if device == "cpu" else f"{device} and {threads}"


def summary(report: dict[str, Any]) -> list[str]:
    """The README's paragraph on the page (links relative to the results folder), rendered from the report."""
    rows, stats = report["rows"], report["stats"]
    reached = {metric: _mean(rows, "joint", "dense", task, metric) for metric, (_, task) in _METRICS.items()}
    verdicts = "; ".join(
        f"{ARMS[arm]} {_gap(d['miou'])} mIoU ({_VERDICTS[d['miou']['verdict']]}), {_gap(d['map'])} mAP "
        f"({_VERDICTS[d['map']['verdict']]})" for arm, d in stats["joint"].items())
    margin = stats["joint"]["hetdpt"]["miou"]["margin"]
    backbones = next(iter(rows.values()))["backbones"]
    share = backbones["hetdpt"]["macs"] / backbones["dense"]["macs"]
    speed = ", ".join(f"{ARMS[arm]} {s['backbone']['speedup']:.2f}x" for arm, s in report["speed"].items())
    batch = next(iter(report["speed"].values()))["backbone"]["batch"]
    return [f"**Pruned backbones under dense heads:** [dense.md](dense.md) puts dense, HetDPT, VBP and width-pruned "
            f"`cluttered-mnist-vit` backbones ({len(rows)} seeds, matched MACs) under smp's U-Net and torchvision's "
            f"Faster R-CNN on ViTDet's pyramid (`{report['command']}`, {report['seconds']['measurements'] / 60:.0f} "
            f"min on {_where(report)}). At {share:.0%} of the dense backbone's MACs the pruned ones run {speed} as "
            f"fast ({report.get('device', 'cpu')}, batch {batch}). Jointly fine-tuned, the dense model reaches "
            f"{reached['miou']:.1f}% mIoU and {reached['map']:.1f}% box mAP; against it, at ±{margin:g} point: "
            f"{verdicts}. {_agreement(rows)} Each Δ is the pruning and a recovery the dense backbone does not get, "
            "together (the page says what that can and cannot explain)."]


def plot(report: dict[str, Any], out_dir: Path, stem: str) -> None:
    """The masks and the boxes each backbone's jointly trained models predict on the first validation canvases,
    beside the truth."""
    from matplotlib import colors

    rows, first = report["rows"], next(iter(report["rows"]))
    task = CLUTTERED_DENSE
    canvases = [((image[0] * task.std + task.mean).numpy(), target)
                for image, target in (ClutteredDenseDataset("val")[i] for i in range(SHOWN))]
    palette = colors.ListedColormap(["black", *[f"C{i}" for i in range(10)]])
    size = CLUTTERED_DENSE.input_size[1:]
    for kind in ("masks", "boxes"):
        fig = figure(figsize=(2 * (len(ARMS) + 1), 2 * SHOWN))
        axes = fig.subplots(SHOWN, len(ARMS) + 1)
        for i, (canvas, target) in enumerate(canvases):
            columns = [("truth", None), *[(label, arm) for arm, label in ARMS.items()]]
            for j, (title, arm) in enumerate(columns):
                ax = axes[i, j]
                ax.set_xticks([])
                ax.set_yticks([])
                if i == 0:
                    ax.set_title(title, fontsize=9)
                if kind == "masks":
                    mask = (target["mask"].numpy() if arm is None else unpack_array(
                        rows[first]["joint"][arm]["segmentation"]["shown"], np.uint8, (SHOWN, *size))[i])
                    ax.imshow(mask, cmap=palette, vmin=0, vmax=10, interpolation="nearest")
                    continue
                ax.imshow(canvas, cmap="gray", vmin=0, vmax=1)
                found = ({"boxes": target["boxes"].tolist(), "labels": target["labels"].tolist()} if arm is None
                         else rows[first]["joint"][arm]["detection"]["shown"][i])
                for (x1, y1, x2, y2), label in zip(found["boxes"], found["labels"]):
                    colour = f"C{label - 1}"
                    ax.add_patch(_rectangle(x1, y1, x2, y2, colour))
                    ax.text(x1, y1 - 1, str(label - 1), color=colour, fontsize=8)
        save_figure(fig, out_dir / f"{stem}_{kind}.png")


def _rectangle(x1: float, y1: float, x2: float, y2: float, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x1 - 0.5, y1 - 0.5), x2 - x1, y2 - y1, fill=False, edgecolor=colour, linewidth=1.2)


def write(report: dict[str, Any], out_dir: Path, stem: str) -> None:
    """The page, its figures and the report's JSON."""
    plot(report, out_dir, stem)
    write_results(out_dir, stem, report, to_markdown(report, report["command"], stem))
