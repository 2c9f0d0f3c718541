"""The generated results page: every results file of a benchmark run, headline tables and plots, no typed numbers.

Reads the JSON files the benchmark scripts wrote into a results folder and writes ``<results>/README.md``: how
the run was made (``suite.json``: protocol, machine, each job's command and wall time), the claims page's and the
dense benchmark's summaries (``claims.json``, ``dense.json``, each rendered by its page's ``summary``), headline
tables drawn from the structural, digits and ONNX results, the plots, and a link to every results file with its
title. With ``--readme`` it also rewrites the excerpt between the README's ``<!-- results:start -->`` and
``<!-- results:end -->`` markers. ``suite.py`` calls it after every run.

    python benchmarks/report.py                       # benchmarks/results/README.md and README.md's excerpt
    python benchmarks/report.py --results /tmp/run --no-readme
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from claims_page import FORMAT as CLAIMS_FORMAT
from claims_page import summary as claims_summary
from compare_example import summary as compare_summary
from dense_page import FORMAT as DENSE_FORMAT
from dense_page import summary as dense_summary

from vitprune.atomic import atomic_file, read_json

HERE = Path(__file__).resolve().parent
PAGE = "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
#: Plots worth showing on the page, in order, with their captions.
PLOTS = {
    "digits_pareto.png": "Accuracy against measured speedup on the digits ViT, every method and chain at one "
                         "fine-tuning budget",
    "structural_cpu.png": "Measured speedup against the MAC ratio (full convention), DeiT-T/S/B, every method",
    "digits_map.png": "HetDPT's model-accuracy predictor (MAP) surface with its budget line",
    "digits_hiap_architecture.png": "HiAP's extracted per-layer architecture",
    "digits_star_tokens.png": "STAR's tokens per block",
    "hetdpt_digits.png": "HetDPT against its baselines (depth only)",
    "vbp_digits.png": "VBP against its baselines",
    "hiap_digits.png": "HiAP against its baselines at matched MACs",
}


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / name
    return read_json(path) if path.exists() else None


def _title(md: Path) -> str:
    first = md.read_text(encoding="utf-8").splitlines()[0] if md.stat().st_size else ""
    return first.lstrip("# ").strip() or md.stem


def _context(row_context: dict[str, Any]) -> str:
    return (f"{row_context.get('device_name', '?')} ({row_context.get('device', '?')}), "
            f"{row_context.get('dtype', '?')}, {row_context.get('threads', '?')} threads, "
            f"torch {row_context.get('torch', '?')}")


def structural_table(report: dict[str, Any], models: list[str] | None = None) -> list[str]:
    """Variant rows, one column pair (MAC ratio, speedup) per model."""
    rows = report["results"]
    models = models or list(dict.fromkeys(r["model"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["variant"] != "dense"))
    cells = {(r["model"], r["variant"]): r for r in rows}
    head = "| variant | " + " | ".join(f"{m}: GMACs full (MAC ratio) | {m}: speedup" for m in models) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(models)]
    for variant in variants:
        parts = []
        for model in models:
            r = cells.get((model, variant))
            if r is None:
                parts += ["", ""]
                continue
            parts += [f"{r['macs_full'] / 1e9:.3f} ({r['mac_ratio_full']:.2f}×)",
                      f"{r['speedup']:.2f}× [{r['speedup_q1']:.2f}-{r['speedup_q3']:.2f}]"]
        lines.append(f"| {variant} | " + " | ".join(parts) + " |")
    return lines


def structural_context(report: dict[str, Any]) -> str:
    """One sentence naming what the structural table was measured on."""
    env = report["environment"]
    return (f"Starting checkpoints: timm DeiT with random weights (structure only). Speedup = dense time / pruned "
            f"time, median [IQR] of {report['pairs']} alternating pairs at batch {report['batch_size']}, "
            f"{_context(env)}. MACs per image, full convention (linear/conv + attention matmuls at each block's "
            f"real token count).")


def digits_table(report: dict[str, Any]) -> list[str]:
    """Variant rows: top-1 after pruning and after fine-tuning, MACs, speedup."""
    dense = report["dense"]
    lines = ["| variant | top-1 after pruning | top-1 after fine-tuning | M MACs full (ratio) | speedup |",
             "|---|---:|---:|---:|---:|",
             f"| dense | {100 * dense['top1']:.2f} | | {dense['macs_full'] / 1e6:.2f} (1.00×) | 1.00× |"]
    for r in report["rows"]:
        s = r["speed"]
        lines.append(f"| {r['label']} | {100 * r['top1']['pruned']:.2f} | {100 * r['top1']['finetuned']:.2f} | "
                     f"{r['macs_full'] / 1e6:.2f} ({dense['macs_full'] / r['macs_full']:.2f}×) | "
                     f"{s['speedup']:.2f}× [{s['speedup_q1']:.2f}-{s['speedup_q3']:.2f}] |")
    return lines


def digits_context(report: dict[str, Any]) -> str:
    """One sentence naming what the digits table was measured on."""
    tune = report["finetune"]
    context = report["rows"][0]["speed"]["context"] if report["rows"] else {}
    return (f"Starting checkpoint: {report['starting_checkpoint']}. Each variant pruned, then fine-tuned "
            f"{tune['epochs']} epochs ({tune['distill']} distillation from the dense model); validation top-1 (%). "
            f"Speedup: median [IQR] of {report['speed_pairs']} alternating pairs at batch {report['speed_batch']}, "
            f"{_context(context)}.")


def onnx_table(report: dict[str, Any]) -> list[str]:
    """Exported models: agreement with PyTorch and onnxruntime speedups."""
    lines = ["| model | max abs diff vs PyTorch | onnxruntime speedup vs dense ONNX | PyTorch speedup vs dense | "
             "MAC ratio (full) |", "|---|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if r["model"] == "dense":
            continue
        lines.append(f"| {r['model']} | {r['export']['max_abs_diff']:.1e} | {r['onnxruntime']['speedup']:.2f}× | "
                     f"{r['pytorch']['speedup']:.2f}× | {r['mac_ratio_full']:.2f}× |")
    return lines


def onnx_context(report: dict[str, Any]) -> str:
    """One sentence naming what the ONNX table was measured on."""
    return (f"Starting checkpoint: {report['starting_checkpoint']}; onnxruntime {report['onnxruntime']}, "
            f"batch {report['batch_size']}, {report['pairs']} alternating pairs, {_context(report['environment'])}.")


def _section(results: Path, stem: str, title: str, table, context) -> list[str]:
    report = _load(results, f"{stem}.json")
    if report is None or not (report.get("rows") or report.get("results")):
        return []
    return [f"### {title}", "", context(report), "", *table(report), "",
            f"Full table: [{stem}.md]({stem}.md) ([JSON]({stem}.json)).", ""]


def headlines(results: Path, link: str = "") -> list[str]:
    """The headline sections (links relative to the results folder, prefixed with ``link``)."""
    lines = []
    for stem, title, form, summary in (("claims", "Each paper's claims on cluttered MNIST", CLAIMS_FORMAT,
                                        claims_summary),
                                       ("dense", "Pruned backbones under dense heads", DENSE_FORMAT, dense_summary)):
        report = _load(results, f"{stem}.json")
        if report is not None and report.get("format") == form:
            lines += [f"### {title}", "", *summary(report), ""]
    compared = _load(results, "compare/report.json")
    if compared is not None:
        lines += ["### Which method at a target", "", *compare_summary(compared), ""]
    lines += [*_section(results, "digits", "Every method on the digits ViT", digits_table, digits_context),
              *_section(results, "structural_cpu", "Every method on DeiT-T/S/B (structure, CPU speed)",
                        structural_table, structural_context),
              *_section(results, "structural_cuda", "Every method on DeiT-T/S/B (GPU, fp32)", structural_table,
                        structural_context),
              *_section(results, "structural_cuda_float16", "Every method on DeiT-T/S/B (GPU, fp16)",
                        structural_table, structural_context),
              *_section(results, "onnx_deit_cpu", "ONNX deployment (onnxruntime, CPU)", onnx_table, onnx_context)]
    if link:
        lines = [re.sub(r"\]\((?!https?:)([^)]+)\)", lambda m: f"]({link}{m.group(1)})", line) for line in lines]
    return lines


def page(results: Path) -> str:
    """The whole generated page."""
    suite = _load(results, "suite.json")
    lines = ["# vitprune benchmark results", ""]
    if suite is not None:
        lines += [f"Generated {suite['date']} by `python benchmarks/suite.py` (protocol `{suite['protocol']}`) on "
                  f"{suite['cpu']} ({suite['cpu_count']} CPUs, {suite['platform']}, Python {suite['python']}); "
                  f"the run took {suite['seconds'] / 60:.1f} minutes. Every number below and in the linked files "
                  "was written by the scripts; nothing is typed by hand. The paper's own numbers are set side by "
                  "side with ours in [paper_tables.md](paper_tables.md).", ""]
    lines += ["## Headlines", "", *headlines(results)]
    if not list(results.glob("structural_cuda*.json")):
        lines += ["No GPU results: this run had no GPU. `python benchmarks/suite.py --gpu` on a machine with CUDA adds "
                  "the structural table at batch 256 in fp32 and fp16 (10 warm-up and 100 timed pairs).", ""]
    lines += ["## Plots", ""]
    for name, caption in PLOTS.items():
        if (results / name).exists():
            lines += [f"**{caption}** ([{name}]({name}))", "", f"![{caption}]({name})", ""]
    lines += ["## Every results file", "", "| results | files | job | wall time |", "|---|---|---|---:|"]
    jobs = {entry["name"]: entry for entry in (suite or {}).get("jobs", [])}
    stems = sorted({p.stem for p in (*results.glob("*.md"), *results.glob("*.json"))} - {Path(PAGE).stem, "suite"})
    for stem in stems:
        md, data = results / f"{stem}.md", results / f"{stem}.json"
        files = ", ".join(f"[{kind}]({p.name})" for kind, p in (("md", md), ("JSON", data)) if p.exists())
        job = _job_of(stem, jobs)
        made = f"{job['name']} | {job['seconds']:.0f} s" if job else " | "
        lines.append(f"| {_title(md) if md.exists() else stem} | {files} | {made} |")
    kinds = {".json": "JSON", ".png": "plot"}
    for job in jobs.values():  # the vitprune commands write into folders of their own
        if job.get("out"):
            files = ", ".join(f"[{kinds[Path(name).suffix]}]({name})" for name in job.get("files", ())
                              if name.startswith(f"{job['out']}/") and Path(name).suffix in kinds
                              and (results / name).exists())
            lines.append(f"| {job['command']} | {files} | {job['name']} | {job['seconds']:.0f} s |")
    if jobs:
        lines += ["", "## How each file was made", "", "| job | command | wall time | exit |", "|---|---|---:|---:|"]
        for job in jobs.values():
            lines.append(f"| {job['name']} | `{job['command']}` | {job['seconds']:.0f} s | {job['returncode']} |")
    return "\n".join(lines) + "\n"


def _job_of(stem: str, jobs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The suite job that last wrote ``stem``'s files (``suite.json`` lists what each job wrote)."""
    written = {f"{stem}.md", f"{stem}.json"}
    return next((job for job in reversed(jobs.values()) if written & set(job.get("files", ()))), None)


def update_readme(readme: Path, results: Path) -> None:
    """Rewrite the excerpt between the README's markers from the results (links made relative to the README)."""
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{readme} has no {START} ... {END} markers for the results excerpt")
    link = f"{results.resolve().relative_to(readme.resolve().parent)}/"
    excerpt = "\n".join(["", *headlines(results, link)]).replace("### ", "#### ")
    head, rest = text.split(START, 1)
    with atomic_file(readme) as tmp:
        tmp.write_text(head + START + excerpt + "\n" + END + rest.split(END, 1)[1], encoding="utf-8")


def write_page(results: Path, *, readme: Path | None = None) -> Path:
    """Write ``<results>/README.md`` (and the README excerpt when ``readme`` is given)."""
    with atomic_file(results / PAGE) as tmp:
        tmp.write_text(page(results), encoding="utf-8")
    if readme is not None:
        update_readme(readme, results)
    return results / PAGE


def main(argv: list[str] | None = None) -> None:
    """Regenerate the page (and the README excerpt) from a results folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--readme", type=Path, default=HERE.parent / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="leave the README alone")
    args = parser.parse_args(argv)
    print(f"wrote {write_page(args.results, readme=None if args.no_readme else args.readme)}")


if __name__ == "__main__":
    main()
