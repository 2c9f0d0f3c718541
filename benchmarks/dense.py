"""Pruned backbones under the segmentation and detection stacks people use: what pruning costs in dense prediction,
HetDPT's Tables 4 and 5 at embedded scale.

Starting checkpoints: vitprune's ``cluttered-mnist-vit`` trained with seeds 0, 1 and 2 (as the claims page; needs
``vitprune[bench]`` and ``vitprune[dense]``). Per seed, four backbones:

- **dense**: the checkpoint;
- **HetDPT**: the attention and GELU layers HetDPT's Step 2 chose for that checkpoint on the claims page (its MAP
  split at 66% of the MACs, then a neuron trim to exactly 66%: ``hetdpt/step2`` in ``claims.store.json``), as the
  paper carries its ImageNet-pruned backbone into COCO and ADE20K;
- **VBP**: FFN neurons of least post-GELU variance, their mean folded into the next bias;
- **width**: Taylor width pruning (torch-pruning's isomorphic groups), topped up with a neuron trim;

VBP and width are brought to the HetDPT backbone's MACs at the dense input (full convention, within 1%), then every
pruned backbone gets the claims page's recovery (2,000 training images drawn by the seed, one epoch, soft
distillation from its dense checkpoint). Each backbone is resized (``set_input_size``) to ``size`` px: 16x16 cells of
its 5-px patches, so that a cell spans 4 pixels of the task's 64-px canvases (resized to it, bilinear, inside both
models), a power of two, as smp's decoders need (:class:`~vitprune.dense.PrunedEncoder`'s ``image_size``).

The task is :mod:`vitprune.data.cluttered_dense` (the page says how it differs from the first one). Both models sit on
ViTDet's simple feature pyramid of the backbone's last map (``pyramid_channels`` wide):

- **segmentation**: smp's U-Net decoder (``decoder_channels``), the backbone registered as an smp encoder
  (:func:`~vitprune.dense.register_encoder`), its pyramid at strides 4 to 32 of the canvas and the canvas's own
  pixels as the skip at stride 2 (``pixels``: the strokes' outline is finer than the backbone's 4-px cells);
- **detection**: torchvision's Faster R-CNN (:func:`~vitprune.dense.faster_rcnn`, ``pyramid=True``) on the pyramid's
  x2, x1 and x1/2 levels (ViTDet's x4 level serves COCO's smallest objects, and costs most of the detector's time on
  digits 12-28 px tall).

Two protocols for each model:

- **joint**, the papers': the backbone's last ``tail_blocks`` blocks fine-tune with the pyramid and the head
  (``backbone_lr``). The papers fine-tune every block; here the earlier blocks stay frozen, so that their tokens are
  computed once per backbone and the trained part runs from them (the same function as the whole model, tested);
- **frozen**: the backbone frozen, the pyramid and the head alone trained.

Training: ``train_images`` canvases drawn by the seed, AdamW (``head_lr``, ``weight_decay``), cosine decay over
``seg_epochs`` / ``det_epochs``; the segmentation loss weighs the background ``background_weight``. Scores on
``val_images`` held-out canvases (digits no training canvas shows), through the whole models: mIoU over the set
(torchmetrics) and COCO's box mAP (pycocotools).

Statistics: each pruned backbone's difference from dense in points, paired over seeds and images: a two-way
bootstrap (:mod:`vitprune.measure.paired`) recomputes mIoU from each drawn image's intersections and unions, and mAP
from pycocotools' per-image matches (:class:`~vitprune.dense.DetectionMatches`: COCO's mAP of the resampled set),
beside the seed-level t-test. Equivalence is two one-sided tests at ±:data:`MARGIN` points, a margin fixed before the
run (the claims page's), Holm-corrected over a backbone's two scores; relative gaps are in % of dense.

Each measurement is stored (``<out-dir>/dense.store.json``) under a key: the hash of the code its arm runs (this
file's measuring functions and that arm's backbone builders, the claims functions they use, vitprune's packages, the
dense task's dataset), the checkpoint's weights, HetDPT's layers, torch's version and the budget, so an interrupted
run continues and a change re-measures the arms it touches.

The full run takes about 4.5 hours on 2 CPU cores (264 min of measurements, plus 13 min for each checkpoint not yet
cached): :class:`Budget` says why no fewer steps will do.

    python benchmarks/dense.py              # the full run: seeds 0 1 2
    python benchmarks/dense.py --quick      # one seed, small budgets
    python benchmarks/dense.py --device cuda   # the heads trained, the models scored and timed on a GPU
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import segmentation_models_pytorch as smp
import torch
import torch.nn.functional as F
from claims import command, final_macs, source_hash, trim_to
from dense_page import ARMS, FORMAT, PROTOCOLS, SHOWN, SHOWN_SCORE, TASKS, pack_array, unpack_array, write
from torch import nn
from torch.utils.data import DataLoader, Subset
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.detection.image_list import ImageList

import vitprune
from vitprune.atomic import read_json, write_json
from vitprune.data import (CLUTTERED_DENSE, ClutteredDenseDataset, balanced_subset, build_dataset, build_loader,
                           collate_dense)
from vitprune.dense import (DetectionMatches, SimpleFeaturePyramid, detection_matches, faster_rcnn, rcnn_transform,
                            register_encoder, segmentation_scores)
from vitprune.errors import VitpruneError
from vitprune.measure import MacTarget, count_macs
from vitprune.measure.paired import judge, paired_metric_difference, paired_weighted_difference
from vitprune.measure.speed import compare_speed
from vitprune.measure.target import reach
from vitprune.methods.vbp import mlp_statistics, neuron_scores
from vitprune.methods.width import NoHeadLeftError, WidthPlan, apply_width, prune_width, taylor_gradients
from vitprune.models.zoo import trained_cluttered_mnist_vit
from vitprune.runs.stages import weights_fingerprint
from vitprune.surgery import merge_linear_mlps, prune_depth, set_input_size
from vitprune.training import TrainConfig, finetune_pruned

#: Faster R-CNN's sampling and box head, smaller than torchvision's defaults (2000 proposals, 512 regions per
#: image, 1024 features, 100 detections), which are sized for COCO's 800-px images and only cost time on 64-px
#: canvases with one to three digits.
DETECTOR = {"rpn_pre_nms_top_n_train": 200, "rpn_post_nms_top_n_train": 100, "rpn_pre_nms_top_n_test": 200,
            "rpn_post_nms_top_n_test": 100, "box_batch_size_per_image": 32, "box_detections_per_img": 10}
REPRESENTATION = 256
#: The pyramid's levels under the detector: x2, x1 and x1/2 of the backbone's map.
DETECTOR_SCALES = (2.0, 1.0, 0.5)
#: The dense task's canvases (square).
CANVAS = CLUTTERED_DENSE.input_size[1]
#: The name the backbones take in smp's encoder registry.
ENCODER = "vitprune-dense-benchmark"
RESULTS = Path(__file__).resolve().parent / "results"
#: The equivalence margin of mIoU and box mAP in points, fixed before the run: the claims page's.
MARGIN = 1.0


@dataclass
class Budget:
    """What one run spends: seeds, the pruning and recovery (the claims page's), the dense task's training.

    The training's settings come from sweeps on seed 0's dense backbone (joint protocol unless said, 300 validation
    canvases; 2026-11-30, 2 CPU cores). From 2,000 canvases, 12 epochs, batch 32, 64 channels, background weight 1,
    smp's FPN decoder: 27.6% mIoU, 30.3% box mAP. The background at 0.2 (strokes are 4% of the pixels): 36.4%. Batch
    8: 46.8% (221 s), batch 4: 49.8% (278 s), more steps being what the heads lack; 4,000 canvases for 6 epochs at
    batch 4: 53.9% (308 s), and 12,000 canvases drawn afresh (the dataset's ``augment``) for 2 epochs no better
    (54.5%); 128 channels: +3.9 at batch 8; the last 4 blocks fine-tuned instead of 2: +1.5 to +1.7 for twice the
    time. At 54.3% (this training, FPN, 128 channels) the strokes were found with 74% IoU, class aside, at the FPN's
    4-px cells, and 87% of their pixels' class was right. smp's U-Net instead: 58.9% (strokes 79%); with the
    canvas's pixels as its stride-2 skip: 61.9% (strokes 85%; 350 s) at 128 channels, 61.6% at 64 (319 s).
    Detection, frozen: 41.3% box mAP at 128 channels (699 s), 41.6% at 64 (mAP@0.5 65.6%; 339 s); joint at 128:
    41.9% (877 s).

    The full run's own seed-0 units, joint, on the 1,000 validation canvases: 69.5% mIoU (333 s of training) and
    48.5% box mAP (523 s). The steps cannot be cut to fit 90 minutes on 2 CPU cores (about 24 min per backbone and
    seed at this budget, and 12 of them): 2 epochs instead of 6, the same canvases, gave 38.3% mIoU (the stroke
    pixels' class right 54% of the time) and 28.8% box mAP.
    """

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    #: The backbone's input: 16x16 cells of 5 px, 4 canvas pixels each.
    size: int = 80
    depth_share: float = 0.66
    calibration_images: int = 1000
    tune_images: int = 2000
    tune_epochs: int = 1
    tune_lr: float = 1e-4
    tune_batch: int = 64
    train_images: int = 4000
    batch_size: int = 8
    seg_epochs: int = 6
    det_epochs: int = 6
    head_lr: float = 1e-3
    #: The joint protocol's backbone blocks (the last ones) and their learning rate.
    tail_blocks: int = 2
    backbone_lr: float = 2e-4
    weight_decay: float = 0.05
    pyramid_channels: int = 64
    #: The U-Net decoder's channels, from its stride-16 block to its stride-1 one.
    decoder_channels: tuple[int, ...] = (128, 64, 32, 16, 16)
    #: Weight of the background class in the segmentation loss (the digits' 1).
    background_weight: float = 0.2
    val_images: int = 1000
    speed_pairs: int = 30
    resamples: int = 10_000
    #: Resamples of the mAP difference, each a COCO evaluation of every seed's resampled set for both arms.
    map_resamples: int = 2000


FULL = Budget()
QUICK = Budget(seeds=[0], calibration_images=256, tune_images=256, train_images=256, seg_epochs=2, det_epochs=2,
               val_images=64, speed_pairs=5, resamples=1000, map_resamples=200)


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
    parser.add_argument("--device", default="cpu", help="where the heads train and the models are scored and timed "
                                                        "(cuda: a GPU); the pruning and recovery run on the CPU")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------- the store


class Store:
    """Measurements by name, each kept while its key holds (saved after every new one); :meth:`close` keeps only
    those this run read or made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.units: dict[str, Any] = read_json(path)["units"] if path.exists() else {}
        self.measured = 0
        self.touched: set[str] = set()

    def unit(self, name: str, key: str, compute: Callable[[], Any]) -> Any:
        self.touched.add(name)
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

    def close(self) -> None:
        kept = {name: unit for name, unit in self.units.items() if name in self.touched}
        if kept != self.units:
            self.units = kept
            write_json(self.path, {"units": kept})


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
        """MACs (full convention) of ``model`` as a backbone on the dense input: merged, resized."""
        work = copy.deepcopy(model)
        merge_linear_mlps(work)
        set_input_size(work, self.b.size, self.b.size)
        return count_macs(work).macs

    def backbone(self, arm: str) -> nn.Module:
        """The arm's backbone: pruned, recovered, merged and resized to the dense input."""
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
        """The HetDPT backbone's MACs on the dense input: what VBP and width are brought to."""
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
        """Taylor width pruning at the largest ratio whose backbone, counted on the dense input, still costs more than
        the HetDPT backbone, then a neuron trim to it. The ratio is bisected on that count, not on the classifier's
        own (as the library's ``prune_width_to_macs`` does): the two do not scale alike, the attention matmuls growing
        with the square of the token count, and whole heads jump by more than a search between them can correct."""
        gradients = taylor_gradients(self.checkpoint, self.calibration[:4])
        plans: dict[float, WidthPlan] = {0.0: WidthPlan()}

        def cost(ratio: float) -> int | None:
            trial = copy.deepcopy(self.checkpoint)
            try:
                plans[ratio] = prune_width(trial, ratio, importance="taylor", gradients=gradients)
            except NoHeadLeftError:
                return None
            return self.dense_macs(trial)

        ratio = reach(cost, MacTarget.absolute(self.target), self.checkpoint, 0.0, 0.95, what="width pruning",
                      dense=self.dense_macs(self.checkpoint), steps=8, above=True)
        model = copy.deepcopy(self.checkpoint)
        apply_width(model, plans[ratio])
        trim_to(model, self.target, macs=self.dense_macs)
        return model

    def _recover(self, model: nn.Module) -> None:
        order = torch.randperm(len(self.train), generator=torch.Generator().manual_seed(self.seed))
        images = Subset(self.train, order[: self.b.tune_images].tolist())
        config = TrainConfig(epochs=self.b.tune_epochs, lr=self.b.tune_lr, batch_size=self.b.tune_batch,
                             seed=self.seed)
        finetune_pruned(model, images, None, config, teacher=self.checkpoint, distill="soft", alpha=1.0, tau=1.0)


# ------------------------------------------------------------------------------------------------- the models


def build_model(task: str, backbone: nn.Module, b: Budget) -> nn.Module:
    """The task's whole model on a copy of ``backbone`` (at the dense input): smp's U-Net or Faster R-CNN, on
    ViTDet's pyramid."""
    if task == "segmentation":
        # smp copies the registered backbone into every model it builds.
        register_encoder(ENCODER, backbone, image_size=CANVAS, pyramid_channels=b.pyramid_channels, pixels=True)
        return smp.Unet(ENCODER, encoder_weights=None, in_channels=CLUTTERED_DENSE.input_size[0],
                        classes=CLUTTERED_DENSE.num_classes, decoder_channels=b.decoder_channels)
    return faster_rcnn(copy.deepcopy(backbone), CLUTTERED_DENSE.num_classes, pyramid=True,
                       pyramid_channels=b.pyramid_channels, scales=DETECTOR_SCALES, representation=REPRESENTATION,
                       **DETECTOR)


def pyramid_of(model: nn.Module) -> SimpleFeaturePyramid:
    """The feature pyramid inside a :func:`build_model` model; its ``maps.model`` is the backbone."""
    return model.encoder.backbone if isinstance(model, smp.Unet) else model.backbone


class Tail(nn.Module):
    """A backbone from the tokens entering its last ``blocks`` blocks to its last map: those blocks (the model's own
    modules, so that training them trains the model) and the patch tokens laid out on the grid."""

    def __init__(self, backbone: nn.Module, blocks: int) -> None:
        super().__init__()
        adapter = vitprune.get_adapter(backbone)
        views = adapter.blocks()
        self.blocks = nn.ModuleList(view.module for view in views[len(views) - blocks:])
        self.prefix, self.grid = adapter.num_prefix_tokens, adapter.grid_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            tokens = block(tokens)
        patches = tokens[:, self.prefix:]
        return patches.transpose(1, 2).reshape(len(patches), -1, *self.grid)


@torch.no_grad()
def entering_tokens(backbone: nn.Module, blocks: int, images: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """The tokens entering ``backbone``'s last ``blocks`` blocks for ``images`` (at its input size)."""
    adapter = vitprune.get_adapter(backbone)
    views = adapter.blocks()
    out = []
    for chunk in images.split(batch):
        tokens = adapter.embed(chunk)
        for view in views[:len(views) - blocks]:
            tokens = view.module(tokens)
        out.append(tokens)
    return torch.cat(out)


def head_forward(task: str, model: nn.Module, maps: torch.Tensor, canvases: torch.Tensor
                 ) -> dict[str, torch.Tensor] | torch.Tensor:
    """What ``model`` does after its backbone's last map ``maps`` of ``canvases`` (at their own size): the
    segmenter's logits at the canvas size, or the detector's pyramid (its RPN and box head take it)."""
    features = pyramid_of(model).from_map(maps)
    if task == "segmentation":
        return model.segmentation_head(model.decoder(model.encoder.encoded(canvases, features)))
    return features


class Canvases:
    """The training canvases drawn by the seed: at their own size (:attr:`canvases`, the segmenter's skip reads
    them), resized to the backbones' input as both models resize them (:attr:`images`: the detector's transform,
    which the segmenter's encoder matches, tested), with their masks at the canvas size and their boxes at the input
    size."""

    def __init__(self, b: Budget, seed: int, transform: nn.Module, device: torch.device | str = "cpu") -> None:
        data = ClutteredDenseDataset("train")
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[: b.train_images]
        canvases, images, masks, self.boxes = [], [], [], []
        for batch, targets in _loader(Subset(data, order.tolist()), 64):
            resized, boxes = transform(list(batch), [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
            canvases.append(batch)
            images.append(resized.tensors)
            masks += [t["mask"] for t in targets]
            self.boxes += [{k: v.to(device) for k, v in target.items()} for target in boxes]
        self.canvases, self.images = torch.cat(canvases).to(device), torch.cat(images).to(device)
        self.masks = torch.stack(masks).to(device)


def train(task: str, model: nn.Module, tokens: torch.Tensor, canvases: Canvases, b: Budget, seed: int,
          tail_blocks: int) -> None:
    """The same training for every backbone: the pyramid and head (and the backbone's last ``tail_blocks`` blocks,
    from ``tokens``, the tokens entering them) under AdamW with cosine decay; what the model's ``forward`` does
    after its frozen blocks, step for step (torchvision's RPN and box head for the detector)."""
    backbone = pyramid_of(model).maps.model
    tail = Tail(backbone, tail_blocks)
    frozen = {id(p) for p in backbone.parameters()}
    backbone.requires_grad_(False)
    tail.requires_grad_(True)
    groups = [{"params": [p for p in model.parameters() if id(p) not in frozen], "lr": b.head_lr}]
    if tail_blocks:
        groups.append({"params": list(tail.parameters()), "lr": b.backbone_lr})
    optimizer = torch.optim.AdamW(groups, weight_decay=b.weight_decay)
    epochs = b.seg_epochs if task == "segmentation" else b.det_epochs
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer,
                                                          T_max=epochs * math.ceil(len(tokens) / b.batch_size))
    weight = torch.tensor([b.background_weight] + [1.0] * (CLUTTERED_DENSE.num_classes - 1), device=tokens.device)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(tokens), generator=generator).split(b.batch_size):
            out = head_forward(task, model, tail(tokens[batch]), canvases.canvases[batch])
            if task == "segmentation":
                loss = F.cross_entropy(out, canvases.masks[batch], weight=weight)
            else:
                images = ImageList(canvases.images[batch], [(b.size, b.size)] * len(batch))
                targets = [canvases.boxes[i] for i in batch]
                proposals, rpn_losses = model.rpn(images, out, targets)
                _, box_losses = model.roi_heads(out, proposals, images.image_sizes, targets)
                loss = sum(rpn_losses.values()) + sum(box_losses.values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval().requires_grad_(False)


def _loader(dataset: Any, batch_size: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_dense)


def _val(b: Budget) -> Subset:
    return Subset(ClutteredDenseDataset("val"), range(b.val_images))


def score(task: str, model: nn.Module, b: Budget) -> dict[str, Any]:
    """The trained model's scores on the validation canvases (per image, for the paired statistics), and its
    predictions on the first :data:`SHOWN`."""
    val = _val(b)
    batches = _loader(val, 64)
    shown = torch.stack([val[i][0] for i in range(SHOWN)]).to(next(model.parameters()).device)
    with torch.no_grad():
        if task == "segmentation":
            scores = segmentation_scores(model, batches, CLUTTERED_DENSE.num_classes, per_image=True)
            counts = torch.stack([scores.pop("intersection"), scores.pop("union")], dim=2).numpy().astype(np.uint16)
            masks = model(shown).argmax(dim=1).cpu().numpy().astype(np.uint8)
            return {**scores, "counts": pack_array(counts), "shown": pack_array(masks)}
        matches = detection_matches(model, batches)
        found = model(list(shown))
    kept = [{k: v[f["scores"] >= SHOWN_SCORE].tolist() for k, v in f.items()} for f in found]
    scores = {name: float(value[0]) for name, value in matches.average_precision(np.ones(b.val_images)).items()}
    return {**scores, "matches": matches.to_dict(), "shown": kept}


def whole_macs(task: str, model: nn.Module, backbone_macs: int, b: Budget) -> int:
    """MACs of the whole model on one canvas: the backbone's (``backbone_macs``) and the rest's, which torch's
    FlopCounterMode gives as the whole model's count less the backbone's alone (matmuls and convolutions; not
    RoIAlign or NMS), half its FLOPs. Its count of the backbone is not used: it misses CPU attention kernels."""
    device = next(model.parameters()).device
    image = torch.zeros(1, *CLUTTERED_DENSE.input_size, device=device)
    backbone = pyramid_of(model).maps.model
    resized = torch.zeros(1, CLUTTERED_DENSE.input_size[0], b.size, b.size, device=device)

    def flops(run: Callable[[], Any]) -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            run()
        return counter.get_total_flops()

    whole = flops(lambda: model(image if task == "segmentation" else list(image)))
    return backbone_macs + (whole - flops(lambda: backbone(resized))) // 2


# ------------------------------------------------------------------------------------------------- the run


def measuring_code(arm: str) -> str:
    """Hash of the code a measurement of ``arm`` runs: this file's measuring functions and the builders of ``arm``'s
    backbone (so that a change to one arm's builder re-measures that arm alone), the claims functions they call,
    vitprune's packages, the dense task's dataset, and the settings that live in constants, not in the budget.
    The page's code is left out: rendering again measures nothing."""
    settings = json.dumps({"detector": DETECTOR, "representation": REPRESENTATION, "scales": DETECTOR_SCALES,
                           "shown": [SHOWN, SHOWN_SCORE]}, sort_keys=True)
    pruned = (Setting._hetdpt_pruned.func, Setting._recover, trim_to, final_macs)
    builders = {"dense": (), "hetdpt": (*pruned, Setting._hetdpt), "vbp": (*pruned, Setting.target.func, Setting._vbp),
                "width": (*pruned, Setting.target.func, Setting._width)}
    code = source_hash((Setting.__init__, Setting.dense_macs, Setting.backbone, *builders[arm], build_model, pyramid_of,
                        Tail, entering_tokens, head_forward, Canvases, train, score, whole_macs, _loader, _val,
                        pack_array, "adapters", "surgery", "training", "measure", "data", "models", "methods", "dense",
                        "recipe", "layers.py", "linear.py"))
    dataset = hashlib.sha256(Path(sys.modules[ClutteredDenseDataset.__module__].__file__).read_bytes()).hexdigest()
    return hashlib.sha256((code + dataset + settings).encode()).hexdigest()


def unit_key(code: str, budget: Budget, layers: dict[str, list[int]], checkpoint: nn.Module, device: str) -> str:
    """The key of one arm's measurements on one seed: the arm's code (:func:`measuring_code`), the budget but its
    seeds, torch, HetDPT's layers, the checkpoint's weights and the device."""
    spent = json.dumps(asdict(replace(budget, seeds=[])), sort_keys=True)
    return hashlib.sha256(json.dumps({"code": code, "budget": spent, "torch": torch.__version__, "layers": layers,
                                      "weights": weights_fingerprint(checkpoint), "device": device}).encode()
                          ).hexdigest()


def hetdpt_layers(path: Path, seed: int) -> dict[str, list[int]]:
    """The layers HetDPT's Step 2 chose for the seed's checkpoint on the claims page."""
    units = read_json(path)["units"] if path.exists() else {}
    unit = units.get(f"hetdpt/step2/seed{seed}")
    if unit is None:
        raise VitpruneError(f"HetDPT's layers for seed {seed} come from the claims run, and {path} has none: "
                            f"run python benchmarks/claims.py --seeds {seed} first")
    return {kind: unit["value"][kind] for kind in ("attention", "activation")}


def run(budget: Budget, out_dir: Path, stem: str, claims_store: Path,
        checkpoints: Callable[[int], nn.Module] = trained_cluttered_mnist_vit, device: str = "cpu") -> dict[str, Any]:
    """Every measurement (or its stored value), then the report; ``checkpoints(seed=s)`` gives seed ``s``'s dense
    model; the heads train, and the models are scored and timed, on ``device``."""
    store = Store(out_dir / f"{stem}.store.json")
    code = {arm: measuring_code(arm) for arm in ARMS}
    start = time.perf_counter()
    rows: dict[int, dict[str, Any]] = {}
    settings: dict[int, Setting] = {}
    for seed in budget.seeds:
        layers = hetdpt_layers(claims_store, seed)
        setting = settings[seed] = Setting(seed, budget, layers, checkpoints(seed=seed))
        canvases: list[Canvases] = []
        rows[seed] = {protocol: {} for protocol in PROTOCOLS}
        rows[seed]["backbones"] = {}
        for arm in ARMS:
            key = unit_key(code[arm], budget, layers, setting.checkpoint, device)

            def shape(arm: str = arm) -> dict[str, Any]:
                backbone = setting.backbone(arm)
                return {"macs": count_macs(backbone).macs, "params": sum(p.numel() for p in backbone.parameters()),
                        "layers": layers if arm == "hetdpt" else None}
            macs = store.unit(f"{arm}/seed{seed}/backbone", key, shape)
            rows[seed]["backbones"][arm] = macs
            for protocol, tail_blocks in (("joint", budget.tail_blocks), ("frozen", 0)):
                tokens: list[torch.Tensor] = []
                for task in TASKS:
                    def measure(task: str = task, arm: str = arm, tail_blocks: int = tail_blocks) -> dict[str, Any]:
                        torch.manual_seed(seed)
                        model = build_model(task, setting.backbone(arm), budget).to(device)
                        if not canvases:
                            canvases.append(Canvases(budget, seed, rcnn_transform(setting.backbone(arm)), device))
                        if not tokens:  # from the model's copy of the backbone, on the device, before training
                            tokens.append(entering_tokens(pyramid_of(model).maps.model.eval(), tail_blocks,
                                                          canvases[0].images))
                        began = time.perf_counter()
                        train(task, model, tokens[0], canvases[0], budget, seed, tail_blocks)
                        return {**score(task, model, budget), "train_seconds": time.perf_counter() - began,
                                "macs": whole_macs(task, model, macs["macs"], budget)}
                    rows[seed][protocol].setdefault(arm, {})[task] = store.unit(
                        f"{protocol}/{arm}/seed{seed}/{task}", key, measure)
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
                        (build_model(part, setting.backbone(arm), budget),
                         build_model(part, setting.backbone("dense"), budget)))
                size = (1, budget.size, budget.size) if part == "backbone" else CLUTTERED_DENSE.input_size
                result = compare_speed(a.eval(), b.eval(), input_size=size, batch_size=batch,
                                       pairs=budget.speed_pairs, device=device)
                out[part] = {"batch": batch, **result.to_dict()}
            return out
        speed[arm] = store.unit(f"{arm}/speed", code[arm] + torch.__version__ + str(budget.speed_pairs) + device, timed)
    store.close()
    this_call = time.perf_counter() - start
    stats = statistics_of(rows, budget)
    # The per-image counts and matches stay in the store: the page reads the statistics made of them.
    light = {seed: {part: ({arm: {task: {k: v for k, v in scores.items() if k not in ("counts", "matches")}
                                      for task, scores in tasks.items()} for arm, tasks in arms.items()}
                           if part in PROTOCOLS else arms) for part, arms in parts.items()}
             for seed, parts in rows.items()}
    return {"format": FORMAT, "date": max(u["date"] for u in store.units.values()), "budget": asdict(budget),
            "rows": light,
            "speed": speed, "stats": stats,
            "checkpoints": {seed: weights_fingerprint(settings[seed].checkpoint) for seed in budget.seeds},
            "seconds": {"this_call": this_call, "measured_now": store.measured,
                        "measurements": sum(u["seconds"] for u in store.units.values())},
            "threads": sorted({u["threads"] for u in store.units.values()}), "device": device,
            "torch": sorted({u["torch"] for u in store.units.values()})}


def _miou(counts: np.ndarray) -> np.ndarray:
    """mIoU in points from summed ``[..., classes, (intersection, union)]`` counts (a class with no pixel in the
    resample, predicted or true, is left out of the mean, as torchmetrics leaves out an absent class)."""
    intersection, union = counts[..., 0], counts[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100 * np.nanmean(np.where(union > 0, intersection / union, np.nan), axis=-1)


def _memoised(score: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``score`` computed once per distinct weights ``w``."""
    seen: dict[bytes, np.ndarray] = {}

    def memo(w: np.ndarray) -> np.ndarray:
        key = hashlib.sha256(np.ascontiguousarray(w).tobytes()).digest()
        if key not in seen:
            seen[key] = score(w)
        return seen[key]
    return memo


def statistics_of(rows: dict[int, dict[str, Any]], b: Budget) -> dict[str, Any]:
    """Each pruned backbone against dense, in each protocol: mIoU and mAP paired over seeds and images, their
    equivalence within :data:`MARGIN` judged (Holm over the two), and the gaps relative to dense."""
    shape = (b.val_images, CLUTTERED_DENSE.num_classes, 2)
    seeds = list(rows)
    out: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        def counts(arm: str, protocol: str = protocol) -> np.ndarray:
            flat = [unpack_array(rows[s][protocol][arm]["segmentation"]["counts"], np.uint16, shape) for s in seeds]
            return np.stack(flat).reshape(len(seeds), b.val_images, -1).astype(np.float64)

        def matches(arm: str, protocol: str = protocol) -> list[DetectionMatches]:
            return [DetectionMatches.from_dict(rows[s][protocol][arm]["detection"]["matches"]) for s in seeds]

        def scores(found: list[DetectionMatches]) -> list[Callable[[np.ndarray], np.ndarray]]:
            return [lambda w, m=m: 100 * m.average_precision(w)["map"] for m in found]

        dense_matches = matches("dense")
        # Every arm is paired with dense under the same draws: dense's COCO evaluations are made once.
        dense_scores = [_memoised(f) for f in scores(dense_matches)]
        dense_found = [m.found() for m in dense_matches]
        dense_score = {"miou": float(np.mean([100 * rows[s][protocol]["dense"]["segmentation"]["miou"]
                                              for s in seeds])),
                       "map": float(np.mean([100 * rows[s][protocol]["dense"]["detection"]["map"] for s in seeds]))}
        out[protocol] = {}
        for arm in list(ARMS)[1:]:
            arm_matches = matches(arm)
            discordant = float(np.mean([a != d for m, found in zip(arm_matches, dense_found)
                                        for a, d in zip(m.found(), found)]))
            differences = {
                "miou": paired_metric_difference(counts(arm), counts("dense"),
                                                 lambda c: _miou(c.reshape(*c.shape[:-1], -1, 2)),
                                                 margin=MARGIN, resamples=b.resamples),
                "map": paired_weighted_difference(scores(arm_matches), dense_scores, b.val_images,
                                                  discordant=discordant, margin=MARGIN,
                                                  resamples=b.map_resamples)}
            verdicts = judge(list(differences.values()), ["comparable"] * len(differences))
            out[protocol][arm] = {
                metric: {**d.to_dict(), "relative": 100 * d.effect / dense_score[metric],
                         "relative_low": 100 * d.low / dense_score[metric],
                         "relative_high": 100 * d.high / dense_score[metric], "verdict": v.verdict,
                         "test": v.test, "p": v.p, "p_holm": v.p_holm, "sample": v.sample}
                for (metric, d), v in zip(differences.items(), verdicts)}
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
        report = run(budget, args.out_dir, stem, args.claims_store, device=args.device)
    except VitpruneError as exc:
        sys.exit(f"error: {exc}")
    report["command"] = command(budget, args.quick, "dense")
    write(report, args.out_dir, stem)


if __name__ == "__main__":
    main()
