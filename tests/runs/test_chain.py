"""Chains of methods: settings checked before anything runs, steps applied in order with the recipe growing in that
order, resume at the step a run stopped in, the final model consistent, and steps that cannot apply named."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from conftest import CONVNEXT_TINY, tracked
from reports import assert_written

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.hetdpt.method import hetdpt_plus_steps
from vitprune.runs import ChainConfig, MethodData, RunContext
from vitprune.runs.chain import CHAIN_FILE, MODEL_DIR, REPORT_FILE, STEP_FILE, STEPS_DIR, run_chain, start_from
from vitprune.runs.method import get_method, step_methods
from vitprune.runs.steps import Step, check_chain, load_chain, parse_chain
from vitprune.surgery import prune_depth, token_ops

pytest.importorskip("torch_pruning")


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    with torch.no_grad():  # untrained biases are 0, which would hide the bias paths
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.05)
    size = vitprune.get_adapter(model).input_size
    train = balanced_subset(build_dataset("digits", "train", input_size=size), 96, seed=0)
    val = balanced_subset(build_dataset("digits", "val", input_size=size), 60, seed=0)
    return model, train, val


def _run(setting, steps, run_dir, **kwargs):
    """``steps`` (a parsed chain, or a list of steps) run as a chain without its ONNX check."""
    model, train, val = setting
    config = steps if isinstance(steps, ChainConfig) else ChainConfig(steps)
    return run_chain(model, MethodData(train, val), dataclasses.replace(config, onnx=False),
                     RunContext(run_dir, speed=SpeedConfig(batch_size=2, pairs=3), **kwargs))


FOUR_STEPS = [
    {"method": "depth", "attention": [1], "activation": [2]},
    {"method": "width", "ratio": 0.25, "heads": 0.0, "head_dims": 1.0},
    {"method": "vbp", "ratio": 0.3, "calibration_images": 32, "calibration_batch": 16},
    {"method": "star", "rates": [1, 1, 0.7, 0.6], "alpha": 1.0},
]


def test_steps_apply_in_order_and_equal_the_methods_run_by_hand(setting, tmp_path):
    model, _, _ = setting
    report = _run(setting, parse_chain(FOUR_STEPS), tmp_path)
    assert [r["method"] for r in report.steps] == ["start", "depth", "width", "vbp", "star"]
    macs = [r["macs_full"] for r in report.steps]
    assert all(b < a for a, b in zip(macs, macs[1:])), macs
    assert report.steps[0]["macs_full"] == count_macs(model).macs
    final = vitprune.load(tmp_path / MODEL_DIR)
    assert count_macs(final).macs == macs[-1] == report.pruned["macs_full"]
    ops = [e.op for e in vitprune.get_recipe(final).edits]
    # depth, width (head dims, neurons, stream channels of the 3 blocks with an MLP), VBP (mean shift folded into
    # the weights), STAR.
    assert ops == ["remove_attention", "remove_activation", *["prune_head_dims"] * 3, *["prune_mlp_neurons"] * 3,
                   "prune_embed_dims", *["prune_mlp_neurons"] * 3, "prune_tokens", "prune_tokens"]
    assert report.consistency["ok"] and report.consistency["onnx_skipped"] == "not asked for"
    assert_written(report, tmp_path / REPORT_FILE)
    # The width step cut exactly what width pruning by hand cuts from the depth-pruned model.
    from vitprune.methods.width import prune_width

    by_hand = copy.deepcopy(model)
    prune_depth(by_hand, [1], [2])
    prune_width(by_hand, 0.25, heads=0.0, head_dims=1.0)
    after_width = vitprune.load(tmp_path / STEPS_DIR / "02-width" / MODEL_DIR)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(after_width(x), by_hand.eval()(x), rtol=0, atol=0)
    # STAR pruned tokens in blocks 2 and 3: ceil(0.7*64) then ceil(0.6*45) patch tokens.
    assert [b.tokens for b in count_macs(final).blocks] == [65, 65, 65, 46]


@pytest.mark.slow
def test_an_interrupted_chain_resumes_at_the_step_it_stopped_in(setting, tmp_path, monkeypatch):

    steps = parse_chain(FOUR_STEPS[:2] + [{"method": "finetune", "epochs": 1, "lr": 1e-3, "batch_size": 32}]).steps
    first = _run(setting, steps, tmp_path)
    # Forget that the fine-tune step finished, and make the first two steps unrunnable: resuming must reload them.
    (tmp_path / STEPS_DIR / "03-finetune" / STEP_FILE).unlink()
    for method in ("depth", "width"):
        monkeypatch.setattr(type(get_method(method)), "run", lambda *a: pytest.fail("a finished step ran again"))
    resumed = _run(setting, steps, tmp_path, resume=True)
    assert [r["top1"] for r in resumed.steps] == [r["top1"] for r in first.steps]
    assert resumed.steps[3]["summary"]["epochs"] == 1
    assert (tmp_path / STEPS_DIR / "03-finetune" / STEP_FILE).exists()
    x = torch.randn(2, *vitprune.get_adapter(setting[0]).input_size)
    with torch.no_grad():
        torch.testing.assert_close(vitprune.load(tmp_path / MODEL_DIR)(x),
                                   vitprune.load(tmp_path / STEPS_DIR / "03-finetune" / MODEL_DIR)(x), rtol=0, atol=0)
    with pytest.raises(VitpruneError, match="step 2 of the run in .* finished with other settings"):
        _run(setting, [steps[0], Step("width", {"ratio": 0.3}), steps[2]], tmp_path, resume=True)
    # A step not finished yet may change: its old stage files go.
    (tmp_path / STEPS_DIR / "03-finetune" / STEP_FILE).unlink()
    changed = _run(setting, [*steps[:2], Step("finetune", {"epochs": 2, "lr": 1e-3, "batch_size": 32})], tmp_path,
                   resume=True)
    assert changed.steps[3]["summary"]["epochs"] == 2
    with pytest.raises(VitpruneError, match="not empty"):
        _run(setting, steps, tmp_path)


def test_a_chain_begun_from_an_earlier_runs_steps_ends_as_if_it_ran_them(setting, tmp_path, monkeypatch):
    """``start_from``: a run whose first steps an earlier run finished with the same settings and seed takes them
    (hard links, their records naming where they ran) and runs only the rest; its model and chain file are those of
    a run that did every step itself."""
    first = [{"method": "depth", "attention": [1]}, {"method": "vbp", "ratio": 0.3, "calibration_images": 16}]
    steps = [first[0], {"method": "vbp", "ratio": 0.5, "calibration_images": 16}]
    _run(setting, parse_chain({"seed": 3, "steps": first}), tmp_path / "earlier")
    chain = parse_chain({"seed": 3, "steps": steps})
    alone = _run(setting, chain, tmp_path / "alone")
    start_from(tmp_path / "shared", tmp_path / "earlier", 1)
    monkeypatch.setattr(type(get_method("depth")), "run", lambda *a: pytest.fail("the shared step ran again"))
    shared = _run(setting, chain, tmp_path / "shared", resume=True)
    source = tmp_path / "earlier" / STEPS_DIR / "01-depth"
    record = json.loads((tmp_path / "shared" / STEPS_DIR / "01-depth" / STEP_FILE).read_text())
    assert record["shared_from"] == str(source) and record["dir"] == str(tmp_path / "shared" / STEPS_DIR / "01-depth")
    weights = next((source / MODEL_DIR).glob("*.safetensors"))
    copied = tmp_path / "shared" / STEPS_DIR / "01-depth" / MODEL_DIR / weights.name
    assert copied.read_bytes() == weights.read_bytes()
    assert [r["macs_full"] for r in shared.steps] == [r["macs_full"] for r in alone.steps]
    assert json.loads((tmp_path / "shared" / CHAIN_FILE).read_text()) == json.loads(
        (tmp_path / "alone" / CHAIN_FILE).read_text())
    for name, value in vitprune.load(tmp_path / "alone" / MODEL_DIR).state_dict().items():
        assert torch.equal(value, vitprune.load(tmp_path / "shared" / MODEL_DIR).state_dict()[name]), name


@pytest.mark.slow
def test_hetdpt_plus_recovers_the_depth_pruned_model_before_width_pruning_ranks_it(setting, tmp_path):
    """The paper's order: HetDPT's two stages (prune, Stage-2 fine-tune with fc1/fc2 apart, merge), then width
    pruning of that recovered model to the target, then the width recovery fine-tune."""
    model, _, _ = setting
    target = 0.5 * count_macs(model).macs
    steps = hetdpt_plus_steps(budget=2, split=[1, 1], target_macs=target, preset="digits",
                              hetdpt={"search_epochs": 1, "epochs": 1, "batch_size": 32},
                              finetune={"epochs": 1, "lr": 1e-3, "batch_size": 32})
    assert [s.method for s in steps] == ["hetdpt", "width", "finetune"] and steps[0].settings["recover"] is True
    report = _run(setting, steps, tmp_path)
    hetdpt, width, finetune = report.steps[1:]
    assert len(hetdpt["summary"]["attention"]) == len(hetdpt["summary"]["activation"]) == 1
    # HetDPT's Stage 2 ran (one epoch) and its model, merged after the fine-tune, is what the width step pruned.
    assert (tmp_path / STEPS_DIR / "01-hetdpt" / "finetune").is_dir()
    assert hetdpt["summary"]["top1"]["finetuned"] == hetdpt["top1"]
    recovered = vitprune.load(tmp_path / STEPS_DIR / "01-hetdpt" / MODEL_DIR)
    assert {e.op for e in vitprune.get_recipe(recovered).edits} >= {"remove_attention", "merge_mlp"}
    assert 0.97 * target <= width["macs_full"] <= target and finetune["macs_full"] == width["macs_full"]
    assert finetune["summary"]["distill"] == "soft" and finetune["summary"]["epochs"] == 1
    merged = hetdpt["summary"]["activation"][0]
    assert str(merged) not in width["summary"]["plan"]["neurons"]  # a merged D×D linear has no hidden neurons
    assert report.consistency["ok"]


def test_a_hetdpt_plus_step_is_the_chain_hetdpt_plus_runs():
    """Registered as a method, HetDPT+ expands to HetDPT (with Stage 2), width pruning and the width recovery, which
    fine-tunes as HetDPT's Stage 2 does unless the step says otherwise; what it needs is what its steps need."""
    from vitprune.methods.hetdpt.pipeline import configure

    plus = get_method("hetdpt+").configure({"budget": 2, "target_macs": 1e6, "seed": 3, "preset": "digits",
                                            "hetdpt": {"epochs": 1}, "finetune": {"lr": 1e-3}}, "imagenet")
    stage2 = configure("digits", seed=3, epochs=1)
    finetune = {**dataclasses.asdict(stage2.finetune), "distill": stage2.distill, "alpha": stage2.alpha,
                "tau": stage2.tau, "lr": 1e-3}
    assert plus.preset == "digits" and plus.steps == hetdpt_plus_steps(
        budget=2, target_macs=1e6, preset="digits", finetune=finetune, hetdpt={"seed": 3, "epochs": 1},
        width={"seed": 3})
    assert set(get_method("hetdpt+").requires(plus)) == {"attention_removal", "activation_removal",
                                                          "output_activation", "gates", "ffn_width", "head_width",
                                                          "embed_width"}
    with pytest.raises(VitpruneError, match="hetdpt\\+ step: target_macs .* is missing"):
        get_method("hetdpt+").configure({"budget": 2}, "digits")


@pytest.mark.slow
def test_a_chain_runs_a_hetdpt_plus_step(setting, tmp_path):
    model, _, _ = setting
    target = 0.5 * count_macs(model).macs
    report = _run(setting, parse_chain([{"method": "hetdpt+", "budget": 2, "split": [1, 1], "target_macs": target,
                                         "preset": "digits", "hetdpt": {"search_epochs": 1, "epochs": 1,
                                                                        "batch_size": 32},
                                         "finetune": {"epochs": 1, "lr": 1e-3, "batch_size": 32}}]), tmp_path)
    plus = report.steps[1]
    assert plus["method"] == "hetdpt+" and 0.97 * target <= plus["macs_full"] <= target
    inner = tmp_path / STEPS_DIR / "01-hetdpt+" / STEPS_DIR
    assert sorted(p.name for p in inner.iterdir()) == ["01-hetdpt", "02-width", "03-finetune"]
    assert report.consistency["ok"]


@pytest.mark.slow
def test_hetdpt_step_reuses_an_earlier_predictor(setting, tmp_path):
    """A chain's HetDPT step can take the MAP an earlier run fitted: the split is the one that fit predicts and no
    predictor data is collected again."""
    from vitprune.methods.hetdpt.predictor import fit_predictor, save_predictor

    # Accuracy falls with the activations removed (1 - t) and not with the attention (1 - a): prune attention only.
    points = [(a, t, 0.9 - 0.5 * (1 - t)) for a in (0.5, 0.75, 1.0) for t in (0.5, 0.75, 1.0)]
    predictor = save_predictor(fit_predictor(points, degrees=(1,)), tmp_path / "predictor.json")
    steps = parse_chain([{"method": "hetdpt", "budget": 2, "predictor": str(predictor), "preset": "digits",
                          "search_epochs": 1, "batch_size": 32}])
    report = _run(setting, steps, tmp_path / "run")
    hetdpt = report.steps[1]["summary"]
    assert hetdpt["split"] == {"attention": 2, "activation": 0, "chosen_by": "predictor"}
    assert len(hetdpt["attention"]) == 2 and hetdpt["activation"] == []
    assert not (tmp_path / "run" / STEPS_DIR / "01-hetdpt" / "predictor_points.json").exists()


def test_depth_then_star_with_its_lrp_prior(setting, tmp_path):
    """The HetDPT paper's orthogonality claim as a chain: STAR's full pipeline (ACS schedule, LRP prior) runs on the
    depth-pruned model; the block whose attention is gone keeps every token."""
    steps = parse_chain([{"method": "depth", "attention": [1], "activation": [2]},
                         {"method": "star", "rho": 0.6, "anchor": "minmax", "acs_images": 16, "lrp_images": 16,
                          "calibration_batch": 8, "classes": 2}])
    report = _run(setting, steps, tmp_path)
    rates = report.steps[2]["summary"]["keep_rates"]
    assert rates[1] == 1.0 and min(rates) == 0.6
    final = vitprune.load(tmp_path / MODEL_DIR)
    blocks = token_ops(final)
    assert {i: b.keep_rate for i, b in blocks.items()} == {i: r for i, r in enumerate(rates) if r < 1}
    assert all(not torch.all(b.inter == 1) for b in blocks.values())  # the LRP prior is installed
    assert report.consistency["ok"]


@pytest.mark.parametrize("steps, message", [
    ([], "non-empty list"),
    ([{"method": "prune"}], "step 1: each step needs a method"),
    ([{"method": "depth"}], "step 1: nothing to prune: give attention"),
    ([{"method": "depth", "attention": [0], "blocks": [1]}], "step 1: depth step: unknown setting.*blocks"),
    ([{"method": "depth", "attention": [0]}, {"method": "width", "ratio": 0.2, "target_macs": 1e6}],
     "step 2: give exactly one of ratio and target_macs"),
    ([{"method": "vbp", "ratio": 1.5}], "step 1: the pruning ratio must be in"),
    ([{"method": "vbp", "finetune": {"epochs": 1}}], "step 1: vbp step: unknown setting.*finetune"),
    ([{"method": "hiap", "lr": 1e-3}], "step 1: hiap step: missing setting.*epochs"),
    ([{"method": "hetdpt", "split": [1, 1]}], "step 1: hetdpt step: budget"),
    ([{"method": "finetune", "epochs": 1, "lr": 1e-3, "distill": "strong"}], "unknown distill 'strong'"),
    ({"steps": [{"method": "star", "rho": 0.5, "rates": [1]}]}, "exactly one of rho, target_macs .* and rates"),
])
def test_bad_chains_fail_before_anything_runs(steps, message):
    with pytest.raises(VitpruneError, match=message):
        parse_chain(steps)


def test_chain_files_and_the_documented_methods(tmp_path):
    path = tmp_path / "chain.json"
    path.write_text('{"steps": [{"method": "depth", "attention": [0]}, {"method": "star", "target_macs": 1e7}]}')
    assert load_chain(path).steps == [Step("depth", {"attention": [0]}), Step("star", {"target_macs": 1e7})]
    path.write_text("[{")
    with pytest.raises(VitpruneError, match="not valid JSON"):
        load_chain(path)
    with pytest.raises(VitpruneError, match="does not exist"):
        load_chain(tmp_path / "missing.json")
    assert set(step_methods()) == {"depth", "hetdpt", "hetdpt+", "merge", "width", "vbp", "star", "tome", "hiap",
                                    "finetune"}


@pytest.mark.parametrize("steps, error, message", [
    # Token-pruning blocks cannot be traced by torch-pruning.
    ([{"method": "star", "rates": [1, 0.5, 1, 1], "alpha": 1.0}, {"method": "width", "ratio": 0.2}],
     UnsupportedArchitectureError, r"step 2 \(width\): blocks.1 reduces tokens; prune width before tokens"),
    # The attention of block 1 is gone: removing it again is a mistake, not a no-op.
    ([{"method": "depth", "attention": [1]}, {"method": "depth", "attention": [1]}],
     VitpruneError, r"step 2 \(depth\): block 1 has no attention left to remove"),
])
def test_steps_that_cannot_apply_name_the_step(setting, tmp_path, steps, error, message):
    with pytest.raises(error, match=message):
        _run(setting, parse_chain(steps), tmp_path)
    # The first step finished and stays: a corrected chain resumes after it.
    assert (tmp_path / CHAIN_FILE).exists() and (tmp_path / STEPS_DIR / f"01-{steps[0]['method']}" / STEP_FILE).exists()


def test_a_step_the_family_cannot_take_is_refused_before_any_step_runs(tmp_path):
    """ConvNeXt takes VBP but not STAR: the chain says so for step 2 before step 1 spends anything."""
    model = tracked("convnext_tiny", CONVNEXT_TINY)
    steps = parse_chain([{"method": "vbp", "ratio": 0.3}, {"method": "star", "rho": 0.7, "alpha": 1.0}])
    with pytest.raises(UnsupportedArchitectureError, match=r"step 2 \(star\): STAR needs to prune or merge tokens, "
                                                           "which vitprune cannot do on timm-convnext models"):
        run_chain(model, MethodData(), steps, RunContext(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_steps_batch_scales_its_presets_learning_rate():
    """A step that sets its batch but not its lr gets its preset's lr scaled with the batch (HiAP's 5e-5 is for batch
    256); an lr given is kept."""
    (run,) = parse_chain([{"method": "hiap", "epochs": 1, "batch_size": 64}]).configs()
    train = run.train
    assert train.batch_size == 64 and train.lr == pytest.approx(5e-5 * 64 / 256)
    (run,) = check_chain([Step("hiap", {"epochs": 1, "batch_size": 64, "lr": 1e-3})])
    assert run.train.lr == 1e-3


def test_a_chain_seeds_its_steps_and_trains_on_its_own_subset(setting, tmp_path):
    """The chain's seed fills every step that names none, its file records each step with its seed, and its
    training subset is the class-balanced draw under that seed: the same run as handing the steps that subset."""
    model, train, val = setting
    steps = [{"method": "vbp", "ratio": 0.3, "calibration_images": 32, "calibration_batch": 16},
             {"method": "finetune", "epochs": 1, "lr": 1e-3, "batch_size": 16}]
    chain = parse_chain({"seed": 3, "train_images": 40, "steps": steps}, onnx=False)
    # VBP's statistics come from every calibration image (the training images without augmentation): only the
    # training images are the chain's subset.
    plain = balanced_subset(build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size,
                                          is_training=False), 96, seed=0)
    report = run_chain(model, MethodData(train, val, plain), chain,
                       RunContext(tmp_path / "a", speed=SpeedConfig(enabled=False)))
    document = json.loads((tmp_path / "a" / CHAIN_FILE).read_text())
    assert document == {"seed": 3, "train_images": 40, "preset": "imagenet",
                        "steps": [{**step, "seed": 3} for step in steps]}
    assert report.chain == document["steps"] and parse_chain(document).to_dict() == document
    subset = balanced_subset(train, 40, seed=3)
    by_hand = run_chain(model, MethodData(subset, val, plain), parse_chain(steps, seed=3, onnx=False),
                        RunContext(tmp_path / "b", speed=SpeedConfig(enabled=False)))
    assert_same_weights(vitprune.load(report.model_dir), vitprune.load(by_hand.model_dir))
    # Its finished steps ran under seed 3: a resume under another is refused.
    with pytest.raises(VitpruneError, match="finished steps with another seed"):
        run_chain(model, MethodData(train, val, plain), dataclasses.replace(chain, seed=4),
                  RunContext(tmp_path / "a", resume=True))


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    """Bit for bit."""
    first, second = a.state_dict(), b.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
