"""HiAP's training: gate sampling per step, the λ controller, optimizer groups, exact resume, budget hardening."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest
import torch
from reports import assert_written
from safetensors.torch import load_file

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import SpeedConfig, count_macs, format_count
from vitprune.methods.hiap import HiAPConfig, HiAPGates, budget_threshold, dense_cost, layer_shapes, train_gates
from vitprune.methods.hiap import pipeline as hiap_pipeline
from vitprune.methods.hiap import HiAPRun
from vitprune.methods.hiap.search import GATES_ATTR, HiAPTraining, gate_learning_rate, hardened_macs
from vitprune.runs import MethodData, RunContext
from vitprune.training import TrainConfig
from vitprune.training.engine import CHECKPOINT_DIR, STATE_FILE

TRAIN = TrainConfig(epochs=2, lr=1e-3, batch_size=32, amp=False)


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    size = vitprune.get_adapter(model).input_size
    train = balanced_subset(build_dataset("digits", "train", input_size=size), 96, seed=0)
    val = balanced_subset(build_dataset("digits", "val", input_size=size, is_training=False), 40, seed=0)
    return model, train, val


def _fixed(model):
    return count_macs(model).macs - dense_cost(layer_shapes(model))


def test_training_samples_per_step_hardens_in_eval_and_leaves_a_plain_model(setting):
    model, _, _ = setting
    gates = HiAPGates(layer_shapes(model), init=0.0)
    work = copy.deepcopy(model)
    hooks = HiAPTraining(work, gates, HiAPConfig(), fixed_macs=_fixed(model))
    trainer = SimpleNamespace(step=3, steps_per_epoch=5, config=SimpleNamespace(epochs=2, seed=0))
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    draws = []
    for _ in range(2):  # the same step draws the same gates, whatever the global RNG did in between
        hooks.on_step_start(trainer)
        torch.rand(7)
        work.train()(x)
        draws.append([v.clone() for v in hooks.gated.values["neuron"]])
    assert all(torch.equal(a, b) for a, b in zip(*draws, strict=True))
    assert {float(v) for d in draws[0] for v in d.detach().unique()} == {0.0, 1.0}  # p = 0.5: both values drawn
    assert hooks.tau == pytest.approx(2.0 * 0.25 ** (3 / 9))
    work.eval()(x)
    assert all(torch.equal(v, torch.zeros_like(v)) for v in hooks.gated.values["neuron"])  # 1[0 > 0]
    hooks.remove()
    with torch.no_grad():
        torch.testing.assert_close(work.eval()(x), model.eval()(x), rtol=0, atol=0)


def test_controller_raises_lambda_over_budget_and_floors_it_at_zero(setting):
    model, _, _ = setting
    total = count_macs(model).macs
    config = HiAPConfig(target_macs=0.5 * total, controller_rate=0.1)
    hooks = HiAPTraining(copy.deepcopy(model), HiAPGates(layer_shapes(model)), config, fixed_macs=_fixed(model))
    share = hooks.share
    trainer = SimpleNamespace(step=1, steps_per_epoch=5, config=SimpleNamespace(epochs=2, seed=0))
    hooks.last = {"expected_exact_share": share + 0.2, "hardened_share": share + 0.4}
    hooks.on_step_start(trainer)
    assert hooks.scale == pytest.approx(1.0 + 0.1 * 0.4)  # the larger of expected and hardened cost
    hooks.on_step_start(trainer)  # the same step again (a resumed run restarts it): λ moved once already
    assert hooks.scale == pytest.approx(1.0 + 0.1 * 0.4)
    hooks.last = {"expected_exact_share": share - 0.9, "hardened_share": share - 0.9}
    for step in range(2, 202):
        trainer.step = step
        hooks.on_step_start(trainer)
    assert hooks.scale == 0.0
    assert hooks.state_dict()["scale"] == 0.0
    hooks.remove()


def test_gates_train_in_their_own_group_and_the_model_comes_back_ungated(setting):
    model, train, val = setting
    work = copy.deepcopy(model)
    epochs = []
    before = copy.deepcopy(work.state_dict())
    gates, history = train_gates(work, train, HiAPConfig(lambda_macro=5.0, lambda_micro=5.0, gate_lr=0.1), TRAIN,
                                 val_set=val, on_epoch=epochs.append)
    assert not hasattr(work, GATES_ATTR) and not work._forward_pre_hooks
    assert [h["epoch"] for h in history] == [1, 2] and len(epochs) == 2
    assert len(history[-1]["layers"]) == 2 and {"macs_hardened", "tau", "lambda_scale", "undecided"} <= set(history[-1])
    assert history[-1]["tau"] == pytest.approx(0.5)
    logits = torch.cat([p.detach().flatten() for p in gates.parameters()])
    assert logits.mean() < 3.0, "a penalty this strong lowers the logits"
    # Adam moves a parameter by about its lr per step at most: 6 steps at the gates' 0.1, not the weights' 1e-3.
    assert 0.3 < (logits - 3.0).abs().max() <= 0.6
    assert any(not torch.equal(before[k], v) for k, v in work.state_dict().items())
    assert gate_learning_rate(3.0, len(train), TRAIN) == pytest.approx(30 / 6)  # 96 images / 32 x 2 epochs


def test_resumed_training_equals_the_uninterrupted_one(setting, tmp_path):
    model, train, val = setting
    config = HiAPConfig(target_macs=0.7 * count_macs(model).macs)
    reference = copy.deepcopy(model)
    ref_gates, _ = train_gates(reference, train, config, TRAIN, run_dir=tmp_path / "a")

    def stop(stats):
        raise KeyboardInterrupt

    interrupted = copy.deepcopy(model)
    with pytest.raises(KeyboardInterrupt):
        train_gates(interrupted, train, config, TRAIN, run_dir=tmp_path / "b", on_epoch=stop)
    state = torch.load(tmp_path / "b" / CHECKPOINT_DIR / STATE_FILE, weights_only=True)
    assert state["epoch"] == 1 and state["hooks"]["scale"] != 1.0, "the controller's λ scale is checkpointed"
    resumed = copy.deepcopy(model)
    gates, _ = train_gates(resumed, train, config, TRAIN, run_dir=tmp_path / "b", resume=True)
    for a, b in zip(ref_gates.parameters(), gates.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)


def _gates_with_logits(model, seed=0):
    gates = HiAPGates(layer_shapes(model))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gates.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
        for b in gates.block:
            b.fill_(2.0)
    return gates


def test_budget_threshold_is_nearest_zero_within_the_band(setting):
    model, _, _ = setting
    gates, fixed = _gates_with_logits(model), _fixed(model)
    at_zero = hardened_macs(gates, fixed, 0.0)
    assert budget_threshold(gates, fixed, at_zero / 0.99) == 0.0  # already 1% under: the paper's threshold
    target = 0.8 * at_zero
    t = budget_threshold(gates, fixed, target, tolerance=0.02)
    assert 0.98 * target <= hardened_macs(gates, fixed, t) <= target and t > 0
    logits = torch.cat([p.detach().flatten() for p in gates.parameters()])
    # No threshold nearer zero fits: every logit between 0 and t, once closed, is still too expensive.
    between = logits[(logits > 0) & (logits < t)]
    nearer = float(between.max()) if len(between) else 0.0
    assert hardened_macs(gates, fixed, nearer - 1e-6) > target
    loose = budget_threshold(gates, fixed, 1.3 * at_zero, tolerance=0.0)  # an exact cost no gate set may have
    assert hardened_macs(gates, fixed, loose) <= 1.3 * at_zero and loose < 0
    with pytest.raises(VitpruneError, match="no hardening of the gates fits"):
        budget_threshold(gates, fixed, fixed - 1)
    # above: the highest threshold whose model still costs more than the target; a hair higher, it fits.
    short = budget_threshold(gates, fixed, target, above=True)
    higher = logits[logits > short].min()
    assert hardened_macs(gates, fixed, short) > target >= hardened_macs(gates, fixed, float(higher))


def test_a_target_out_of_reach_is_one_line(setting):
    model, train, _ = setting
    total, fixed = count_macs(model).macs, _fixed(model)
    with pytest.raises(VitpruneError, match="is not below the model's .* there is nothing to prune"):
        train_gates(copy.deepcopy(model), train, HiAPConfig(target_macs=total * 1.01), TRAIN)
    with pytest.raises(UnreachableTargetError, match=f"HiAP cannot reach .*; the nearest it reaches is above what it "
                                                     f"cannot prune, {format_count(fixed)}"):
        train_gates(copy.deepcopy(model), train, HiAPConfig(target_macs=fixed * 0.5), TRAIN)
    with pytest.raises(VitpruneError, match="without EMA"):
        train_gates(copy.deepcopy(model), train, HiAPConfig(), TrainConfig(epochs=1, lr=1e-3, ema_decay=0.9))


def test_pipeline_extracts_what_the_gates_decided(setting, tmp_path):
    model, train, val = setting
    report = hiap_pipeline.run_hiap(model, MethodData(train, val), HiAPRun(TRAIN, HiAPConfig(lambda_macro=3.0,
                                    lambda_micro=3.0)), RunContext(tmp_path, speed=SpeedConfig(batch_size=2, pairs=3)))
    loaded = vitprune.load(tmp_path / hiap_pipeline.MODEL_DIR)
    assert count_macs(loaded).macs == report.pruned["macs_full"] == report.macs_predicted
    assert report.threshold == 0.0 and report.target_macs is None
    # Validation during training ran the hardened gates: the extracted model is that model.
    assert report.top1["extracted"] == report.top1["gated_last_epoch"]
    assert [h["epoch"] for h in report.history] == [1, 2]
    logits = load_file(str(tmp_path / hiap_pipeline.GATES_FILE))
    kept = [int((logits[f"neuron.{b}"] > 0).sum()) if logits[f"block.{b}"] > 0 else 0 for b in range(2)]
    assert kept == [layer["neurons"] for layer in report.layers]
    assert (tmp_path / hiap_pipeline.PLOT_FILE).stat().st_size > 0
    assert_written(report, tmp_path / hiap_pipeline.REPORT_FILE)
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        hiap_pipeline.run_hiap(model, MethodData(train, val), HiAPRun(TRAIN), RunContext(tmp_path))


@pytest.mark.parametrize("stop", [4, 5], ids=["inside-step-4", "inside-step-5"])
def test_a_ctrl_c_inside_a_step_resumes_to_the_uninterrupted_gates(setting, tmp_path, monkeypatch, stop):
    """The λ scale moves at a step's start; the interrupted step starts again on resume and must not move it twice.
    Periodic checkpoints every step, so the resumed run restarts from the interrupted step itself."""
    from interrupts import Batches

    model, train, val = setting
    config = HiAPConfig(target_macs=0.7 * count_macs(model).macs)
    train_config = dataclasses.replace(TRAIN, checkpoint_every=1)
    reference = copy.deepcopy(model)
    ref_gates, ref_history = train_gates(reference, train, config, train_config, run_dir=tmp_path / "a")
    with monkeypatch.context() as patch:
        Batches(patch, stop=stop)
        with pytest.raises(KeyboardInterrupt):
            train_gates(copy.deepcopy(model), train, config, train_config, run_dir=tmp_path / "b")
    resumed = copy.deepcopy(model)
    gates, history = train_gates(resumed, train, config, train_config, run_dir=tmp_path / "b", resume=True)
    assert history[-1]["lambda_scale"] == ref_history[-1]["lambda_scale"]
    for a, b in zip(ref_gates.parameters(), gates.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
