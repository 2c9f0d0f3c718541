"""HiAP's described DeiT-S architecture: its MACs against the paper's 3.1G, and its speed against its MAC ratio.

The paper (§5.3) describes what HiAP keeps of DeiT-S at the 3.1G budget: 2-4 heads per layer, value
dimensions cut from 64 to about 32 per head, ~1400 of 1536 FFN neurons in early layers and ~1200 in
deeper ones, and the last FFN block closed. This script extracts that architecture (3 heads × 32 value
dims in every block, FFN 1400 in blocks 1-6 and 1200 in 7-11, FFN 12 closed; the note's §3.5 check,
which derives 2.89G exact MACs) with HiAP's own extraction from hand-set gates, and times it against
the dense model in alternating pairs. On DeiT-S widths a block's fixed costs (norms, residual adds,
softmax) weigh less than on the digits ViT (width 48), so this shows how much of HiAP's MAC reduction
turns into speed at a realistic width.

Weights are random (speed and MACs do not depend on them; nothing is downloaded). Writes
``<out-dir>/hiap_deit_<device>.json`` and ``.md``.

    python benchmarks/hiap_deit.py                               # CPU, fp32
    python benchmarks/hiap_deit.py --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from profile_deit import DTYPES, results_stem, write_results

import vitprune
from vitprune.measure import compare_speed, count_macs
from vitprune.methods.hiap import HiAPGates, extract, layer_shapes

#: The paper's reported DeiT-S result and its dense figure (GMACs).
PAPER = {"dense_gmacs": 4.6, "hiap_gmacs": 3.1}


#: HiAP §5.3's learned DeiT-S architecture as notes/hiap.md §3.5 reads it: heads kept in every block, value dims
#: per kept head, FFN neurons in the first and in the second half of the blocks (the last block's FFN closed).
DESCRIBED = {"heads": 3, "dims": 32, "early": 1400, "late": 1200}


def described_gates(model: torch.nn.Module, heads: int = DESCRIBED["heads"], dims: int = DESCRIBED["dims"],
                    early: int = DESCRIBED["early"], late: int = DESCRIBED["late"]) -> HiAPGates:
    """Gates that keep the first ``heads`` heads with their first ``dims`` value dims, ``early`` neurons in the
    first half of the blocks and ``late`` after, and close the last block's FFN."""
    shapes = layer_shapes(model)
    gates = HiAPGates(shapes, init=-1.0)
    with torch.no_grad():
        for b, shape in enumerate(shapes):
            gates.head[b][:heads] = 1.0
            gates.dim[b][:heads, :dims] = 1.0
            last = b == len(shapes) - 1
            gates.block[b].fill_(-1.0 if last else 1.0)
            gates.neuron[b][:early if b < len(shapes) // 2 else late] = 1.0
    return gates


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Extract the described architecture, count it, time it against the dense model."""
    torch.manual_seed(0)
    dense = vitprune.create_model("deit_small_patch16_224")
    pruned = vitprune.create_model("deit_small_patch16_224")
    pruned.load_state_dict(dense.state_dict())
    extract(pruned, described_gates(pruned))
    before, after = count_macs(dense).totals(), count_macs(pruned).totals()
    comparison = compare_speed(pruned, dense, batch_size=args.batch_size, device=args.device,
                               dtype=DTYPES[args.dtype], pairs=args.pairs, warmup=args.warmup)
    speed = comparison.to_dict()
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "checkpoint": "deit_small_patch16_224, random weights",
            "architecture": "3 heads x 32 value dims per block; FFN 1400 (blocks 0-5), 1200 (6-10), closed (11)",
            "dense": before, "pruned": after, "paper": PAPER, "speed": speed,
            "mac_ratio": before["macs_full"] / after["macs_full"]}


def to_markdown(report: dict[str, Any]) -> str:
    """The table: MACs in both conventions against the paper, the speedup against the MAC ratio."""
    d, p, s = report["dense"], report["pruned"], report["speed"]
    ctx = s["a"]["context"]
    return "\n".join([
        "# HiAP's described DeiT-S architecture: MACs and speed",
        "",
        f"Starting checkpoint: {report['checkpoint']}. Architecture (paper §5.3, note §3.5): "
        f"{report['architecture']}, extracted by `vitprune.methods.hiap.extract` from hand-set gates. Speed: "
        f"median of {s['pairs']} alternating pairs, batch {ctx['batch_size']}, {ctx['dtype']}, {ctx['device_name']} "
        f"({ctx['threads']} threads, denormals flushed: {ctx.get('flush_denormal')}); {report['date']}.",
        "",
        "| | dense | extracted | paper (dense → HiAP) |",
        "|---|---:|---:|---:|",
        f"| GMACs, full (with attention matmuls) | {d['macs_full'] / 1e9:.3f} | {p['macs_full'] / 1e9:.3f} | "
        f"{report['paper']['dense_gmacs']} → {report['paper']['hiap_gmacs']} |",
        f"| GMACs, linear only | {d['macs_linear'] / 1e9:.3f} | {p['macs_linear'] / 1e9:.3f} | |",
        f"| params (M) | {d['params'] / 1e6:.2f} | {p['params'] / 1e6:.2f} | |",
        f"| ms per batch (median) | {s['b']['median_ms']:.1f} | {s['a']['median_ms']:.1f} | |",
        "",
        f"Speedup {s['speedup']:.3f}× (IQR {s['speedup_q1']:.3f}–{s['speedup_q3']:.3f}) against a MAC ratio of "
        f"{report['mac_ratio']:.3f}: {s['speedup'] / report['mac_ratio']:.3f} of the MAC reduction realised.",
        "",
    ])


def main(argv: list[str] | None = None) -> None:
    """Run, then write the JSON and Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    report = run(args)
    stem = results_stem("hiap_deit", args.device, args.dtype)
    write_results(args.out_dir, stem, report, to_markdown(report))
    print(to_markdown(report))


if __name__ == "__main__":
    main()
