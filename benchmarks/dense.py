"""Pruned backbones under a segmentation and a detection head: what pruning costs in dense prediction, HetDPT's
Tables 4 and 5 at embedded scale.

Starting checkpoints: vitprune's ``cluttered-mnist-vit`` trained with seeds 0, 1 and 2 (as the claims page;
needs ``vitprune[bench]`` and ``vitprune[dense]``). Per seed, four backbones:

- **dense**: the checkpoint;
- **HetDPT**: the attention and GELU layers HetDPT's Step 2 chose for that checkpoint on the claims page (its MAP
  split at 66% of the MACs, then a neuron trim to exactly 66%: ``hetdpt/step2`` in ``claims.store.json``), as the
  paper carries its ImageNet-pruned backbone into COCO and ADE20K;
- **VBP**: FFN neurons of least post-GELU variance, their mean folded into the next bias;
- **width**: Taylor width pruning (torch-pruning's isomorphic groups), topped up with a neuron trim;

VBP and width are brought to the HetDPT backbone's MACs at the dense task's input (full convention, within 1%),
then every pruned backbone gets the claims page's recovery (2,000 training images drawn by the seed, one epoch,
soft distillation from its dense checkpoint). Each backbone is then resized to the dense canvases
(``set_input_size``: 65x65, a 13x13 grid of the classifier's 5-px patches; the 64-px canvases are resized to it,
as torchvision's detection transform does) and put, twice, under the same head: torchvision's FCN head
(:class:`~vitprune.dense.Segmenter`) and Faster R-CNN (:func:`~vitprune.dense.faster_rcnn`). Scores on
``val_images`` held-out canvases (digits no training canvas shows): mIoU over the set (torchmetrics) and COCO box
mAP (pycocotools), through the whole models.

The backbone is **frozen** and only the heads train (``train_images`` canvases drawn by the seed, the backbone's
maps computed once, AdamW, cosine decay, ``seg_epochs`` and ``det_epochs``), where the paper fine-tunes backbone and
head together for 12 COCO epochs. On two CPU cores a joint fine-tune that fits the 45-minute run (one pass over
2,000 canvases per head and arm) leaves both heads untrained: measured on the dense backbone, seed 0, mIoU 8.7%
(background everywhere) and 16% with the background weighted 0.1, box mAP 2-4%. Caching the frozen maps buys each
head 12-20 epochs for the same time. The gap measured is then what the pruned backbone's features lack for the
task, with no recovery by the dense task's gradients: a stricter test than the paper's. The segmentation loss
weighs the background ``background_weight`` (strokes are 4% of the pixels; unweighted, the head learns the
background first).

Paired statistics: mIoU differences resample seeds and images (:func:`~vitprune.measure.paired
.paired_metric_difference`, each image's intersections and unions); COCO's mAP ranks detections across the whole
set, so it does not split by image: its difference is paired by seed (mean and t-interval over the seeds).

Each measurement is stored (``<out-dir>/dense.store.json``) under a key: the hash of this file, of the claims
functions it uses and of vitprune's packages, the checkpoint's weights, HetDPT's layers, torch's version and the
budget, so an interrupted run continues and a changed one re-measures.

    python benchmarks/dense.py              # the full run: seeds 0 1 2
    python benchmarks/dense.py --quick      # one seed, small budgets
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from claims import MATCH, command, final_macs, source_hash, trim_to
from dense_page import ARMS, SHOWN, SHOWN_SCORE, pack_array, unpack_array, write
from scipy.stats import t as student_t
from torch import nn
from torch.utils.data import DataLoader, Subset
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.detection.image_list import ImageList

import vitprune
from vitprune.adapters.features import FeatureMaps
from vitprune.atomic import read_json, write_json
from vitprune.data import (CLUTTERED_DENSE, ClutteredDenseDataset, balanced_subset, build_dataset, build_loader,
                           collate_dense)
from vitprune.dense import Segmenter, detection_scores, faster_rcnn, segmentation_scores
from vitprune.errors import VitpruneError
from vitprune.measure import MacTarget, count_macs
from vitprune.measure.paired import paired_metric_difference
from vitprune.measure.speed import compare_speed
from vitprune.methods.vbp import mlp_statistics, neuron_scores
from vitprune.methods.width import prune_width_to_macs, taylor_gradients
from vitprune.models.zoo import trained_cluttered_mnist_vit
from vitprune.runs.stages import weights_fingerprint
from vitprune.surgery import merge_linear_mlps, prune_depth, set_input_size
from vitprune.training import TrainConfig, finetune_pruned

#: Faster R-CNN's sampling and box head, smaller than torchvision's defaults (2000 proposals, 512 regions per
#: image, 1024 features), which are sized for COCO's 800-px images and only cost time on 64-px canvases with one
#: to three digits.
DETECTOR = {"rpn_pre_nms_top_n_train": 200, "rpn_post_nms_top_n_train": 100, "rpn_pre_nms_top_n_test": 200,
            "rpn_post_nms_top_n_test": 100, "box_batch_size_per_image": 16, "box_detections_per_img": 20}
REPRESENTATION = 256
RESULTS = Path(__file__).resolve().parent / "results"

@dataclass
class Budget:
    """What one run spends: seeds, the pruning and recovery (the claims page's), the dense task's training."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    #: The dense input: 13x13 patches of 5 px.
    size: int = 65
    depth_share: float = 0.66
    calibration_images: int = 1000
    tune_images: int = 2000
    tune_epochs: int = 1
    tune_lr: float = 1e-4
    tune_batch: int = 64
    train_images: int = 2000
    batch_size: int = 32
    seg_epochs: int = 20
    det_epochs: int = 14
    head_lr: float = 1e-3
    weight_decay: float = 0.05
    #: Weight of the background class in the segmentation loss (the digits' 1): strokes are 4% of the pixels.
    background_weight: float = 0.2
    val_images: int = 1000
    speed_pairs: int = 30
    resamples: int = 10_000


FULL = Budget()
QUICK = Budget(seeds=[0], calibration_images=256, tune_images=256, train_images=256, seg_epochs=3, det_epochs=2,
               val_images=64, speed_pairs=5, resamples=1000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed and small budgets")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (and dense checkpoints) to run")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--render", action="store_true", help="render the page from the stored report, measuring "
                                                               "nothing")
    parser.add_argument("--claims-store", type=Path, default=RESULTS / "claims.store.json",
                        help="the claims run's store, which holds HetDPT's layers for each seed")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------- the store


class Store:
    """Measurements by name, each kept while its key holds (saved after every new one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.units: dict[str, Any] = read_json(path)["units"] if path.exists() else {}
        self.measured = 0

    def unit(self, name: str, key: str, compute: Callable[[], Any]) -> Any:
        stored = self.units.get(name)
        if stored is None or stored["key"] != key:
            start = time.perf_counter()
            value = compute()
            self.units[name] = {"key": key, "value": value, "seconds": time.perf_counter() - start,
                                "threads": torch.get_num_threads(), "torch": torch.__version__,
                                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
            self.measured += 1
            write_json(self.path, {"units": self.units})
            print(f"{name}: {self.units[name]['seconds']:.1f} s", flush=True)
        return self.units[name]["value"]


# ------------------------------------------------------------------------------------------------- backbones


class Setting:
    """One seed's checkpoint, data and backbones (built when a measurement needs them, then kept)."""

    def __init__(self, seed: int, budget: Budget, layers: dict[str, list[int]], checkpoint: nn.Module) -> None:
        self.seed, self.b, self.layers, self.checkpoint = seed, budget, layers, checkpoint
        size = vitprune.get_adapter(self.checkpoint).input_size
        self.train = build_dataset("cluttered-mnist", "train", input_size=size)
        plain = build_dataset("cluttered-mnist", "train", input_size=size, is_training=False)
        self.calibration = list(build_loader(balanced_subset(plain, budget.calibration_images, seed=0), 64,
                                             shuffle=False, seed=0))
        self._backbones: dict[str, nn.Module] = {}

    def dense_macs(self, model: nn.Module) -> int:
        """MACs (full convention) of ``model`` as a backbone on the dense canvases: merged, resized."""
        work = copy.deepcopy(model)
        merge_linear_mlps(work)
        set_input_size(work, self.b.size, self.b.size)
        return count_macs(work).macs

    def backbone(self, arm: str) -> nn.Module:
        """The arm's backbone: pruned, recovered, merged and resized to the dense canvases."""
        if arm not in self._backbones:
            if arm == "dense":
                model = copy.deepcopy(self.checkpoint)
            else:
                model = {"hetdpt": self._hetdpt, "vbp": self._vbp, "width": self._width}[arm]()
                self._recover(model)
                merge_linear_mlps(model)
            set_input_size(model, self.b.size, self.b.size)
            self._backbones[arm] = model.eval()
        return self._backbones[arm]

    @functools.cached_property
    def target(self) -> int:
        """The HetDPT backbone's MACs on the dense canvases: what VBP and width are brought to."""
        return self.dense_macs(self._hetdpt_pruned)

    @functools.cached_property
    def _hetdpt_pruned(self) -> nn.Module:
        """HetDPT's pruned model before recovery, made once: its arm and the others' target both need it."""
        model = copy.deepcopy(self.checkpoint)
        prune_depth(model, self.layers["attention"], self.layers["activation"], merge=False)
        trim_to(model, self.b.depth_share * final_macs(self.checkpoint))
        return model

    def _hetdpt(self) -> nn.Module:
        return copy.deepcopy(self._hetdpt_pruned)

    def _vbp(self) -> nn.Module:
        stats = mlp_statistics(self.checkpoint, self.calibration)
        scores = neuron_scores(self.checkpoint, "variance", self.calibration, stats=stats)
        model = copy.deepcopy(self.checkpoint)
        trim_to(model, self.target, macs=self.dense_macs, scores=scores, stats=stats)
        return model

    def _width(self) -> nn.Module:
        """Width pruning plans at the classifier's own size; its target there is adjusted until the result, on
        the dense canvases, lands just above the HetDPT backbone's MACs, and a neuron trim takes it the rest."""
        target, own = self.target, final_macs(self.checkpoint)
        gradients = taylor_gradients(self.checkpoint, self.calibration[:4])
        share = target / self.dense_macs(self.checkpoint)
        for _ in range(8):
            model = copy.deepcopy(self.checkpoint)
            prune_width_to_macs(model, MacTarget.absolute(own * share), importance="taylor", steps=8,
                                gradients=gradients)
            reached = self.dense_macs(model)
            if target <= reached <= target * (1 + 3 * MATCH):
                trim_to(model, target, macs=self.dense_macs)
                return model
            share *= target * (1 + 1.5 * MATCH) / reached
        raise VitpruneError("width pruning did not land near the HetDPT backbone's MACs")

    def _recover(self, model: nn.Module) -> None:
        order = torch.randperm(len(self.train), generator=torch.Generator().manual_seed(self.seed))
        images = Subset(self.train, order[: self.b.tune_images].tolist())
        config = TrainConfig(epochs=self.b.tune_epochs, lr=self.b.tune_lr, batch_size=self.b.tune_batch,
                             seed=self.seed)
        finetune_pruned(model, images, None, config, teacher=self.checkpoint, distill="soft", alpha=1.0, tau=1.0)


# ------------------------------------------------------------------------------------------------- dense tasks


def _loader(dataset: Any, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_dense)


def build_head(task: str, backbone: nn.Module) -> nn.Module:
    """The task's head on (a copy of) ``backbone``, whose weights stay frozen."""
    model = copy.deepcopy(backbone).eval().requires_grad_(False)
    if task == "segmentation":
        return Segmenter(model, CLUTTERED_DENSE.num_classes)
    return faster_rcnn(model, CLUTTERED_DENSE.num_classes, representation=REPRESENTATION, **DETECTOR)


class Cache:
    """The frozen backbone's last feature map of the training canvases drawn by the seed, computed once for both
    heads, with the targets at the backbone's input size (as the detector's transform resizes them)."""

    def __init__(self, backbone: nn.Module, b: Budget, seed: int) -> None:
        data = ClutteredDenseDataset("train")
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[: b.train_images]
        transform = build_head("detection", backbone).transform
        maps, self.masks, self.targets = [], [], []
        features = FeatureMaps(backbone, [-1])
        with torch.no_grad():
            for images, targets in _loader(Subset(data, order.tolist()), 64):
                resized, boxes = transform(list(images), [{"boxes": t["boxes"], "labels": t["labels"]}
                                                          for t in targets])
                maps.append(features(resized.tensors)[0])
                self.masks += [t["mask"] for t in targets]
                self.targets += boxes
        self.maps, self.size = torch.cat(maps), tuple(resized.tensors.shape[-2:])


def train_head(task: str, head: nn.Module, cache: Cache, b: Budget, seed: int) -> None:
    """The same training for every arm: the head alone (the backbone frozen) on the cached maps, AdamW at
    ``head_lr``, cosine decay; what the model's ``forward`` does after its backbone, step for step (torchvision's
    RPN and box head for the detector)."""
    epochs = b.seg_epochs if task == "segmentation" else b.det_epochs
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=b.head_lr, weight_decay=b.weight_decay)
    steps = epochs * math.ceil(len(cache.maps) / b.batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    weight = torch.tensor([b.background_weight] + [1.0] * (CLUTTERED_DENSE.num_classes - 1))
    generator = torch.Generator().manual_seed(seed)
    head.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(cache.maps), generator=generator).split(b.batch_size):
            maps = cache.maps[batch]
            if task == "segmentation":
                logits = F.interpolate(head.head(maps), size=CLUTTERED_DENSE.input_size[1:], mode="bilinear",
                                       align_corners=False)
                loss = F.cross_entropy(logits, torch.stack([cache.masks[i] for i in batch]), weight=weight)
            else:
                images = ImageList(torch.zeros(len(batch), 1, *cache.size), [cache.size] * len(batch))
                targets = [cache.targets[i] for i in batch]
                features = {"0": maps}
                proposals, rpn_losses = head.rpn(images, features, targets)
                _, box_losses = head.roi_heads(features, proposals, images.image_sizes, targets)
                loss = sum(rpn_losses.values()) + sum(box_losses.values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    head.eval()


def _val(b: Budget) -> Subset:
    return Subset(ClutteredDenseDataset("val"), range(b.val_images))


def score(task: str, head: nn.Module, b: Budget) -> dict[str, Any]:
    """The trained head's scores on the validation canvases, and its predictions on the first :data:`SHOWN`."""
    val = _val(b)
    batches = _loader(val, 64)
    shown = torch.stack([val[i][0] for i in range(SHOWN)])
    with torch.no_grad():
        if task == "segmentation":
            scores = segmentation_scores(head, batches, CLUTTERED_DENSE.num_classes, per_image=True)
            counts = torch.stack([scores.pop("intersection"), scores.pop("union")], dim=2).numpy().astype(np.uint16)
            masks = head(shown).argmax(dim=1).numpy().astype(np.uint8)
            return {**scores, "counts": pack_array(counts), "shown": pack_array(masks)}
        found = head(list(shown))
    kept = [{k: v[f["scores"] >= SHOWN_SCORE].tolist() for k, v in f.items()} for f in found]
    return {**detection_scores(head, batches), "shown": kept}


def whole_macs(task: str, head: nn.Module, backbone_macs: int) -> int:
    """MACs of the whole model on one canvas: the backbone's (``backbone_macs``) and the head's, which torch's
    FlopCounterMode gives as the whole model's count less the backbone's alone (matmuls and convolutions; not
    RoIAlign or NMS), half its FLOPs. Its count of the backbone is not used: it misses CPU attention kernels."""
    image = torch.zeros(1, *CLUTTERED_DENSE.input_size)
    backbone = head.backbone
    resized = torch.zeros(1, *vitprune.get_adapter(_backbone_of(head)).input_size)

    def flops(run: Callable[[], Any]) -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            run()
        return counter.get_total_flops()

    whole = flops(lambda: head(image if task == "segmentation" else list(image)))
    return backbone_macs + (whole - flops(lambda: backbone(resized))) // 2


def _backbone_of(head: nn.Module) -> nn.Module:
    return head.backbone.model if isinstance(head, Segmenter) else head.backbone.maps.model


# ------------------------------------------------------------------------------------------------- the run


def measuring_code() -> str:
    """Hash of the code a measurement runs (this file's measuring functions, the claims functions they call,
    vitprune's packages) and of the settings that live in constants, not in the budget. The page's code is left
    out: rendering again measures nothing."""
    settings = json.dumps({"detector": DETECTOR, "representation": REPRESENTATION, "shown": [SHOWN, SHOWN_SCORE]},
                          sort_keys=True)
    code = source_hash((Setting, Cache, build_head, train_head, score, whole_macs, _backbone_of, _loader, _val,
                        pack_array, trim_to, final_macs, "adapters", "surgery", "training", "measure", "data", "models",
                        "methods", "dense", "recipe", "layers.py", "linear.py"))
    return hashlib.sha256((code + settings).encode()).hexdigest()


def hetdpt_layers(path: Path, seed: int) -> dict[str, list[int]]:
    """The layers HetDPT's Step 2 chose for the seed's checkpoint on the claims page."""
    units = read_json(path)["units"] if path.exists() else {}
    unit = units.get(f"hetdpt/step2/seed{seed}")
    if unit is None:
        raise VitpruneError(f"HetDPT's layers for seed {seed} come from the claims run, and {path} has none: "
                            f"run python benchmarks/claims.py --seeds {seed} first")
    return {kind: unit["value"][kind] for kind in ("attention", "activation")}


def run(budget: Budget, out_dir: Path, stem: str, claims_store: Path,
        checkpoints: Callable[[int], nn.Module] = trained_cluttered_mnist_vit) -> dict[str, Any]:
    """Every measurement (or its stored value), then the report; ``checkpoints(seed=s)`` gives seed ``s``'s dense
    model."""
    store = Store(out_dir / f"{stem}.store.json")
    code = measuring_code()
    spent = json.dumps(asdict(replace(budget, seeds=[])), sort_keys=True)
    start = time.perf_counter()
    rows: dict[int, dict[str, Any]] = {}
    settings: dict[int, Setting] = {}
    for seed in budget.seeds:
        layers = hetdpt_layers(claims_store, seed)
        setting = settings[seed] = Setting(seed, budget, layers, checkpoints(seed=seed))
        key = hashlib.sha256(json.dumps({"code": code, "budget": spent, "torch": torch.__version__, "layers": layers,
                                         "weights": weights_fingerprint(setting.checkpoint)}).encode()).hexdigest()
        rows[seed] = {}
        for arm in ARMS:
            def shape(arm: str = arm) -> dict[str, Any]:
                backbone = setting.backbone(arm)
                return {"macs": count_macs(backbone).macs, "params": sum(p.numel() for p in backbone.parameters()),
                        "layers": layers if arm == "hetdpt" else None}
            row = {"backbone": store.unit(f"{arm}/seed{seed}/backbone", key, shape)}
            caches: dict[str, Cache] = {}
            for task in ("segmentation", "detection"):
                def measure(task: str = task, arm: str = arm) -> dict[str, Any]:
                    if "maps" not in caches:
                        caches["maps"] = Cache(setting.backbone(arm), budget, seed)
                    torch.manual_seed(seed)
                    head = build_head(task, setting.backbone(arm))
                    began = time.perf_counter()
                    train_head(task, head, caches["maps"], budget, seed)
                    return {**score(task, head, budget), "train_seconds": time.perf_counter() - began,
                            "macs": whole_macs(task, head, row["backbone"]["macs"])}
                row[task] = store.unit(f"{arm}/seed{seed}/{task}", key, measure)
            rows[seed][arm] = row
    # Speed last, on seed 0's models (the timing does not depend on the weights), and on an otherwise idle machine.
    first = budget.seeds[0]
    speed = {}
    for arm in list(ARMS)[1:]:
        def timed(arm: str = arm) -> dict[str, Any]:
            setting = settings[first]
            out = {}
            for part, batch in (("backbone", 32), ("segmentation", 32), ("detection", 8)):
                torch.manual_seed(0)
                a, b = ((setting.backbone(arm), setting.backbone("dense")) if part == "backbone" else
                        (build_head(part, setting.backbone(arm)), build_head(part, setting.backbone("dense"))))
                result = compare_speed(a.eval(), b.eval(), input_size=CLUTTERED_DENSE.input_size if part != "backbone"
                                       else (1, budget.size, budget.size), batch_size=batch, pairs=budget.speed_pairs)
                out[part] = {"batch": batch, **result.to_dict()}
            return out
        speed[arm] = store.unit(f"{arm}/speed", code + torch.__version__ + str(budget.speed_pairs), timed)
    this_call = time.perf_counter() - start
    return {"date": max(u["date"] for u in store.units.values()), "budget": asdict(budget), "rows": rows,
            "speed": speed, "stats": statistics_of(rows, budget),
            "checkpoints": {seed: weights_fingerprint(settings[seed].checkpoint) for seed in budget.seeds},
            "seconds": {"this_call": this_call, "measured_now": store.measured,
                        "measurements": sum(u["seconds"] for u in store.units.values())},
            "threads": sorted({u["threads"] for u in store.units.values()}),
            "torch": sorted({u["torch"] for u in store.units.values()})}


def _miou(counts: np.ndarray) -> np.ndarray:
    """mIoU in points from summed ``[..., classes, (intersection, union)]`` counts (a class with no pixel in the
    resample, predicted or true, is left out of the mean, as torchmetrics leaves out an absent class)."""
    intersection, union = counts[..., 0], counts[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100 * np.nanmean(np.where(union > 0, intersection / union, np.nan), axis=-1)


def statistics_of(rows: dict[int, dict[str, Any]], b: Budget) -> dict[str, Any]:
    """Each pruned arm against dense: mIoU paired over seeds and images, mAP paired over seeds."""
    shape = (b.val_images, CLUTTERED_DENSE.num_classes, 2)
    seeds = list(rows)

    def counts(arm: str) -> np.ndarray:
        flat = [unpack_array(rows[s][arm]["segmentation"]["counts"], np.uint16, shape) for s in seeds]
        return np.stack(flat).reshape(len(seeds), b.val_images, -1).astype(np.float64)

    out = {}
    for arm in list(ARMS)[1:]:
        miou = paired_metric_difference(counts(arm), counts("dense"),
                                        lambda c: _miou(c.reshape(*c.shape[:-1], -1, 2)), resamples=b.resamples)
        gaps = [100 * (rows[s][arm]["detection"]["map"] - rows[s]["dense"]["detection"]["map"]) for s in seeds]
        mean = statistics.fmean(gaps)
        half = (student_t.ppf(0.975, len(gaps) - 1) * statistics.stdev(gaps) / math.sqrt(len(gaps))
                if len(gaps) > 1 else math.nan)
        out[arm] = {"miou": miou.to_dict(), "map": {"effect": mean, "low": mean - half, "high": mean + half,
                                                    "per_seed": gaps}}
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure what is missing or stale, then write the JSON, page and figures."""
    args = parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.seeds:
        budget = replace(budget, seeds=args.seeds)
    stem = "dense_quick" if args.quick else "dense"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.render:
        write(read_json(args.out_dir / f"{stem}.json"), args.out_dir, stem)
        return
    try:
        report = run(budget, args.out_dir, stem, args.claims_store)
    except VitpruneError as exc:
        sys.exit(f"error: {exc}")
    report["command"] = command(budget, args.quick, "dense")
    write(report, args.out_dir, stem)


if __name__ == "__main__":
    main()
