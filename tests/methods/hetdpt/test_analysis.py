"""HetDPT analyses: mask gradients equal their closed form; single-layer recovery equals independent surgery."""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch
import torch.nn.functional as F

import vitprune
from vitprune.adapters import get_adapter
from vitprune.data import DigitsDataset, build_loader
from vitprune.methods.hetdpt import gradient_disparity, plot_gradient_disparity, plot_recovery, recovery_asymmetry
from vitprune.surgery import prune_depth
from vitprune.training import TrainConfig, Trainer, evaluate

#: One short epoch: enough to exercise fine-tuning, cheap on two cores.
TINY_CONFIG = TrainConfig(epochs=1, lr=1e-3, batch_size=128)


def _tiny(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return vitprune.create_model("digits-vit", depth=2, **kwargs)


def _digits_batches(sizes: list[int], dtype: torch.dtype = torch.float32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = DigitsDataset("train")
    batches, start = [], 0
    for size in sizes:
        items = [data[i] for i in range(start, start + size)]
        batches.append((torch.stack([x for x, _ in items]).to(dtype), torch.tensor([y for _, y in items])))
        start += size
    return batches


def _closed_form(model: torch.nn.Module, images: torch.Tensor, targets: torch.Tensor,
                 identity: str) -> dict[tuple[str, int], float]:
    """``Σ δ ⊙ (f(u) - identity(u))`` of every layer of the plain (ungated) ``model``, from hooks."""
    found = {}

    def record(key, kind):
        def hook(module, args, output):
            u = args[0]
            rest = torch.zeros_like(u) if kind == "attention" and identity == "skip" else u
            output.register_hook(lambda delta: found.__setitem__(key, float((delta * (output - rest)).sum())))
        return hook

    handles = []
    for view in get_adapter(model).blocks():
        handles.append(view.attn.module.register_forward_hook(record(("attention", view.index), "attention")))
        handles.append(view.mlp.act.register_forward_hook(record(("activation", view.index), "activation")))
    F.cross_entropy(model(images), targets).backward()
    for handle in handles:
        handle.remove()
    return found


@pytest.mark.parametrize("identity", ["norm", "skip"])
def test_mask_gradients_are_the_closed_form(identity):
    # Double precision, so the only rounding left is the float32 importance the gradient lands in.
    model = _tiny().double().train()
    before = copy.deepcopy(model.state_dict())
    batches = _digits_batches([8, 5, 8], torch.float64)
    result = gradient_disparity(model, batches, identity=identity, max_batches=2)

    assert result["batches"] == 2 and result["images"] == 13 and result["identity"] == identity
    assert set(result["attention"]) == set(result["activation"]) == {"0", "1"}
    eval_copy = copy.deepcopy(model).eval()
    per_batch = [_closed_form(copy.deepcopy(eval_copy), images, targets, identity) for images, targets in batches[:2]]
    for kind in ("attention", "activation"):
        for block in (0, 1):
            grads = [g[(kind, block)] for g in per_batch]
            layer = result[kind][str(block)]
            assert layer["mean_abs"] == pytest.approx((abs(grads[0]) + abs(grads[1])) / 2, rel=1e-6)
            assert layer["mean"] == pytest.approx((grads[0] + grads[1]) / 2, rel=1e-6, abs=1e-9)
    summary = result["summary"]
    attention = [result["attention"][b]["mean_abs"] for b in ("0", "1")]
    activation = [result["activation"][b]["mean_abs"] for b in ("0", "1")]
    assert summary["attention_mean_abs"] == sum(attention) / 2
    assert summary["activation_mean_abs"] == sum(activation) / 2
    assert summary["ratio"] == summary["activation_mean_abs"] / summary["attention_mean_abs"]
    assert json.loads(json.dumps(result)) == result

    # The caller's model: same weights, still in training mode, no gates, no gradients, still trainable.
    assert model.training and all(p.requires_grad and p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(v.attn.gate is None and v.mlp.gate is None for v in get_adapter(model).blocks())


def test_gradient_disparity_skips_removed_layers_and_rejects_empty_input():
    model = _tiny()
    prune_depth(model, attention=[1], activation=[0])
    result = gradient_disparity(model, _digits_batches([4]))
    assert set(result["attention"]) == {"0"} and set(result["activation"]) == {"1"}
    with pytest.raises(vitprune.VitpruneError, match="no batch to measure"):
        gradient_disparity(model, [])
    with pytest.raises(vitprune.VitpruneError, match="max_batches must be at least 1"):
        gradient_disparity(model, _digits_batches([4]), max_batches=0)


@pytest.mark.slow
def test_recovery_equals_independent_surgery_and_fine_tuning():
    model = _tiny()
    before = copy.deepcopy(model.state_dict())
    train, val = DigitsDataset("train", augment=True), DigitsDataset("val")
    result = recovery_asymmetry(model, train, val, config=TINY_CONFIG, layers=[("attention", 1), ("activation", 0)])

    val_loader = build_loader(val, TINY_CONFIG.batch_size, shuffle=False, seed=0)
    assert result["dense_top1"] == evaluate(model, val_loader)["top1"]
    assert [(r["type"], r["block"]) for r in result["layers"]] == [("attention", 1), ("activation", 0)]
    assert result["config"]["epochs"] == 1 and result["identity"] == "norm"
    for row in result["layers"]:
        pruned = copy.deepcopy(model)
        prune_depth(pruned, **{row["type"]: [row["block"]]})
        assert row["top1_pruned"] == evaluate(pruned, val_loader)["top1"]
        if row["type"] == "activation":  # one independent fine-tune is enough to pin the protocol down
            Trainer(pruned, train, TINY_CONFIG, device="cpu").fit()
            assert row["top1_finetuned"] == evaluate(pruned, val_loader)["top1"]
    assert json.loads(json.dumps(result)) == result
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert vitprune.get_recipe(model).edits == []


def test_recovery_defaults_to_every_remaining_layer(monkeypatch):
    from vitprune.methods.hetdpt import analysis

    model = _tiny()
    prune_depth(model, activation=[1])
    # Fine-tuning is covered above; here only which layers are visited matters.
    monkeypatch.setattr(analysis.Trainer, "fit", lambda self: [])
    result = recovery_asymmetry(model, DigitsDataset("train"), DigitsDataset("val"), config=TINY_CONFIG)
    assert [(r["type"], r["block"]) for r in result["layers"]] == [("attention", 0), ("attention", 1),
                                                                   ("activation", 0)]
    # Without fine-tuning, "after fine-tuning" is the pruned model's own accuracy.
    assert all(r["top1_finetuned"] == r["top1_pruned"] for r in result["layers"])


@pytest.mark.parametrize("layers, message", [
    ([("mlp", 0)], r"unknown layer type 'mlp' \(choose from: attention, activation\)"),
    ([("attention", 2)], r"attention index 2 is out of range: the model has 2 blocks \(0-1\)"),
    ([("activation", 1), ("activation", 1)], r"activation index 1 is given more than once"),
    ([("activation", 0)], r"block 0 has no activation left to remove"),
], ids=["type", "range", "repeated", "removed"])
def test_bad_layer_lists_fail_before_any_work(layers, message):
    model = _tiny()
    prune_depth(model, activation=[0])
    with pytest.raises(vitprune.VitpruneError, match=message):
        recovery_asymmetry(model, None, None, config=TINY_CONFIG, layers=layers)


def test_plots_are_written_atomically(tmp_path):
    gradients = {"attention": {"0": {"mean_abs": 0.1, "mean": 0.1}},
                 "activation": {"0": {"mean_abs": 0.3, "mean": -0.2}, "1": {"mean_abs": 0.2, "mean": 0.2}},
                 "summary": {"ratio": 2.5}}
    recovery = {"dense_top1": 0.9, "layers": [{"type": "attention", "block": 0, "top1_pruned": 0.8,
                                               "top1_finetuned": 0.85},
                                              {"type": "activation", "block": 1, "top1_pruned": 0.1,
                                               "top1_finetuned": 0.8}]}
    for plot, result in ((plot_gradient_disparity, gradients), (plot_recovery, recovery)):
        path = plot(result, tmp_path / "sub" / f"{plot.__name__}.png")
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["plot_gradient_disparity.png", "plot_recovery.png"]


def test_plotting_without_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with pytest.raises(vitprune.VitpruneError, match="a vitprune dependency that is missing: pip install matplotlib"):
        plot_recovery({"dense_top1": 1.0, "layers": []}, tmp_path / "r.png")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_trained_digits_gradient_disparity(trained_digits):
    """The embedded model over one epoch: deterministic and complete (see the ratio note below)."""
    train = DigitsDataset("train")
    result = gradient_disparity(trained_digits, build_loader(train, 64, shuffle=True, seed=0))
    assert result["batches"] == 23 and result["images"] == len(train)
    assert set(result["attention"]) == set(result["activation"]) == {str(i) for i in range(12)}
    assert all(v["mean_abs"] > 0 for kind in ("attention", "activation") for v in result[kind].values())
    # The paper's activation/attention ratio > 1 does not hold for this converged model (about 0.5 with
    # the "norm" identity), so it is reported by `vitprune analyze gradient-disparity`, not asserted.
    # A fresh loader: a reused one would go on from its generator's state and shuffle differently.
    assert gradient_disparity(trained_digits, build_loader(train, 64, shuffle=True, seed=0)) == result


@pytest.mark.slow
def test_trained_digits_recovery(trained_digits):
    train, val = DigitsDataset("train", augment=True), DigitsDataset("val")
    config = TrainConfig(epochs=1, lr=5e-4, batch_size=64)
    result = recovery_asymmetry(trained_digits, train, val, config=config, layers=[("attention", 3), ("activation", 5)])
    val_loader = build_loader(val, 64, shuffle=False, seed=0)
    assert result["dense_top1"] == evaluate(trained_digits, val_loader)["top1"]
    for row in result["layers"]:
        pruned = copy.deepcopy(trained_digits)
        prune_depth(pruned, **{row["type"]: [row["block"]]})
        assert row["top1_pruned"] == evaluate(pruned, val_loader)["top1"]
