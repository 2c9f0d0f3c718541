"""``vitprune compare`` end to end on a tiny model: every applicable arm at each target, the control, the table,
plot and JSON, a resume that runs nothing again, targets a method cannot reach, and the families' own refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import CONVNEXT_TINY, SWIN_TINY, tracked

import vitprune
from vitprune.comparison import arms as arms_module
from vitprune.comparison import run as run_module
from vitprune.comparison.arms import CHAINS, NOT_APPLICABLE, PLANNED, UNREACHABLE, arm_names, left_out, plan_arms
from vitprune.comparison.budget import get_budget
from vitprune.comparison.config import CompareConfig, check_targets
from vitprune.comparison.report import CompareReport, Target
from vitprune.comparison.run import ARM_FILE, compare
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import VitpruneError
from vitprune.measure import MacTarget, SpeedConfig, count_macs
from vitprune.measure import speed as speed_module
from vitprune.methods.hetdpt import pipeline as hetdpt_pipeline
from vitprune.methods.hiap import pipeline as hiap_pipeline
from vitprune.methods.star import pipeline as star_pipeline
from vitprune.methods.tome import pipeline as tome_pipeline
from vitprune.methods.vbp import pipeline as vbp_pipeline
from vitprune.methods.width import pipeline as width_pipeline
from vitprune.runs import MethodData, RunContext
from vitprune.runs.steps import load_chain, parse_chain

pytest.importorskip("torch_pruning")

SPEED = SpeedConfig(batch_size=1, pairs=3, warmup=1)


def _data(model, train=48, val=40):
    size = vitprune.get_adapter(model).input_size
    return (balanced_subset(build_dataset("digits", "train", input_size=size), train, seed=0),
            balanced_subset(build_dataset("digits", "val", input_size=size), val, seed=0),
            balanced_subset(build_dataset("digits", "train", input_size=size, is_training=False), train, seed=0))


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """A three-block digits ViT (16 patches) compared at 60% of its MACs on the quick budget: every arm and the
    control, about 10 s on 2 cores (the tests that read it are slow; the fast lane runs compare end to end below, on
    one arm at a target out of reach and one at a measured speedup)."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=3, patch_size=8)
    train, val, calibration = _data(model)
    run_dir = tmp_path_factory.mktemp("compare") / "run"
    searches: dict[str, list[object]] = {}
    with pytest.MonkeyPatch.context() as patch:
        # The timing's full collection before each arm's pairs costs a quarter second in a test process's heap;
        # this test judges no timing.
        patch.setattr(speed_module.gc, "collect", lambda: 0)
        for module, name, position in SEARCHES:
            patch.setattr(module, name, _recorded(getattr(module, name), position, searches.setdefault(name, [])))
        report = compare(model, MethodData(train, val, calibration),
                         CompareConfig(target_macs=0.6, budget="quick", model="digits-vit", data="digits"),
                         RunContext(run_dir, speed=SPEED))
    return model, (train, val, calibration), run_dir, report, searches


#: Each method's rate search, where its pipeline calls it, and which argument is the target.
SEARCHES = [(vbp_pipeline, "select_for_macs", 2), (star_pipeline, "rho_for_macs", 2),
            (tome_pipeline, "r_for_macs", 1), (width_pipeline, "prune_width_to_macs", 1),
            (hiap_pipeline, "fixed_macs", 1), (hetdpt_pipeline, "budget_for_macs", 1)]


def _recorded(search, position, seen):
    """``search``, recording the target each call hands it."""
    def call(*args, **kwargs):
        seen.append(args[position])
        return search(*args, **kwargs)
    return call


@pytest.mark.slow
def test_the_target_reaches_every_rate_search_as_a_mac_target(compared):
    """--target-macs 0.6 becomes one MacTarget, which the comparison resolves against the dense model once and
    every method's own search receives (through its chain step's JSON form and its config)."""
    model, _, _, _, searches = compared
    dense = count_macs(model).macs
    goal = MacTarget.absolute(0.6 * dense)
    assert set(searches) == {name for _, name, _ in SEARCHES}
    assert all(isinstance(target, MacTarget) for targets in searches.values() for target in targets)
    for name, targets in searches.items():
        if name == "budget_for_macs":  # also the chains' first steps: the square root of the share each (planned
            # once, before anything runs, for the estimate and the run)
            chains = sum(methods[0] == "hetdpt" for methods, _ in CHAINS.values())
            assert [t.value for t in targets] == pytest.approx([goal.value, *[dense * 0.6 ** 0.5] * chains])
        else:  # the method's own arm, and a chain's last step
            assert set(targets) == {goal}, name


@pytest.mark.slow
def test_every_arm_runs_to_the_target_next_to_the_control(compared):
    model, _, run_dir, report, _ = compared
    dense = count_macs(model).macs
    # vitprune's own methods in their names' order, then the chains.
    assert [r.arm for r in report.arms] == arm_names() == ["hetdpt", "hiap", "star", "tome", "vbp", "width", *CHAINS]
    assert all(r.status == "done" for r in report.arms), [(r.arm, r.reason) for r in report.arms]
    for row in report.arms:
        model_dir = run_dir / "arms" / "macs-0.6" / row.arm / "seed-0" / "model"
        assert row.macs == count_macs(vitprune.load(model_dir)).macs and row.seeds == [0]
        assert row.macs_share == row.macs / dense and row.met == (abs(row.macs_share / 0.6 - 1) <= 0.01)
        assert row.interval[0] <= row.top1 <= row.interval[1] and row.speedup > 0 and row.seconds > 0
    # Every arm lands within 1% below the target: a coarse rate search (whole layers, heads, tokens, gates) stops
    # above it and VBP's neuron trim reaches it.
    assert all(row.met and row.macs <= 0.6 * dense and row.reason is None for row in report.arms), \
        [(r.arm, r.macs_share, r.reason) for r in report.arms]
    steps = {r.arm: [s["method"] for s in r.steps] for r in report.arms}
    assert steps == {"hetdpt": ["hetdpt", "vbp", "finetune"], "width": ["width", "vbp", "finetune"],
                     "vbp": ["vbp", "finetune"], "star": ["star", "vbp", "finetune"],
                     "tome": ["tome", "vbp", "finetune"], "hiap": ["hiap", "vbp", "finetune"],
                     "hetdpt+": ["hetdpt", "width", "vbp", "finetune"],
                     "hetdpt+star": ["hetdpt", "star", "vbp", "finetune"],
                     "hetdpt+tome": ["hetdpt", "tome", "vbp", "finetune"]}
    assert all(r.steps[-3]["above"] for r in report.arms if r.arm not in ("hetdpt", "vbp"))
    # HetDPT's Step 1 (its predictor, fitted on the dense model for any budget) runs once: the chains that start with
    # HetDPT take the first arm's, and their chain files say so.
    fitted = run_dir / "arms" / "macs-0.6" / "hetdpt" / "seed-0" / "steps" / "01-hetdpt" / "predictor.json"
    assert fitted.is_file() and "predictor" not in report.arms[0].steps[0]
    assert all(r.steps[0]["predictor"] == str(fitted) for r in report.arms if r.arm in ("hetdpt+", "hetdpt+star"))
    step1 = [run_dir / "arms" / "macs-0.6" / arm / "seed-0" / "steps" / "01-hetdpt"
             for arm in ("hetdpt+", "hetdpt+star")]
    assert not any((step / "predictor_points.json").exists() for step in step1)  # no probe fine-tunes of their own
    # HetDPT then STAR begins with the HetDPT step HetDPT+ ran (the same settings and seed), taken, not run again.
    record = json.loads((step1[1] / "step.json").read_text())
    assert record["shared_from"] == str(step1[0]) and record["dir"] == str(step1[1])
    # Every arm recovers alike, and so does the control; HiAP's gate training is as long as the recovery.
    recoveries = [r.steps[-1] for r in report.arms] + [report.control.steps[-1]]
    assert all(step == recoveries[0] for step in recoveries) and recoveries[0]["epochs"] == 1
    hiap = next(r for r in report.arms if r.arm == "hiap").steps[0]
    assert hiap["epochs"] == recoveries[0]["epochs"]
    assert report.control.arm == "dense" and report.control.macs == dense and report.control.met is None
    assert all(r.target == "macs-0.6" and r.share == 0.6 and r.probes is None for r in report.arms)
    assert set(report.left_out) == {"depth", "merge", "hetdpt+", "finetune"}


@pytest.mark.slow
def test_the_answer_is_written_and_names_the_best_arm(compared):
    model, _, run_dir, report, _ = compared
    assert json.loads((run_dir / "report.json").read_text()) == json.loads(json.dumps(report.to_dict()))
    page = (run_dir / "report.md").read_text()
    assert (run_dir / "pareto.png").stat().st_size > 10_000 and "![top-1 against measured speedup](pareto.png)" in page
    for row in report.arms:
        assert f"| {row.arm} | {row.top1:.2f} [" in page
    chosen = report.pick["macs-0.6"]
    best = next(r for r in report.arms if r.arm == chosen["arm"])
    assert chosen["objective"] == "speed" and chosen["rule"].startswith("the fastest arm on target")
    assert chosen["most_accurate"] == max(report.arms, key=lambda r: (r.top1, r.speedup)).arm
    # The pick is the fastest of the arms shown within the tolerance of the most accurate.
    within = [r for r in report.arms if r.arm in chosen["within_tolerance"]]
    assert chosen["most_accurate"] in chosen["within_tolerance"] and best.speedup == max(r.speedup for r in within)
    assert f"**Pick at 60% of the MACs: {best.arm}**" in page and chosen["why"] in page
    command = chosen["command"]
    steps = run_dir / "arms" / "macs-0.6" / best.arm / "seed-0" / "chain.json"
    assert command.startswith(f"vitprune chain digits-vit --data digits --steps {steps} ")
    assert load_chain(steps).to_dict()["steps"] == parse_chain(best.steps).to_dict()["steps"] == best.steps
    # The pick against every other scored arm and the control, paired image by image, Holm within the target.
    verdicts = chosen["verdicts"]
    assert [v["b"] for v in verdicts] == [r.arm for r in report.arms if r is not best] + ["dense"]
    assert all(v["a"] == best.arm and v["images"] == 40 and v["low"] <= v["effect"] <= v["high"] for v in verdicts)
    assert {v["verdict"] for v in verdicts} <= {"better", "equivalent", "worse", "inconclusive"}
    assert chosen["indistinguishable"] == [v["b"] for v in verdicts if v["verdict"] in ("equivalent", "inconclusive")]
    assert "Pareto set (on target" in page


@pytest.mark.slow
def test_resume_reads_finished_arms_back(compared, monkeypatch):
    model, (train, val, calibration), run_dir, report, _ = compared

    def refuse(*args, **kwargs):
        raise AssertionError("a finished arm ran again")
    monkeypatch.setattr(run_module, "run_chain", refuse)
    again = compare(model, MethodData(train, val, calibration),
                    CompareConfig(target_macs=0.6, budget="quick", model="digits-vit", data="digits"),
                    RunContext(run_dir, speed=SPEED, resume=True))
    assert [r.to_dict() for r in again.arms] == [r.to_dict() for r in report.arms]
    assert again.control == report.control and again.pick == report.pick
    with pytest.raises(VitpruneError, match="ran with other targets, budget, arms, seeds or timing"):
        compare(model, MethodData(train, val, calibration), CompareConfig(target_macs=0.6, budget="quick", epochs=2),
                RunContext(run_dir, speed=SPEED, resume=True))
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        compare(model, MethodData(train, val, calibration), CompareConfig(target_macs=0.6),
                RunContext(run_dir, speed=SPEED))


def test_a_target_out_of_reach_is_reported_not_changed(tmp_path):
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=3)
    train, val, calibration = _data(model, train=32, val=20)
    report = compare(model, MethodData(train, val, calibration),
                     CompareConfig(target_macs=0.02, arms=["vbp", "width", "star"]), RunContext(tmp_path, speed=SPEED))
    assert [(r.arm, r.status) for r in report.arms] == [(a, UNREACHABLE) for a in ("star", "vbp", "width")]
    reasons = {r.arm: r.reason for r in report.arms}
    # Each says how near its rate search comes.
    assert reasons["vbp"].startswith("step 1 (vbp): VBP's neuron removal cannot reach ")
    assert reasons["width"].startswith("step 1 (width): width pruning cannot reach ")
    assert reasons["star"].startswith("step 1 (star): STAR's keep-rate schedule cannot reach ")
    assert all("; the nearest it reaches" in reason for reason in reasons.values())
    assert all(r.macs is None and r.top1 is None for r in report.arms)
    assert report.pick == {"macs-0.02": None}
    assert "No arm reached this target" in (tmp_path / "report.md").read_text()
    # An unreachable arm is recorded: a resume does not try it again.
    stored = tmp_path / "arms" / "macs-0.02" / "vbp" / "seed-0" / ARM_FILE
    assert json.loads(stored.read_text())["result"]["status"] == UNREACHABLE


@pytest.mark.parametrize("name, kwargs, refused", [
    ("convnext_tiny", CONVNEXT_TINY, {"hetdpt": "hetdpt", "star": "star", "tome": "tome", "hetdpt+": "hetdpt",
                                      "hetdpt+star": "hetdpt", "hetdpt+tome": "hetdpt"}),
    pytest.param("swin_tiny_patch4_window7_224", SWIN_TINY, {"star": "star", "tome": "tome", "hetdpt+star": "star",
                                                             "hetdpt+tome": "tome"}, marks=pytest.mark.slow),
], ids=["convnext", "swin"])  # Swin's takes 4 s: the full suite runs it
def test_a_family_without_a_capability_lists_the_arm_as_not_applicable(name, kwargs, refused):
    """The adapter decides, before anything runs: ConvNeXt has no attention or tokens to remove, Swin no [CLS] token to
    rank tokens by; each refused arm names the step and the family's reason, the others are planned."""
    model = tracked(name, kwargs)
    family = vitprune.get_adapter(model).family
    planned = {a.name: a for a in plan_arms(model, MacTarget.relative(0.7), get_budget("quick"), seed=0)}
    assert list(planned) == arm_names()
    assert {n: a.status for n, a in planned.items()} == {n: NOT_APPLICABLE if n in refused else PLANNED
                                                         for n in arm_names()}
    for arm, step in refused.items():
        assert re.search(rf"step \d \({step}\): .* which vitprune cannot do on {family} models", planned[arm].reason)


def test_bad_targets_arms_and_budgets_are_one_line():
    assert check_targets([0.5, "70%", 0.5, "1.2G"], [2, 1.5]) == [
        Target.macs(0.5), Target.macs(0.7), Target.macs(1.2e9), Target("speedup", 1.5), Target("speedup", 2.0)]
    assert [t.label for t in check_targets(0.6, 1.5)] == ["macs-0.6", "speedup-1.5"]
    assert Target.parse("speedup-1.5") == Target("speedup", 1.5) and Target.macs(0.6).describe() == \
        "60% of the MACs"
    assert Target.parse("macs-1200000000") == Target.macs("1.2G") and Target.macs("1.2G").describe() == "1.2G MACs"
    for macs, speedup, pattern in (([], None, "give at least one target"),
                                   (["150%"], None, "a share of the model's MACs lies between 0 and 1"),
                                   (["1.5"], None, "neither a share"), (0.0, None, "got 0"),
                                   (None, 0.9, "a speedup target is a factor above 1, such as 1.5; got 0.9")):
        with pytest.raises(VitpruneError, match=pattern):
            check_targets(macs, speedup)
    with pytest.raises(VitpruneError, match="a speedup target is measured: drop --no-speed"):
        check_targets(None, 1.5, SpeedConfig(enabled=False))
    with pytest.raises(VitpruneError, match="unknown arm\\(s\\) prune; known: hetdpt, hiap, star, tome, vbp, width"):
        arms_module.check_arms(["prune"])
    with pytest.raises(VitpruneError, match="unknown budget 'huge' \\(choose from: quick, standard, paper\\)"):
        get_budget("huge")
    with pytest.raises(VitpruneError, match="epochs must be at least 1"):
        get_budget("quick", epochs=0)
    assert get_budget("standard", epochs=3).recovery.epochs == 3 and get_budget("quick").train_images == 2000
    assert get_budget("quick").recovery_settings(seed=4) == {"epochs": 1, "lr": 1e-4, "batch_size": 64, "seed": 4,
                                                             "distill": "soft", "alpha": 1.0, "tau": 1.0}
    assert "depth" in left_out() and CompareReport.__dataclass_fields__.keys() >= {"pick", "arms"}


def test_a_speedup_target_probes_mac_shares_until_it_is_measured(tmp_path):
    """--speedup: each arm's pruned model is timed at MAC shares from 1 / factor on, the next share from the
    speedups measured so far, until the factor lies within a probe's quartiles (or the probes run out, or the method
    cannot go lower); the arm then runs at that share and is on target when its own measured quartiles hold the
    factor. How fast a tiny model runs on a shared CPU varies, so the rule is checked, not where it lands."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=3, patch_size=8)
    train, val, calibration = _data(model, train=32, val=20)
    report = compare(model, MethodData(train, val, calibration), CompareConfig(speedup=1.2, arms=["vbp"]),
                     RunContext(tmp_path, speed=SpeedConfig(batch_size=32, pairs=5, warmup=1)))
    row, = report.arms
    assert report.targets == ["speedup-1.2"] and row.target == "speedup-1.2"
    probes = row.probes
    assert 1 <= len(probes) <= run_module.PROBES and probes[0]["share"] == pytest.approx(1 / 1.2)
    probes_dir = tmp_path / "arms" / "speedup-1.2" / "probes" / "vbp"
    statistics = str(probes_dir / "01" / "steps" / "01-vbp" / "statistics.safetensors")
    for number, probe in enumerate(probes):
        assert (probes_dir / f"{number + 1:02d}" / "report.json").is_file()
        # The first probe computes the dense model's statistics; the later ones take them.
        step, = json.loads((probes_dir / f"{number + 1:02d}" / "chain.json").read_text())["steps"]
        assert step.get("statistics") == (statistics if number else None)
        if number + 1 < len(probes):  # a probe that missed: the next share follows from those so far
            assert not probe["speedup_q1"] <= 1.2 <= probe["speedup_q3"]
            assert probes[number + 1]["share"] == pytest.approx(run_module._next_share(probes[:number + 1], 1.2))
    if row.status == "done":
        assert row.met == (row.speedup_q1 <= 1.2 <= row.speedup_q3)
        assert abs(row.macs_share / row.share - 1) <= 0.01  # the arm lands on the share its probes found
    else:  # the search went below what VBP can remove, or the least share it tries was still too slow
        assert row.status == UNREACHABLE and re.search("VBP's neuron removal cannot reach|runs slower than 1.2×",
                                                       row.reason)
    assert "## 1.2× measured speedup" in (tmp_path / "report.md").read_text()


def test_the_next_share_follows_a_power_law_through_the_last_two_probes():
    one = [{"share": 0.5, "macs_share": 0.5, "speedup": 1.2}]
    assert run_module._next_share(one, 1.5) == pytest.approx(0.5 * 1.2 / 1.5)  # speed in proportion to MACs
    # speedup = macs_share ** -0.5 through both points: 2 needs a share of 1/4
    two = [{"share": 0.64, "macs_share": 0.64, "speedup": 1.25}, {"share": 0.36, "macs_share": 0.36,
                                                                   "speedup": 1 / 0.6}]
    assert run_module._next_share(two, 2.0) == pytest.approx(0.25)
    assert run_module._next_share([{"share": 0.05, "macs_share": 0.05, "speedup": 1.0}], 10.0) == 0.02
    # Two slow probes barely apart in speed point the power law below 0.2, already fast enough: the search takes the
    # geometric middle of the bracket the probes make (0.2 fast enough, 0.45 too slow) instead.
    noisy = [{"share": share, "macs_share": share, "speedup": speedup}
             for share, speedup in ((0.2, 1.5), (0.5, 1.1), (0.45, 1.12))]
    assert run_module._next_share(noisy, 1.3) == pytest.approx((0.2 * 0.45) ** 0.5)
    # One share fast enough, one too slow: the next lies between them.
    bracket = [{"share": 0.6, "macs_share": 0.6, "speedup": 1.1}, {"share": 0.2, "macs_share": 0.2, "speedup": 2.5}]
    assert 0.2 < run_module._next_share(bracket, 1.3) < 0.6


def test_every_arm_and_the_control_run_under_each_seed(tmp_path):
    """--seeds 0,1: each run its own chain (its subset and steps drawn under its seed), the arm's row their
    combination (top-1 the mean, the two-way interval), the verdicts resampling seeds and images."""
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2, patch_size=8)
    train, val, calibration = _data(model, train=32, val=20)
    lines: list[str] = []
    report = compare(model, MethodData(train, val, calibration),
                     CompareConfig(target_macs=0.6, arms=["vbp"], seeds=[0, 1], train_images=24),
                     RunContext(tmp_path, speed=SPEED, log=lines.append))
    assert report.seeds == [0, 1]
    # One line per run with the time left, from the runs so far.
    done = [line for line in lines if " done in " in line]
    assert [line.split()[:2] for line in done] == [["1/4", "dense"], ["2/4", "dense"], ["3/4", "vbp"], ["4/4", "vbp"]]
    assert all(re.search(r"; about \d+ s left$", line) for line in done) and done[-1].endswith("about 0 s left")
    for row in (report.arms[0], report.control):
        assert row.status == "done" and row.seeds == [0, 1] and [r["seed"] for r in row.runs] == [0, 1]
        assert row.top1 == pytest.approx(sum(r["top1"] for r in row.runs) / 2)
        assert row.interval[0] <= row.top1 <= row.interval[1]
        for run in row.runs:
            chain = json.loads((Path(run["run_dir"]) / "chain.json").read_text())
            assert chain["seed"] == run["seed"] and chain["train_images"] == 24
            assert all(step["seed"] == run["seed"] for step in chain["steps"])
    chosen = report.pick["macs-0.6"]
    assert chosen["arm"] == "vbp" and chosen["seed"] == 0 and "/vbp/seed-0/chain.json" in chosen["command"]
    assert [(v["b"], v["seeds"], v["images"]) for v in chosen["verdicts"]] == [("dense", 2, 20)]


def test_the_budget_sets_how_many_seeds_unless_they_are_named():
    assert CompareConfig().seed_list() == [0] and CompareConfig(seed=5).seed_list() == [5]
    assert CompareConfig(budget="standard", seed=2).seed_list() == [2, 3, 4]
    assert CompareConfig(budget="paper", seeds=[7]).seed_list() == [7]
    with pytest.raises(VitpruneError, match="each once"):
        CompareConfig(seeds=[1, 1]).seed_list()


def test_the_estimate_counts_each_methods_search():
    """Each method's search in images through training steps and forward passes, from its step's settings: the
    estimate before a comparison times both on the model."""
    from vitprune.runs.method import get_method

    model = vitprune.create_model("digits-vit", depth=3, patch_size=8)
    target = MacTarget.absolute(0.6 * count_macs(model).macs)
    cost = {name: get_method(name).search_cost(model, get_method(name).target_steps(model, target, "quick",
                                                                                   exact=False)[0], 1000, 200)
            for name in ("vbp", "star", "width", "hiap", "hetdpt")}
    assert cost["vbp"] == (0.0, 256.0)  # its statistics' one pass
    assert cost["width"] == (128.0, 0.0)  # Taylor importance: 2 batches of 64
    assert cost["hiap"] == (1000.0, 1000.0)  # one epoch of gate training, each image through the teacher too
    assert cost["star"] == (64 * 6, 64 + 64)  # LRP from 6 classes of 64 images; the ACS and MAC passes
    budget = get_method("hetdpt").target_steps(model, target, "quick", exact=False)[0]["budget"]
    points = 2 * min(budget, 3) + 2 * (budget // 2)  # both sweeps and the interleaved one
    # Step 2's epoch and Step 1's fine-tunes; TE once for Step 2 and once per type for Step 1 (TE-Static at quick
    # effort), and the evaluation of each point and of the dense model
    assert cost["hetdpt"] == (1000 + points * 128, 3 * 64 * (1 + 2) + 200 * (points + 1))
    given = {**get_method("hetdpt").target_steps(model, target, "quick", exact=False)[0], "split": [1, 1]}
    assert get_method("hetdpt").search_cost(model, given, 1000, 200) == (1000.0, 3 * 64)
    every_round = {**given, "split": "auto", "te_once": False}
    assert get_method("hetdpt").search_cost(model, every_round, 1000, 200)[1] == 3 * 64 * (1 + points) + 200 * (
        points + 1)


def test_one_hetdpt_step_1_serves_every_target_and_the_estimate_counts_it_once(monkeypatch):
    """Every planned HetDPT step's sweeps reach the largest planned budget, so the first one's predictor serves the
    others of that seed (a probe beyond it keeps its own); the estimate counts what runs share once: Step 1 in the
    first HetDPT step, and none of the HetDPT step that HetDPT then STAR shares with HetDPT+."""
    from vitprune.runs.method import get_method

    hetdpt = get_method("hetdpt")
    planned = [{"method": "hetdpt", "budget": b, "split": "auto", "preset": "digits"} for b in (2, 3)]
    assert hetdpt.shared_search(planned[0], planned) == {"sweep_layers": 3, "interleaved_rounds": 1}
    assert hetdpt.shared_search({**planned[0], "budget": 4}, planned) == {}
    paper = {**planned[0], "preset": "imagenet-hetdpt"}  # its preset fixes the interleaved rounds (3)
    assert hetdpt.shared_search(paper, [paper]) == {"sweep_layers": 2}

    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=6, patch_size=8)  # budgets 3 and 5 (HetDPT), 1 and 3 (chains)
    budget = get_budget("quick")
    arms = [arms_module.plan_arm(model, name, MacTarget.relative(share), budget, 0)
            for share in (0.7, 0.5) for name in ("hetdpt", "hetdpt+", "hetdpt+star")]
    searched = []
    monkeypatch.setattr(run_module, "_image_seconds", lambda *a, **k: 1.0)
    monkeypatch.setattr(run_module, "_chain_seconds", lambda model: 0.0)
    monkeypatch.setattr(type(hetdpt), "search_cost", lambda self, model, step, images, val: searched.append(step)
                        or (0.0, 0.0))
    run_module._estimate(model, 100, 10, budget, 1, arms, torch.device("cpu"), None, SPEED)
    assert [arm.status for arm in arms] == [PLANNED] * 6
    assert all(step["sweep_layers"] == 5 and step["interleaved_rounds"] == 2 for step in searched)
    # The 70% HetDPT step fits the predictor; every later one takes it; HetDPT then STAR runs none of its own.
    assert [step["budget"] for step in searched] == [3, 1, 5, 3]  # hetdpt and hetdpt+ at each target
    assert "predictor" not in searched[0] and all(step["predictor"] == str(Path("run-0", "steps", "01-hetdpt",
                                                                                 "predictor.json"))
                                                  for step in searched[1:])


def test_the_lrp_prior_and_the_statistics_of_the_dense_model_are_computed_once_per_seed(monkeypatch):
    """Every target's STAR and VBP arms begin on the dense model: the first of each computes its LRP prior or its
    statistics and the later ones take them; a step after other steps (HetDPT then STAR's STAR, the VBP trims) is on
    another model and computes its own. The estimate counts what is taken as nothing."""
    from vitprune.runs.method import get_method

    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=6, patch_size=8)
    budget = get_budget("quick")
    arms = [arms_module.plan_arm(model, name, MacTarget.relative(share), budget, 0)
            for share in (0.7, 0.5) for name in ("star", "vbp", "hetdpt+star")]
    assert [arm.status for arm in arms] == [PLANNED] * 6
    searched: dict[str, list[tuple[dict, tuple[float, float]]]] = {"star": [], "vbp": []}
    monkeypatch.setattr(run_module, "_image_seconds", lambda *a, **k: 1.0)
    monkeypatch.setattr(run_module, "_chain_seconds", lambda model: 0.0)
    for name, found in searched.items():
        cost = type(get_method(name)).search_cost

        def record(self, model, step, images, val, cost=cost, found=found):
            found.append((step, cost(self, model, step, images, val)))
            return found[-1][1]

        monkeypatch.setattr(type(get_method(name)), "search_cost", record)
    run_module._estimate(model, 100, 10, budget, 1, arms, torch.device("cpu"), None, SPEED)
    prior = str(Path("run-0", "steps", "01-star", "inter.safetensors"))  # the 70% STAR arm's
    statistics = str(Path("run-1", "steps", "01-vbp", "statistics.safetensors"))  # the 70% VBP arm's
    # STAR at 70%, HetDPT then STAR at 70%, STAR at 50% (takes the prior), HetDPT then STAR at 50%.
    assert [step.get("prior") for step, _ in searched["star"]] == [None, None, prior, None]
    assert [lrp == 0 for step, (lrp, _) in searched["star"]] == [False, False, True, False]
    given = [step.get("statistics") for step, _ in searched["vbp"]]
    assert given.count(statistics) == 1 and set(given) == {None, statistics}  # the 50% VBP arm alone takes them
    assert all((passed == 0) == (step.get("statistics") is not None) for step, (_, passed) in searched["vbp"])
