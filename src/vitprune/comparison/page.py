"""A comparison's answer as a page: the table, the Pareto set, the pick per target with its rule, its verdicts and its
command, and one Pareto plot across the targets (top-1 against measured speedup)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitprune.atomic import write_text
from vitprune.comparison.config import points
from vitprune.comparison.report import DONE, ArmResult, CompareReport, Target
from vitprune.plotting import figure, save_figure

PAGE_FILE, PLOT_FILE = "report.md", "pareto.png"


def write_page(report: CompareReport, run_dir: Path) -> None:
    """``report.md`` and ``pareto.png`` in ``run_dir``."""
    write_text(run_dir / PAGE_FILE, render(report, plot=PLOT_FILE))
    save_figure(pareto(report), run_dir / PLOT_FILE)


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _row(r: ArmResult) -> str:
    if r.status != DONE:
        return f"| {r.arm} | {r.status}: {r.reason} | | | | | | {r.title} |"
    on = {None: "control", True: "yes", False: f"**no**: {r.reason}"}[r.met]
    return (f"| {r.arm} | {r.top1:.2f} [{r.interval[0]:.2f}, {r.interval[1]:.2f}] | {r.params / 1e6:.3f} M | "
            f"{r.macs / 1e6:.2f} M ({r.macs_share:.1%}) | {_num(r.speedup, '.2f')}× "
            f"[{_num(r.speedup_q1, '.2f')}, {_num(r.speedup_q3, '.2f')}] | {on} | {duration(r.seconds)} | "
            f"{r.title} |")


def _top1_words(seeds: list[int]) -> str:
    if len(seeds) == 1:
        return f"Every arm and the control ran under seed {seeds[0]}; top-1 with Wilson's 95% interval."
    return (f"Every arm and the control ran under seeds {', '.join(map(str, seeds))}; top-1 is the mean over them, "
            "with the 95% interval of the two-way bootstrap (seeds and images resampled), and the verdicts resample "
            "both too.")


def duration(seconds: float | None) -> str:
    """Seconds as the page and the command's log say them: ``45 s``, ``16.4 min``, ``–`` for none."""
    if seconds is None:
        return "–"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def render(report: CompareReport, plot: str | None = None) -> str:
    """The page's Markdown."""
    dense = report.dense
    budget = report.budget
    recovery = budget["recovery"]
    lines = [
        f"# Which method for {report.model} on {report.data}",
        "",
        f"Starting checkpoint: `{report.model}` (top-1 {dense['top1']:.2f}% on {report.validation_images} validation "
        f"images, {dense['params'] / 1e6:.3f} M params, {dense['macs'] / 1e6:.2f} M MACs per image, "
        f"{report.mac_convention}). Budget `{budget['name']}`: every arm and the dense control recover for "
        f"{recovery['epochs']} epoch(s) at lr {recovery['lr']:g}, batch {recovery['batch_size']}, "
        f"{budget['distill']['distill']} distillation from the dense model, on "
        f"{'every' if budget['train_images'] is None else budget['train_images']} training images; each "
        f"method's own search at `{budget['effort']}` effort (HiAP's gate training is its search, as long as the "
        "recovery at quick and standard; the recovery follows its extraction). Speedup: the arm's final model against "
        f"the dense model in {report.speed['pairs']} alternating pairs, median [quartiles], at batch "
        f"{report.speed['batch_size']} in {report.speed['runtimes'][0]}, {report.speed['dtype']}, on "
        f"{report.speed['device']} with {report.speed['threads']} threads (the speed the pick uses; every runtime and "
        "batch in each target's speed table). "
        f"{_top1_words(report.seeds)} Wall time {duration(report.seconds)} (estimated "
        f"{duration(report.estimate_seconds)} before the run, from the searches' and recoveries' images); an arm's "
        "wall time is that of the steps it ran, not of those it took from an earlier arm with the same settings and "
        "seed (its step.json says `shared_from`).",
        "",
    ]
    for label in report.targets:
        target = Target.parse(label)
        lines += [f"## {target.describe()}", "",
                  "| arm | top-1 % [95%] | params | MACs (share) | speedup [IQR] | on target | wall | what |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [_row(r) for r in report.arms if r.target == label]
        lines += [_row(report.control), ""]
        lines += _speed_lines([*(r for r in report.arms if r.target == label), report.control], report.speed)
        front = pareto_set([r for r in report.arms if r.target == label])
        if front:
            lines += ["Pareto set (on target; top-1 against measured speedup): " + ", ".join(
                f"{r.arm} ({r.top1:.2f}% [{r.interval[0]:.2f}, {r.interval[1]:.2f}], {_num(r.speedup, '.2f')}× "
                f"[{_num(r.speedup_q1, '.2f')}, {_num(r.speedup_q3, '.2f')}])" for r in front) + ".", ""]
        lines += _pick_lines(report.pick[label], target)
    if report.left_out:
        lines += ["Not run on their own: " + "; ".join(f"{name} ({why})" for name, why in report.left_out.items())
                  + ".", ""]
    if plot:
        lines += [f"![top-1 against measured speedup]({plot})", ""]
    return "\n".join(lines)


def _speed_lines(arms: list[ArmResult], speed: dict[str, Any]) -> list[str]:
    """Each scored arm's final model timed as deployed: per runtime and batch its milliseconds per batch and speedup
    [quartiles] over the dense model, and its memory."""
    timed = [r for r in arms if r.status == DONE and r.timings]
    if not timed:
        return []
    columns = list(dict.fromkeys((row["runtime"], row["batch"]) for r in timed for row in r.timings))
    cuda = any(r.memory and r.memory.get("peak_bytes") is not None for r in timed)
    names = [f"{runtime}, batch {batch}" + (" (latency)" if batch == 1 else "") for runtime, batch in columns]
    lines = [f"Speed as deployed ({speed['dtype']} in torch, float32 in onnxruntime; ms per batch, speedup over the "
             "dense model [quartiles]):", "",
             "| arm | " + " | ".join(names) + " | weights" + (" | peak (CUDA)" if cuda else "") + " |",
             "|---|" + "---|" * (len(columns) + 1 + cuda)]
    for r in timed:
        cells = {(row["runtime"], row["batch"]): row for row in r.timings}
        row_cells = [_timing_cell(cells.get(column)) for column in columns]
        memory = r.memory or {}
        lines.append(f"| {r.arm} | " + " | ".join(row_cells) + f" | {memory.get('weights_bytes', 0) / 2**20:.2f} MiB"
                     + (f" | {_num((memory.get('peak_bytes') or 0) / 2**20, '.1f')} MiB" if cuda else "") + " |")
    return [*lines, ""]


def _timing_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if "error" in row:
        return f"not run: {row['error']}"
    return f"{row['ms']:.2f} ms, {row['speedup']:.2f}× [{row['speedup_q1']:.2f}, {row['speedup_q3']:.2f}]"


def _pick_lines(chosen: dict[str, Any] | None, target: Target) -> list[str]:
    """The pick at one target: who, why, by which rule, and its verdicts against the rest."""
    if chosen is None:
        return ["No arm reached this target (MACs within 1%, or the speedup within the measured quartiles).", ""]
    same = chosen["indistinguishable"]
    lines = [f"**Pick at {target.describe()}: {chosen['arm']}** ({chosen['top1']:.2f}% top-1, "
             f"{_num(chosen['speedup'], '.2f')}× measured): {chosen['why']}. Rule (`--objective "
             f"{chosen['objective']}`): {chosen['rule']}. Statistically indistinguishable from it: "
             f"{', '.join(same) if same else 'none'}. Alone (seed {chosen['seed']}): `{chosen['command']}`", ""]
    if chosen["verdicts"]:
        lines += ["| pick vs | verdict | difference (points) [95%] | p (pick not better) | p (pick not worse) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {v['b']} | {v['verdict']} | {v['effect']:+.2f} [{v['low']:+.2f}, {v['high']:+.2f}] | "
                  f"{v['p_greater']:.3g} | {v['p_less']:.3g} |" for v in chosen["verdicts"]]
        margin = points(chosen["tolerance"])
        lines += ["", f"Verdicts Holm-corrected within the target; *equivalent*: within ±{margin} by two one-sided "
                      "tests.", ""]
    return lines


def pareto_set(arms: list[ArmResult]) -> list[ArmResult]:
    """The scored arms on target that no other on-target arm beats in both top-1 and measured speedup, fastest
    first."""
    points = [r for r in arms if r.status == DONE and r.met and r.speedup is not None]
    front, best = [], float("-inf")
    for r in sorted(points, key=lambda r: (-r.speedup, -r.top1)):
        if r.top1 > best:
            front.append(r)
            best = r.top1
    return front


def pareto(report: CompareReport) -> Any:
    """Top-1 against measured speedup, every target on the same axes: each scored arm with its top-1 interval and
    its speedup's quartiles, one colour per target, off-target arms hollow, each target's pick ringed, the Pareto
    set of the arms on target joined, speedup targets as dashed lines and the dense control at 1×."""
    fig = figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    for number, label in enumerate(report.targets):
        colour, target = f"C{number}", Target.parse(label)
        arms = [r for r in report.arms if r.target == label and r.status == DONE and r.speedup is not None]
        for r in arms:
            ax.errorbar(r.speedup, r.top1, xerr=[[r.speedup - r.speedup_q1], [r.speedup_q3 - r.speedup]],
                        yerr=[[r.top1 - r.interval[0]], [r.interval[1] - r.top1]], fmt="o", color=colour,
                        markerfacecolor=colour if r.met else "white", markersize=5, elinewidth=0.8, capsize=2)
            ax.annotate(r.arm, (r.speedup, r.top1), textcoords="offset points", xytext=(4, 3), fontsize=7)
        front = pareto_set(arms)
        ax.plot([r.speedup for r in front], [r.top1 for r in front], color=colour, alpha=0.6,
                marker="o" if len(front) == 1 else None, label=f"{target.describe()} (hollow: off target)")
        chosen = report.pick[label]
        if chosen is not None and chosen["speedup"] is not None:
            ax.scatter(chosen["speedup"], chosen["top1"], s=180, facecolors="none", edgecolors=colour, linewidths=1.5)
        if target.kind == "speedup":
            ax.axvline(target.value, color=colour, linestyle="--", linewidth=0.8)
    control = report.control
    if control.status == DONE:
        ax.scatter(control.speedup or 1.0, control.top1, color="black", marker="*", s=60, label="dense + recovery")
    ax.set_xlabel("measured speedup over the dense model (×; bars: quartiles)")
    ax.set_ylabel("validation top-1 (%; bars: 95% interval)")
    ax.set_title(f"{report.model}: accuracy against measured speedup (ringed: the pick)")
    ax.legend(fontsize=7)
    return fig


__all__ = ["PAGE_FILE", "PLOT_FILE", "duration", "pareto", "pareto_set", "render", "write_page"]
