"""The fine-tuning engine: exact resume, clean stops, hooks, and recovery of a damaged model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import HF_TINY, SWIN_TINY, tracked
from torch.utils.data import Subset, TensorDataset

import vitprune
from vitprune.data import DigitsDataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.hiap import HiAPConfig, HiAPGates, layer_shapes
from vitprune.methods.hiap.search import HiAPTraining
from vitprune.surgery import add_depth_gates, prune_mlp_neurons
from vitprune.training import evaluate
from vitprune.training.engine import CHECKPOINT_DIR, METRICS_FILE, STATE_FILE, TrainConfig, Trainer, TrainHooks


def _small_model(seed: int = 0):
    torch.manual_seed(seed)
    return vitprune.create_model("digits-vit", depth=2)


def _data(n: int = 192):
    return Subset(DigitsDataset("train", augment=True), range(n))


CONFIG = dict(epochs=2, lr=2e-3, batch_size=32, warmup_epochs=0.5, checkpoint_every=2)


class StopAt(TrainHooks):
    """Simulates Ctrl-C just before optimisation step ``step`` (0-based count of completed steps)."""

    def __init__(self, step: int) -> None:
        self.at = step

    def on_step_start(self, trainer: Trainer) -> None:
        if trainer.step == self.at:
            raise KeyboardInterrupt


def test_resume_after_mid_epoch_interrupt_matches_uninterrupted(tmp_path):
    reference = _small_model()
    Trainer(reference, _data(), TrainConfig(**CONFIG), run_dir=tmp_path / "a").fit()

    interrupted = _small_model()
    with pytest.raises(KeyboardInterrupt):
        Trainer(interrupted, _data(), TrainConfig(**CONFIG), run_dir=tmp_path / "b", hooks=StopAt(9)).fit()
    state = torch.load(tmp_path / "b" / CHECKPOINT_DIR / STATE_FILE, weights_only=True)
    assert (state["epoch"], state["batch"], state["step"]) == (1, 3, 9), "saved mid-epoch at the interrupt"

    resumed = _small_model(seed=123)  # different init: everything must come from the checkpoint
    Trainer(resumed, _data(), TrainConfig(**CONFIG), run_dir=tmp_path / "b").fit(resume=True)
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6, msg=name)
    logs = [json.loads(line) for line in (tmp_path / "b" / METRICS_FILE).read_text().splitlines()]
    assert [entry["epoch"] for entry in logs] == [1, 2] and logs[-1]["step"] == 12


def test_existing_run_needs_resume(tmp_path):
    Trainer(_small_model(), _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=32), run_dir=tmp_path).fit()
    with pytest.raises(VitpruneError, match="already holds a checkpoint; pass --resume"):
        Trainer(_small_model(), _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=32), run_dir=tmp_path).fit()
    with pytest.raises(VitpruneError, match=r"settings differ from the checkpoint's \(epochs\)"):
        Trainer(_small_model(), _data(64), TrainConfig(epochs=2, lr=1e-3, batch_size=32), run_dir=tmp_path).fit(
            resume=True)


class NanAt(TrainHooks):
    def __init__(self, step: int) -> None:
        self.at = step

    def extra_loss(self, trainer, images, outputs):
        return torch.tensor(float("nan")) if trainer.step == self.at else None


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    model = _small_model()
    trainer = Trainer(model, _data(), TrainConfig(**CONFIG), run_dir=tmp_path, hooks=NanAt(5))
    with pytest.raises(VitpruneError, match=rf"loss became nan at epoch 1, batch 6; stopped, the last good checkpoint "
                                            rf"is {tmp_path / CHECKPOINT_DIR}"):
        trainer.fit()
    state = torch.load(tmp_path / CHECKPOINT_DIR / STATE_FILE, weights_only=True)
    assert state["step"] == 4
    assert all(torch.isfinite(p).all() for p in vitprune.load(tmp_path / CHECKPOINT_DIR / "model").parameters())


class TwoRates(TrainHooks):
    def param_groups(self, model, config):
        head = list(model.head.parameters())
        rest = [p for n, p in model.named_parameters() if not n.startswith("head.")]
        return [{"params": rest}, {"params": head, "lr": config.lr * 10}]


def test_param_groups_keep_their_own_learning_rates():
    trainer = Trainer(_small_model(), _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=32), hooks=TwoRates())
    trainer.fit()
    assert len(trainer.optimizer.param_groups) == 2
    assert trainer.optimizer.param_groups[1]["initial_lr"] == pytest.approx(1e-2)
    assert trainer.optimizer.param_groups[0]["initial_lr"] == pytest.approx(1e-3)


def test_accumulation_and_ema(tmp_path):
    trainer = Trainer(_small_model(), _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=16, accum_steps=2,
                                                             ema_decay=0.9, clip_grad=1.0), run_dir=tmp_path)
    trainer.fit()
    assert trainer.step == 2 and trainer.batches_per_epoch == 4
    assert (tmp_path / CHECKPOINT_DIR / "ema.safetensors").is_file()
    assert not all(torch.equal(a, b) for a, b in zip(trainer.ema.module.parameters(), trainer.model.parameters()))


@pytest.mark.parametrize("kwargs, match", [
    ({"epochs": 0}, "epochs must be at least 1"), ({"lr": 0.0}, "learning rate must be positive"),
    ({"optimizer": "lamb"}, "unknown optimizer 'lamb'"), ({"accum_steps": 0}, "accumulation steps"),
    ({"ema_decay": 1.5}, "EMA decay"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(VitpruneError, match=match):
        Trainer(_small_model(), _data(64), TrainConfig(**{"epochs": 1, "lr": 1e-3, **kwargs}))


@pytest.mark.slow
def test_short_finetune_recovers_a_damaged_model(trained_digits):
    import copy

    model = copy.deepcopy(trained_digits)
    for block in range(12):
        prune_mlp_neurons(model, block, list(range(0, 192, 8)))
    val = build_loader(DigitsDataset("val"), 256, shuffle=False, seed=0)
    damaged = evaluate(model, val)["top1"]
    Trainer(model, DigitsDataset("train", augment=True), TrainConfig(epochs=2, lr=1e-3, batch_size=64)).fit()
    recovered = evaluate(model, val)["top1"]
    assert damaged < 0.9 and recovered > damaged + 0.05, (damaged, recovered)


def test_hard_distillation_trains_a_distilled_deit():
    """DeiT-style hard distillation through the engine: the distillation head learns the teacher's labels."""
    import timm
    from torch import nn

    from vitprune.training import DistillationLoss, make_teacher, use_distillation_head

    torch.manual_seed(0)
    student = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, img_size=32, in_chans=1,
                                depth=2, embed_dim=48, num_heads=3, num_classes=10)
    teacher = make_teacher(student)
    assert use_distillation_head(student, "hard")
    criterion = DistillationLoss(nn.CrossEntropyLoss(), teacher, kind="hard", alpha=0.5)
    before = [p.clone() for p in teacher.parameters()]
    trainer = Trainer(student, _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=32), criterion=criterion)
    stats = trainer.fit()
    assert trainer.step == 2 and stats[0]["loss"] > 0 and criterion.last["distill"] > 0
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters())), "the teacher never changes"
    assert all(p.grad is None for p in teacher.parameters())


@pytest.mark.slow
def test_two_process_torchrun_matches_one_process_with_the_same_global_batch(tmp_path):
    """DDP on 2 CPU processes (gloo) with global batch 32 ends where 1 process with batch 32 does."""
    from pathlib import Path

    from conftest import run_torchrun

    run_torchrun(Path(__file__).with_name("_engine_worker.py"), str(tmp_path / "out.pt"))
    two = torch.load(tmp_path / "out.pt", weights_only=True)

    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    # SGD, not Adam: Adam rescales gradients that are zero in exact arithmetic (the key bias cannot change a
    # softmax), so rounding differences between 1 and 2 processes would become lr-sized updates there.
    config = TrainConfig(epochs=2, lr=0.05, batch_size=32, optimizer="sgd")
    one = Trainer(model, Subset(DigitsDataset("train"), range(128)), config).fit()
    for a, b in zip(one, two["stats"]):
        assert a["step"] == b["step"] == 4 * a["epoch"]
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5) and b["top1"] == pytest.approx(a["top1"], abs=1e-9)
    for (name, a), b in zip(model.state_dict().items(), two["state"].values()):
        assert (b - a).abs().max() <= 1e-5, (name, float((b - a).abs().max()))


def test_mixup_cutmix_resume_exactly(tmp_path):
    """timm mixup/cutmix (numpy RNG) survives an interrupt: the resumed run ends where an uninterrupted one does."""
    config = dict(CONFIG, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    reference = _small_model()
    stats = Trainer(reference, _data(200), TrainConfig(**config), run_dir=tmp_path / "a").fit()
    assert all(0 <= s["top1"] <= 1 for s in stats)  # 200 = 6 x 32 + 8: the short last batch is mixed too
    interrupted = _small_model()
    with pytest.raises(KeyboardInterrupt):
        Trainer(interrupted, _data(200), TrainConfig(**config), run_dir=tmp_path / "b", hooks=StopAt(10)).fit()
    resumed = _small_model(seed=5)
    Trainer(resumed, _data(200), TrainConfig(**config), run_dir=tmp_path / "b").fit(resume=True)
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6, msg=name)


def test_mixup_handles_an_odd_last_batch():
    trainer = Trainer(_small_model(), _data(65), TrainConfig(epochs=1, lr=1e-3, batch_size=32, mixup_alpha=0.8))
    assert trainer.fit()[0]["step"] == 3
    with pytest.raises(VitpruneError, match="even batch per process"):
        Trainer(_small_model(), _data(65), TrainConfig(epochs=1, lr=1e-3, batch_size=33, mixup_alpha=0.8))


@pytest.mark.parametrize("enabled", [True, False])
def test_training_progress_goes_to_stderr_only_when_enabled(capfd, enabled):
    from vitprune.training.progress import training_progress

    trainer = Trainer(_small_model(), _data(64), TrainConfig(epochs=1, lr=1e-3, batch_size=32))
    with training_progress(trainer, enabled=enabled) as on_batch:
        trainer.fit(on_batch=on_batch)
    out, err = capfd.readouterr()
    assert out == ""
    assert ("epoch 1/1" in err and "2/2" in err) if enabled else err == ""


def _decays(optimizer: torch.optim.Optimizer) -> dict[int, float]:
    return {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}


@pytest.mark.parametrize("name, kwargs, tokens", [
    ("deit_tiny_distilled_patch16_224", {"depth": 1}, 3),  # class and distillation tokens, position embedding
    ("hf:ViTForImageClassification", {**HF_TINY, "num_hidden_layers": 1}, 2),  # class token, position embedding
    ("swin_tiny_patch4_window7_224", {**SWIN_TINY, "depths": (1, 1, 1, 1)}, 4),  # a bias table per block
], ids=["deit-distilled", "hf_vit", "swin"])
def test_norms_biases_tokens_and_gates_are_not_decayed(name, kwargs, tokens):
    """timm's convention in every trainer: weight decay on matrices only, never on norms, biases, LayerScale, the
    class/distillation tokens, the position embedding, Swin's bias tables, depth gates' importance or HiAP's gates."""
    model = tracked(name, kwargs)
    gates = add_depth_gates(model)
    size = vitprune.get_adapter(model).input_size
    data = TensorDataset(torch.randn(4, *size), torch.zeros(4, dtype=torch.long))
    decays = _decays(Trainer(model, data, TrainConfig(epochs=1, weight_decay=0.05, batch_size=2)).optimizer)
    adapter = vitprune.get_adapter(model)
    quiet = [*adapter.no_decay_parameters(), *(p for p in model.parameters() if p.ndim <= 1)]
    assert quiet and all(decays[id(p)] == 0.0 for p in quiet)
    assert all(decays[id(p)] == 0.05 for p in model.parameters() if id(p) not in {id(q) for q in quiet})
    assert len(adapter.no_decay_parameters()) == tokens
    assert all(decays[id(g.importance)] == 0.0 for g in gates.attention.values())
    model = tracked(name, kwargs)
    hiap = HiAPTraining(model, HiAPGates(layer_shapes(model)), HiAPConfig(), fixed_macs=0, gate_lr=0.1)
    groups = hiap.param_groups(model, TrainConfig(epochs=1, weight_decay=0.05))
    decayed = {id(p) for g in groups if g["weight_decay"] for p in g["params"]}
    assert not decayed & {id(p) for p in vitprune.get_adapter(model).no_decay_parameters()}
    assert all(p.ndim > 1 for p in model.parameters() if id(p) in decayed)
