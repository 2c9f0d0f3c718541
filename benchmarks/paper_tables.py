"""Paper tables side by side: every params/MACs figure HetDPT, VBP, STAR and HiAP print, next to vitprune's.

The four papers report parameter and MAC counts for their configurations, counted with different tools
and conventions, sometimes on a different checkpoint than the one named. This script rebuilds every
configuration a paper specifies from timm's DeiT/ViT, ConvNeXt and Swin (or vitprune's LV-ViT) with random weights
(structure only, nothing is downloaded) with vitprune's own surgery, counts it with ``vitprune.measure.count_macs`` in
every convention (full, linear and torch-pruning's ``tp``; HetDPT's depth rows also as HetDPT's own code ran
torch-pruning's counter), and sets the printed figures beside ours with the difference, taken in the convention the
paper's figure follows; each difference beyond the printed precision carries its explanation from the implementation
notes (``notes/*.md``). What a paper
prints but does not specify (learned architectures it does not print, other methods' results,
architectures vitprune does not support) is listed with the printed figures and the reason.

HetDPT+'s width targets take a ~2 minute torch-pruning bisection, so their rows are read from
``<out-dir>/hetdpt_plus_budgets.json`` (``hetdpt_plus_budgets.py`` writes it) when it is there. Writes
``<out-dir>/paper_tables.json`` and ``.md``.

    python benchmarks/paper_tables.py                  # about a minute on 2 quiet CPU cores
    python benchmarks/paper_tables.py --out-dir /tmp/pt
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch_pruning
from depth_speed import CONFIGS as DEPTH_CONFIGS
from hetdpt_plus_budgets import DEPTH as PLUS_DEPTH
from hetdpt_plus_budgets import MODEL as PLUS_MODEL
from hetdpt_plus_budgets import PAPER as PLUS_PAPER
from hiap_deit import PAPER as HIAP_PAPER
from hiap_deit import described_gates
from profile_deit import write_results
from stage_splits import HETDPT_SWIN, SWIN, build_split, depth_splits, stages, uniform_vbp, vbp_stage_shares
from star_deit import ACS_GAMMA, LVVIT, LVVIT_KWARGS, static_star
from star_deit import DENSE as STAR_DENSE
from star_deit import TABLE2 as STAR_TABLE2
from timm.layers import Attention, LayerNorm
from torch import nn
from torch_pruning.utils import count_ops_and_params
from vbp_deit import ROWS as VBP_ROWS

import vitprune
from vitprune.atomic import read_json
from vitprune.measure import CONVENTIONS, count_macs
from vitprune.methods.hiap import dense_cost, extract, gate_cost, layer_shapes
from vitprune.methods.vbp import prune_by_selection, select_neurons
from vitprune.surgery import prune_depth, prune_tokens, token_pruning_blocks

_B, _S, _T = "deit_base_patch16_224", "deit_small_patch16_224", "deit_tiny_patch16_224"
_LABELS = {_B: "DeiT-B", _S: "DeiT-S", _T: "DeiT-T"}
_UNITS = {"G": 1e9, "M": 1e6}
#: The MAC columns of a table, by key (``ours["macs_<key>"]``): every convention, and for HetDPT's depth rows
#: torch-pruning's counter as HetDPT's own code ran it.
_COLUMNS = {**{c: c for c in CONVENTIONS}, "tp_hetdpt": "tp as HetDPT's code"}
TP_HETDPT = ("torch-pruning's count_ops_and_params on HetDPT's own model classes (measure_throughput.py): its Attention "
             "class has no torch-pruning hook, so only its qkv and proj Linears count (no QKᵀ, A·V, softmax or "
             "scaling); its norms are nn.LayerNorm, which the counter counts at 2 per element")

#: HetDPT's other two published layer sets (Tables 11-13, bold; notes/hetdpt.md §3.5) with their Table 1 row.
_HETDPT_MORE = {
    "DeiT-B, 8 layers": (_B, [0, 3, 7, 11], [2, 7, 8, 11], {"params_m": 61.4, "gmacs": 11.8}),
    "DeiT-S, 6 layers": (_S, [1, 10, 11], [8, 10, 11], {"params_m": 17.6, "gmacs": 3.3}),
}
#: NOSE rows of HetDPT Tables 1/8: model -> [(attention layers removed, params M, GMACs, tables)].
_NOSE = {_B: [(5, "75.5", "14.6", "Tables 1, 8"), (6, "73.2", "14.1", "Tables 1, 8")],
         _S: [(4, "20.1", "3.8", "Table 8"), (5, "19.5", "3.7", "Tables 1, 8")]}
#: HetDPT Tables 2/9 distilled ("-KD") dense rows: timm name -> (params M, GMACs, tables).
_KD = {_B: ("87.3", "17.7", "Tables 2, 9"), _S: ("22.1", "4.6", "Table 9"), _T: ("5.9", "1.3", "Table 9")}

#: VBP Table 3 (and Table 7's DeiT-B rows): the 50% models, params M and GMACs as printed.
_VBP_T3 = {_T: ("3.94", "0.91"), _S: ("14.96", "3.21"), _B: ("58.24", "12.0")}
#: VBP Table 4 on DeiT-B: (row, VBP ratio or None, params M, GMACs).
_VBP_T4 = [("ToMe-24", None, "86.57", "6.02"), ("ToMe-14 & VBP", 0.5, "58.24", "6.08"),
           ("ToMe-20", None, "86.57", "7.14"), ("ToMe-12 & VBP", 0.5, "58.24", "6.90"),
           ("ToMe-18", None, "86.57", "7.88"), ("ToMe-10 & VBP", 0.5, "58.24", "7.73")]
#: VBP Table 10 (ImageNet): model -> (dense params M, dense GMACs, [(params M, GMACs) at 5%, 10%, ..., 50%]).
_VBP_T10 = {
    _B: ("86.57", "17.58", [("83.73", "17.02"), ("80.90", "16.46"), ("78.07", "15.91"), ("75.24", "15.35"),
                            ("72.40", "14.79"), ("69.57", "14.23"), ("66.74", "13.67"), ("63.90", "13.12"),
                            ("61.07", "12.56"), ("58.24", "12.00")]),
    _S: ("22.05", "4.61", [("21.34", "4.47"), ("20.63", "4.33"), ("19.92", "4.19"), ("19.22", "4.05"),
                           ("18.51", "3.91"), ("17.80", "3.77"), ("17.09", "3.63"), ("16.38", "3.49"),
                           ("15.67", "3.35"), ("14.96", "3.21")]),
    _T: ("5.72", "1.26", [("5.54", "1.22"), ("5.36", "1.19"), ("5.18", "1.15"), ("5.01", "1.12"), ("4.83", "1.08"),
                          ("4.65", "1.05"), ("4.48", "1.01"), ("4.30", "0.98"), ("4.12", "0.94"), ("3.94", "0.91")]),
}
#: VBP Table 11 (CIFAR-100; same dense rows as Table 10): model -> [(params M, GMACs) at 30%, 40%, ..., 70%].
_VBP_T11 = {
    _B: [("69.57", "14.23"), ("63.90", "13.12"), ("58.24", "12.00"), ("52.57", "10.88"), ("49.74", "10.33")],
    _S: [("17.80", "3.77"), ("16.38", "3.49"), ("14.96", "3.21"), ("13.55", "2.93"), ("12.13", "2.65")],
    _T: [("4.65", "1.05"), ("4.30", "0.98"), ("3.94", "0.91"), ("3.59", "0.84"), ("3.23", "0.77")],
}

#: VBP Table 8's ConvNeXts: (size, timm name, dense params (M) and GMACs, pruned params and GMACs, Table 12's rate).
_VBP_CONVNEXT = [("T", "convnext_tiny", ("28.59", "4.47"), ("12.61", "2.96"), 0.45),
                 ("S", "convnext_small", ("50.22", "8.71"), ("23.50", "5.11"), 0.5),
                 ("B", "convnext_base", ("88.59", "15.38"), ("41.32", "8.91"), 0.55)]

#: VBP Table 1's Swin rows: size -> (dense params M and GMACs, [(ratio, params M, GMACs)]).
_VBP_SWIN = {"T": (("28.29", "4.50"), [(0.45, "21.31", "3.23")]), "S": (("49.61", "8.76"), [(0.5, "35.02", "5.63")]),
             "B": (("87.77", "15.46"), [(0.55, "56.29", "10.22"), (0.2, "76.42", "13.58")])}

#: STAR's static-ACS rows: (model, rho, GFLOPs as printed, where printed).
_STAR_ACS = [
    ("DeiT-B", 0.9, "14.0", "Table 4"),
    ("DeiT-B", 0.8, "11.2", "Table 4; Tables 8 (STAR) and 9, whose rho is not printed"),
    ("DeiT-B", 0.75, "10.2", "Table 1 (STAR); Table 2 (ACS, STAR); Table 6 (10.22/10.20/10.20/10.18 for ACS from "
                             "1000/500/250/100 images); Table 7"),
    ("DeiT-B", 0.7, "9.3", "Table 1 (STAR); Table 2 (ACS); Table 4"),
    ("DeiT-B", 0.65, "8.4", "Table 2 (ACS)"),
    ("DeiT-B", 0.6, "7.7", "Table 4"),
    ("DeiT-S", 0.9, "3.6", "Table 4"),
    ("DeiT-S", 0.8, "2.8", "Table 4; Table 9, whose rho is not printed"),
    ("DeiT-S", 0.75, "2.6", "Table 1 (STAR); Table 7"),
    ("DeiT-S", 0.7, "2.3", "Table 1 (STAR); Table 4"),
    ("DeiT-S", 0.6, "2.0", "Table 4"),
    ("DeiT-T", 0.9, "0.9", "Table 4"),
    ("DeiT-T", 0.8, "0.7", "Table 1 (STAR); Table 4; Tables 7 and 9, whose rho is not printed"),
    ("DeiT-T", 0.7, "0.6", "Table 4"),
    ("DeiT-T", 0.6, "0.5", "Table 4"),
]

#: HiAP Table 3's CIFAR-10 ViT-Tiny: 6 blocks, width 192, 3 heads as printed; patch 4 and MLP ratio 4 assumed
#: (notes/hiap.md §1.5).
_CIFAR_VIT_TINY = ("vit_tiny_patch16_224", (("depth", 6), ("img_size", 32), ("patch_size", 4), ("num_classes", 10)))

# Configurations printed with params and/or MACs that are not rebuilt: (paper, tables, reason, MAC unit,
# [(configuration, params M, MACs)]).
_NOT_REPRODUCED: list[tuple[str, str, str, str, list[tuple[str, str | None, str | None]]]] = [
    ("HetDPT", "Tables 1, 8",
     "WD-Pruning's learned per-layer widths and depth are not printed (a baseline quoted from its paper).", "G",
     [("DeiT-B DW Prun. (0.2-12)", "68.2", "13.6"), ("DeiT-B DW Prun. (0.2-10)", "59.4", "10.8"),
      ("DeiT-S DW Prun. (0.3-12)", "15.0", "3.1")]),
    ("HetDPT", "Table 8",
     "Token-pruning/merging baselines quoted from their papers: their keep schedules are not given here; "
     "DynamicViT and TPS add predictor modules, ToMe and GTP-ViT merge tokens (vitprune has no merging).", "G",
     [("DeiT-B DynamicViT", "89.5", "11.2"), ("DeiT-B Evo-ViT", "87.3", "11.3"), ("DeiT-B EViT", "86.6", "11.2"),
      ("DeiT-B TPS", "89.5", "12.9"), ("DeiT-B ToMe", "86.6", "13.2"), ("DeiT-B GTP-ViT", "86.6", "13.2"),
      ("DeiT-S TPS", "22.8", "3.3"), ("DeiT-S ToMe", "22.1", "3.3"), ("DeiT-S GTP-ViT", "22.1", "3.5")]),
    ("HetDPT", "Tables 1, 8; BoundaryDPT draft Tables 1, 6 (Swin-T)",
     "Width-pruning baselines on Swin quoted from their papers; their learned widths are not printed.", "G",
     [("Swin-S DW Prun. (0.2-24)", "39.2", "6.8"), ("Swin-S DW Prun. (0.2-22)", "34.4", "6.3"),
      ("Swin-B SAViT", "33.0", "7.7"), ("Swin-T DW Pruning (0.2-12), draft", "22.7", "3.6"),
      ("Swin-T DW Pruning (0.2-10), draft", "20.2", "3.3")]),
    ("HetDPT", "Tables 2, 9",
     "Width-pruning baselines quoted from their papers; their learned widths are not printed.", "G",
     [("NViT-S", "20.8", "3.9"), ("Iso-Prun. 4.2G", "20.7", "4.2"), ("Iso-Prun. 2.6G", "13.1", "2.6"),
      ("NViT-T", "6.7", "1.2"), ("Iso-Prun. 1.2G", "5.7", "1.2")]),
    ("HetDPT", "Table 9",
     "Off-the-shelf architectures of families vitprune has no adapter for, so its counter does not support them (Swin-T, "
     "the other one, is in the Swin table above).",
     "G",
     [("Cait-S24", "46.9", "8.6"), ("TNT-S", "23.8", "4.8"), ("CrossViT-S", "26.9", "5.6"),
      ("Efficientformer-L3", "31.4", "3.9"), ("PVTv2-B2", "25.4", "3.9")]),
    ("HetDPT", "Table 6",
     "DINOv2-Giant's SwiGLU (GluMlp) FFN is not supported by vitprune's adapters; HetDPT's 15-layer split is not "
     "printed and does not decompose into whole attention/FFN savings (notes/hetdpt.md §1.11).", "G",
     [("DINO-V2-Giant (Dense), CIFAR-100", "1134.92", None), ("NOSE (12 layers)", "1021.55", None),
      ("HetDPT (15 layers)", "927.12", None)]),
    ("VBP", "Table 5",
     "NViT's learned widths are not printed (a baseline quoted from its paper).", "G",
     [("NViT (50 Ep.)", "56.37", None), ("NViT (1 Ep.)", "56.85", None)]),
    ("STAR", "Tables 1, 2, 8",
     "a-STAR keeps an input-dependent number of tokens per image: the printed GFLOPs are averages over ImageNet "
     "images through the trained model, which random weights cannot reproduce.", "G",
     [("DeiT-B a-STAR rho 0.75", None, "10.0"), ("DeiT-B a-STAR rho 0.7", None, "9.0"),
      ("DeiT-S a-STAR rho 0.75", None, "2.5"), ("DeiT-S a-STAR rho 0.7", None, "2.2"),
      ("DeiT-T a-STAR rho 0.8", None, "0.7"), ("DeiT-B a-STAR rho 0.77 (Table 2)", None, "10.2"),
      ("DeiT-B a-STAR (Table 8)", None, "11.0")]),
    ("STAR", "Tables 1, 8",
     "Other methods' results quoted or re-run by the paper; their configurations are not given.", "G",
     [("DeiT-B IA-RED²", None, "11.8"), ("DeiT-B EViT", None, "11.6"), ("DeiT-B CP-ViT", None, "10.3"),
      ("DeiT-B SCOP", None, "10.2"), ("DeiT-B VTP", None, "10.0"), ("DeiT-B DiffRate (Table 8)", None, "11.5"),
      ("DeiT-S IA-RED²", None, "3.2"), ("DeiT-S SCOP", None, "2.6"), ("DeiT-S PoWER", None, "2.7"),
      ("DeiT-S ToMe", None, "2.7"), ("DeiT-S HVT", None, "2.4"), ("DeiT-T SAViT", None, "0.9"),
      ("DeiT-T ToMe", None, "0.8"), ("DeiT-T VTC-LFC", None, "0.8")]),
    ("STAR", "Table 1",
     "a-STAR on LV-ViT: the per-image token counts are averages over ImageNet images through the trained model, "
     "which random weights cannot reproduce; the other rows are other methods' results quoted by the paper, their "
     "configurations not given.", "G",
     [("LV-ViT-M a-STAR rho 0.8", None, "6.5"), ("LV-ViT-S a-STAR rho 0.65", None, "3.1"),
      ("LV-ViT-M EViT", None, "8.5"), ("LV-ViT-S PS-LV-ViT-S", None, "4.7"), ("LV-ViT-S EViT", None, "3.9"),
      ("LV-ViT-S VTC-LFC", None, "3.2")]),
    ("HiAP", "Table 2",
     "HiAP's 2.5G architecture is learned and not described; the baselines are quoted and their learned "
     "architectures not printed.", "G",
     [("HiAP (Ours) 2.5G", "12.3", "2.5"), ("WDPruning", "15.0", "3.1"), ("WDPruning", "13.3", "2.6"),
      ("S2ViT", "15.3", "3.1"), ("S2ViT", "13.5", "2.8"), ("ViT-Slim", "15.6", "3.1"), ("ViT-Slim", "13.5", "2.8"),
      ("GOHSP", "14.4", "3.0"), ("GOHSP", "11.1", "2.8")]),
    ("HiAP", "Table 3",
     "Learned (HiAP) or weight-dependent (ℓ1 ranking) architectures hit to a MAC target, whose structure is not "
     "printed; the baselines' definitions are not given either (notes/hiap.md §5 B9). Their MACs equal the "
     "target by construction, so a rebuild would check nothing.", "M",
     [("Uniform-Ratio", None, "116.6"), ("ℓ1-Structured (FFN)", None, "116.5"), ("HiAP (Moderate)", None, "116.3"),
      ("ℓ1-Structured (FFN)", None, "87.3"), ("HiAP (Aggressive)", None, "87.1")]),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="where to write, and where hetdpt_plus_budgets.json is read from")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- building and counting

@functools.cache
def _base(name: str, kwargs: tuple[tuple[str, Any], ...] = ()) -> nn.Module:
    """One randomly initialised model per architecture: DeiT-B takes ~1.5 s to initialise, a copy ~0.2 s."""
    return vitprune.create_model(name, **dict(kwargs))


def _fresh(name: str, kwargs: tuple[tuple[str, Any], ...] = ()) -> nn.Module:
    return copy.deepcopy(_base(name, kwargs))


def _distilled(name: str) -> str:
    return name.replace("_patch", "_distilled_patch")


def _totals(model: nn.Module) -> dict[str, int | None]:
    """Params and MACs in every convention; ``macs_tp`` is ``None`` for a model with token-pruning blocks, whose
    attention torch-pruning's counter would miss (``count_macs`` refuses to count it)."""
    convention = "full" if token_pruning_blocks(model) else "tp"
    return {"macs_tp": None, **count_macs(model, convention=convention).totals()}


class _HetDPTAttention(Attention):
    """timm's Attention under another class, as HetDPT's code declares its own (``hetdpt/models_pruned.py``):
    torch-pruning's counter picks its hooks by exact type and has none for it."""


def _tp_as_hetdpt(model: nn.Module) -> int:
    """:data:`TP_HETDPT`: torch-pruning's count of ``model`` with HetDPT's module classes in place of timm's (its
    Attention, which the counter does not know, and ``nn.LayerNorm``); everything else is the same structure."""
    x = torch.randn(1, *vitprune.get_adapter(model).input_size)
    model = copy.deepcopy(model)
    for module in model.modules():
        if type(module) is Attention:
            module.__class__ = _HetDPTAttention
        elif type(module) is LayerNorm:
            module.__class__ = nn.LayerNorm
    return round(count_ops_and_params(model, x)[0])


@functools.cache
def _dense(name: str, kwargs: tuple[tuple[str, Any], ...] = ()) -> dict[str, int]:
    return _totals(_base(name, kwargs))


@functools.cache
def _dense_hetdpt(name: str) -> dict[str, int]:
    """:func:`_dense` with :data:`TP_HETDPT`'s count (``macs_tp_hetdpt``)."""
    return {**_dense(name), "macs_tp_hetdpt": _tp_as_hetdpt(_base(name))}


def _depth(name: str, attention: list[int], activation: list[int]) -> dict[str, int]:
    """HetDPT's edits as its reference code makes them: LN1 kept in a removed attention, fc1·fc2 merged, a GELU on
    the output of a block that lost both; counted in every convention and as :data:`TP_HETDPT`."""
    model = _fresh(name)
    prune_depth(model, attention, activation, output_gelu=True)
    return {**_totals(model), "macs_tp_hetdpt": _tp_as_hetdpt(model)}


@functools.cache
def _vbp_pruned(name: str, ratio: float, num_classes: int = 1000, rounding: str = "ceil") -> dict[str, int]:
    """VBP's structure at ``ratio``: ``rounding(ratio · all MLP neurons)`` removed by one global ranking.

    The scores are random: every DeiT block has the same width and token count, so which neurons go does not
    change the counts.
    """
    model = _fresh(name, (("num_classes", num_classes),) if num_classes != 1000 else ())
    hidden = {v.index: v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks()}
    generator = torch.Generator().manual_seed(0)
    scores = {b: torch.rand(h, generator=generator) for b, h in hidden.items()}
    prune_by_selection(model, select_neurons(scores, ratio, rounding=rounding))
    return _totals(model)


def _star_manual(blocks: list[int], rate: float) -> dict[str, int]:
    """DeiT-B keeping ``rate``, ``rate²``, ``rate³`` of the tokens entering the 1-based ``blocks``, after attention."""
    model = _fresh(_B)
    for power, block in enumerate(blocks, start=1):
        prune_tokens(model, block - 1, rate**power)
    return _totals(model)


def _star_acs(name: str, kwargs: tuple[tuple[str, Any], ...], gamma: float, rho: float) -> dict[str, int]:
    """STAR's static schedule at ``rho`` for the ACS profile ``(l / (L-1))^gamma``."""
    return _totals(static_star(_base(name, kwargs), gamma, rho)[0])


def _hiap_described() -> tuple[dict[str, int], int]:
    """HiAP's described DeiT-S architecture (``hiap_deit.described_gates``): its counts, and its MACs under the
    paper's cost model (V projection charged at full head width)."""
    model = _fresh(_S)
    gates, shapes = described_gates(model), layer_shapes(model)
    # The cost model covers the prunable part only; the rest (embedding, norms, head) HiAP cannot change.
    fixed = _dense(_S)["macs_full"] - dense_cost(shapes)
    paper_cost = round(fixed + sum(float(c) for c in gate_cost(gates.hardened(0.0), shapes, "paper")))
    extract(model, gates)
    return _totals(model), paper_cost


# ---------------------------------------------------------------- rows and tables

def _p(value: float, decimals: int) -> str:
    """A paper value reused from another script, as printed (its float has lost trailing zeros)."""
    return f"{value:.{decimals}f}"


def _row(config: str, params: str | None, macs: str | None, ours: dict[str, int] | None, compare: str | None,
         note: str = "", source: str = "computed") -> dict[str, Any]:
    """One configuration: the printed figures, ours, the convention the printed MACs follow, and why they differ."""
    return {"config": config, "paper": {"params_m": params, "macs": macs}, "ours": ours, "compare": compare,
            "source": source, "note": note}


def _half_unit(printed: str) -> float:
    """Half a unit in the last printed digit: how far a value may be from ``printed`` and still round to it."""
    decimals = len(printed.partition(".")[2])
    return 0.5 * 10**-decimals + 1e-9


def _difference(row: dict[str, Any], scale: float) -> dict[str, Any]:
    """Ours − paper in the row's convention, and whether ours rounds to the printed figures."""
    ours, paper = row["ours"], row["paper"]
    pairs = {}
    if ours is not None and paper["params_m"] is not None:
        pairs["params_m"] = (ours["params"] / 1e6, paper["params_m"])
    if ours is not None and paper["macs"] is not None and ours.get(f"macs_{row['compare']}") is not None:
        pairs["macs"] = (ours[f"macs_{row['compare']}"] / scale, paper["macs"])
    return {"delta": {k: o - float(p) for k, (o, p) in pairs.items()} or None,
            "within_rounding": all(abs(o - float(p)) <= _half_unit(p) for o, p in pairs.values()) if pairs else None}


def _table(title: str, macs_label: str, rows: list[dict[str, Any]], intro: str = "", unit: str = "G",
           columns: tuple[str, ...] = tuple(CONVENTIONS)) -> dict[str, Any]:
    """A results table: its rows with their differences, MACs in ``unit`` (``G`` or ``M``) as the paper prints them,
    ours in ``columns`` (keys of :data:`_COLUMNS`)."""
    for row in rows:
        row.update(_difference(row, _UNITS[unit]))
    return {"title": title, "macs_label": macs_label, "unit": unit, "intro": intro, "rows": rows,
            "columns": list(columns)}


def _not_reproduced(paper: str) -> list[dict[str, Any]]:
    """``paper``'s printed configurations that are not rebuilt, grouped by reason."""
    return [{"tables": tables, "reason": reason, "unit": unit,
             "rows": [{"config": c, "params_m": p, "macs": m} for c, p, m in rows]}
            for who, tables, reason, unit, rows in _NOT_REPRODUCED if who == paper]


# ---------------------------------------------------------------- HetDPT

def _hetdpt_plus_rows(out_dir: Path) -> list[dict[str, Any]]:
    """Table 2's HetDPT+ rows from ``hetdpt_plus_budgets.json``, or rows that say to run that script first."""
    path = out_dir / "hetdpt_plus_budgets.json"
    report = read_json(path) if path.is_file() else None
    problem = ("run hetdpt_plus_budgets.py first (its torch-pruning bisection takes ~2 min): this script reads its "
               "hetdpt_plus_budgets.json from the same --out-dir.")
    if report is not None and (report.get("model") != PLUS_MODEL or report.get("depth") != PLUS_DEPTH):
        report, problem = None, "hetdpt_plus_budgets.json is for another starting point: rerun hetdpt_plus_budgets.py."
    rows = []
    for gmacs, params in PLUS_PAPER:
        config = f"HetDPT+ {gmacs}G (Tables 2, 9)"
        found = next((r for r in report["rows"] if r["paper_gmacs"] == gmacs), None) if report else None
        if found is None:
            rows.append(_row(config, _p(params, 1), _p(gmacs, 1), None, "linear", problem, source="missing"))
            continue
        tp = found.get("gmacs_tp")
        ours = {"params": round(found["params_m"] * 1e6), "macs_full": round(found["gmacs_full"] * 1e9),
                "macs_linear": round(found["gmacs"] * 1e9), "macs_tp": None if tp is None else round(tp * 1e9)}
        note = (f"From hetdpt_plus_budgets.json ({report['date']}): the 10-layer distilled DeiT-B, then one global "
                f"torch-pruning magnitude ratio ({found['ratio']:.4f}; embed dim {found['embed_dim']}) bisected on "
                "linear MACs to the printed target from below, so the MACs agree by construction. The paper does not "
                "give Isomorphic Pruning's importance, per-group ratios or which depth model it starts from "
                "(notes/hetdpt.md §1.10), so our split between embedding, head and FFN widths, and with it the "
                f"params, differ from theirs: {found['params_m'] / params - 1:+.1%}.")
        rows.append(_row(config, _p(params, 1), _p(gmacs, 1), ours, "linear", note,
                         source="hetdpt_plus_budgets.json"))
    return rows


def _hetdpt_section(out_dir: Path) -> dict[str, Any]:
    """HetDPT Tables 1, 8 (depth pruning) and 2, 9 (distilled baselines, HetDPT+)."""
    # Paper order: fewer layers first.
    depth = sorted({**DEPTH_CONFIGS, **_HETDPT_MORE}.items(), key=lambda kv: int(kv[0].split(", ")[1].split()[0]))
    dense_note = "Plain DeiT, full convention, as the paper's dense rows (notes/hetdpt.md §1.8.4)."
    pruned_note = ("Distilled DeiT (198 tokens, two heads), LN1 kept where attention goes, counted as HetDPT's code "
                   "counts (tp with its classes), as the paper's pruned rows (notes/hetdpt.md §1.8.4).")
    rows = []
    for name in (_B, _S):
        label = _LABELS[name]
        paper = next(c[3] for c in DEPTH_CONFIGS.values() if c[0] == name)
        rows.append(_row(f"{label} (Dense)", _p(paper["dense_params_m"], 1), _p(paper["dense_gmacs"], 1),
                         _dense_hetdpt(name), "full", dense_note))
        blocks = len(vitprune.get_adapter(_base(name)).blocks())
        for k, params, gmacs, tables in _NOSE[name]:
            # Every block has the same width and tokens, so which k attention layers go does not change the counts.
            rows.append(_row(f"{label} NOSE ({k} layers; {tables})", params, gmacs,
                             _depth(_distilled(name), list(range(blocks - k, blocks)), []), "tp_hetdpt",
                             pruned_note + f" Ours removes the last {k} attention layers; the paper names none."))
        for key, (model, attention, activation, paper) in depth:
            if model == name:
                tables = "Tables 1, 8" + ("; Table 9's HetDPT-KD" if key == "DeiT-B, 10 layers" else "")
                rows.append(_row(f"{label} HetDPT ({key.split(', ')[1]}; {tables}): attention {attention}, "
                                 f"GELU {activation}", _p(paper["params_m"], 1), _p(paper["gmacs"], 1),
                                 _depth(_distilled(name), attention, activation), "tp_hetdpt", pruned_note))
    pruned = [r for r in rows if r["compare"] == "tp_hetdpt"]

    def off(key: str) -> list[float]:
        return [r["ours"][f"macs_{key}"] / 1e9 / float(r["paper"]["macs"]) - 1 for r in pruned]

    extra = [(r["ours"]["macs_tp_hetdpt"] - r["ours"]["macs_linear"]) / 1e9 for r in pruned]
    ten = next(r for r in rows if r["config"].startswith("DeiT-B HetDPT (10 layers"))["ours"]
    intro = ("HetDPT's code counts its models with torch-pruning's `count_ops_and_params` (`measure_throughput.py`, "
             "after merging fc1·fc2). Its models declare their own Attention class, which that counter (hooks chosen "
             "by exact type) has no hook for, so it counted their qkv and proj Linears but no QKᵀ or A·V. On timm's "
             "Attention, which vitprune keeps, the same counter counts them: the *tp* column, "
             f"{min(off('tp')):+.1%} to {max(off('tp')):+.1%} from the printed pruned rows. The *tp as HetDPT's code* "
             "column counts our structure with that counter and HetDPT's module classes put in (its Attention, "
             "`nn.LayerNorm`; the GELU HetDPT's code puts on the output of a block that lost both is in the structure "
             "too), the paper's pruned rows' convention: every one within rounding of the printed figure, "
             f"{min(off('tp_hetdpt')):+.2%} to {max(off('tp_hetdpt')):+.2%}. The note's linear reading (§1.8.4) is "
             f"within rounding as well: what separates the two, biases, norms and GELUs, is {min(extra):.3f}-"
             f"{max(extra):.3f} G. The dense rows are not counted that way (it would give the plain DeiT-B "
             f"{_dense_hetdpt(_B)['macs_tp_hetdpt'] / 1e9:.2f} G): they are the usual full-convention (timm/fvcore) "
             "figures of the plain DeiT (197 tokens), to which tp rounds as well. The pruned rows are distilled DeiTs "
             "(198 tokens), so the paper's dense → pruned ratios mix models and conventions: in one convention (full, "
             f"distilled) the 10-layer DeiT-B is {ten['macs_full'] / 1e9:.2f} G, not "
             f"{ten['macs_tp_hetdpt'] / 1e9:.2f} G. NOSE rows are reproduced the same way.")
    depth_table = _table("Tables 1 and 8: depth pruning", "MACs (G)", rows, intro,
                         columns=(*CONVENTIONS, "tp_hetdpt"))

    kd = []
    for name, (params, gmacs, tables) in _KD.items():
        ours, plain = _dense(_distilled(name)), _dense(name)
        note = "Distilled DeiT, full convention (the dense rows' convention)."
        if abs(ours["params"] / 1e6 - float(params)) > _half_unit(params):
            note = (f"The printed {params} M is the plain {_LABELS[name]}'s ({plain['params'] / 1e6:.2f} M); the "
                    f"distilled model's extra token and head add {(ours['params'] - plain['params']) / 1e6:.2f} M. "
                    "Its MACs are the distilled model's, full convention.")
        kd.append(_row(f"{_LABELS[name]}-KD ({tables})", params, gmacs, ours, "full", note))
    kd[1:1] = _hetdpt_plus_rows(out_dir)
    swin_intro = ("timm's Swin with random weights, full convention: the dense rows' params and MACs round to the "
                  "printed figures. The paper prints how many layers it removes but not which (notes/hetdpt.md §1.11). "
                  "Removing an attention or a GELU costs the same in every block of a stage, so each pruned row lists "
                  "the per-stage splits whose counts round to both printed figures, measured (one removal per stage "
                  "and type, counted); ours builds the closest, removing each stage's last blocks.")
    plus = [r for r in kd if r["config"].startswith("HetDPT+")]
    tp_given = any((r["ours"] or {}).get("macs_tp") is not None for r in plus)
    plus_intro = ("HetDPT+ = the 10-layer configuration plus width pruning to each MAC target; its rows come from "
                  "`hetdpt_plus_budgets.py`'s results (linear convention, distilled DeiT-B, as the paper's pruned "
                  "rows), not recomputed here; "
                  + ("the tp column is that file's `gmacs_tp`. " if tp_given else
                     "that file gives no tp figures (`gmacs_tp`), hence the empty tp column. ")
                  + "HetDPT+'s code is not released; if it counts as HetDPT's code does (the table above: the linear "
                  "count plus biases, norms and GELUs), the linear column is the closest of ours.")
    return {"paper": "HetDPT", "note": "notes/hetdpt.md",
            "tables": [depth_table, _table("Tables 2 and 9: distilled baselines and HetDPT+", "MACs (G)", kd,
                                           plus_intro),
                       _table("Table 1 and the draft's Table 1: Swin", "MACs (G)", _hetdpt_swin_rows(), swin_intro)],
            "not_reproduced": _not_reproduced("HetDPT")}


@functools.cache
def _swin_stages(size: str) -> tuple:
    return tuple(stages(_base(SWIN[size])))


def _hetdpt_swin_rows() -> list[dict[str, Any]]:
    """HetDPT's Swin rows: dense, then the closest per-stage split of the printed layer count (or of any count)."""
    rows = []
    for size, (tables, (dense_params, dense_gmacs), (params, gmacs), layers) in HETDPT_SWIN.items():
        name, stage_list = SWIN[size], list(_swin_stages(size))
        rows.append(_row(f"Swin-{size} (Dense; {tables}; `{name}`)", dense_params, dense_gmacs, _dense(name), "full"))
        splits = {c: depth_splits(stage_list, _dense(name), params, gmacs, c, layers) for c in ("full", "linear")}
        best = splits["full"][0]
        counts = "" if layers else (f" of {min(s.layers for s in splits['full'])}-"
                                    f"{max(s.layers for s in splits['full'])} layers")
        note = (f"{len(splits['full'])} per-stage splits{counts} round to both printed figures in the full convention "
                f"({len(splits['linear'])} in the linear); ours is the closest: {best.describe()} "
                f"({best.layers} layers; stages of {'/'.join(str(len(s.blocks)) for s in stage_list)} blocks).")
        label = f"{layers} layers" if layers else "layer count not printed"
        rows.append(_row(f"Swin-{size} HetDPT ({label}; {tables})", params, gmacs,
                         build_split(_base(name), stage_list, best), "full", note))
    return rows


# ---------------------------------------------------------------- VBP

def _vbp_swin_rows() -> list[dict[str, Any]]:
    """VBP Table 1's Swin rows: dense, then p of every block's neurons (the per-stage split the printed rows imply
    in the note)."""
    rows = []
    for size, (dense, printed) in _VBP_SWIN.items():
        name = SWIN[size]
        rows.append(_row(f"Swin-{size} dense (`{name}`)", *dense, _dense(name), "full",
                         f"The paper's dense count is {float(dense[1]) - _dense(name)['macs_full'] / 1e9:.3f} G above "
                         "ours (see the introduction)."))
        for ratio, params, gmacs in printed:
            shares = vbp_stage_shares(list(_swin_stages(size)), ratio, dense, (params, gmacs))
            rows.append(_row(f"Swin-{size} {ratio:.0%} (uniform split)", params, gmacs,
                             uniform_vbp(_base(name), ratio), "full",
                             f"Ours removes {ratio:.0%} of every block's neurons; {_shares_text(shares)}."))
    return rows


def _shares_text(shares: list[tuple[float, float]] | None) -> str:
    """What :func:`stage_splits.vbp_stage_shares` found, in words."""
    if shares is None:
        return "no split of the removed neurons over the stages gives both printed figures"
    return "the printed rows imply that VBP removed " + ", ".join(
        f"{lo:.0%}-{hi:.0%}" if round(lo, 2) != round(hi, 2) else f"{lo:.0%}" for lo, hi in shares) + \
        " of stages 1-4's neurons"


def _vbp_rows(name: str, printed: list[tuple[float, str, str]], dense: tuple[str, str], num_classes: int = 1000,
              label: str = "") -> list[dict[str, Any]]:
    """The dense row and one row per ``(ratio, params, GMACs)``; MACs beyond rounding are set against the dense
    offset, params of a 100-class model against the 1000-class model's."""
    ours_dense = _dense(name, (("num_classes", num_classes),) if num_classes != 1000 else ())
    offset = float(dense[1]) - ours_dense["macs_full"] / 1e9
    rows = []
    for ratio, params, gmacs in [(0.0, *dense), *printed]:
        ours = _vbp_pruned(name, ratio, num_classes) if ratio else ours_dense
        row = _row(f"{_LABELS[name]} {f'{ratio:.0%}' if ratio else 'dense'}{label}", params, gmacs, ours, "full")
        row.update(_difference(row, 1e9))
        notes = []
        if abs(row["delta"]["params_m"]) > _half_unit(params) and num_classes != 1000:
            thousand = (_vbp_pruned(name, ratio) if ratio else _dense(name))["params"]
            notes.append(f"The printed params are the 1000-class model's (ours with timm's ImageNet head: "
                         f"{thousand / 1e6:.2f} M; notes/vbp.md §5 item 15).")
        if abs(row["delta"]["macs"]) > _half_unit(gmacs):
            removed, paper_removed = (ours_dense["macs_full"] - ours["macs_full"]) / 1e9, float(dense[1]) - float(gmacs)
            if not ratio:
                notes.append(f"The paper's dense count is {offset:.3f} G above ours (see Table 1's introduction).")
            elif abs(paper_removed - removed) < 0.011:  # two printed values, each rounded to 0.005
                notes.append(f"The dense offset ({offset:+.3f} G); the removed MACs agree: paper "
                             f"{paper_removed:.2f} G, ours {removed:.3f} G.")
        row["note"] = " ".join(notes)
        rows.append(row)
    return rows


def _vbp_section() -> dict[str, Any]:
    """VBP Tables 1, 3/7, 4, 5, 10 and 11."""
    t1 = []
    for name in (_T, _S, _B):
        entries = [entry for entry in VBP_ROWS.values() if entry[0] == name]
        t1 += _vbp_rows(name, [(ratio, _p(params[1], 2), _p(gmacs[1], 2)) for _, ratio, params, gmacs in entries],
                        (_p(entries[0][2][0], 2), _p(entries[0][3][0], 2)))
    t3 = []
    for name in (_T, _S, _B):
        t3 += _vbp_rows(name, [(0.5, *_VBP_T3[name])], _VBP_T10[name][:2])
    t3[-1]["config"] += " (also Table 7's pre- and post-activation rows)"
    t4 = _vbp_rows(_B, [], _VBP_T10[_B][:2])
    for config, ratio, params, gmacs in _VBP_T4:
        ours = {"params": (_vbp_pruned(_B, ratio) if ratio else _dense(_B))["params"], "macs_full": None,
                "macs_linear": None, "macs_tp": None}
        t4.append(_row(config, params, gmacs, ours, "full",
                       "vitprune has no token merging, so the MACs are not counted; ToMe adds no parameters, so the "
                       f"params are {'the VBP 50%' if ratio else 'the dense'} model's."))
    neurons = sum(v.mlp.hidden_features for v in vitprune.get_adapter(_base(_distilled(_B))).blocks())
    quantile = _vbp_pruned(_distilled(_B), 0.55, rounding="floor")
    t5 = [_row("VBP (ours) on distilled DeiT-B, 55%", "56.18", None, _vbp_pruned(_distilled(_B), 0.55), "full",
               f"The table does not print the rate; 55% is the one near 56.18 M (notes/vbp.md §7). vitprune removes "
               f"ceil(0.55 × {neurons}) = {math.ceil(0.55 * neurons)} neurons, one more than the printed count needs: "
               "the quantile threshold the note also lists (score ≤ quantile(p), floor(p·(n−1)) + 1 = "
               f"{math.floor(0.55 * (neurons - 1)) + 1} neurons; notes/vbp.md §1.4) gives "
               f"{quantile['params'] / 1e6:.3f} M; the note finds it matches every other printed count too.")]
    t10 = []
    for name, (params, gmacs, printed) in _VBP_T10.items():
        t10 += _vbp_rows(name, [(round(0.05 * i, 2), *p) for i, p in enumerate(printed, start=1)], (params, gmacs))
    t11 = []
    for name, printed in _VBP_T11.items():
        t11 += _vbp_rows(name, [(round(0.1 * i, 1), *p) for i, p in enumerate(printed, start=3)],
                         _VBP_T10[name][:2], num_classes=100, label=" (CIFAR-100)")
    b70, b65 = next(r for r in t11 if r["config"] == "DeiT-B 70% (CIFAR-100)"), _vbp_pruned(_B, 0.65)
    b70["note"] = (f"The printed {b70['paper']['macs']} G / {b70['paper']['params_m']} M are the 65% model's (ours at "
                   f"65% with the ImageNet head: {b65['macs_full'] / 1e9:.3f} G, {b65['params'] / 1e6:.2f} M): a label "
                   "or copy error in the paper (notes/vbp.md §5 item 20). " + b70["note"])
    t8, offsets8 = [], []
    for size, name, dense, pruned, table12 in _VBP_CONVNEXT:
        offsets8.append(f"{float(dense[1]) - _dense(name)['macs_full'] / 1e9:.3f}")
        t8.append(_row(f"ConvNeXt-{size} full (`{name}`)", *dense, _dense(name), "full",
                       "The MACs differ by the element-wise offset the introduction describes."))
        stage_list = stages(_base(name))
        shares = vbp_stage_shares(stage_list, 0.5, dense, pruned)
        note = ("Ours removes 50% of every block's neurons; " + _shares_text(shares) + ".")
        if table12 != 0.5:
            other = vbp_stage_shares(stage_list, table12, dense, pruned)
            note += (f" At Table 12's {table12:.0%} " + ("no split of the neurons over the stages gives both printed "
                                                         "figures" if other is None else _shares_text(other)) + ".")
        t8.append(_row(f"ConvNeXt-{size} 50% (uniform split)", *pruned, uniform_vbp(_base(name), 0.5), "full", note))
    t8_intro = ("timm's ConvNeXt with random weights: the parameters agree to the printed digit; the paper's MACs are "
                f"{', '.join(offsets8)} G above ours for T/S/B (0.2-0.3%), of the size element-wise operations (norms, "
                "biases, activations), which vitprune does not count, would add, as for DeiT. No attention, so both "
                "conventions agree. The rate behind the pruned rows is ambiguous (caption 50%, Table 12 45/50/55%; "
                "notes/vbp.md §5 item 21): solving for the per-stage split, as for Swin below, only 50% fits all "
                "three rows, so the caption's rate is the one. VBP's global ranking of trained variances decides the "
                "split, which random weights cannot: ours removes the same share of every block.")
    swin_intro = ("timm's Swin with random weights, full convention: the params agree to the printed digit, the "
                  "MACs are 0.01-0.03 G (0.2%) above ours, of the size Swin's own counter's norms would add. VBP "
                  "ranks every neuron by its trained variance in one global list, so how many each stage loses, and "
                  "with it the params and MACs (a neuron costs 2C + 1 params and 2C·T MACs in its stage: 4x the MACs "
                  "per param in stage 1 as in stage 2), depends on the weights (notes/vbp.md §7). Ours removes the "
                  "same share of every block's neurons; the note says what split the printed rows imply (solved from "
                  "the count ceil(p · all), the params and the MACs the printed rows differ by, within their "
                  "rounding).")
    offsets = ", ".join(f"{float(_VBP_T10[n][1]) - _dense(n)['macs_full'] / 1e9:.3f}" for n in (_T, _S, _B))
    intro = ("VBP removes ceil(p × all MLP neurons) by one global ranking; every DeiT block has the same width and "
             "token count, so the counts depend on p only. The paper's MACs follow the full convention, but its dense "
             f"counts are {offsets} G above ours for DeiT-T/S/B. Its counter is not named (notes/vbp.md §5 item 14); "
             "an offset that grows with the width is what element-wise operations (norms, biases, activations), "
             "which vitprune does not count, would add. The removed MACs (197 tokens × 2C per neuron, notes/vbp.md §7) "
             "agree, so every pruned row carries the same offset.")
    return {"paper": "VBP", "note": "notes/vbp.md",
            "tables": [_table("Table 1: DeiT rows", "MACs (G)", t1, intro),
                       _table("Tables 3 and 7: 50% (Magnitude, SNIP and VBP share one structure)", "MACs (G)", t3),
                       _table("Table 4: ToMe and ToMe + VBP (50%) on DeiT-B", "MACs (G)", t4),
                       _table("Table 5: against NViT (params only)", "MACs (G)", t5),
                       _table("Table 10: ImageNet-1k, 5-50%", "MACs (G)", t10),
                       _table("Table 11: CIFAR-100, 30-70%", "MACs (G)", t11,
                              "Counted with CIFAR-100's 100-class head, at 224 px as the paper's MACs imply."),
                       _table("Table 8: ConvNeXt", "MACs (G)", t8, t8_intro),
                       _table("Table 1: Swin rows", "MACs (G)", _vbp_swin_rows(), swin_intro)],
            "not_reproduced": _not_reproduced("VBP")}


# ---------------------------------------------------------------- STAR

def _star_section() -> dict[str, Any]:
    """STAR's dense models, Table 2's hand-set schedules and the static-ACS rows of Tables 1, 2, 4 and 6-9."""
    dense = [_row(f"{label} (Tables 1, 4 baseline)", None, _p(printed, 1), _dense(name), "full")
             for label, (name, printed) in STAR_DENSE.items()]
    lvvit_kwargs = tuple(LVVIT_KWARGS.items())
    for label, (name, printed, _) in LVVIT.items():
        with_aux = _dense(name)["macs_full"]
        dense.append(_row(f"{label} (Tables 1, 5 baseline; vitprune's `{name}`, class head alone)", None,
                          _p(printed, 1), _dense(name, lvvit_kwargs), "full",
                          "STAR's code runs LV-ViT with its [CLS] head alone (notes/star.md §1), and so do these rows: "
                          f"with the token-labelling head LV-ViT's own evaluation adds, it is {with_aux / 1e9:.3f} G, "
                          "which does not round to the printed figure."))
    manual = []
    for blocks, rate, printed in STAR_TABLE2:
        row = _row(f"DeiT-B blocks {blocks} (1-based) at {rate}, {rate}², {rate}³ (intra- and inter-layer rows)",
                   None, _p(printed, 1), _star_manual(blocks, rate), "full")
        if not _difference(row, 1e9)["within_rounding"]:
            row["note"] = ("The reading that reproduces the other two rows (per-layer keep rates r, r², r³, pruning "
                           "after attention) gives this; no reading the note tried gives the printed value "
                           "(cumulative rates 11.49 G, pruning at block outputs 10.82 G; notes/star.md §1.10), which "
                           "equals the ACS rho = 0.75 row of the same table.")
        manual.append(row)
    names = {label: (name, ()) for label, (name, _) in STAR_DENSE.items()}
    names |= {label: (name, lvvit_kwargs) for label, (name, _, _) in LVVIT.items()}
    lvvit = [(label, rho, _p(printed, 1), where) for label, (_, _, rows) in LVVIT.items()
             for rho, (printed, where) in rows.items()]
    acs = []
    for label, rho, printed, where in _STAR_ACS + lvvit:
        row = _row(f"{label} rho {rho} ({where})", None, printed, _star_acs(*names[label], ACS_GAMMA[label], rho),
                   "full")
        delta = _difference(row, 1e9)
        if not delta["within_rounding"]:
            row["note"] = (f"{delta['delta']['macs']:+.2f} G: the fitted profile (gamma {ACS_GAMMA[label]}) is "
                           "only an approximation of the trained model's ACS.")
        acs.append(row)
    acs_intro = ("Not fully specified: the keep rates follow from the trained model's per-block ACS, which the paper "
                 "does not print. Ours use the profile (ACS_l − ACS_1)/(ACS_L − ACS_1) = (l/(L−1))^gamma, gamma "
                 f"{', '.join(f'{g} ({m})' for m, g in ACS_GAMMA.items())}: DeiT's are the note's fit to Table 4's "
                 "GFLOPs (notes/star.md §1.10), LV-ViT's ours to Table 5's and Table 1's rows (least squares over "
                 "0.20-1.00 by 0.05; `python benchmarks/star_deit.py --fit-gamma`). Agreement is by construction, a "
                 "difference is the fit's error, not a counting one. Tokens are kept as ceil(p × patches), after "
                 "attention; LV-ViT's token-labelling head reads the patch tokens the last block keeps.")
    intro = ("STAR prints MACs (torchprofile) under the label GFLOPs (notes/star.md §1.10); they follow the full "
             "convention. Token pruning adds no parameters, and the paper prints none. The token-pruned rows below "
             "have no tp figure: torch-pruning's counter would count none of a token-pruning block's attention "
             "(docs/measurement.md).")
    return {"paper": "STAR", "note": "notes/star.md",
            "tables": [_table("Tables 1 and 4: dense models", "GFLOPs", dense, intro),
                       _table("Table 2: hand-set schedules on DeiT-B", "GFLOPs", manual),
                       _table("Static ACS schedules (Tables 1, 2, 4, 6, 7, 8, 9)", "GFLOPs", acs, acs_intro)],
            "not_reproduced": _not_reproduced("STAR")}


# ---------------------------------------------------------------- HiAP

def _hiap_section() -> dict[str, Any]:
    """HiAP Table 2 (DeiT-S: dense and the described 3.1G architecture) and Table 3's dense CIFAR ViT-Tiny."""
    described, paper_cost = _hiap_described()
    t2 = [_row("DeiT-S (Dense Baseline)", "22.1", _p(HIAP_PAPER["dense_gmacs"], 1), _dense(_S), "full"),
          _row("HiAP (Ours) 3.1G: the architecture §5.3 describes", "15.0", _p(HIAP_PAPER["hiap_gmacs"], 1),
               described, "full",
               "The paper describes the learned architecture only roughly (§5.3: 2-4 heads per layer, value dims "
               "'often' 32 or fewer, ~1400 FFN neurons early and ~1200 deeper, last FFN closed). Its reading here "
               "(3 heads × 32 value dims in every block, FFN 1400 in blocks 0-5 and 1200 in 6-10, block 11's FFN "
               "closed; notes/hiap.md §3.5, hiap_deit.described_gates) is smaller than the printed 15.0 M / 3.1 G; "
               "the paper's cost model, which charges the V projection at full head width, gives it "
               f"{paper_cost / 1e9:.2f} G.")]
    cifar = _dense(*_CIFAR_VIT_TINY)
    t3 = [_row("ViT-Tiny dense baseline (6 blocks, width 192, 3 heads; 32 px, patch 4, MLP ratio 4)", None, "174.0",
               cifar, "linear",
               "The paper gives 6 blocks, width 192 and 3 heads only; patch 4, MLP ratio 4 and a [CLS] token are the "
               "note's reading (notes/hiap.md §1.5, §5 B8). The printed 174.0 M is closest to the linear count; "
               "ptflops-style bias, LayerNorm and GELU element ops would add about 1 M (note §1.5). The full count "
               f"is {cifar['macs_full'] / 1e6:.1f} M.")]
    intro = "Table 2 prints MACs under the label FLOPs (G) (notes/hiap.md §3.2), full convention."
    return {"paper": "HiAP", "note": "notes/hiap.md",
            "tables": [_table("Table 2: ImageNet-1K, DeiT-S", "FLOPs (G)", t2, intro),
                       _table("Table 3: CIFAR-10, custom ViT-Tiny", "MACs (M)", t3, unit="M")],
            "not_reproduced": _not_reproduced("HiAP")}


# ---------------------------------------------------------------- report

def _ours(row: dict[str, Any], convention: str, scale: float, digits: int) -> str:
    """Our MACs in ``convention`` (a key of :data:`_COLUMNS`), bold where the paper's figure follows it."""
    value = (row["ours"] or {}).get(f"macs_{convention}")
    if value is None:
        return "—"
    text = f"{value / scale:.{digits}f}"
    return f"**{text}**" if convention == row["compare"] and row["paper"]["macs"] is not None else text


def _md_difference(row: dict[str, Any], unit: str) -> str:
    if row["within_rounding"] is None:
        return "—"
    parts = []
    if "params_m" in row["delta"]:
        parts.append(f"params {row['delta']['params_m']:+.3f} M")
    if "macs" in row["delta"]:
        parts.append(f"MACs {row['delta']['macs']:+.{3 if unit == 'G' else 1}f} {unit}")
    return ("✓ " if row["within_rounding"] else "✗ ") + ", ".join(parts)


def _md_table(table: dict[str, Any]) -> list[str]:
    unit = table["unit"]
    scale, digits = _UNITS[unit], 3 if unit == "G" else 1
    lines = [f"### {table['title']}", ""]
    if table["intro"]:
        lines += [table["intro"], ""]
    columns = table["columns"]
    lines += [f"| configuration | paper params (M) | ours params (M) | paper {table['macs_label']} | "
              + "".join(f"ours {unit}MACs {_COLUMNS[c]} | " for c in columns) + "ours − paper | difference explained |",
              "|---|---:|---:|---:|" + "---:|" * len(columns) + "---|---|"]
    for row in table["rows"]:
        paper, ours = row["paper"], row["ours"]
        lines.append(f"| {row['config']} | {paper['params_m'] or '—'} | "
                     f"{'—' if ours is None else format(ours['params'] / 1e6, '.3f')} | {paper['macs'] or '—'} | "
                     + "".join(f"{_ours(row, c, scale, digits)} | " for c in columns)
                     + f"{_md_difference(row, unit)} | {row['note']} |")
    return lines + [""]


def _md_not_reproduced(groups: list[dict[str, Any]]) -> list[str]:
    lines = ["### Printed but not rebuilt", "", "| tables | configurations as printed | why not |", "|---|---|---|"]
    for group in groups:
        configs = "; ".join(
            r["config"] + ": " + ", ".join(x for x in (r["params_m"] and f"{r['params_m']} M params",
                                                       r["macs"] and f"{r['macs']} {group['unit']}MACs") if x)
            for r in group["rows"])
        lines.append(f"| {group['tables']} | {configs} | {group['reason']} |")
    return lines + [""]


def to_markdown(report: dict[str, Any]) -> str:
    """The page: what is compared and how, then each paper's tables and what it prints but does not specify."""
    rows = [r for p in report["papers"] for t in p["tables"] for r in t["rows"]]
    listed = sum(len(g["rows"]) for p in report["papers"] for g in p["not_reproduced"])
    lines = [
        "# Paper tables side by side",
        "",
        "For every configuration that HetDPT, VBP, STAR and HiAP print with a parameter and/or MAC count, the printed "
        "figures next to vitprune's: timm's DeiT/ViT, ConvNeXt and Swin (and vitprune's LV-ViT) built with random weights "
        "(`pretrained=False`, nothing downloaded), pruned with vitprune's own surgery and counted by "
        "`vitprune.measure.count_macs`. Only structure "
        "is compared (accuracy needs ImageNet training). The counts are exact integer arithmetic over the layer "
        "shapes one forward pass records, so they are the same on every machine and every run; nothing is timed. "
        f"MACs per image: *full* = {CONVENTIONS['full']}, with the tokens that actually enter each block; *linear* "
        f"= {CONVENTIONS['linear']}. Biases, norms, activations and softmax are in neither. *tp* = "
        f"{CONVENTIONS['tp']} (torch-pruning {torch_pruning.__version__}; docs/measurement.md says what it counts on each family); "
        "it cannot count token-pruning blocks, so the STAR rows with token pruning have none. HetDPT's depth table "
        f"adds *tp as HetDPT's code* = {TP_HETDPT}. The papers label their "
        "counts MACs (HetDPT, VBP), GFLOPs (STAR) or FLOPs (HiAP Table 2); all are MACs. **Bold** marks the "
        "convention the paper's figure follows (per the implementation notes, `notes/<paper>.md`); *ours − paper* "
        "is taken in it, ✓ meaning ours rounds to the printed figure at its printed precision and ✗ a difference "
        "beyond rounding, explained in the last column. Paper figures are typed from the papers, with their table "
        "numbers. What a paper prints but does not specify is listed after its tables with the printed figures and "
        "the reason.",
        "",
        (f"{len(rows)} configurations in the tables: {sum(r['within_rounding'] is True for r in rows)} within "
         f"rounding, {sum(r['within_rounding'] is False for r in rows)} beyond it (explained), "
         f"{sum(r['source'] == 'missing' for r in rows)} waiting for `hetdpt_plus_budgets.py`; {listed} listed as "
         f"not rebuilt. {report['date']}, {report['seconds']:.0f} s."),
        "",
    ]
    for paper in report["papers"]:
        lines += [f"## {paper['paper']} ({paper['note']})", ""]
        for table in paper["tables"]:
            lines += _md_table(table)
        lines += _md_not_reproduced(paper["not_reproduced"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Build and count every configuration, then write the JSON and Markdown."""
    args = parse_args(argv)
    start = time.perf_counter()
    papers = [_hetdpt_section(args.out_dir), _vbp_section(), _star_section(), _hiap_section()]
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "conventions": {**CONVENTIONS, "tp_hetdpt": TP_HETDPT},
              "torch_pruning": torch_pruning.__version__,
              "weights": "random (timm, pretrained=False): structure only", "seconds": time.perf_counter() - start,
              "papers": papers}
    write_results(args.out_dir, "paper_tables", report, to_markdown(report))


if __name__ == "__main__":
    main()
