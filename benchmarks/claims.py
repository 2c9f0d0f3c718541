"""Each paper's claims tested against its baselines on cluttered MNIST, at matched MACs, over several seeds.

Starting checkpoint: vitprune's ``cluttered-mnist-vit`` (trained on first use, then cached;
needs ``vitprune[bench]``). Every arm of a comparison is pruned to the same MACs (full
convention, within 1%), measured right after pruning and after the same short recovery
(:class:`Budget`'s ``tune_images`` training images, one epoch, AdamW, soft distillation from the
dense model), over its ``seeds`` (a seed sets the fine-tune's images and their order and any random
or trained selection). Each arm's interval is its mean ± the seeds' std and the validation set's
binomial standard error together (:func:`_margin`). A comparison *holds* when the claimed winner's
interval lies above the other's, *does not hold* when it lies below (or, for "comparable" claims,
when they do not overlap), else it is *inconclusive*. A claim holds when all its comparisons hold
and does not hold when any of them does not.

Each measurement is stored (``<out-dir>/claims.store.json``) as soon as it is made, so an
interrupted run continues where it stopped (``--fresh`` starts over). Writes
``<out-dir>/claims.{json,md}`` and plots (``claims_quick.*`` with ``--quick``).

    python benchmarks/claims.py                 # the full run: 65 minutes on 2 CPU cores in ours
    python benchmarks/claims.py --quick         # one seed, smaller budgets: about 11 minutes
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from hiap_digits import uniform
from profile_deit import write_results
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn
from torch.utils.data import Dataset, Subset

import vitprune
from vitprune.atomic import atomic_file, read_json, write_json
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import count_macs
from vitprune.methods.hetdpt import collect_predictor_data, fit_predictor
from vitprune.methods.hetdpt.baselines import greedy_te
from vitprune.methods.hetdpt.importance import select_layers
from vitprune.methods.hiap import HiAPConfig, budget_threshold, extract, train_gates
from vitprune.methods.hiap.search import fixed_macs
from vitprune.methods.star import (apply_keep_rates, average_cosine_similarity, inter_layer_scores, keep_rates,
                                   rho_for_macs)
from vitprune.methods.vbp import magnitude_scores, mlp_statistics, neuron_scores, prune_by_selection, select_neurons
from vitprune.methods.width import prune_width_to_macs, taylor_gradients

from vitprune.surgery import merge_linear_mlps, prune_depth, remaining_layers
from vitprune.training import TrainConfig, evaluate, finetune_pruned

#: MACs of the arms of one comparison may differ by at most this share.
MATCH = 0.01
#: VBP's criteria (the paper's and its baselines').
VBP_CRITERIA = ("variance", "magnitude", "mean", "random")
#: STAR's fused score weight (the paper's DeiT setting).
STAR_ALPHA = 0.15


@dataclass
class Budget:
    """What one run spends: seeds, fine-tuning images and every method's own budget; MAC targets are shares of
    the dense model's (full convention)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    tune_images: int = 2000
    #: One epoch at a constant rate (the engine's cosine steps per epoch): 5e-4, the model's training peak, cost the
    #: STAR model 4 points where 2e-4 cost 0.3, and recovered a depth-pruned one only 2 points more (our probe).
    lr: float = 2e-4
    batch_size: int = 64
    calibration_images: int = 1000
    vbp_ratios: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7])
    depth_share: float = 0.66
    probe_images: int = 512
    te_images: int = 256
    search_images: int = 2000
    star_share: float = 0.6
    lrp_images: int = 256
    star_mac_images: int = 16
    hiap_share: float = 0.6
    hiap_images: int = 2000
    hiap_epochs: int = 2
    width_share: float = 0.5
    #: Composition: depth pruning to ``compose_depth_share``, then STAR to ``compose_share`` (STAR alone cannot go
    #: far below 60% on the cluttered-MNIST model: its ACS schedule keeps the early blocks' tokens).
    compose_depth_share: float = 0.8
    compose_share: float = 0.6


FULL = Budget()
QUICK = Budget(seeds=[0], tune_images=500, calibration_images=500, vbp_ratios=[0.5], probe_images=128,
               te_images=128, search_images=500, lrp_images=64, star_mac_images=8, hiap_images=500, hiap_epochs=1)


@dataclass
class Setting:
    """The dense model and its data: augmented training set, the same images with the evaluation transform, and
    the validation set."""

    checkpoint: str
    dense: nn.Module
    train: Dataset
    plain: Dataset
    val: Dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed and smaller budgets (about 11 minutes)")
    parser.add_argument("--seeds", type=int, nargs="+", help="override the budget's seeds")
    parser.add_argument("--fresh", action="store_true", help="ignore measurements an earlier run stored")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    return parser.parse_args(argv)


def load_setting() -> Setting:
    """The trained cluttered-MNIST ViT and its data."""
    model = vitprune.create_model("cluttered-mnist-vit", pretrained=True)
    size = vitprune.get_adapter(model).input_size
    return Setting("cluttered-mnist-vit (trained by vitprune, seed 0)", model,
                   build_dataset("cluttered-mnist", "train", input_size=size),
                   build_dataset("cluttered-mnist", "train", input_size=size, is_training=False),
                   build_dataset("cluttered-mnist", "val", input_size=size))


# ---------------------------------------------------------------------------------------------------- measuring


class Runner:
    """Measures arms, each once: results live in ``units`` (saved to ``path`` after every new one)."""

    def __init__(self, setting: Setting, budget: Budget, path: Path, units: dict[str, Any], progress: Progress):
        self.s, self.b, self.path, self.units, self.progress = setting, budget, path, units, progress
        self.task = progress.add_task("claims", total=None)
        self.val_loader = build_loader(setting.val, 256, shuffle=False, seed=0)
        self.calibration = list(build_loader(balanced_subset(setting.plain, budget.calibration_images, seed=0),
                                             64, shuffle=False, seed=0))
        self.dense_macs = count_macs(setting.dense).macs
        self._nested = 0.0

    def unit(self, key: str, compute: Callable[[], Any]) -> Any:
        """The stored result of ``key``, or ``compute()`` stored under it."""
        if key not in self.units:
            self.progress.update(self.task, description=key)
            outer, self._nested = self._nested, 0.0
            start = time.perf_counter()
            value = compute()
            elapsed = time.perf_counter() - start
            # A unit's own time: units computed inside it (a selection inside an arm) count for themselves.
            self.units[key] = {"value": value, "seconds": elapsed - self._nested, "threads": torch.get_num_threads(),
                               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
            self._nested = outer + elapsed
            self.save()
            if not self.progress.disable:
                self.progress.console.log(f"{key}: {self.units[key]['seconds']:.1f} s")
            else:
                print(f"{key}: {self.units[key]['seconds']:.1f} s", flush=True)
        self.progress.advance(self.task)
        return self.units[key]["value"]

    def save(self) -> None:
        write_json(self.path, {"budget": asdict(self.b), "checkpoint": self.s.checkpoint, "units": self.units})

    def evaluate(self, model: nn.Module) -> float:
        return evaluate(model, self.val_loader)["top1"]

    def images(self, seed: int, count: int) -> Subset:
        """``count`` training images drawn by ``seed``: what one seed's fine-tune, search or HiAP run trains on."""
        order = torch.randperm(len(self.s.train), generator=torch.Generator().manual_seed(seed))
        return Subset(self.s.train, order[:count].tolist())

    def tune(self, model: nn.Module, seed: int, *, images: int | None = None, epochs: int = 1, alpha: float = 0.5,
             tau: float = 1.0) -> None:
        """The short recovery: ``images`` training images drawn by ``seed``, soft distillation from the dense model."""
        config = TrainConfig(epochs=epochs, lr=self.b.lr, batch_size=self.b.batch_size, seed=seed)
        finetune_pruned(model, self.images(seed, images or self.b.tune_images), None, config, teacher=self.s.dense,
                        distill="soft", alpha=alpha, tau=tau)

    def arm(self, key: str, build: Callable[[], nn.Module], seed: int, *, tune: bool = True,
            macs: Callable[[nn.Module], float] | None = None) -> dict[str, Any]:
        """Build the pruned model, measure it right after pruning, then after the short recovery."""
        def work() -> dict[str, Any]:
            model = build()
            row = {"macs": (macs or final_macs)(model), "top1_pruned": self.evaluate(model)}
            if tune:
                self.tune(model, seed)
                merge_linear_mlps(model)
                row["top1_tuned"] = self.evaluate(model)
            return row
        return {**self.unit(key, work), "images": len(self.s.val)}

    def arms(self, key: str, build: Callable[[int], nn.Module], **options: Any) -> list[dict[str, Any]]:
        """:meth:`arm` once per seed; ``build(seed)``."""
        return [self.arm(f"{key}/seed{seed}", lambda seed=seed: build(seed), seed, **options) for seed in self.b.seeds]


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


def _values(rows: list[dict[str, Any]], metric: str) -> list[float]:
    return [100 * r[metric] for r in rows]


def _spread(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _margin(values: list[float], std: float, rows: list[dict]) -> float:
    """Half-width of an arm's interval: the seeds' std and the binomial standard error of a top-1 measured on
    ``images`` validation images, together (a deterministic arm has no seed spread, but its top-1 is still an
    estimate from a finite set: about 1.1 points at 85% on 1,000 images)."""
    images = rows[0].get("images")
    if not images:
        return std
    p = min(max(statistics.mean(values) / 100, 0.0), 1.0)
    return math.hypot(std, 100 * math.sqrt(p * (1 - p) / images))


def compare(label: str, a: str, a_rows: list[dict], b: str, b_rows: list[dict], metric: str,
            kind: str = "better") -> dict[str, Any]:
    """One comparison of two arms on ``metric``: is ``a`` better than ``b`` (``kind`` "better") or comparable
    to it (``"comparable"``)? Each arm's interval is its mean ± :func:`_margin`. Arms whose MACs differ by
    more than :data:`MATCH` get no verdict but *inconclusive*."""
    (va, vb) = _values(a_rows, metric), _values(b_rows, metric)
    (ma, sa), (mb, sb) = _spread(va), _spread(vb)
    ea, eb = _margin(va, sa, a_rows), _margin(vb, sb, b_rows)
    apart = ma - ea > mb + eb or ma + ea < mb - eb
    if kind == "comparable":
        verdict = "does not hold" if apart else "holds"
    elif ma - ea > mb + eb:
        verdict = "holds"
    elif ma + ea < mb - eb:
        verdict = "does not hold"
    else:
        verdict = "inconclusive"
    macs_a, macs_b = (statistics.mean(r["macs"] for r in rows) for rows in (a_rows, b_rows))
    gap = abs(macs_a - macs_b) / max(macs_a, macs_b)
    if gap > MATCH:  # not a fair comparison: it judges nothing
        verdict = "inconclusive"
    return {"label": label, "a": a, "b": b, "metric": metric, "kind": kind, "a_mean": ma, "a_std": sa, "a_margin": ea,
            "b_mean": mb, "b_std": sb, "b_margin": eb, "n": len(a_rows), "macs_a": macs_a, "macs_b": macs_b,
            "macs_gap": gap, "verdict": verdict}


def claim(paper: str, statement: str, comparisons: list[dict[str, Any]], note: str = "") -> dict[str, Any]:
    """A claim with its comparisons' verdicts and its own."""
    verdicts = [c["verdict"] for c in comparisons]
    if all(v == "holds" for v in verdicts):
        verdict = "holds"
    elif "does not hold" in verdicts:
        verdict = "does not hold"
    else:
        verdict = "inconclusive"
    return {"paper": paper, "statement": statement, "verdict": verdict, "note": note, "comparisons": comparisons}


def _both(label: str, a: str, a_rows: list[dict], b: str, b_rows: list[dict]) -> list[dict[str, Any]]:
    """The comparison right after pruning and after the short recovery."""
    return [compare(f"{label}, right after pruning", a, a_rows, b, b_rows, "top1_pruned"),
            compare(f"{label}, after recovery", a, a_rows, b, b_rows, "top1_tuned")]


# ---------------------------------------------------------------------------------------------------- VBP


def vbp_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Variance vs magnitude, mean activation and random, each with and without mean-shift compensation."""
    dense = r.s.dense
    stats = mlp_statistics(dense, r.calibration)
    arms: dict[tuple[float, str, bool], list[dict]] = {}
    for ratio in r.b.vbp_ratios:
        for criterion in VBP_CRITERIA:
            for compensate in (True, False):
                def build(seed: int, criterion=criterion, compensate=compensate, ratio=ratio) -> nn.Module:
                    scores = neuron_scores(dense, criterion, stats=stats, seed=seed)
                    model = copy.deepcopy(dense)
                    prune_by_selection(model, select_neurons(scores, ratio), stats if compensate else None)
                    return model
                name = f"vbp/{ratio}/{criterion}/{'ms' if compensate else 'plain'}"
                arms[(ratio, criterion, compensate)] = r.arms(name, build)
    criterion_cmp, compensation_cmp = [], []
    for ratio in r.b.vbp_ratios:
        for compensate in (True, False):
            tag = "+ms" if compensate else ""
            for other in VBP_CRITERIA[1:]:
                criterion_cmp += _both(f"{ratio:.0%} pruned", f"variance{tag}", arms[(ratio, "variance", compensate)],
                                       f"{other}{tag}", arms[(ratio, other, compensate)])
        for criterion in VBP_CRITERIA:
            compensation_cmp += _both(f"{ratio:.0%} pruned", f"{criterion}+ms", arms[(ratio, criterion, True)],
                                      criterion, arms[(ratio, criterion, False)])
    claims = [
        claim("VBP", "Post-activation variance ranks FFN neurons better than weight magnitude, mean activation and "
              "random choice (same compensation on both sides)", criterion_cmp),
        claim("VBP", "Mean-shift compensation (the removed neurons' mean folded into the next bias) improves every "
              "criterion", compensation_cmp),
    ]
    table = {f"{ratio}/{criterion}/{'ms' if c else 'plain'}": rows for (ratio, criterion, c), rows in arms.items()}
    return claims, table


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


def trim_to(model: nn.Module, target: float) -> int:
    """Remove the lowest-magnitude FFN neurons (ranked over the blocks that keep their GELU) until the model costs
    at most ``target`` MACs; returns how many went. This tops a depth choice up to an exact MAC budget."""
    if final_macs(model) <= target:
        return 0
    blocks = set(remaining_layers(model)["activation"])
    scores = {b: s for b, s in magnitude_scores(model).items() if b in blocks}
    total = sum(len(s) for s in scores.values())

    def removed(count: int) -> dict[int, list[int]]:
        return select_neurons(scores, count / total, rounding="round")

    def cost(count: int) -> int:
        work = copy.deepcopy(model)
        prune_by_selection(work, removed(count))
        return final_macs(work)

    full, none = cost(total), final_macs(model)
    if full > target:
        raise VitpruneError("no neuron trim reaches the MAC target")
    # The fewest neurons that reach the target: cost(high) <= target < cost(low). Neurons of a plain ViT all cost
    # the same, so interpolation brackets it at once; the bracket widens where they do not.
    guess = math.ceil((none - target) / (none - full) * total)
    low, high, step = max(0, guess - 1), min(total, guess + 1), 2
    while low > 0 and cost(low) <= target:
        low, step = max(0, low - step), 2 * step
    while cost(high) > target:
        high, step = min(total, high + step), 2 * step
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if cost(mid) <= target else (mid, high)
    prune_by_selection(model, removed(high))
    return high


def depth_grid(r: Runner, share: float) -> list[dict[str, Any]]:
    """Every split that reaches ``share`` of the dense MACs: ``a`` attention layers, as many whole GELU layers as
    fit (``g``), and a neuron trim for the rest (``t``: the GELU layers it all counts as, fractional)."""
    savings = r.unit("hetdpt/savings", lambda: layer_savings(r.s.dense))
    blocks = len(vitprune.get_adapter(r.s.dense).blocks())
    needed = r.dense_macs * (1 - share)
    grid = []
    for a in range(blocks + 1):
        t = (needed - a * savings["attention"]) / savings["activation"]
        g = math.floor(t + 1e-9)
        # a trim needs a block that keeps its GELU
        if 0 <= t and (g < blocks or t - g < 1e-9) and g <= blocks:
            grid.append({"a": a, "g": g, "t": t})
    return grid


def _te_layers(r: Runner, kind: str, count: int) -> list[int]:
    if count == 0:
        return []
    batches = r.calibration[: max(1, r.b.te_images // 64)]
    attention, activation = r.unit(f"hetdpt/te/{kind}/{count}", lambda: greedy_te(r.s.dense, kind, count, batches))
    return attention or activation


def _depth_model(r: Runner, attention: list[int], activation: list[int], target: float) -> nn.Module:
    model = copy.deepcopy(r.s.dense)
    prune_depth(model, attention, activation, merge=False)
    trim_to(model, target)
    return model


def predictor(r: Runner):
    """The MAP fitted to Algorithm 1 and 2 points (fast fine-tunes on ``probe_images``)."""
    blocks = len(vitprune.get_adapter(r.s.dense).blocks())

    def points() -> list[dict[str, Any]]:
        probe = balanced_subset(r.s.train, r.b.probe_images, seed=0)
        return collect_predictor_data(
            r.s.dense, probe, r.s.val, max_attention=blocks, max_activation=blocks - 1, interleaved_rounds=blocks // 2,
            finetune=TrainConfig(epochs=1, lr=r.b.lr, batch_size=r.b.batch_size), te_set=r.s.plain,
            te_images=r.b.te_images)
    data = r.unit("hetdpt/predictor-points", points)
    return fit_predictor([(p["a"], p["t"], p["top1"]) for p in data]), data


def predicted(fit, point: dict[str, Any], blocks: int) -> float:
    """The MAP's top-1 (%) for a grid point; the neuron trim counts as the fraction of a GELU layer it saves."""
    return float(fit.predict(1 - point["a"] / blocks, 1 - point["t"] / blocks))


def map_pick(fit, grid: list[dict[str, Any]], blocks: int) -> dict[str, Any]:
    """The grid point of highest predicted accuracy (the MAP's split search, at a MAC budget)."""
    return max(grid, key=lambda p: predicted(fit, p, blocks))


def hetdpt_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dense = r.s.dense
    target = r.dense_macs * r.b.depth_share
    fit, points = predictor(r)
    blocks = len(vitprune.get_adapter(dense).blocks())
    grid = depth_grid(r, r.b.depth_share)
    pick = map_pick(fit, grid, blocks)
    grid_rows = {}
    for p in grid:
        layers = (_te_layers(r, "attention", p["a"]), _te_layers(r, "activation", p["g"]))
        grid_rows[p["a"]] = r.arms(f"hetdpt/grid/a{p['a']}g{p['g']}",
                                   lambda seed, layers=layers: _depth_model(r, *layers, target))

    def ste(seed: int) -> nn.Module:
        def choose() -> list[list[int]]:
            chosen = select_layers(dense, r.images(seed, r.b.search_images), TrainConfig(epochs=1, lr=r.b.lr, batch_size=r.b.batch_size,
                                                              seed=seed),
                                   attention=pick["a"], activation=pick["g"])
            return [chosen.attention, chosen.activation]
        attention, activation = r.unit(f"hetdpt/ste-layers/seed{seed}", choose)
        return _depth_model(r, attention, activation, target)

    def random_layers(seed: int) -> nn.Module:
        generator = torch.Generator().manual_seed(seed)
        attention = sorted(torch.randperm(blocks, generator=generator)[: pick["a"]].tolist())
        activation = sorted(torch.randperm(blocks, generator=generator)[: pick["g"]].tolist())
        return _depth_model(r, attention, activation, target)

    hetdpt = r.arms("hetdpt/ste", ste)
    ste_layers = {seed: r.units[f"hetdpt/ste-layers/seed{seed}"]["value"] for seed in r.b.seeds}
    te_layers = (_te_layers(r, "attention", pick["a"]), _te_layers(r, "activation", pick["g"]))
    random_rows = r.arms("hetdpt/random", random_layers)
    te_rows = grid_rows[pick["a"]]
    attention_only = grid_rows[max(p["a"] for p in grid if p["g"] == 0)] if any(p["g"] == 0 for p in grid) else None
    activation_only = grid_rows.get(0)
    types = []
    if attention_only is not None:
        types += _both("vs attention only", "HetDPT", hetdpt, "attention only", attention_only)
    if activation_only is not None:
        types += _both("vs GELU only", "HetDPT", hetdpt, "GELU only", activation_only)
    tuned = {a: _spread(_values(rows, "top1_tuned"))[0] for a, rows in grid_rows.items()}
    best = max(tuned, key=tuned.get)
    worst = min(tuned, key=tuned.get)
    near = compare(f"MAP's split a={pick['a']} vs the grid's best a={best}, after recovery", "MAP split",
                   grid_rows[pick["a"]], "best split", grid_rows[best], "top1_tuned", kind="comparable")
    spread = compare(f"the grid's best a={best} vs its worst a={worst}: do splits differ at all?", "best split",
                     grid_rows[best], "worst split", grid_rows[worst], "top1_tuned")
    if near["verdict"] == "holds" and spread["verdict"] != "holds" and pick["a"] != best:
        near["verdict"] = "inconclusive"  # no split is clearly worse than another: the grid cannot judge the pick

    single = {}
    for kind in ("attention", "activation"):
        rows = []
        for block in range(blocks):
            seed = r.b.seeds[block % len(r.b.seeds)]

            def one(kind=kind, block=block) -> nn.Module:
                model = copy.deepcopy(dense)
                prune_depth(model, **{kind: [block]}, merge=False)
                return model
            rows.append(r.arm(f"hetdpt/single/{kind}{block}/seed{seed}", one, seed))
        single[kind] = rows
    asym_right = compare("one attention vs one GELU layer removed, right after", "attention removed",
                         single["attention"], "GELU removed", single["activation"], "top1_pruned")
    asym_tuned = compare("one attention vs one GELU layer removed, after recovery", "attention removed",
                         single["attention"], "GELU removed", single["activation"], "top1_tuned", kind="comparable")
    for c in (asym_right, asym_tuned):
        c["macs_gap"] = None  # one layer of each type: not a matched-MAC comparison, by design

    claims = [
        claim("HetDPT", "Removing attention and GELU layers jointly (MAP split, learnable importance) beats "
              "removing one type only, at equal MACs and recovery", types,
              note=f"MAP's split: {pick['a']} attention + {pick['g']} GELU layers, trim {pick['t'] - pick['g']:.2f} "
                   "of a GELU layer in neurons"),
        claim("HetDPT", "Learnable (straight-through) importance picks better layers within each type than transfer "
              "entropy alone or random choice", _both("STE vs TE only", "STE", hetdpt, "TE only", te_rows)
              + _both("STE vs random", "STE", hetdpt, "random", random_rows),
              note=f"Step 2 trains {r.b.search_images} images for one epoch (lr {r.b.lr}); the layers it removes, "
                   "by seed: " + "; ".join(f"{seed}: attention {att}, GELU {act}" for seed, (att, act) in
                                          ste_layers.items())
                   + f"; TE's: attention {te_layers[0]}, GELU {te_layers[1]}"),
        claim("HetDPT", "The MAP's predicted split is (near) the best split of the budget", [near],
              note=f"grid over {len(grid)} splits (TE layers), top-1 after recovery: "
                   + ", ".join(f"a={a}: {v:.2f}" for a, v in sorted(tuned.items()))
                   + f"; does the best split beat the worst? {spread['verdict']}"),
        claim("HetDPT", "Recovery asymmetry: one GELU removal hurts far more than one attention removal right away, "
              "and after a short fine-tune both recover to comparable accuracy", [asym_right, asym_tuned],
              note=f"spread over the {blocks} layers of each type (seeds cycle over the layers)"),
    ]
    table = {"grid": [{**p, "predicted": predicted(fit, p, blocks), "rows": grid_rows[p["a"]]}
                      for p in grid],
             "pick": pick, "predictor_points": points, "predictor_fit": {"degree": fit.degree, "mae": fit.mae},
             "single": single, "ste": hetdpt, "random": random_rows,
             "ste_layers": ste_layers}
    return claims, table


# ---------------------------------------------------------------------------------------------------- STAR


def _mean_macs(r: Runner) -> Callable[[nn.Module], float]:
    """a-STAR's MACs depend on the image: their mean over the first validation images."""
    images = [r.s.val[i][0] for i in range(min(r.b.star_mac_images, len(r.s.val)))]
    return lambda model: statistics.mean(count_macs(model, image=img).macs for img in images)


def star_anchor(acs: list[float]) -> str:
    """The paper's ACS anchors (first and last block), or ``minmax`` where those do not increase."""
    try:
        keep_rates(acs, 0.5, anchor="paper")
    except VitpruneError:
        return "minmax"
    return "paper"


def star_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dense = r.s.dense
    blocks = len(vitprune.get_adapter(dense).blocks())
    target = r.dense_macs * r.b.star_share
    acs = r.unit("star/acs", lambda: average_cosine_similarity(dense, r.calibration))
    prior = torch.tensor(r.unit("star/lrp", lambda: inter_layer_scores(
        dense, r.calibration, max_images=r.b.lrp_images).float().tolist()))
    mean_macs = _mean_macs(r)
    anchor = star_anchor(acs)

    def tokens(rates: list[float], alpha: float, table: torch.Tensor | None, adaptive: bool = False) -> nn.Module:
        model = copy.deepcopy(dense)
        apply_keep_rates(model, rates, alpha=alpha, prior=table, adaptive=adaptive)
        return model

    def adaptive_rho() -> float:  # rho_for_macs for a-STAR, whose MACs are a mean over images
        return _bisect(lambda x: mean_macs(tokens(keep_rates(acs, x, anchor=anchor), STAR_ALPHA, prior, True)),
                       target, 1e-4, 1.0, steps=12)

    rates = keep_rates(acs, r.unit("star/rho", lambda: rho_for_macs(dense, acs, target, anchor=anchor)),
                       anchor=anchor)
    flat = r.unit("star/uniform", lambda: _bisect(
        lambda x: count_macs(tokens([x] * blocks, 1.0, None)).macs, target, 1e-3, 1.0))
    adaptive_rates = keep_rates(acs, r.unit("star/rho-adaptive", adaptive_rho), anchor=anchor)

    def random_prior(seed: int) -> torch.Tensor:
        return torch.rand(prior.shape, generator=torch.Generator().manual_seed(seed)) + 1e-3

    fused = r.arms("star/fused", lambda seed: tokens(rates, STAR_ALPHA, prior))
    cls = r.arms("star/cls-only", lambda seed: tokens(rates, 1.0, None))
    lrp = r.arms("star/lrp-only", lambda seed: tokens(rates, 0.0, prior))
    rand = r.arms("star/random", lambda seed: tokens(rates, 0.0, random_prior(seed)))
    flat_rows = r.arms("star/uniform-rates", lambda seed: tokens([flat] * blocks, STAR_ALPHA, prior))
    adaptive = r.arms("star/a-star", lambda seed: tokens(adaptive_rates, STAR_ALPHA, prior, True), macs=mean_macs)
    claims = [
        claim("STAR", "Fusing online [CLS] attention with the offline LRP prior picks better tokens than either "
              "alone or random choice, at equal MACs", _both("vs [CLS] only", "fused", fused, "[CLS] only", cls)
              + _both("vs LRP only", "fused", fused, "LRP only", lrp)
              + _both("vs random", "fused", fused, "random", rand),
              note=f"α {STAR_ALPHA}; one ACS schedule ({anchor} anchors) for all four scores"),
        claim("STAR", "Keep rates from average cosine similarity beat one uniform rate at equal MACs",
              _both("ACS vs uniform", "ACS rates", fused, "uniform rate", flat_rows)),
        claim("STAR", "Adaptive a-STAR beats static STAR at equal (mean) MACs",
              _both("a-STAR vs STAR", "a-STAR", adaptive, "STAR", fused),
              note=f"a-STAR's MACs are the mean over {r.b.star_mac_images} validation images"),
    ]
    table = {"acs": acs, "anchor": anchor, "prior": prior.tolist(), "rates": rates, "uniform_rate": flat,
             "adaptive_rates": adaptive_rates,
             "rows": {"fused": fused, "cls-only": cls, "lrp-only": lrp, "random": rand, "uniform-rates": flat_rows,
                      "a-star": adaptive}}
    return claims, table


# ---------------------------------------------------------------------------------------------------- HiAP


def hiap_claims(r: Runner) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dense = r.s.dense
    target = r.dense_macs * r.b.hiap_share
    train = TrainConfig(epochs=r.b.hiap_epochs, lr=r.b.lr, batch_size=r.b.batch_size)
    variants = {"all gates": HiAPConfig(target_macs=target),
                "coarse only": HiAPConfig(target_macs=target, lambda_micro=0.0),
                "fine only": HiAPConfig(target_macs=target, lambda_macro=0.0, lambda_micro=1.5)}

    def hiap(config: HiAPConfig, seed: int) -> nn.Module:
        model = copy.deepcopy(dense)
        gates, _ = train_gates(model, r.images(seed, r.b.hiap_images), config, replace(train, seed=seed), teacher=dense)
        extract(model, gates, budget_threshold(gates, fixed_macs(dense, target), target, 0.005))
        return model

    # HiAP trains as it prunes: the extracted model's accuracy is its recovered one.
    rows = {name: [{**row, "top1_tuned": row["top1_pruned"]}
                   for row in r.arms(f"hiap/{name}", lambda seed, c=config: hiap(c, seed), tune=False)]
            for name, config in variants.items()}

    def uniform_at(seed: int, index: int) -> nn.Module:
        goal = rows["all gates"][index]["macs"]
        share = r.unit(f"hiap/uniform-share/seed{seed}", lambda: _bisect(
            lambda x: count_macs(uniform(dense, x)).macs, goal, 0.02, 1.0, steps=14))
        return uniform(dense, share)

    baseline = []
    for index, seed in enumerate(r.b.seeds):
        def work(seed=seed, index=index) -> dict[str, Any]:
            model = uniform_at(seed, index)
            row = {"macs": count_macs(model).macs, "top1_pruned": r.evaluate(model)}
            r.tune(model, seed, images=r.b.hiap_images, epochs=r.b.hiap_epochs, alpha=0.7, tau=4.0)
            return {**row, "top1_tuned": r.evaluate(model)}
        baseline.append({**r.unit(f"hiap/uniform/seed{seed}", work), "images": len(r.s.val)})
    budget = [{"label": f"{name}, seed {seed}: {row['macs'] / target - 1:+.1%} of the budget", "a": name, "b": "",
               "metric": "macs", "kind": "budget", "a_mean": 100 * row["macs"] / target, "a_std": 0.0,
               "b_mean": 100.0, "b_std": 0.0, "n": 1, "macs_a": row["macs"], "macs_b": target, "macs_gap": None,
               "verdict": "holds" if abs(row["macs"] / target - 1) <= 0.05 else "does not hold"}
              for name, group in rows.items() for seed, row in zip(r.b.seeds, group, strict=True)]
    claims = [
        claim("HiAP", "HiAP at a MAC budget beats uniform width pruning (same share of value dims and neurons in "
              "every block) at matched MACs and training", [compare(
                  "after training / fine-tuning", "HiAP", rows["all gates"], "uniform", baseline, "top1_tuned")],
              note="HiAP is trained for as many epochs on as many images as the baseline is fine-tuned"),
        claim("HiAP", "All four gate kinds together beat coarse gates only (heads, FFN blocks) and fine gates only "
              "(value dims, neurons)", [
                  compare("vs coarse only", "all gates", rows["all gates"], "coarse only", rows["coarse only"],
                          "top1_tuned"),
                  compare("vs fine only", "all gates", rows["all gates"], "fine only", rows["fine only"],
                          "top1_tuned")],
              note="coarse only: λ_micro = 0; fine only: λ_macro = 0, λ_micro = 1.5 (the paper's Appendix A runs)"),
        claim("HiAP", "The extracted model's MACs land within ±5% of the budget", budget),
    ]
    return claims, {"rows": rows, "uniform": baseline, "target": target}


# -------------------------------------------------------------------------------------- width and composition


def width_claims(r: Runner, hetdpt_table: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dense = r.s.dense
    target = r.dense_macs * r.b.width_share

    def width(model: nn.Module, importance: str) -> nn.Module:
        options = {"gradients": taylor_gradients(model, r.calibration[:4])} if importance == "taylor" else {}
        work = copy.deepcopy(model)
        # torch-pruning's steps are coarse near the target: a little above it, then neurons to reach it exactly
        prune_width_to_macs(work, target * (1 + 2 * MATCH), importance=importance, steps=8, **options)
        trim_to(work, target)
        return work

    pruned: dict[str, nn.Module] = {}  # the dense model's width pruning does not depend on the seed: done once

    def dense_width(importance: str) -> nn.Module:
        if importance not in pruned:
            pruned[importance] = width(dense, importance)
        return copy.deepcopy(pruned[importance])

    taylor = r.arms("width/taylor", lambda seed: dense_width("taylor"))
    magnitude = r.arms("width/magnitude", lambda seed: dense_width("magnitude"))
    depth_target = r.dense_macs * r.b.depth_share

    def hetdpt_plus(seed: int) -> nn.Module:
        attention, activation = hetdpt_table["ste_layers"][seed]
        model = _depth_model(r, attention, activation, depth_target)
        merge_linear_mlps(model)
        return width(model, "taylor")

    plus = r.arms("width/hetdpt+", hetdpt_plus)
    claims = [
        claim("Width (Isomorphic)", "Taylor importance beats weight magnitude at matched MACs",
              _both("Taylor vs magnitude", "Taylor", taylor, "magnitude", magnitude)),
        claim("HetDPT+", "Depth then width pruning (HetDPT+) beats width pruning alone at matched MACs",
              _both("HetDPT+ vs width only", "HetDPT+", plus, "width only (Taylor)", taylor),
              note=f"HetDPT's layers at {r.b.depth_share:.0%} of the MACs, then Taylor width pruning"),
    ]
    return claims, {"taylor": taylor, "magnitude": magnitude, "hetdpt+": plus}


def composition_claims(r: Runner, star_table: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dense = r.s.dense
    blocks = len(vitprune.get_adapter(dense).blocks())
    target = r.dense_macs * r.b.compose_share
    fit, _ = predictor(r)
    prior = torch.tensor(star_table["prior"])

    def depth(point: dict[str, Any], share: float) -> nn.Module:
        layers = (_te_layers(r, "attention", point["a"]), _te_layers(r, "activation", point["g"]))
        return _depth_model(r, *layers, r.dense_macs * share)

    def scheduled(model: nn.Module, acs: list[float], x: float) -> nn.Module:
        work = copy.deepcopy(model)
        apply_keep_rates(work, keep_rates(acs, x, anchor=star_anchor(acs)), alpha=STAR_ALPHA, prior=prior)
        return work

    def star_to(model: nn.Module) -> nn.Module:
        acs = average_cosine_similarity(model, r.calibration)
        return scheduled(model, acs, _bisect(lambda x: final_macs(scheduled(model, acs, x)), target, 1e-4, 1.0))

    def first_split() -> dict[str, Any]:
        """The MAP's best split at ``compose_depth_share`` that leaves STAR enough attention blocks to reach the
        target."""
        for point in sorted(depth_grid(r, r.b.compose_depth_share), key=lambda p: -predicted(fit, p, blocks)):
            model = depth(point, r.b.compose_depth_share)
            if final_macs(scheduled(model, average_cosine_similarity(model, r.calibration), 1e-4)) <= target:
                return point
        raise VitpruneError(f"no depth split at {r.b.compose_depth_share:.0%} of the MACs lets STAR reach "
                            f"{r.b.compose_share:.0%}")

    alone = map_pick(fit, depth_grid(r, r.b.compose_share), blocks)
    first = r.unit("compose/depth-split", first_split)
    depth_only = r.arms("compose/depth", lambda seed: depth(alone, r.b.compose_share))
    star_only = r.arms("compose/star", lambda seed: star_to(dense))
    both = r.arms("compose/depth+star", lambda seed: star_to(depth(first, r.b.compose_depth_share)))
    claims = [claim("Composition", "Depth pruning then STAR beats depth pruning alone and STAR alone at matched MACs",
                    _both("vs depth only", "depth + STAR", both, "depth only", depth_only)
                    + _both("vs STAR only", "depth + STAR", both, "STAR only", star_only),
                    note=f"depth + STAR: the MAP's best split at {r.b.compose_depth_share:.0%} of the MACs that "
                         f"leaves STAR enough attention blocks ({first['a']} attention + {first['g']} GELU layers, TE "
                         "layers), "
                         f"then STAR to {r.b.compose_share:.0%}; depth only: the MAP's split at "
                         f"{r.b.compose_share:.0%} ({alone['a']} attention + {alone['g']} GELU)")]
    return claims, {"depth": depth_only, "star": star_only, "depth+star": both}


# ---------------------------------------------------------------------------------------------------- the run


def run(setting: Setting, budget: Budget, path: Path, *, fresh: bool = False, progress: bool = True
        ) -> dict[str, Any]:
    """Every claim, measured (or read back from ``path``, the store of an earlier run of the same budget)."""
    units: dict[str, Any] = {}
    if path.exists() and not fresh:
        stored = read_json(path)
        if stored.get("budget") != asdict(budget) or stored.get("checkpoint") != setting.checkpoint:
            raise VitpruneError(f"{path} holds a run of another budget or checkpoint; pass --fresh to start over")
        units = stored["units"]
    start = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} measured"),
               TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        r = Runner(setting, budget, path, units, bar)
        dense = r.unit("dense", lambda: {"top1": r.evaluate(setting.dense), **count_macs(setting.dense).totals()})
        hetdpt, hetdpt_table = hetdpt_claims(r)
        star, star_table = star_claims(r)
        vbp, vbp_table = vbp_claims(r)
        hiap, hiap_table = hiap_claims(r)
        width, width_table = width_claims(r, hetdpt_table)
        compose, compose_table = composition_claims(r, star_table)
    measured = sum(u["seconds"] for u in units.values())
    # Where and when the measurements were made, whichever calls made them (a later call may only read them back).
    return {"date": max(u["date"] for u in units.values()), "checkpoint": setting.checkpoint, "budget": asdict(budget),
            "dense": dense, "val_images": len(setting.val), "claims": hetdpt + vbp + star + hiap + width + compose,
            "tables": {"hetdpt": hetdpt_table, "vbp": vbp_table, "star": star_table, "hiap": hiap_table,
                       "width": width_table, "composition": compose_table},
            "seconds": {"this_call": time.perf_counter() - start, "measurements": measured},
            "torch": sorted({u["torch"] for u in units.values()}),
            "threads": sorted({u["threads"] for u in units.values()}), "units": units}


def _cell(mean: float, std: float, margin: float, n: int) -> str:
    """Mean ± std over the seeds, and the half-width of the interval the verdict uses."""
    return (f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f}") + f" (±{margin:.2f})"


def to_markdown(report: dict[str, Any], command: str) -> str:
    """The page: every claim with its comparisons, numbers, spread and verdict."""
    b, dense = report["budget"], report["dense"]
    claims = report["claims"]
    counts = {v: sum(c["verdict"] == v for c in claims) for v in ("holds", "does not hold", "inconclusive")}
    lines = [
        "# Each paper's claims, tested on cluttered MNIST",
        "",
        f"Starting checkpoint: {report['checkpoint']}: {100 * dense['top1']:.2f}% validation top-1 (1,000 images), "
        f"{dense['params']:,} params, {dense['macs_full'] / 1e6:.1f} M MACs full convention (linear + attention "
        f"matmuls; {dense['macs_linear'] / 1e6:.1f} M linear only).",
        f"Command: `{command}`; the measurements took {report['seconds']['measurements'] / 60:.1f} min (each "
        f"one's own time, summed over the calls that made them) on {' or '.join(map(str, report['threads']))} CPU "
        f"threads, torch {', '.join(report['torch'])}; the last one finished {report['date']}.",
        "",
        f"Recovery, the same for every arm that is not trained as it is pruned: {b['tune_images']} training images "
        f"drawn by the seed, one epoch, AdamW lr {b['lr']}, batch {b['batch_size']}, soft distillation from the dense "
        f"model (α 0.5, τ 1). Seeds {b['seeds']}: each sets the fine-tune's images and order and any random or "
        f"trained selection. Top-1 in %, mean ± standard deviation over the seeds, then in brackets the half-width "
        "of the interval the verdict uses (below). Every comparison's arms cost the "
        f"same MACs within {MATCH:.0%} (the MACs gap column) unless it says otherwise.",
        "",
        "Verdicts: each arm's interval is its mean ± √(std² + SE²), SE the binomial standard error of a top-1 "
        f"measured on {report['val_images']:,} validation images (1.1 points at 85%): an arm that does not depend on "
        "the seed (every deterministic selection, right after pruning) has no spread over seeds, yet a difference of "
        "a few images is no evidence. A comparison *holds* when the claimed winner's interval lies above the "
        "other's, *does not hold* when it lies below, and is *inconclusive* when they overlap; a claim of comparable "
        "accuracy holds when they overlap. Arms whose MACs differ by more than 1% are inconclusive whatever their "
        "accuracy. A claim holds when every comparison holds and does not hold when any does not.",
        "",
        f"**{len(claims)} claims: holds {counts['holds']}, does not hold {counts['does not hold']}, inconclusive "
        f"{counts['inconclusive']}.**" + (
            " With one seed the intervals miss the spread over seeds: a quick run shows the machinery, not the "
            "answer." if len(b["seeds"]) == 1 else ""),
        "",
        "| Paper | Claim | Verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {c['paper']} | {c['statement']} | **{c['verdict']}** |" for c in claims]
    for paper in dict.fromkeys(c["paper"] for c in claims):
        lines += ["", f"## {paper}"]
        for c in (c for c in claims if c["paper"] == paper):
            lines += ["", f"### {c['statement']}: **{c['verdict']}**", ""]
            if c["note"]:
                lines += [c["note"] + ".", ""]
            lines += ["| Comparison | A | A | B | B | MACs gap | Verdict |", "|---|---|---:|---|---:|---:|---|"]
            for x in c["comparisons"]:
                gap = "n/a" if x["macs_gap"] is None else f"{100 * x['macs_gap']:.2f}%"
                if x["kind"] == "budget":
                    lines.append(f"| {x['label']} | {x['a']} | {x['macs_a'] / 1e6:.2f} M | budget | "
                                 f"{x['macs_b'] / 1e6:.2f} M | {gap} | {x['verdict']} |")
                    continue
                lines.append(f"| {x['label']} | {x['a']} | {_cell(x['a_mean'], x['a_std'], x['a_margin'], x['n'])} | "
                             f"{x['b']} | {_cell(x['b_mean'], x['b_std'], x['b_margin'], x['n'])} | {gap} | "
                             f"{x['verdict']} |")
    lines += ["", "Plots: [VBP](claims_vbp.png), [HetDPT](claims_hetdpt.png), [the other arms](claims_arms.png)"
              .replace("claims_", f"{report.get('stem', 'claims')}_"), ""]
    return "\n".join(lines)


def _bars(ax, groups: dict[str, list[dict]], title: str) -> None:
    names = list(groups)
    for i, metric in enumerate(("top1_pruned", "top1_tuned")):
        stats = [_spread(_values(groups[n], metric)) for n in names]
        ax.bar([x + 0.4 * i for x in range(len(names))], [s[0] for s in stats], 0.4,
               yerr=[s[1] for s in stats], label="right after" if i == 0 else "after recovery")
    ax.set_xticks([x + 0.2 for x in range(len(names))], names, rotation=30, ha="right", fontsize=7)
    ax.set(title=title, ylabel="top-1 (%)")
    ax.grid(alpha=0.3, axis="y")


def plot(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Three figures: VBP's criteria by ratio, HetDPT's split grid and asymmetry, and every other claim's arms."""
    from matplotlib.figure import Figure

    tables, dense = report["tables"], 100 * report["dense"]["top1"]
    paths = []

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    ratios = sorted({float(k.split("/")[0]) for k in tables["vbp"]})
    for criterion in VBP_CRITERIA:
        for comp, style in (("ms", "-"), ("plain", "--")):
            rows = [tables["vbp"][f"{ratio}/{criterion}/{comp}"] for ratio in ratios]
            for ax, metric in zip(axes, ("top1_pruned", "top1_tuned"), strict=True):
                stats = [_spread(_values(r, metric)) for r in rows]
                ax.errorbar([100 * x for x in ratios], [s[0] for s in stats], [s[1] for s in stats], fmt="o" + style,
                            label=f"{criterion}{'+ms' if comp == 'ms' else ''}", capsize=3)
    for ax, title in zip(axes, ("right after pruning", "after recovery"), strict=True):
        ax.axhline(dense, color="gray", ls=":", label="dense")
        ax.set(xlabel="FFN neurons removed (%)", ylabel="top-1 (%)", title=f"VBP: {title}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    paths.append(_save(fig, out_dir / f"{stem}_vbp.png"))

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    hetdpt = tables["hetdpt"]
    grid = hetdpt["grid"]
    stats = [_spread(_values(p["rows"], "top1_tuned")) for p in grid]
    axes[0].errorbar([p["a"] for p in grid], [s[0] for s in stats], [s[1] for s in stats], fmt="o-", capsize=3,
                     label="measured, after recovery")
    axes[0].plot([p["a"] for p in grid], [p["predicted"] for p in grid], "s--", label="MAP's prediction")
    axes[0].axvline(hetdpt["pick"]["a"], color="red", ls=":", label="MAP's pick")
    axes[0].set(xlabel="attention layers removed (GELU layers and neurons make up the MACs)", ylabel="top-1 (%)",
                title="HetDPT: splits at equal MACs")
    axes[0].legend(fontsize=7)
    for kind, marker in (("attention", "o"), ("activation", "s")):
        rows = hetdpt["single"][kind]
        for metric, style in (("top1_pruned", "-"), ("top1_tuned", "--")):
            axes[1].plot(range(len(rows)), _values(rows, metric), marker + style,
                         label=f"{'GELU' if kind == 'activation' else kind} removed, "
                               f"{'right after' if metric == 'top1_pruned' else 'after recovery'}")
    axes[1].axhline(dense, color="gray", ls=":", label="dense")
    axes[1].set(xlabel="block", ylabel="top-1 (%)", title="HetDPT: one layer removed (recovery asymmetry)")
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    paths.append(_save(fig, out_dir / f"{stem}_hetdpt.png"))

    fig = Figure(figsize=(13, 4.5), layout="constrained")
    axes = fig.subplots(1, 4)
    _bars(axes[0], tables["star"]["rows"], "STAR")
    _bars(axes[1], {**tables["hiap"]["rows"], "uniform": tables["hiap"]["uniform"]}, "HiAP (trained as pruned)")
    _bars(axes[2], tables["width"], "width")
    _bars(axes[3], tables["composition"], "composition")
    axes[0].legend(fontsize=7)
    for ax in axes:
        ax.axhline(dense, color="gray", ls=":")
    paths.append(_save(fig, out_dir / f"{stem}_arms.png"))
    return paths


def _save(fig, path: Path) -> Path:
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


def write(report: dict[str, Any], out_dir: Path, stem: str, command: str) -> None:
    """The results JSON (without the raw store), the page and the plots."""
    report = {**report, "stem": stem}
    out_dir.mkdir(parents=True, exist_ok=True)
    plot(report, out_dir, stem)
    write_results(out_dir, stem, {k: v for k, v in report.items() if k != "units"}, to_markdown(report, command))


def main(argv: list[str] | None = None) -> None:
    """Measure every claim (resuming), then write the JSON, page and plots."""
    args = parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.seeds:
        budget = replace(budget, seeds=args.seeds)
    stem = "claims_quick" if args.quick else "claims"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        report = run(load_setting(), budget, args.out_dir / f"{stem}.store.json", fresh=args.fresh,
                     progress=sys.stderr.isatty())
    except VitpruneError as exc:
        sys.exit(f"error: {exc}")
    command = "python benchmarks/claims.py" + (" --quick" if args.quick else "")
    write(report, args.out_dir, stem, command)


if __name__ == "__main__":
    main()
