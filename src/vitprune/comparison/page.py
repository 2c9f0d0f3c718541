"""A comparison's answer as a page: the table, the paired statistics, the best arm per target with its command, and
the Pareto plot (top-1 against measured speedup)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitprune.atomic import write_text
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
    on = {None: "control", True: "yes", False: "**no**"}[r.met]
    return (f"| {r.arm} | {r.top1:.2f} [{r.interval[0]:.2f}, {r.interval[1]:.2f}] | {r.params / 1e6:.3f} M | "
            f"{r.macs / 1e6:.2f} M ({r.macs_share:.1%}) | {_num(r.speedup, '.2f')}× "
            f"[{_num(r.speedup_q1, '.2f')}, {_num(r.speedup_q3, '.2f')}] | {on} | {duration(r.seconds)} | "
            f"{r.title} |")


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
        f"method's own search at `{budget['effort']}` effort. Speedup: the arm against the dense model in "
        f"{report.speed['pairs']} alternating pairs at batch {report.speed['batch_size']}, {report.speed['dtype']}, on "
        f"{report.speed['device']} with {report.speed['threads']} threads (median [quartiles]). "
        f"Top-1 with Wilson's 95% interval. Wall time {duration(report.seconds)} (estimated "
        f"{duration(report.estimate_seconds)} before the run, recovery and training only).",
        "",
    ]
    for label in report.targets:
        target = Target.parse(label)
        lines += [f"## {target.describe()}", "",
                  "| arm | top-1 % [95%] | params | MACs (share) | speedup [IQR] | on target | wall | what |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [_row(r) for r in report.arms if r.target == label]
        lines += [_row(report.control), ""]
        best = report.best[label]
        if best is None:
            lines += ["No arm reached this target (MACs within 1%, or the speedup within the measured quartiles).",
                      ""]
        else:
            lines += [f"**Best at {target.describe()}: {best['arm']}**, {best['top1']:.2f}% top-1, "
                      f"{_num(best['speedup'], '.2f')}× measured. Alone: `{best['command']}`", ""]
        paired = report.paired[label]
        if paired:
            lines += ["| best vs | difference (points) [95%] | p (best not better) |", "|---|---|---|"]
            lines += [f"| {p['b']} | {p['effect']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}] | {p['p_greater']:.3g} |"
                      for p in paired]
            lines.append("")
    if report.left_out:
        lines += ["Not run on their own: " + "; ".join(f"{name} ({why})" for name, why in report.left_out.items())
                  + ".", ""]
    if plot:
        lines += [f"![top-1 against measured speedup]({plot})", ""]
    return "\n".join(lines)


def pareto(report: CompareReport) -> Any:
    """Top-1 against measured speedup: one marker per scored arm, one colour per target, each target's Pareto front
    joined, the dense control at 1×."""
    fig = figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for number, label in enumerate(report.targets):
        colour = f"C{number}"
        points = [(r.speedup, r.top1, r.arm) for r in report.arms
                  if r.target == label and r.status == DONE and r.speedup is not None]
        for x, y, arm in points:
            ax.scatter(x, y, color=colour, s=24)
            ax.annotate(arm, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        front, best = [], float("-inf")
        for x, y, _ in sorted(points, key=lambda p: -p[0]):
            if y > best:
                front.append((x, y))
                best = y
        if front:
            xs, ys = zip(*sorted(front))
            ax.plot(xs, ys, color=colour, alpha=0.6, label=Target.parse(label).describe())
    control = report.control
    if control.status == DONE:
        ax.scatter(control.speedup or 1.0, control.top1, color="black", marker="*", s=60, label="dense + recovery")
    ax.set_xlabel("measured speedup over the dense model (×)")
    ax.set_ylabel("validation top-1 (%)")
    ax.set_title(f"{report.model}: accuracy against measured speedup")
    ax.legend(fontsize=8)
    return fig


__all__ = ["PAGE_FILE", "PLOT_FILE", "duration", "pareto", "render", "write_page"]
