"""The page of ``dense.py``: tables, the comparison with HetDPT's gaps and the mask and box figures, rendered from
the run's report alone (``python benchmarks/dense.py --render`` renders the stored report again)."""

from __future__ import annotations

import base64
import statistics
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from profile_deit import write_results

from vitprune.data import CLUTTERED_DENSE, ClutteredDenseDataset
from vitprune.plotting import figure, save_figure

#: The backbones, in table order, and their labels.
ARMS = {"dense": "dense", "hetdpt": "HetDPT (depth)", "vbp": "VBP (FFN neurons)", "width": "width (Taylor)"}
#: HetDPT's own gaps to the dense DeiT-B backbone, in points: Table 4 (COCO, H-Deformable-DETR 12 epochs, 10 of 24
#: layers removed: 32.4 vs 32.8 mAP) and Table 5 (ADE20K, 8 layers removed: 46.4 vs 47.0 mIoU).
PAPER_GAPS = {"map": -0.4, "miou": -0.6}
#: Validation canvases drawn in the page's figures, and the score a box needs to be drawn.
SHOWN, SHOWN_SCORE = 4, 0.5


def pack_array(array: np.ndarray) -> str:
    """``array``'s bytes, compressed, as text for the store."""
    return base64.b64encode(zlib.compress(np.ascontiguousarray(array).tobytes(), 9)).decode("ascii")


def unpack_array(text: str, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=dtype).reshape(shape)


def _mean(rows: dict[int, dict[str, Any]], arm: str, task: str, metric: str) -> float:
    return statistics.fmean(rows[s][arm][task][metric] for s in rows)


def to_markdown(report: dict[str, Any], command: str, stem: str) -> str:
    """The results page."""
    rows, b, stats, speed = report["rows"], report["budget"], report["stats"], report["speed"]
    seeds = list(rows)
    first = seeds[0]
    dense_macs = rows[first]["dense"]["backbone"]["macs"]
    minutes = report["seconds"]["measurements"] / 60
    lines = [
        "# Pruned backbones for segmentation and detection (cluttered MNIST)",
        "",
        f"Command: `{command}` · {len(seeds)} seed{'s' * (len(seeds) > 1)} ({', '.join(map(str, seeds))}) · "
        f"measured {report['date']} on {report['threads']} CPU threads, torch {', '.join(report['torch'])} · "
        f"wall time of the measurements {minutes:.1f} min.",
        "",
        "Starting checkpoints: `cluttered-mnist-vit` trained with seeds " + ", ".join(map(str, seeds)) +
        " (weights " + ", ".join(f"`{report['checkpoints'][s][:12]}`" for s in seeds) + "). Protocol: the docstring "
        "of [`benchmarks/dense.py`](../dense.py); the library calls it uses: [docs/dense.md](../../docs/dense.md). "
        f"Backbones on {b['size']}x{b['size']} inputs (the 64-px canvases resized), frozen; the heads trained on "
        f"their maps of {b['train_images']} canvases drawn by the seed (FCN head {b['seg_epochs']} epochs, Faster "
        f"R-CNN {b['det_epochs']}), scored on {b['val_images']} held-out canvases.",
        "",
        "## Cost",
        "",
        "Backbone MACs: vitprune's counter, full convention (attention matmuls included) at the dense input; whole "
        "model: torch's FlopCounterMode on one canvas (the detector after its 100 test proposals; RoIAlign and NMS "
        "not counted). Speedup: time of the dense model / time of the pruned one, median over alternating pairs "
        f"(IQR), CPU, float32, {speed[next(iter(speed))]['backbone']['pairs']} pairs.",
        "",
        "| backbone | backbone MACs (M) | share | params (M) | segmenter MACs (M) | detector MACs (M) | "
        "speedup backbone (b 32) | segmenter (b 32) | detector (b 8) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, label in ARMS.items():
        row = rows[first][arm]
        cells = [label, f"{row['backbone']['macs'] / 1e6:.1f}", f"{row['backbone']['macs'] / dense_macs:.1%}",
                 f"{row['backbone']['params'] / 1e6:.2f}", f"{row['segmentation']['macs'] / 1e6:.1f}",
                 f"{row['detection']['macs'] / 1e6:.1f}"]
        for part in ("backbone", "segmentation", "detection"):
            s = speed.get(arm, {}).get(part)
            cells.append("1 (reference)" if s is None else
                         f"{s['speedup']:.2f}x ({s['speedup_q1']:.2f}-{s['speedup_q3']:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Scores",
        "",
        "Mean over seeds (per seed in brackets). Δ: pruned minus dense in points with its 95% interval — mIoU "
        "resampling seeds and images (two-way bootstrap of each image's intersections and unions), mAP paired by "
        "seed (t-interval; COCO's mAP ranks detections over the whole set, so it does not split by image).",
        "",
        "| backbone | mIoU (%) | Δ mIoU | pixel acc. (%) | box mAP (%) | Δ mAP | mAP@0.5 (%) | mAP@0.75 (%) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, label in ARMS.items():
        per_seed = ", ".join(f"{100 * rows[s][arm]['segmentation']['miou']:.1f}" for s in seeds)
        per_seed_map = ", ".join(f"{100 * rows[s][arm]['detection']['map']:.1f}" for s in seeds)
        gap = stats.get(arm)
        cells = [label, f"{100 * _mean(rows, arm, 'segmentation', 'miou'):.1f} ({per_seed})",
                 "—" if gap is None else f"{gap['miou']['effect']:+.2f} [{gap['miou']['low']:+.2f}, "
                                         f"{gap['miou']['high']:+.2f}]",
                 f"{100 * _mean(rows, arm, 'segmentation', 'pixel_accuracy'):.2f}",
                 f"{100 * _mean(rows, arm, 'detection', 'map'):.1f} ({per_seed_map})",
                 "—" if gap is None else f"{gap['map']['effect']:+.2f} [{gap['map']['low']:+.2f}, "
                                         f"{gap['map']['high']:+.2f}]",
                 f"{100 * _mean(rows, arm, 'detection', 'map_50'):.1f}",
                 f"{100 * _mean(rows, arm, 'detection', 'map_75'):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    hetdpt = stats["hetdpt"]
    lines += [
        "",
        "## Against the paper",
        "",
        f"HetDPT reports its pruned DeiT-B {PAPER_GAPS['map']:+.1f} mAP below the dense backbone on COCO (Table 4, "
        f"10 of 24 layers) and {PAPER_GAPS['miou']:+.1f} mIoU on ADE20K (Table 5, 8 layers). Here its backbone "
        f"(at {rows[first]['hetdpt']['backbone']['macs'] / dense_macs:.0%} of the dense backbone's MACs on the "
        f"dense input) lands at {hetdpt['miou']['effect']:+.2f} mIoU [{hetdpt['miou']['low']:+.2f}, "
        f"{hetdpt['miou']['high']:+.2f}] and {hetdpt['map']['effect']:+.2f} mAP [{hetdpt['map']['low']:+.2f}, "
        f"{hetdpt['map']['high']:+.2f}].",
        "",
        f"![masks]({stem}_masks.png)",
        "",
        f"![boxes]({stem}_boxes.png)",
        "",
        f"Figures: the first {SHOWN} validation canvases, seed {first}; masks are each arm's per-pixel classes "
        f"(background black), boxes those scored ≥ {SHOWN_SCORE} with their digit.",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], out_dir: Path, stem: str) -> None:
    """The masks and the boxes each arm predicts on the first validation canvases, beside the truth."""
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
                    mask = (target["mask"].numpy() if arm is None else
                            unpack_array(rows[first][arm]["segmentation"]["shown"], np.uint8, (SHOWN, *size))[i])
                    ax.imshow(mask, cmap=palette, vmin=0, vmax=10, interpolation="nearest")
                    continue
                ax.imshow(canvas, cmap="gray", vmin=0, vmax=1)
                found = ({"boxes": target["boxes"].tolist(), "labels": target["labels"].tolist()} if arm is None
                         else rows[first][arm]["detection"]["shown"][i])
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
