"""Every renderer prints a report whatever its accuracies: zero (an untrained model on a small dataset) or missing
ones print as figures or "-", never as a division by zero."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vitprune.cli import render as cli_render
from vitprune.cli.app import console, err_console
from vitprune.methods.hetdpt.pipeline import HetDPTReport
from vitprune.methods.hetdpt.render import render_hetdpt
from vitprune.methods.hiap import HiAPReport
from vitprune.methods.hiap.render import render_hiap, render_hiap_epoch
from vitprune.methods.star.pipeline import STARReport
from vitprune.methods.star.render import render_star
from vitprune.methods.vbp.pipeline import VBPReport
from vitprune.methods.vbp.render import render_vbp
from vitprune.runs import render
from vitprune.runs.chain import ChainReport
from vitprune.runs.stages import retention

#: An accuracy as a report may hold it: missing, exactly zero, or any fraction.
ACCURACY = st.one_of(st.none(), st.just(0.0), st.floats(0.0, 1.0))
FOOTPRINT = {"params": 1000, "macs_full": 5000, "macs_linear": 4000}


def _speed() -> dict:
    context = {"device_name": "CPU", "dtype": "float32", "batch_size": 4}
    timing = {"median_ms": 2.0, "context": context}
    return {"speedup": 1.2, "speedup_q1": 1.1, "speedup_q3": 1.3, "pairs": 3, "a": timing, "b": timing}


def _gains(top1: dict) -> dict:
    """The fields every method's report has."""
    return {"top1": top1, "dense": FOOTPRINT, "pruned": {**FOOTPRINT, "params": 0}, "mac_conventions": {},
            "speed": _speed(), "seconds": {"prune": 1.0}, "model_dir": "run/model"}


def _layer() -> dict:
    return {"heads": 0, "heads_of": 3, "value_dims": [], "neurons": 0, "neurons_of": 8, "ffn": False,
            "expected_heads": 0.0, "expected_neurons": 0.0}


def _reports(a: dict) -> list[tuple]:
    """(renderer, arguments) for every renderer, with the accuracies in ``a``: the methods' views print on a console
they are given, the command's own on the command's."""
    pruned = {"dense": a["dense"], "pruned": a["pruned"], "finetuned": a["finetuned"], "finetune_best": a["best"]}
    return [
        (cli_render.render_eval, ("m", "digits", "val", {"count": 10, "top1": a["dense"], "top5": a["pruned"],
                                                     "loss": None})),
        (render_hetdpt, (console, "m", HetDPTReport(
            **_gains(pruned), budget=2, attention=[0], activation=[1], merged_blocks=[1],
            split={"attention": 1, "activation": 1, "chosen_by": "user"}, predictor=None, selection={}, config={}))),
        (render_vbp, (console, "m", VBPReport(
            **_gains(pruned), retention=retention(pruned), widths_dense={"0": 8}, widths={"0": 4}, removed=4,
            ratio=0.5, criterion="variance", compensate=True, config={}))),
        (render_star, (console, "m", STARReport(
            **{**_gains(pruned), "pruned": FOOTPRINT}, retention=retention(pruned), adaptive=False, rho=0.7,
            alpha=0.15, keep_rates=[1.0, 0.7], acs=[1.0, 0.9], config={}))),
        (render_hiap, (console, "m", HiAPReport(
            **_gains({"dense": a["dense"], "extracted": a["pruned"]}), target_macs=None, threshold=0.0,
            macs_predicted=0, heads=0, neurons=0, ffn_closed=[0], layers=[_layer()], config={}, train={}, history=[],
            plot="arch.png"))),
        (render_hiap_epoch, (err_console, {"epoch": 1, "macs_expected_exact": 10.0, "macs_hardened": 8.0, "tau": 1.0,
                                     "lambda_scale": 1.0, "undecided": 0.5, "val_top1": a["pruned"],
                                     "layers": [_layer()], "target_macs": None},)),
        (render.render_chain, (console, "m", ChainReport(
            **_gains({"dense": a["dense"], "final": a["finetuned"]}),
            steps=[{"step": 0, "method": "start", **FOOTPRINT, "top1": a["dense"]},
                   {"step": 1, "method": "depth", **FOOTPRINT, "top1": a["pruned"]}],
            consistency={"ok": True, "macs_counted": 1, "macs_padding": 0, "macs_flop_counter": 1,
                         "flop_counter_reference": "ref", "round_trip_max_diff": 0.0, "architecture_rebuilt": True,
                         "onnx_max_diff": None, "onnx_skipped": "not asked for"},
            chain=[{"method": "depth"}]))),
    ]


@settings(max_examples=40)
@given(accuracies=st.fixed_dictionaries({"dense": ACCURACY, "pruned": ACCURACY, "finetuned": ACCURACY,
                                         "best": ACCURACY}))
def test_every_renderer_survives_zero_and_missing_accuracies(accuracies):
    for renderer, args in _reports(accuracies):
        with console.capture(), err_console.capture():
            renderer(*args)


def test_a_zero_dense_accuracy_prints_a_dash_for_the_share(monkeypatch):
    monkeypatch.setattr(console, "width", 200)
    with console.capture() as captured:
        render_hiap(*_reports({"dense": 0.0, "pruned": 0.0, "finetuned": 0.0, "best": None})[4][1])
    assert "0.00% extracted, no fine-tuning (- of dense)" in captured.get()
    assert render.percent(None) == "-" and render.percent(0.0) == "0.00%"
    assert render.ratio(1, 0) == render.ratio(None, 2) == "-" and render.ratio(1, 4) == "0.250"
    assert render.share(0.5, 0.0) == "-" and render.share(0.5, 0.8) == "62.5%"


@pytest.mark.parametrize("top1, expected", [({"dense": 0.0, "pruned": 0.0}, {"pruned": None}),
                                            ({"dense": 0.5, "finetune_best": None}, {"finetune_best": None}),
                                            ({"dense": 0.5, "pruned": 0.25}, {"pruned": 0.5})])
def test_retention_is_none_where_it_cannot_be_computed(top1, expected):
    assert retention(top1) == expected


def _timing(other_load: float | None, threads: int, cpu_count: int = 2) -> dict:
    context = {"device": "cpu", "device_name": "CPU", "dtype": "float32", "batch_size": 4, "threads": threads,
               "cpu_count": cpu_count, "torch": "2", "repeats": 3}
    return {"median_ms": 2.0, "q1_ms": 1.9, "q3_ms": 2.1, "throughput": 2000.0, "other_load": other_load,
            "context": context, "repeats": 3, "warmup": 1}


@pytest.mark.parametrize("other_load, threads, cpu_count, busy", [
    (0.0, 2, 2, False), (0.05, 2, 2, False),   # a quiet machine's background: 0.1 core
    (0.06, 2, 2, True), (0.69, 2, 2, True),    # the user's 0.69: 1.4 cores wanted the ones the timing ran on
    (0.3, 1, 2, False), (0.6, 1, 2, True),     # one thread leaves a core idle for the others, up to a core
    (None, 2, 2, False),                       # no /proc/stat: unknown, not flagged
])
def test_a_busy_machine_is_named_next_to_the_figure(capsys, monkeypatch, other_load, threads, cpu_count, busy):
    from vitprune.measure import busy_note

    monkeypatch.setattr(console, "width", 300)
    timing = _timing(other_load, threads, cpu_count)
    assert bool(busy_note(timing)) == busy
    render.render_comparison(console, "pruned", "dense", {**_speed(), "a": timing, "b": timing, "speedup_min": 1.0,
                                                  "speedup_max": 1.4})
    render.render_gains(console, "m", "VBP", "50.0%", type("R", (), {**_gains({"dense": 0.5}), "speed": {
        **_speed(), "a": timing, "b": timing}})())
    out = capsys.readouterr().out
    assert out.count("busy machine: other processes kept") == (2 if busy else 0)
    if busy:
        assert f"{other_load * cpu_count:.1f} of {cpu_count} cores busy while this ran {threads} threads; not to be " \
               "trusted" in out
