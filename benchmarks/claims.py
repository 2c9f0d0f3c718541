"""Each paper's claims as the paper states them, tested on cluttered MNIST under the paper's protocol, judged with
paired statistics.

Starting checkpoints: vitprune's ``cluttered-mnist-vit`` trained with seeds 0 to 5, chosen before the run (the
same recipe; each trained on first use, then cached; needs ``vitprune[bench]``). Seed ``s`` of every arm starts
from checkpoint ``s`` and also sets the fine-tune's images and order and any random or trained selection, so claims
that depend on the starting model are judged over six models. Every arm of a comparison costs the same MACs (full
convention, within 1%). A claim is judged at the stage its paper judges it: right after pruning, or after the same
recovery for every arm (:class:`Budget`: ``tune_images`` training images drawn by the seed, soft distillation from
the arm's own dense checkpoint), whose cost the dense + recovery control measures; every claim judged after the
recovery is judged again after ``long_epochs`` times as long a recovery on the first ``long_seeds`` seeds.

Every arm's per-image correctness on the validation set (``renderings`` clutter renderings of each of the 1,000
held-out digits) is stored; validation images are only scored. What a method or a protocol chooses (the MAP's
fit, the best split, a-STAR's mean MACs, Fig. 8's operating points) is chosen on ``holdout_images`` fixed training
images. A comparison is the paired difference of two arms over images and seeds
(:func:`vitprune.measure.paired.paired_difference`: an image-level bootstrap and a seed-level t-test, both of which
must reject), decided within its claim with Holm's correction, and "comparable" by a ±1-point equivalence margin
fixed in advance (:func:`vitprune.measure.paired.judge`).

Each measurement is stored (``<out-dir>/claims.store.json``) under a key: the hash of the code that measures it
(this file's functions of its family and vitprune's packages they run), the weights of its dense checkpoint,
torch's version and the budget. A run measures what is missing or whose key changed, then renders, so an
interrupted run continues where it stopped and a page never shows a stale number (``--fresh`` starts over).

    python benchmarks/claims.py --seeds 0 1 2 3 4 5      # the full run (the default seeds)
    python benchmarks/claims.py --quick            # one seed, smaller budgets
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import inspect
import itertools
import json
import math
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from claims_page import write
from hiap_digits import uniform
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from scipy.stats import spearmanr
from torch import nn
from torch.utils.data import Dataset, Subset, TensorDataset

import vitprune
from vitprune.atomic import read_json, write_json
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.data.cluttered_mnist import ClutteredMnistDataset
from vitprune.errors import VitpruneError
from vitprune.measure import MacTarget, compare_speed, count_macs
from vitprune.measure.paired import PairedDifference, judge, paired_difference
from vitprune.measure.paired import pack_correct as pack
from vitprune.measure.paired import unpack_correct as unpack
from vitprune.methods.hetdpt import collect_predictor_data, fit_predictor, transfer_entropy
from vitprune.methods.hetdpt.importance import select_layers
from vitprune.methods.hetdpt.pipeline import te_shortlist
from vitprune.methods.hiap import HiAPConfig, budget_threshold, extract, train_gates
from vitprune.methods.hiap.search import fixed_macs
from vitprune.methods.star import (apply_keep_rates, average_cosine_similarity, inter_layer_scores, keep_rates,
                                   rho_for_macs)
from vitprune.methods.vbp import (hidden_mlps, magnitude_scores, mlp_statistics, neuron_scores, prune_by_selection,
                                  select_for_macs, select_neurons)
from vitprune.methods.tome import apply_merging, r_schedule
from vitprune.methods.width import prune_width_to_macs, taylor_gradients
from vitprune.models.zoo import trained_cluttered_mnist_vit
from vitprune.runs.stages import weights_fingerprint
from vitprune.surgery import merge_linear_mlps, prune_depth, remaining_layers
from vitprune.training import TrainConfig, evaluate, finetune_pruned

#: The report's layout: seed-level tests, the longer recovery, per-block Observation 2 (a page renders its own format).
FORMAT = 3
#: MACs of the arms of one comparison may differ by at most this share.
MATCH = 0.01
#: STAR's fused score weight (the paper's DeiT setting).
STAR_ALPHA = 0.15
#: VBP's criteria in Table 3 (variance is the paper's), and the random one the task's difficulty is read from.
VBP_CRITERIA = ("variance", "magnitude", "snip")
#: DeiT-B's manual token schedule in STAR's Table 2: per-layer keep ratios r, r², r³ at blocks 4, 7 and 10 of 12.
MANUAL_BLOCKS = (4, 7, 10)
#: HiAP's budget claim: the 0.5-threshold model's MACs within this share of the budget (the paper names no ε);
#: shown, not judged, until a run anneals the gates to binary.
HIAP_TOLERANCE = 0.05


@dataclass
class Budget:
    """What one run spends: seeds, validation renderings, the recovery and every method's own budget; MAC
    targets are shares of the dense model's (full convention)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 5])
    renderings: int = 4
    tune_images: int = 2000
    tune_epochs: int = 1
    #: The longer recovery every after-recovery claim is judged again with: ``long_epochs`` epochs of the same
    #: images (4x the steps), on the first ``long_seeds`` seeds.
    long_epochs: int = 4
    long_seeds: int = 3
    #: Fixed (unaugmented) training images that choices are made on, so that validation images are only scored.
    holdout_images: int = 2000
    lr: float = 1e-4
    #: Weight of the distillation term (the rest is cross-entropy with the labels).
    alpha: float = 1.0
    batch_size: int = 64
    calibration_images: int = 1000
    vbp_ratio: float = 0.5
    vbp_trend: list[float] = field(default_factory=lambda: [0.3, 0.7])
    depth_share: float = 0.66
    probe_images: int = 512
    te_images: int = 256
    search_images: int = 2000
    search_epochs: int = 4
    shortlist: float = 2 / 3
    star_share: float = 0.6
    lrp_images: int = 256
    star_mac_images: int = 16
    #: The paper's moderate budget: 33% of the MACs removed (Table 3).
    hiap_share: float = 0.67
    hiap_images: int = 2000
    hiap_epochs: int = 2
    width_share: float = 0.5
    #: HetDPT's Fig. 8: ToMe's merge counts and STAR's keep rates swept on each seed's dense and HetDPT checkpoints
    #: (each sweep starts with the model itself, r 0 or keep rate 1), the operating point's top-1 floor in points
    #: below the lower of the dense and HetDPT top-1 (the paper's example sits 0.9 below the dense model), and the
    #: paired timing (batch, pairs) against the dense checkpoint.
    fig8_tome: list[int] = field(default_factory=lambda: list(range(17)))
    fig8_star: list[float] = field(default_factory=lambda: [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    fig8_floor: float = 1.0
    fig8_batch: int = 64
    fig8_pairs: int = 15
    resamples: int = 10_000


FULL = Budget()
QUICK = Budget(seeds=[0], renderings=2, tune_images=500, long_seeds=1, holdout_images=500, calibration_images=500,
               vbp_trend=[], probe_images=128, te_images=128, search_images=500, search_epochs=4, lrp_images=64,
               star_mac_images=8, hiap_images=500, hiap_epochs=1, resamples=2000)


@dataclass
class Setting:
    """The dense checkpoints (by seed) and the data: augmented training set, the same images with the evaluation
    transform, and the validation set."""

    checkpoints: dict[int, nn.Module]
    labels: dict[int, str]
    train: Dataset
    plain: Dataset
    val: Dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed and smaller budgets")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (and dense checkpoints) to run")
    parser.add_argument("--fresh", action="store_true", help="ignore measurements an earlier run stored")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def load_setting(budget: Budget) -> Setting:
    """The trained cluttered-MNIST ViTs of the budget's seeds and their data."""
    checkpoints = {seed: trained_cluttered_mnist_vit(seed=seed) for seed in budget.seeds}
    size = vitprune.get_adapter(checkpoints[budget.seeds[0]]).input_size
    return Setting(checkpoints, {seed: f"cluttered-mnist-vit, seed {seed}" for seed in budget.seeds},
                   build_dataset("cluttered-mnist", "train", input_size=size),
                   build_dataset("cluttered-mnist", "train", input_size=size, is_training=False),
                   ClutteredMnistDataset("val", renderings=budget.renderings))


# ---------------------------------------------------------------------------------------------------- the store


#: Library modules no unit runs, left out of every key (so a change to them re-measures nothing), and why.
UNHASHED = {"measure/paired.py": "the statistics, which judge the stored correctness at every render",
            "data/cluttered_dense.py": "the dense task's dataset, which no claim builds"}


def source_hash(parts: tuple[Any, ...]) -> str:
    """Hash of the code in ``parts``: functions and classes of this file (their source) and vitprune's packages or
    modules (by path below ``vitprune/``, every ``.py`` file under it but :data:`UNHASHED`)."""
    root = Path(vitprune.__file__).parent
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            path = root / part
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for file in (f for f in files if f.relative_to(root).as_posix() not in UNHASHED):
                digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes())
        else:
            digest.update(inspect.getsource(part).encode())
    return digest.hexdigest()


class Runner:
    """Measures arms, each once per key: results live in ``units`` (saved to ``path`` after every new one)."""

    def __init__(self, setting: Setting, budget: Budget, path: Path, units: dict[str, Any], progress: Progress):
        self.s, self.b, self.path, self.units, self.progress = setting, budget, path, units, progress
        self.task = progress.add_task("claims", total=None)
        images, labels = zip(*(setting.val[i] for i in range(len(setting.val))), strict=True)
        self.val_loader = build_loader(TensorDataset(torch.stack(images), torch.tensor(labels)), 256, shuffle=False,
                                       seed=0)
        self.images_count = len(labels)
        self.calibration = list(build_loader(balanced_subset(setting.plain, budget.calibration_images, seed=0),
                                             64, shuffle=False, seed=0))
        self.holdout = balanced_subset(setting.plain, budget.holdout_images, seed=1)
        self.holdout_loader = build_loader(self.holdout, 256, shuffle=False, seed=0)
        self.long_seeds = budget.seeds[:budget.long_seeds]
        self.dense_macs = count_macs(self.dense(budget.seeds[0])).macs
        self.blocks = len(vitprune.get_adapter(self.dense(budget.seeds[0])).blocks())
        self.weights = {seed: weights_fingerprint(model) for seed, model in setting.checkpoints.items()}
        spent = {k: v for k, v in asdict(budget).items() if k != "seeds"}  # a unit is per seed already
        self.budget_hash = hashlib.sha256(json.dumps(spent, sort_keys=True).encode()).hexdigest()
        self.code = {family: source_hash(parts) for family, parts in family_code().items()}
        self.memo: dict[Any, Any] = {}
        self._nested = 0.0
        self.measured = 0
        #: The units this run read or measured: the page's, and all the store keeps.
        self.touched: set[str] = set()

    def dense(self, seed: int) -> nn.Module:
        return self.s.checkpoints[seed]

    def key(self, family: str, seed: int) -> str:
        """What a unit's value depends on: its family's code, its checkpoint's weights, torch and the budget."""
        parts = {"code": self.code[family], "weights": self.weights[seed], "torch": torch.__version__,
                 "budget": self.budget_hash}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def unit(self, name: str, compute: Callable[[], Any], *, family: str, seed: int) -> Any:
        """The stored result of ``name``, or ``compute()`` stored under it when missing or stale."""
        key = self.key(family, seed)
        self.touched.add(name)
        stored = self.units.get(name)
        if stored is None or stored.get("key") != key:
            self.progress.update(self.task, description=name)
            outer, self._nested = self._nested, 0.0
            start = time.perf_counter()
            value = compute()
            elapsed = time.perf_counter() - start
            # A unit's own time: units computed inside it (a selection inside an arm) count for themselves.
            self.units[name] = {"key": key, "value": value, "seconds": elapsed - self._nested,
                                "threads": torch.get_num_threads(), "torch": torch.__version__,
                                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
            self._nested = outer + elapsed
            self.measured += 1
            self.save()
            line = f"{name}: {self.units[name]['seconds']:.1f} s"
            if not self.progress.disable:
                self.progress.console.log(line)
            else:
                print(line, flush=True)
        self.progress.advance(self.task)
        return self.units[name]["value"]

    def save(self) -> None:
        write_json(self.path, {"units": self.units})

    def once(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per process (in-memory: statistics several arms of one checkpoint share)."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def correct(self, model: nn.Module) -> str:
        """Which validation images ``model`` classifies right, packed (:func:`pack`)."""
        return pack(evaluate(model, self.val_loader, per_image=True)["correct"])

    def held_out(self, model: nn.Module) -> float:
        """``model``'s top-1 (%) on the held-out training images: what a choice is made on."""
        return 100 * float(evaluate(model, self.holdout_loader, per_image=True)["correct"].float().mean())

    def images(self, seed: int, count: int) -> Subset:
        """``count`` training images drawn by ``seed``: what one seed's fine-tune, search or HiAP run trains on."""
        order = torch.randperm(len(self.s.train), generator=torch.Generator().manual_seed(seed))
        return Subset(self.s.train, order[:count].tolist())

    def tune(self, model: nn.Module, seed: int, *, images: int | None = None, epochs: int | None = None,
             alpha: float | None = None, tau: float = 1.0) -> None:
        """The recovery: training images drawn by ``seed``, soft distillation from the seed's dense checkpoint."""
        config = TrainConfig(epochs=epochs or self.b.tune_epochs, lr=self.b.lr, batch_size=self.b.batch_size,
                             seed=seed)
        finetune_pruned(model, self.images(seed, images or self.b.tune_images), None, config, teacher=self.dense(seed),
                        distill="soft", alpha=self.b.alpha if alpha is None else alpha, tau=tau)

    def arm(self, name: str, build: Callable[[], nn.Module], seed: int, *, family: str, tune: bool = True,
            macs: Callable[[nn.Module], float] | None = None, choose: bool = False) -> dict[str, Any]:
        """Build the pruned model and score it right after pruning, then (``tune``) after the recovery; ``choose``
        also scores the recovered model on the held-out training images (``held_out``), for a choice among arms."""
        def work() -> dict[str, Any]:
            model = build()
            row = {"macs": (macs or final_macs)(model), "pruned": self.correct(model)}
            if tune:
                self.tune(model, seed)
                merge_linear_mlps(model)
                row["tuned"] = self.correct(model)
                if choose:
                    row["held_out"] = self.held_out(model)
            return row
        return {**self.unit(name, work, family=family, seed=seed), "seed": seed}

    def arms(self, name: str, build: Callable[[int], nn.Module], **options: Any) -> list[dict[str, Any]]:
        """:meth:`arm` once per seed; ``build(seed)``."""
        return [self.arm(f"{name}/seed{seed}", lambda seed=seed: build(seed), seed, **options) for seed in self.b.seeds]

    def longer(self, name: str, build: Callable[[int], nn.Module], *, family: str,
               macs: Callable[[nn.Module], float] | None = None) -> list[dict[str, Any]]:
        """The arms ``name`` after the longer recovery (``long_epochs``), on the long seeds: rows with ``tuned``."""
        def work(seed: int) -> dict[str, Any]:
            model = build(seed)
            row = {"macs": (macs or final_macs)(model)}
            self.tune(model, seed, epochs=self.b.long_epochs)
            merge_linear_mlps(model)
            return {**row, "tuned": self.correct(model)}
        return [{**self.unit(f"{name}/long/seed{seed}", lambda seed=seed: work(seed), family=family, seed=seed),
                 "seed": seed} for seed in self.long_seeds]


def final_macs(model: nn.Module) -> int:
    """MACs (full convention) of the model with every activation-less MLP merged, as it is deployed."""
    merged = copy.deepcopy(model)
    merge_linear_mlps(merged)
    return count_macs(merged).macs


def _bisect(cost: Callable[[float], float], target: float, low: float, high: float, steps: int = 16) -> float:
    """The largest ``x`` in ``[low, high]`` whose ``cost(x)`` (growing with ``x``) is at most ``target``."""
    if cost(low) > target:
        raise VitpruneError(f"target {target:.4g} is out of reach (cost {cost(low):.4g} at {low})")
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if cost(mid) <= target else (low, mid)
    return low


# ---------------------------------------------------------------------------------------------------- verdicts


def top1(rows: list[dict[str, Any]], stage: str, images: int) -> list[float]:
    """Each row's top-1 (%) at ``stage`` (``pruned`` or ``tuned``)."""
    return [100 * float(unpack(r[stage], images).mean()) for r in rows]


def compare(r: Runner, label: str, a: str, a_rows: list[dict], b: str, b_rows: list[dict], stage: str,
            kind: str = "better", matched: bool = True) -> dict[str, Any]:
    """One comparison of two arms at ``stage``, paired row by row (same seed, or same block) and image by image:
    A better than B (``kind`` "better") or within the margin of it (``"comparable"``). Its verdict comes from
    :func:`claim`, with the claim's other comparisons. Arms whose MACs differ by more than :data:`MATCH` (when
    ``matched``) are not judged."""
    n = r.images_count
    diff = paired_difference(np.stack([unpack(x[stage], n) for x in a_rows]),
                             np.stack([unpack(x[stage], n) for x in b_rows]), resamples=r.b.resamples)
    macs_a, macs_b = (statistics.mean(x["macs"] for x in rows) for rows in (a_rows, b_rows))
    gap = abs(macs_a - macs_b) / max(macs_a, macs_b) if matched else None
    return {"label": label, "a": a, "b": b, "stage": stage, "kind": kind, "a_top1": top1(a_rows, stage, n),
            "b_top1": top1(b_rows, stage, n), "difference": diff.to_dict(), "macs_a": macs_a, "macs_b": macs_b,
            "macs_gap": gap, "judged": gap is None or gap <= MATCH}


def _judge(comparisons: list[dict[str, Any]]) -> str:
    """Judge ``comparisons`` as one family (Holm over the judged ones; each gets its verdict and the test that gave
    it) and return their claim's verdict: *holds* when every comparison holds, *does not hold* when any does not,
    *equivalent* when the rest are within the margin (a claimed gain the data bound below ±1 point), else
    *inconclusive*."""
    judged = [c for c in comparisons if c["judged"]]
    judgements = judge([PairedDifference(**c["difference"]) for c in judged], [c["kind"] for c in judged])
    for c, j in zip(judged, judgements, strict=True):
        c.update(verdict=j.verdict, test=j.test, p=j.p, p_holm=j.p_holm, sample=j.sample)
    for c in comparisons:
        c.setdefault("verdict", "inconclusive")  # MACs not matched: judges nothing
    found = [c["verdict"] for c in comparisons]
    if all(v == "holds" for v in found):
        return "holds"
    if "does not hold" in found:
        return "does not hold"
    if all(v in ("holds", "equivalent") for v in found):
        return "equivalent"
    return "inconclusive"


def claim(claim_id: str, comparisons: list[dict[str, Any]], *,
          lengths: list[tuple[dict[str, Any], dict[str, Any]]] | None = None, **details: Any) -> dict[str, Any]:
    """A claim: its comparisons' verdicts (Holm-corrected over the judged ones) and its own (:func:`_judge`).
    ``lengths`` (:func:`lengths`) are its after-recovery comparisons on the long seeds at the recovery and at the
    longer one, each set judged as a claim of its own: does the verdict change with the recovery's length?"""
    made = {"id": claim_id, "verdict": _judge(comparisons), "comparisons": comparisons, **details}
    if lengths:
        short, long = [pair[0] for pair in lengths], [pair[1] for pair in lengths]
        made["recovery_length"] = {"short": {"verdict": _judge(short), "comparisons": short},
                                   "long": {"verdict": _judge(long), "comparisons": long}}
    return made


def lengths(r: Runner, label: str, a: str, a_rows: list[dict], a_long: list[dict], b: str, b_rows: list[dict],
            b_long: list[dict], kind: str = "better", matched: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """One after-recovery comparison on the long seeds, after the recovery and after the longer one."""
    def kept(rows: list[dict]) -> list[dict]:
        return [x for x in rows if x["seed"] in r.long_seeds and "tuned" in x]
    return (compare(r, label, a, kept(a_rows), b, kept(b_rows), "tuned", kind, matched),
            compare(r, f"{label}, {r.b.long_epochs}x recovery", a, a_long, b, b_long, "tuned", kind, matched))


def _stages(r: Runner, label: str, a: str, a_rows: list[dict], b: str, b_rows: list[dict]) -> list[dict[str, Any]]:
    """The comparison right after pruning and after the recovery (a claim its paper judges at both)."""
    return [compare(r, f"{label}, right after pruning", a, a_rows, b, b_rows, "pruned"),
            compare(r, f"{label}, after recovery", a, a_rows, b, b_rows, "tuned")]


# ---------------------------------------------------------------------------------------------------- control


def control_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The dense model through the same recovery: what the recovery itself costs."""
    def dense(seed: int) -> nn.Module:
        return copy.deepcopy(r.dense(seed))
    rows = r.arms("dense", dense, family="dense")
    before = [{**row, "tuned": row["pruned"]} for row in rows]
    label = "dense + recovery vs dense"
    return [claim("recovery-control", [compare(r, label, "dense + recovery", rows, "dense", before, "tuned",
                                               kind="comparable")],
                  lengths=[lengths(r, label, "dense + recovery", rows, r.longer("dense", dense, family="dense"),
                                   "dense", before, [x for x in before if x["seed"] in r.long_seeds],
                                   kind="comparable")])], {"rows": rows}


# ---------------------------------------------------------------------------------------------------- HetDPT


def layer_savings(dense: nn.Module) -> dict[str, int]:
    """MACs one attention and one GELU removal save (the same in every block of a plain ViT)."""
    base = final_macs(dense)
    savings = {}
    for kind in ("attention", "activation"):
        model = copy.deepcopy(dense)
        prune_depth(model, **{kind: [0]}, merge=False)
        savings[kind] = base - final_macs(model)
    return savings


def trim_to(model: nn.Module, target: float, *, macs: Callable[[nn.Module], float] = final_macs,
            scores: dict[int, torch.Tensor] | None = None, stats: Any = None) -> int:
    """Remove the lowest-scored FFN neurons (``scores``, by default their magnitude; ranked over the blocks that keep
    their GELU) until the model costs at most ``target`` by ``macs``; returns how many went. ``stats`` (VBP's MLP
    statistics) folds the removed neurons' mean into the next bias. This tops a depth choice up to an exact MAC
    budget, and brings VBP to one."""
    if macs(model) <= target:  # already within it: nothing to trim
        return 0
    blocks = set(remaining_layers(model)["activation"])
    scores = {b: s for b, s in (magnitude_scores(model) if scores is None else scores).items() if b in blocks}
    try:
        removed = select_for_macs(model, scores, MacTarget.absolute(target), cost=macs)
    except VitpruneError:
        raise VitpruneError("no neuron trim reaches the MAC target") from None
    prune_by_selection(model, removed, stats)
    return sum(map(len, removed.values()))


def depth_grid(r: Runner, share: float) -> list[dict[str, Any]]:
    """Every split that reaches ``share`` of the dense MACs: ``a`` attention layers, as many whole GELU layers as
    fit (``g``), and a neuron trim for the rest (``t``: the GELU layers it all counts as, fractional)."""
    first = r.b.seeds[0]
    savings = r.unit("hetdpt/savings", lambda: layer_savings(r.dense(first)), family="hetdpt", seed=first)
    needed = r.dense_macs * (1 - share)
    grid = []
    for a in range(r.blocks + 1):
        t = (needed - a * savings["attention"]) / savings["activation"]
        g = math.floor(t + 1e-9)
        # a trim needs a block that keeps its GELU
        if 0 <= t and (g < r.blocks or t - g < 1e-9) and g <= r.blocks:
            grid.append({"a": a, "g": g, "t": t})
    return grid


def layer_te(r: Runner, seed: int) -> dict[str, dict[int, float]]:
    """Every layer's transfer entropy in the seed's dense model, by type (HetDPT's TE-Static ranking)."""
    batches = r.calibration[: max(1, r.b.te_images // 64)]
    def measure() -> dict[str, list[float]]:
        te = {kind: transfer_entropy(r.dense(seed), kind, batches) for kind in ("attention", "activation")}
        return {kind: [scores[b] for b in range(r.blocks)] for kind, scores in te.items()}
    stored = r.unit(f"hetdpt/te/seed{seed}", measure, family="hetdpt", seed=seed)
    return {kind: dict(enumerate(values)) for kind, values in stored.items()}


def te_layers(r: Runner, seed: int, a: int, g: int) -> tuple[list[int], list[int]]:
    """TE-Static: the ``a`` attention and ``g`` GELU layers of least transfer entropy (ties to the earlier)."""
    te = layer_te(r, seed)
    lowest = {kind: sorted(scores, key=lambda b: (scores[b], b)) for kind, scores in te.items()}
    return sorted(lowest["attention"][:a]), sorted(lowest["activation"][:g])


def _depth_model(r: Runner, seed: int, attention: list[int], activation: list[int], target: float) -> nn.Module:
    model = copy.deepcopy(r.dense(seed))
    prune_depth(model, attention, activation, merge=False)
    trim_to(model, target)
    return model


def predictor(r: Runner):
    """The MAP fitted to Algorithm 1 and 2 points (fast fine-tunes on ``probe_images``, scored on the held-out
    training images) of the first checkpoint."""
    first = r.b.seeds[0]

    def points() -> list[dict[str, Any]]:
        probe = balanced_subset(r.s.train, r.b.probe_images, seed=0)
        # scored on the held-out training images: validation images are only scored
        return collect_predictor_data(
            r.dense(first), probe, r.holdout, max_attention=r.blocks, max_activation=r.blocks - 1,
            interleaved_rounds=r.blocks // 2, finetune=TrainConfig(epochs=1, lr=r.b.lr, batch_size=r.b.batch_size),
            te_set=r.s.plain, te_images=r.b.te_images)
    data = r.unit("hetdpt/predictor-points", points, family="hetdpt", seed=first)
    return fit_predictor([(p["a"], p["t"], p["top1"]) for p in data]), data


def predicted(fit, point: dict[str, Any], blocks: int) -> float:
    """The MAP's top-1 (%) for a grid point; the neuron trim counts as the fraction of a GELU layer it saves."""
    return float(fit.predict(1 - point["a"] / blocks, 1 - point["t"] / blocks))


def map_pick(r: Runner, share: float) -> dict[str, Any]:
    """The grid point of highest predicted accuracy at ``share`` of the MACs (the MAP's split search)."""
    fit, _ = predictor(r)
    return max(depth_grid(r, share), key=lambda p: predicted(fit, p, r.blocks))


def step2(r: Runner, seed: int, a: int, g: int) -> dict[str, Any]:
    """HetDPT Step 2 as the library runs it: the lowest-TE ``shortlist`` of each type are the candidates, the
    importance scores train with the weights' AdamW (the paper's code) for ``search_epochs`` on ``search_images``
    images drawn by the seed, and layers go at evenly spaced steps over the first half."""
    def choose() -> dict[str, Any]:
        candidates = te_shortlist(layer_te(r, seed), (a, g), r.b.shortlist)
        config = TrainConfig(epochs=r.b.search_epochs, lr=r.b.lr, batch_size=r.b.batch_size, seed=seed)
        chosen = select_layers(r.dense(seed), r.images(seed, r.b.search_images), config, attention=a, activation=g,
                               candidates=candidates)
        return {"attention": chosen.attention, "activation": chosen.activation, "candidates": candidates,
                "history": chosen.history}
    return r.unit(f"hetdpt/step2/seed{seed}", choose, family="hetdpt", seed=seed)


def hetdpt_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    target = r.dense_macs * r.b.depth_share
    fit, points = predictor(r)
    grid = {p["a"]: p for p in depth_grid(r, r.b.depth_share)}
    pick = map_pick(r, r.b.depth_share)

    def te_model(p: dict[str, Any]) -> Callable[[int], nn.Module]:
        return lambda seed: _depth_model(r, seed, *te_layers(r, seed, p["a"], p["g"]), target)

    def grid_name(p: dict[str, Any]) -> str:
        return f"hetdpt/grid/a{p['a']}g{p['g']}"
    grid_rows = {a: r.arms(grid_name(p), te_model(p), family="hetdpt", choose=True) for a, p in grid.items()}
    searched = {seed: step2(r, seed, pick["a"], pick["g"]) for seed in r.b.seeds}

    def step2_model(seed: int) -> nn.Module:
        return _depth_model(r, seed, searched[seed]["attention"], searched[seed]["activation"], target)
    ste = r.arms("hetdpt/step2-arm", step2_model, family="hetdpt")
    te_rows = grid_rows[pick["a"]]
    only = {name: p for name, p in (
        ("attention only", max((p for p in grid.values() if p["g"] == 0), key=lambda p: p["a"], default=None)),
        ("GELU only", grid.get(0))) if p is not None}
    tuned = {a: statistics.mean(top1(rows, "tuned", r.images_count)) for a, rows in grid_rows.items()}
    # the best split is chosen on the held-out training images, then scored on the validation images
    held = {a: statistics.mean(row["held_out"] for row in rows) for a, rows in grid_rows.items()}
    best = max(held, key=held.get)
    long = {a: r.longer(grid_name(grid[a]), te_model(grid[a]), family="hetdpt")
            for a in sorted({pick["a"], best, *(p["a"] for p in only.values())})}
    joint = [compare(r, f"vs {name}, after recovery", "MAP split", te_rows, name, grid_rows[p["a"]], "tuned")
             for name, p in only.items()]
    joint_lengths = [lengths(r, f"vs {name}, after recovery", "MAP split", te_rows, long[pick["a"]], name,
                             grid_rows[p["a"]], long[p["a"]]) for name, p in only.items()]

    single: dict[str, dict[int, list[dict]]] = {"attention": {}, "activation": {}}
    single_long: dict[str, dict[int, list[dict]]] = {"attention": {}, "activation": {}}
    for kind in single:
        for block in range(r.blocks):
            def one(seed: int, kind: str = kind, block: int = block) -> nn.Module:
                model = copy.deepcopy(r.dense(seed))
                prune_depth(model, **{kind: [block]}, merge=False)
                return model
            name = f"hetdpt/single/{kind}{block}"
            # right after pruning on every seed; the recoveries (a minute each) on the long seeds
            single[kind][block] = [r.arm(f"{name}/seed{seed}", lambda one=one, seed=seed: one(seed), seed,
                                         family="hetdpt", tune=seed in r.long_seeds) for seed in r.b.seeds]
            single_long[kind][block] = r.longer(name, one, family="hetdpt")
    blocks = range(r.blocks)

    def recovered(rows: list[dict]) -> list[dict]:
        return [x for x in rows if "tuned" in x]
    after = "one attention vs one GELU layer removed, after recovery"
    asymmetry = [compare(r, f"block {b}: one attention vs one GELU layer removed, right after", "attention removed",
                         single["attention"][b], "GELU removed", single["activation"][b], "pruned", matched=False)
                 for b in blocks]
    asymmetry += [compare(r, f"block {b}: {after}", "attention removed", recovered(single["attention"][b]),
                          "GELU removed", recovered(single["activation"][b]), "tuned", kind="comparable",
                          matched=False) for b in blocks]
    asymmetry_lengths = [lengths(r, f"block {b}: {after}", "attention removed", single["attention"][b],
                                 single_long["attention"][b], "GELU removed", single["activation"][b],
                                 single_long["activation"][b], kind="comparable", matched=False) for b in blocks]
    steps = {"search": r.b.search_epochs * math.ceil(r.b.search_images / r.b.batch_size),
             "recovery": r.b.tune_epochs * math.ceil(r.b.tune_images / r.b.batch_size)}
    single_top1 = {kind: {"pruned": [statistics.mean(top1(by_block[b], "pruned", r.images_count)) for b in blocks],
                          "tuned": [statistics.mean(top1(recovered(by_block[b]), "tuned", r.images_count))
                                    for b in blocks]} for kind, by_block in single.items()}
    predicted_by_a = {a: predicted(fit, p, r.blocks) for a, p in grid.items()}
    claims = [
        claim("hetdpt-joint", joint, lengths=joint_lengths, split=pick, facts=_joint_facts(
            tuned, predicted_by_a, pick, fit.mae, single_top1)),
        claim("hetdpt-step2", [compare(r, "Step 2 vs TE-Static, after recovery", "Step 2", ste, "TE-Static", te_rows,
                                       "tuned")], steps=steps,
              lengths=[lengths(r, "Step 2 vs TE-Static, after recovery", "Step 2", ste,
                               r.longer("hetdpt/step2-arm", step2_model, family="hetdpt"), "TE-Static", te_rows,
                               long[pick["a"]])]),
        claim("hetdpt-map", [compare(r, f"MAP's split a={pick['a']} vs the held-out best a={best}, after recovery",
                                     "MAP split", te_rows, "best split", grid_rows[best], "tuned", kind="comparable")],
              lengths=[lengths(r, f"MAP's split a={pick['a']} vs the held-out best a={best}, after recovery",
                               "MAP split", te_rows, long[pick["a"]], "best split", grid_rows[best], long[best],
                               kind="comparable")],
              grid={a: v for a, v in sorted(tuned.items())}, best=best,
              facts={"pick": pick["a"], "best": best, "predicted_pick": predicted_by_a[pick["a"]],
                     "predicted_best": predicted_by_a[best], "measured_pick": tuned[pick["a"]],
                     "measured_best": tuned[best], "held_out_pick": held[pick["a"]], "held_out_best": held[best],
                     "mae": fit.mae}),
        claim("hetdpt-asymmetry", asymmetry, lengths=asymmetry_lengths),
    ]
    claims[-1]["facts"] = _asymmetry_facts(single_top1, asymmetry, r.blocks)  # from the verdicts just given
    table = {"grid": [{**p, "predicted": predicted_by_a[a], "top1_tuned": tuned[a], "held_out": held[a]}
                      for a, p in grid.items()],
             "pick": pick, "predictor_points": points, "predictor_fit": {"degree": fit.degree, "mae": fit.mae},
             "single": single_top1,
             "step2": {seed: {**{k: v for k, v in searched[seed].items() if k != "history"},
                              "te_static": dict(zip(("attention", "activation"),
                                                    te_layers(r, seed, pick["a"], pick["g"]), strict=True)),
                              "removal_steps": [h.get("step") for h in searched[seed]["history"]]}
                       for seed in r.b.seeds},
             "steps": steps}
    return claims, table


def _joint_facts(tuned: dict[int, float], predicted_by_a: dict[int, float], pick: dict[str, Any], mae: float,
                 single: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """What the joint-removal claim's diagnosis cites: the grid after recovery, one layer of each type removed after
    recovery (mean over blocks), and the MAP's call."""
    att, gelu = (statistics.mean(single[kind]["tuned"]) for kind in ("attention", "activation"))
    best = max(tuned, key=tuned.get)
    return {"grid": {a: tuned[a] for a in sorted(tuned)}, "measured_best": best, "pick": pick["a"],
            "attention_single": att, "gelu_single": gelu, "predicted_pick": predicted_by_a[pick["a"]],
            "predicted_measured_best": predicted_by_a[best], "mae": mae,
            "predicted_gap": abs(predicted_by_a[pick["a"]] - predicted_by_a[best])}


def _asymmetry_facts(single: dict[str, dict[str, list[float]]], comparisons: list[dict[str, Any]],
                     blocks: int) -> dict[str, Any]:
    """What Observation 2's diagnosis cites, block by block: which removal costs more right after pruning, how
    much the GELU-removed models keep, and how many blocks recover to within the margin."""
    att, gelu = single["attention"]["pruned"], single["activation"]["pruned"]
    after = [c for c in comparisons if c["stage"] == "tuned"]
    return {"blocks": blocks, "gelu_milder": sum(g > a for a, g in zip(att, gelu)),
            "gelu_low": min(gelu), "gelu_high": max(gelu), "attention_low": min(att), "attention_high": max(att),
            "recovered_equivalent": sum(c["verdict"] == "holds" for c in after),
            "recovered_apart": sum(c["verdict"] == "does not hold" for c in after)}


# ---------------------------------------------------------------------------------------------------- VBP


def vbp_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Table 3 (variance vs magnitude and SNIP, 50%, right after and after fine-tuning) and Table 6 (mean-shift
    with the variance criterion), plus right-after rows at other ratios (Fig. 5's sweep) with random choice."""
    def stats(seed: int):
        return r.once(("stats", seed), lambda: mlp_statistics(r.dense(seed), r.calibration))

    def scores(seed: int, criterion: str):
        return r.once(("scores", seed, criterion), lambda: neuron_scores(
            r.dense(seed), criterion, r.calibration, stats=stats(seed), seed=seed))

    def build(seed: int, criterion: str, ratio: float, compensate: bool) -> nn.Module:
        model = copy.deepcopy(r.dense(seed))
        prune_by_selection(model, select_neurons(scores(seed, criterion), ratio), stats(seed) if compensate else None)
        return model

    def name(ratio: float, criterion: str, compensate: bool) -> str:
        return f"vbp/{ratio}/{criterion}/{'ms' if compensate else 'plain'}"

    def arms(ratio: float, criterion: str, compensate: bool, tune: bool) -> list[dict]:
        return r.arms(name(ratio, criterion, compensate), lambda seed: build(seed, criterion, ratio, compensate),
                      family="vbp", tune=tune)

    def longer(criterion: str, compensate: bool) -> list[dict]:
        return r.longer(name(ratio, criterion, compensate), lambda seed: build(seed, criterion, ratio, compensate),
                        family="vbp")

    def diagnostics(seed: int) -> dict[str, Any]:
        """How far the criteria agree (Spearman over all neurons) and what share of the first two blocks' neurons
        each removes at the claim's ratio."""
        ranked = {c: scores(seed, c) for c in VBP_CRITERIA}
        flat = {c: torch.cat([v[b].flatten().double() for b in sorted(v)]).numpy() for c, v in ranked.items()}
        early = {c: sorted(v)[:2] for c, v in ranked.items()}
        return {"spearman": {f"{x}-{y}": float(spearmanr(flat[x], flat[y]).statistic)
                             for x, y in itertools.combinations(VBP_CRITERIA, 2)},
                "early_removed": {c: sum(len(select_neurons(v, ratio).get(b, [])) for b in early[c])
                                  / sum(len(v[b]) for b in early[c]) for c, v in ranked.items()}}

    ratio = r.b.vbp_ratio
    main = {c: arms(ratio, c, True, True) for c in VBP_CRITERIA}
    plain = arms(ratio, "variance", False, True)
    long = {c: longer(c, True) for c in VBP_CRITERIA}
    long_plain = longer("variance", False)
    diagnosed = {seed: r.unit(f"vbp/diagnostics/seed{seed}", lambda seed=seed: diagnostics(seed), family="vbp",
                              seed=seed) for seed in r.b.seeds}
    trend = {f"{x}/{c}": {"pruned": top1(arms(x, c, True, False), "pruned", r.images_count)}
             for x in r.b.vbp_trend for c in (*VBP_CRITERIA, "random")}
    trend.update({f"{ratio}/{c}": {"pruned": top1(rows, "pruned", r.images_count),
                                   "tuned": top1(rows, "tuned", r.images_count)} for c, rows in main.items()})
    trend[f"{ratio}/variance-plain"] = {"pruned": top1(plain, "pruned", r.images_count),
                                        "tuned": top1(plain, "tuned", r.images_count)}
    claims = [
        claim("vbp-criterion", [c for other in VBP_CRITERIA[1:] for c in _stages(
            r, f"{ratio:.0%} pruned, vs {other}", "variance", main["variance"], other, main[other])],
            lengths=[lengths(r, f"{ratio:.0%} pruned, vs {other}, after recovery", "variance", main["variance"],
                             long["variance"], other, main[other], long[other]) for other in VBP_CRITERIA[1:]],
            facts=_vbp_facts(trend, diagnosed)),
        claim("vbp-mean-shift", _stages(r, f"{ratio:.0%} pruned", "variance + mean-shift", main["variance"],
                                        "variance alone", plain),
              lengths=[lengths(r, f"{ratio:.0%} pruned, after recovery", "variance + mean-shift", main["variance"],
                               long["variance"], "variance alone", plain, long_plain)]),
    ]
    return claims, {"ratios": trend, "diagnostics": diagnosed}


def _vbp_facts(trend: dict[str, dict[str, list[float]]], diagnosed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What VBP's criterion diagnosis cites: each ratio's right-after top-1 by criterion (mean over the seeds), at
    how many ratios variance trails both others, how far the rankings agree and how much of the first two blocks
    each criterion removes (ranges over the checkpoints)."""
    ratios = sorted({float(key.split("/")[0]) for key in trend})
    by_ratio = {x: {c: statistics.mean(trend[f"{x}/{c}"]["pruned"]) for c in VBP_CRITERIA} for x in ratios}
    spearman = [v for d in diagnosed.values() for v in d["spearman"].values()]
    early = {c: [min(d["early_removed"][c] for d in diagnosed.values()),
                 max(d["early_removed"][c] for d in diagnosed.values())] for c in VBP_CRITERIA}
    return {"by_ratio": by_ratio, "ratios": len(ratios),
            "variance_trails": sum(v["variance"] < min(v["magnitude"], v["snip"]) for v in by_ratio.values()),
            "spearman_low": min(spearman), "spearman_high": max(spearman), "early_removed": early}


def mean_shift_facts(r: Runner) -> dict[str, Any]:
    """What VBP's mean-shift diagnosis cites, per checkpoint at the claim's ratio with the variance criterion: the
    share of the error that the removed neurons leave in their blocks' output (per token, on the calibration images
    the means come from) which folding their mean takes away; how the fold changes that error on the class token (the
    one the classifier reads); and how far each model's logits on the first 1,000 held-out training images lie from
    its dense checkpoint's with and without the fold, with every block pruned and with each block pruned alone. Units
    of their own family, so that adding them re-measured none of the claim's arms."""
    def measure(seed: int) -> dict[str, Any]:
        dense = r.dense(seed)
        stats = r.once(("stats", seed), lambda: mlp_statistics(dense, r.calibration))
        scores = r.once(("scores", seed, "variance"), lambda: neuron_scores(dense, "variance", r.calibration,
                                                                             stats=stats, seed=seed))
        removed = select_neurons(scores, r.b.vbp_ratio)
        prefix = vitprune.get_adapter(dense).num_prefix_tokens
        energy = {"left": 0.0, "folded": 0.0, "prefix_left": 0.0, "prefix_folded": 0.0}

        def record(block: int, fc2: nn.Linear):
            weight = fc2.weight[:, removed[block]].double()
            folded = stats[block].mean[removed[block]].double() @ weight.T

            def hook(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
                lost = args[0][..., removed[block]].double() @ weight.T
                for part, tokens in (("", lost), ("prefix_", lost[:, :prefix])):
                    energy[f"{part}left"] += float(tokens.square().sum())
                    energy[f"{part}folded"] += float((tokens - folded).square().sum())
            return hook

        handles = [v.mlp.fc2.register_forward_pre_hook(record(v.index, v.mlp.fc2))
                   for v in hidden_mlps(dense) if removed.get(v.index)]
        try:
            with torch.no_grad():
                for images, _ in r.calibration:
                    dense(images)
        finally:
            for handle in handles:
                handle.remove()
        images = torch.cat([x for x, _ in r.holdout_loader])[:1000]
        with torch.no_grad():
            reference = dense(images)

            def pruned(blocks: list[int], fold: bool) -> torch.Tensor:
                model = copy.deepcopy(dense)
                prune_by_selection(model, {b: removed[b] for b in blocks}, stats if fold else None)
                return model.eval()(images)

            def mse(logits: torch.Tensor) -> float:
                return float((logits - reference).square().mean())

            everywhere = sorted(b for b in removed if removed[b])
            logits = {"plain": pruned(everywhere, False), "mean-shift": pruned(everywhere, True)}
            alone = {b: [mse(pruned([b], fold)) for fold in (False, True)] for b in everywhere}
        return {"mean_share": 1 - energy["folded"] / energy["left"],
                "prefix_change": energy["prefix_folded"] / energy["prefix_left"] - 1,
                "logit_mse": {k: mse(v) for k, v in logits.items()},
                "agreement": {k: float((v.argmax(1) == reference.argmax(1)).double().mean())
                              for k, v in logits.items()},
                "alone_closer": sum(folded < plain for plain, folded in alone.values()), "blocks": len(alone)}

    per_seed = [r.unit(f"vbp/mean-shift-diagnostics/seed{seed}", lambda seed=seed: measure(seed), family="vbp-why",
                       seed=seed) for seed in r.b.seeds]
    shares, prefix = [d["mean_share"] for d in per_seed], [d["prefix_change"] for d in per_seed]
    return {"seeds": len(per_seed), "mean_share_low": min(shares), "mean_share_high": max(shares),
            "prefix_change_low": min(prefix), "prefix_change_high": max(prefix),
            **{f"{fact}_{arm}": statistics.mean(d[fact][arm] for d in per_seed)
               for fact in ("logit_mse", "agreement") for arm in ("plain", "mean-shift")},
            "closer": sum(d["logit_mse"]["mean-shift"] < d["logit_mse"]["plain"] for d in per_seed),
            "alone_closer": sum(d["alone_closer"] for d in per_seed), "blocks": sum(d["blocks"] for d in per_seed)}


# ---------------------------------------------------------------------------------------------------- STAR


def _mean_macs(r: Runner) -> Callable[[nn.Module], float]:
    """a-STAR's MACs depend on the image: their mean over the first held-out training images."""
    images = [r.holdout[i][0] for i in range(min(r.b.star_mac_images, len(r.holdout)))]
    return lambda model: statistics.mean(count_macs(model, image=img).macs for img in images)


def star_anchor(acs: list[float]) -> str:
    """The paper's ACS anchors (first and last block), or ``minmax`` where those do not increase."""
    try:
        keep_rates(acs, 0.5, anchor="paper")
    except VitpruneError:
        return "minmax"
    return "paper"


def manual_rates(blocks: int, r_: float) -> list[float]:
    """STAR Table 2's manual schedule scaled to ``blocks``: per-layer keep ratios r, r², r³ at the blocks that sit
    where DeiT-B's 4, 7 and 10 of 12 do (1-based), 1 elsewhere."""
    rates = [1.0] * blocks
    for power, block in enumerate(MANUAL_BLOCKS, start=1):
        rates[round(block * blocks / 12) - 1] = r_ ** power
    return rates


class StarSchedules:
    """One checkpoint's STAR inputs: ACS, the LRP prior, the ACS schedule at the target and the manual one."""

    def __init__(self, r: Runner, seed: int, target: float):
        dense = r.dense(seed)
        self.acs = r.unit(f"star/acs/seed{seed}", lambda: average_cosine_similarity(dense, r.calibration),
                          family="star", seed=seed)
        self.prior = torch.tensor(r.unit(f"star/lrp/seed{seed}", lambda: inter_layer_scores(
            dense, r.calibration, max_images=r.b.lrp_images).float().tolist(), family="star", seed=seed))
        self.anchor = star_anchor(self.acs)
        self.rates = keep_rates(self.acs, r.unit(f"star/rho/seed{seed}", lambda: rho_for_macs(
            dense, self.acs, MacTarget.absolute(target), anchor=self.anchor), family="star", seed=seed),
            anchor=self.anchor)
        self.manual = manual_rates(r.blocks, r.unit(f"star/manual-r/seed{seed}", lambda: _bisect(
            lambda x: count_macs(tokens(dense, manual_rates(r.blocks, x), 1.0, None)).macs, target, 1e-3, 1.0),
            family="star", seed=seed))
        mean_macs = _mean_macs(r)
        # rho_for_macs for a-STAR, whose MACs are a mean over images
        self.adaptive = keep_rates(self.acs, r.unit(f"star/rho-adaptive/seed{seed}", lambda: _bisect(
            lambda x: mean_macs(tokens(dense, keep_rates(self.acs, x, anchor=self.anchor), STAR_ALPHA, self.prior,
                                       True)), target, 1e-4, 1.0, steps=12), family="star", seed=seed),
            anchor=self.anchor)


def tokens(dense: nn.Module, rates: list[float], alpha: float, prior: torch.Tensor | None,
           adaptive: bool = False) -> nn.Module:
    """A copy of ``dense`` that prunes tokens at ``rates``."""
    model = copy.deepcopy(dense)
    apply_keep_rates(model, rates, alpha=alpha, prior=prior, adaptive=adaptive)
    return model


def star_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Table 2 and 3's ablations, all right after pruning at matched MACs: fusion vs either score, ACS vs the
    manual schedule (intra-layer scores, as the paper), a-STAR vs STAR."""
    target = r.dense_macs * r.b.star_share
    sched = {seed: StarSchedules(r, seed, target) for seed in r.b.seeds}

    def arms(name: str, build: Callable[[int], nn.Module], **options: Any) -> list[dict]:
        return r.arms(f"star/{name}", build, family="star", tune=False, **options)

    fused = arms("fused", lambda s: tokens(r.dense(s), sched[s].rates, STAR_ALPHA, sched[s].prior))
    cls = arms("cls-only", lambda s: tokens(r.dense(s), sched[s].rates, 1.0, None))
    lrp = arms("lrp-only", lambda s: tokens(r.dense(s), sched[s].rates, 0.0, sched[s].prior))
    manual = arms("manual", lambda s: tokens(r.dense(s), sched[s].manual, 1.0, None))
    adaptive = arms("a-star", lambda s: tokens(r.dense(s), sched[s].adaptive, STAR_ALPHA, sched[s].prior, True),
                    macs=_mean_macs(r))
    claims = [
        claim("star-fusion", [compare(r, "fused vs [CLS] only, right after pruning", "fused", fused, "[CLS] only",
                                      cls, "pruned"),
                              compare(r, "fused vs LRP only, right after pruning", "fused", fused, "LRP only", lrp,
                                      "pruned")]),
        claim("star-acs", [compare(r, "ACS vs manual schedule ([CLS] scores), right after pruning", "ACS schedule",
                                   cls, "manual schedule", manual, "pruned")]),
        claim("star-adaptive", [compare(r, "a-STAR vs STAR, right after pruning", "a-STAR", adaptive, "STAR", fused,
                                        "pruned")]),
    ]
    table = {seed: {"acs": s.acs, "anchor": s.anchor, "rates": s.rates, "manual": s.manual, "adaptive": s.adaptive,
                    "prior": s.prior.tolist()} for seed, s in sched.items()}
    return claims, table


# ---------------------------------------------------------------------------------------------------- HiAP


def hiap_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Table 3: HiAP vs uniform width pruning at matched MACs and training (judged at the end of training); and
    where the 0.5 threshold (logit 0) lands against the budget."""
    target = r.dense_macs * r.b.hiap_share
    train = TrainConfig(epochs=r.b.hiap_epochs, lr=r.b.lr, batch_size=r.b.batch_size)

    def hiap(seed: int) -> dict[str, Any]:
        dense = r.dense(seed)
        model = copy.deepcopy(dense)
        gates, _ = train_gates(model, r.images(seed, r.b.hiap_images), HiAPConfig(target_macs=target),
                               replace(train, seed=seed), teacher=dense)
        half = copy.deepcopy(model)
        extract(half, gates, 0.0)  # logit 0: the paper's probability 0.5
        extract(model, gates, budget_threshold(gates, fixed_macs(dense, MacTarget.absolute(target)), target, 0.005))
        return {"macs": count_macs(model).macs, "tuned": r.correct(model), "macs_half": count_macs(half).macs,
                "tuned_half": r.correct(half)}

    rows = [{**r.unit(f"hiap/all-gates/seed{seed}", lambda seed=seed: hiap(seed), family="hiap", seed=seed),
             "seed": seed} for seed in r.b.seeds]

    def uniform_arm(seed: int, goal: float) -> dict[str, Any]:
        dense = r.dense(seed)
        share = _bisect(lambda x: count_macs(uniform(dense, x)).macs, goal, 0.02, 1.0, steps=14)
        model = uniform(dense, share)
        row = {"macs": count_macs(model).macs, "pruned": r.correct(model), "share": share}
        # the same images, epochs and distillation HiAP trains with
        r.tune(model, seed, images=r.b.hiap_images, epochs=r.b.hiap_epochs, alpha=0.7, tau=4.0)
        return {**row, "tuned": r.correct(model)}

    baseline = [{**r.unit(f"hiap/uniform/seed{seed}", lambda seed=seed, row=row: uniform_arm(seed, row["macs"]),
                          family="hiap", seed=seed), "seed": seed} for seed, row in zip(r.b.seeds, rows, strict=True)]
    budget = [{"seed": row["seed"], "threshold 0.5": row["macs_half"] / target - 1,
               "budget search": row["macs"] / target - 1,
               "top1 at 0.5": top1([{"t": row["tuned_half"]}], "t", r.images_count)[0]} for row in rows]
    half = [b["threshold 0.5"] for b in budget]
    search = [b["budget search"] for b in budget]
    claims = [
        claim("hiap-uniform", [compare(r, "HiAP vs uniform, after training", "HiAP", rows, "uniform", baseline,
                                       "tuned")]),
        # Proposition 2 is about gates trained until they are binary (200 epochs, tau annealed); these are not, so
        # the 0.5 threshold's MACs are shown, not judged.
        {"id": "hiap-budget", "verdict": "not tested", "comparisons": [], "budget": budget, "target": target,
         "facts": {"steps": r.b.hiap_epochs * math.ceil(r.b.hiap_images / r.b.batch_size),
                   "half_low": min(half), "half_high": max(half), "search_low": min(search),
                   "search_high": max(search), "within": sum(abs(x) <= HIAP_TOLERANCE for x in half),
                   "seeds": len(half), "tolerance": HIAP_TOLERANCE, "threshold": 0.5, "paper_epochs": 200,
                   "paper_tau": 0.5}},
    ]
    return claims, {"target": target, "budget": budget}


# ---------------------------------------------------------------------------------------------------- width


def width_to(model: nn.Module, target: float, calibration: list) -> nn.Module:
    """Taylor width pruning (torch-pruning) a little above ``target``, then neurons to reach it exactly."""
    work = copy.deepcopy(model)
    prune_width_to_macs(work, MacTarget.absolute(target * (1 + 2 * MATCH)), importance="taylor", steps=8,
                        gradients=taylor_gradients(work, calibration[:4]))
    trim_to(work, target)
    return work


def hetdpt_plus_claims(r: Runner, hetdpt_table: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """HetDPT+ (Sec. 3.5): Step 2's layers at ``depth_share``, then width pruning, vs width pruning alone, after
    recovery at matched MACs."""
    target = r.dense_macs * r.b.width_share
    depth_target = r.dense_macs * r.b.depth_share

    def width_only(seed: int) -> nn.Module:
        return width_to(r.dense(seed), target, r.calibration)

    def plus(seed: int) -> nn.Module:
        layers = hetdpt_table["step2"][seed]
        model = _depth_model(r, seed, layers["attention"], layers["activation"], depth_target)
        merge_linear_mlps(model)
        return width_to(model, target, r.calibration)

    width = r.arms("width/taylor", width_only, family="width")
    both = r.arms("width/hetdpt+", plus, family="width")
    label = "HetDPT+ vs width only, after recovery"
    return [claim("hetdpt-plus", [compare(r, label, "HetDPT+", both, "width only", width, "tuned")],
                  lengths=[lengths(r, label, "HetDPT+", both, r.longer("width/hetdpt+", plus, family="width"),
                                   "width only", width, r.longer("width/taylor", width_only, family="width"))])], {}


# ---------------------------------------------------------------------------------------------------- Fig. 8


def fig8_claims(r: Runner, hetdpt_table: dict[str, Any], star_table: dict[str, Any]
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """HetDPT's Fig. 8: at matched top-1, HetDPT + token reduction is faster than the dense model + token reduction.

    Per seed, ToMe's merge count and STAR's keep rate are swept on the dense checkpoint and on HetDPT's (the Step 2
    arm after the recovery, rebuilt as ``hetdpt-step2`` measured it), no fine-tuning after the token reduction (ToMe
    needs none; the paper's Fig. 8 applies it to trained models). Every point's top-1 (on the validation images, and
    on the held-out training images the choice is made on) and its speedup over the dense checkpoint (paired timing)
    are measured. A curve's operating point is its fastest point whose held-out top-1 is at most ``fig8_floor`` points
    below the lower of the seed's dense and HetDPT held-out top-1: the paper's "about 0.9 points below the dense
    model" where HetDPT recovers to the dense accuracy (its 400 epochs), else an accuracy both curves reach (a floor
    under the dense model alone would leave HetDPT's curve no point to compare: the quick run's HetDPT checkpoint sat
    8 points under its dense one). The two operating points are then timed against each other in alternating pairs.
    The rule, fixed before the multi-seed run: the claim *holds* when HetDPT's operating point is faster in every
    seed (the lower quartile of the pairs' ratios above 1) and the dense curve's is not its sweep's last point (it
    might be faster further on), *does not hold* when HetDPT's is slower in every seed (the upper quartile below 1),
    else *inconclusive*. The sweeps run until few tokens are left (r 16 under the per-block
    cap, ρ 0.1)."""
    target = r.dense_macs * r.b.depth_share

    def hetdpt(seed: int) -> nn.Module:
        def build() -> nn.Module:
            picked = hetdpt_table["step2"][seed]
            model = _depth_model(r, seed, picked["attention"], picked["activation"], target)
            r.tune(model, seed)
            merge_linear_mlps(model)
            return model
        return r.once(("fig8-hetdpt", seed), build)

    bases = {"dense": r.dense, "HetDPT": hetdpt}
    # The rebuilt HetDPT model is the Step 2 arm hetdpt-step2 scored: the same images right.
    rebuilt = {seed: r.unit(f"fig8/hetdpt-rebuilt/seed{seed}", lambda seed=seed: r.correct(hetdpt(seed)) == r.units[
        f"hetdpt/step2-arm/seed{seed}"]["value"]["tuned"], family="fig8", seed=seed) for seed in r.b.seeds}

    def acs(base: str, seed: int) -> list[float]:
        return r.unit(f"fig8/{base}/acs/seed{seed}",
                      lambda: average_cosine_similarity(bases[base](seed), r.calibration), family="fig8", seed=seed)

    def reduced(reducer: str, base: str, seed: int, setting: float) -> nn.Module:
        model = bases[base](seed)
        if reducer == "ToMe":
            merged = copy.deepcopy(model)
            apply_merging(merged, r_schedule(int(setting), 0.0, r.blocks))
            return merged
        rates = acs(base, seed)
        return tokens(model, keep_rates(rates, setting, anchor=star_anchor(rates)), STAR_ALPHA,
                      torch.tensor(star_table[seed]["prior"]))

    def timed(a: nn.Module, b: nn.Module) -> dict[str, float]:
        cmp = compare_speed(a, b, batch_size=r.b.fig8_batch, pairs=r.b.fig8_pairs, warmup=3).to_dict()
        return {"speedup": cmp["speedup"], "q1": cmp["speedup_q1"], "q3": cmp["speedup_q3"]}

    def point(reducer: str, base: str, seed: int, setting: float) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            model = reduced(reducer, base, seed, setting)
            return {"macs": count_macs(model).macs, "correct": r.correct(model), "held_out": r.held_out(model),
                    **timed(model, r.dense(seed))}
        value = r.unit(f"fig8/{base}+{reducer}/{setting:g}/seed{seed}", work, family="fig8", seed=seed)
        return {**value, "setting": setting, "top1": top1([{"c": value["correct"]}], "c", r.images_count)[0]}

    claims, table = [], {}
    for reducer, settings in (("ToMe", r.b.fig8_tome), ("STAR", r.b.fig8_star)):
        seeds, a_rows, b_rows = {}, [], []
        for seed in r.b.seeds:
            if reducer == "STAR":  # read even where every point is stored, so that the store keeps them
                for base in bases:
                    acs(base, seed)
            curves = {base: [point(reducer, base, seed, x) for x in settings] for base in bases}
            # Each sweep's first point is its model itself (r 0, keep rate 1): the dense and the HetDPT top-1.
            floor = min(curve[0]["held_out"] for curve in curves.values()) - r.b.fig8_floor
            chosen = {base: max((p for p in curve if p["held_out"] >= floor), key=lambda p: p["speedup"],
                                default=None) for base, curve in curves.items()}
            duel = None
            if all(chosen.values()):
                h, d = chosen["HetDPT"]["setting"], chosen["dense"]["setting"]
                duel = r.unit(f"fig8/{reducer}/duel/{h:g}-vs-{d:g}/seed{seed}", lambda h=h, d=d, seed=seed: timed(
                    reduced(reducer, "HetDPT", seed, h), reduced(reducer, "dense", seed, d)), family="fig8", seed=seed)
                a_rows.append({"macs": chosen["HetDPT"]["macs"], "c": chosen["HetDPT"]["correct"]})
                b_rows.append({"macs": chosen["dense"]["macs"], "c": chosen["dense"]["correct"]})
            # A dense curve still above the floor at the sweep's last point might be faster further on: not a win.
            censored = chosen["dense"] is curves["dense"][-1]
            faster = duel is not None and duel["q1"] > 1 and not censored
            slower = duel is not None and duel["q3"] < 1
            kept = ("setting", "top1", "held_out", "speedup", "q1", "q3", "macs")
            seeds[seed] = {"floor": floor, "duel": duel, "censored": censored,
                           "outcome": "faster" if faster else "slower" if slower else "unclear",
                           "curves": {base: [{k: p[k] for k in kept} for p in curve] for base, curve in curves.items()},
                           "chosen": {base: None if p is None else p["setting"] for base, p in chosen.items()}}
        outcomes = [s["outcome"] for s in seeds.values()]
        verdict = "holds" if set(outcomes) == {"faster"} else "does not hold" if set(outcomes) == {"slower"} else \
            "inconclusive"
        # The accuracy at the two operating points, paired over the seeds that have both: how well they match.
        comparisons = [compare(r, f"HetDPT + {reducer} vs dense + {reducer} at their operating points",
                               f"HetDPT + {reducer}", a_rows, f"dense + {reducer}", b_rows, "c", kind="comparable",
                               matched=False)] if len(a_rows) >= 2 else []
        name = f"hetdpt-fig8-{reducer.lower()}"
        judged = claim(name, comparisons) if comparisons else {"id": name, "comparisons": []}
        claims.append({**judged, "verdict": verdict, "seeds": seeds})
        table[reducer] = seeds
    return claims, {**table, "rebuilt": rebuilt}


# ---------------------------------------------------------------------------------------------------- the run


def family_code() -> dict[str, tuple[Any, ...]]:
    """The code each family of units runs: this file's functions and vitprune's packages (:func:`source_hash`).
    A unit's key holds its family's hash, so changing any of it re-measures the family."""
    base = (Runner, final_macs, _bisect, pack, "adapters", "surgery", "training", "measure", "data", "models",
            "layers.py", "recipe", "runs/stages.py")
    hetdpt = (layer_savings, trim_to, depth_grid, layer_te, te_layers, _depth_model, predictor, predicted, map_pick,
              step2, hetdpt_claims, "methods/hetdpt", "methods/vbp")
    star = (_mean_macs, star_anchor, manual_rates, StarSchedules, tokens, star_claims, "methods/star")
    fig8 = (*hetdpt, *star, fig8_claims, "methods/tome")
    return {"dense": (*base, control_claims),
            "hetdpt": (*base, *hetdpt),
            "vbp": (*base, vbp_claims, "methods/vbp"),
            "star": (*base, *star),
            "vbp-why": (*base, mean_shift_facts, "methods/vbp"),
            "hiap": (*base, hiap_claims, sys.modules[uniform.__module__], "methods/hiap"),
            "width": (*base, *hetdpt, width_to, hetdpt_plus_claims, "methods/width"),
            "fig8": (*base, *fig8)}


def _call(measured: int, seconds: float) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "measured": measured, "seconds": seconds}


@contextlib.contextmanager
def _recorded(path: Path, units: dict[str, Any], calls: list[dict[str, Any]], start: float) -> Iterator[list[Runner]]:
    """Records a call stopped part-way (Ctrl-C or SIGTERM) in the store with the units it saved, so that the wall
    time of a run resumed over several calls adds up."""
    runner: list[Runner] = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield runner
    except KeyboardInterrupt:
        if runner and runner[0].measured:
            stopped = _call(runner[0].measured, time.perf_counter() - start)
            write_json(path, {"units": units, "calls": [*calls, stopped]})
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(setting: Setting, budget: Budget, path: Path, *, fresh: bool = False, progress: bool = True
        ) -> dict[str, Any]:
    """Every claim, measured (or read back from ``path`` where the stored unit's key still matches)."""
    stored = {} if fresh or not path.exists() else read_json(path)
    units: dict[str, Any] = stored.get("units", {})
    calls: list[dict[str, Any]] = stored.get("calls", [])
    start = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} units"),
               TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar, _recorded(path, units, calls, start) as runner:
        r = Runner(setting, budget, path, units, bar)
        runner.append(r)
        control, control_table = control_claims(r)
        hetdpt, hetdpt_table = hetdpt_claims(r)
        vbp, vbp_table = vbp_claims(r)
        next(c for c in vbp if c["id"] == "vbp-mean-shift")["facts"] = mean_shift_facts(r)
        star, star_table = star_claims(r)
        hiap, hiap_table = hiap_claims(r)
        plus, _ = hetdpt_plus_claims(r, hetdpt_table)
        fig8, fig8_table = fig8_claims(r, hetdpt_table, star_table)
    used = {name: units[name] for name in sorted(r.touched)}
    this_call = time.perf_counter() - start
    if r.measured:  # the calls that measured something make up the run's wall time
        calls.append(_call(r.measured, this_call))
    write_json(path, {"units": used, "calls": calls})  # what stale code measured goes: the store is the page's
    dense = {seed: {"label": setting.labels[seed], "weights": r.weights[seed],
                    "top1": top1([row], "pruned", r.images_count)[0],
                    "top1_recovered": top1([row], "tuned", r.images_count)[0]}
             for seed, row in zip(budget.seeds, control_table["rows"], strict=True)}
    model = setting.checkpoints[budget.seeds[0]]
    groups: dict[str, dict[str, float]] = {}
    for name, u in used.items():  # per-unit times by kind of unit (the name without its seed and numbers)
        group = groups.setdefault(unit_group(name), {"units": 0, "seconds": 0.0})
        group["units"] += 1
        group["seconds"] += u["seconds"]
    return {"format": FORMAT, "date": max(u["date"] for u in used.values()), "budget": asdict(budget), "dense": dense,
            "dense_counts": count_macs(model).totals(), "val_images": r.images_count,
            "claims": control + hetdpt + vbp + star + hiap + plus + fig8,
            "tables": {"hetdpt": hetdpt_table, "vbp": vbp_table, "star": star_table, "hiap": hiap_table,
                       "fig8": fig8_table},
            "seconds": {"this_call": this_call, "measurements": sum(u["seconds"] for u in used.values()),
                        "calls": sum(c["seconds"] for c in calls)},
            "calls": calls, "unit_times": dict(sorted(groups.items(), key=lambda g: -g[1]["seconds"])),
            "measured_now": r.measured, "units": len(used),
            "torch": sorted({u["torch"] for u in used.values()}),
            "threads": sorted({u["threads"] for u in used.values()})}


def unit_group(name: str) -> str:
    """A unit's kind: its name without the seed, settings as ``#`` (``hetdpt/grid/a#g#/long``)."""
    setting = r"[\d.]+|a\d+g\d+|(attention|activation)\d+|[\d.]+-vs-[\d.]+"
    return "/".join(re.sub(r"\d+(\.\d+)?", "#", part) if re.fullmatch(setting, part) else part
                    for part in name.split("/") if not re.fullmatch(r"seed\d+", part))


def command(budget: Any, quick: bool, script: str = "claims") -> str:
    """The command line of ``benchmarks/<script>.py`` that makes its page: every flag that sets what is measured
    (``budget``'s seeds)."""
    seeds = " ".join(map(str, budget.seeds))
    return f"python benchmarks/{script}.py" + (" --quick" if quick else "") + f" --seeds {seeds}"


def main(argv: list[str] | None = None) -> None:
    """Measure what is missing or stale, then write the JSON, page and plots."""
    args = parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.seeds:
        budget = replace(budget, seeds=args.seeds)
    stem = "claims_quick" if args.quick else "claims"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        report = run(load_setting(budget), budget, args.out_dir / f"{stem}.store.json", fresh=args.fresh,
                     progress=sys.stderr.isatty())
    except VitpruneError as exc:
        sys.exit(f"error: {exc}")
    write(report, args.out_dir, stem, command(budget, args.quick))


if __name__ == "__main__":
    main()
