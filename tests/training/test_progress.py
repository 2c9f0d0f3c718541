"""Progress on a console that is not a terminal (a log file, CI, nohup): plain lines as the work goes, not one bar at
the end."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from vitprune.training.progress import LineProgress, progress_bar, track_batches


def _console(out: io.StringIO, *, terminal: bool = False) -> Console:
    return Console(file=out, force_terminal=terminal, force_interactive=terminal, width=200)


def test_a_terminal_gets_the_bar_and_anything_else_lines():
    """Anything else: a file, a pipe, a dumb terminal (rich's ``is_interactive``), none of which can redraw."""
    with progress_bar(True, _console(io.StringIO(), terminal=True)) as bar:
        assert type(bar) is Progress and not bar.disable
    with progress_bar(True, _console(io.StringIO())) as bar:
        assert isinstance(bar, LineProgress)
    out = io.StringIO()
    with progress_bar(False, _console(out)) as bar:
        assert type(bar) is Progress and bar.disable
        bar.update(bar.add_task("silent", total=1, stats=""), completed=1)
    assert out.getvalue() == ""


def test_lines_come_every_interval_on_a_refresh_and_at_completion():
    clock, out = [0.0], io.StringIO()
    with LineProgress(_console(out), interval=30, get_time=lambda: clock[0]) as bar:
        task = bar.add_task("epoch 1/2", total=4, stats="")
        bar.update(task, completed=1, stats="loss 2.000")  # too soon for a line
        clock[0] = 31.0
        bar.update(task, completed=2, stats="loss 1.500")  # 31 s since the task started
        bar.update(task, completed=2, stats="loss 1.400", refresh=True)  # the epoch's end
        clock[0] = 40.0
        bar.update(task, completed=3, description="epoch 2/2", stats="loss 1.200")  # 9 s since the last line
        bar.advance(task)  # complete
    assert out.getvalue().splitlines() == [
        "epoch 1/2 2/4 loss 1.500 0:00:31",
        "epoch 1/2 2/4 loss 1.400 0:00:31",
        "epoch 2/2 4/4 loss 1.200 0:00:40",
    ]


def test_a_task_of_unknown_length_shows_its_last_state_when_the_bar_stops():
    out = io.StringIO()
    with LineProgress(_console(out), 30, get_time=lambda: 5.0) as bar:
        assert list(bar.track((i for i in range(3)), description="collecting")) == [0, 1, 2]
    assert out.getvalue() == "collecting 3 0:00:00\n"


def test_tracked_batches_on_a_captured_stderr_print_their_line(capsys):
    assert list(track_batches(range(5), "statistics", max_batches=3, enabled=True)) == [0, 1, 2]
    _, err = capsys.readouterr()
    assert err.startswith("statistics 3/3 0:00:") and err.count("\n") == 1
