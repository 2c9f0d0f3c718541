"""The fine-tuning engine: exact resume, clean stops, hooks, and recovery of a damaged model."""

from __future__ import annotations

import json
from dataclasses import replace

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
from vitprune.training.sampler import SeededSamples


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
    ({"ema_decay": 1.5}, "EMA decay"), ({"re_prob": 1.5}, "random-erasing probability"),
    ({"aug_repeats": 0}, "augmentation repeats"), ({"drop_path": 1.0}, "drop-path rate"),
    ({"warmup_lr": -1.0}, "warm-up lr"), ({"auto_augment": "rand-q3"}, "timm cannot build the augmentation"),
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


# --- DeiT's regularisation: each setting takes effect ------------------------------------------


def test_warm_up_starts_from_warmup_lr():
    """The scheduler's first lr is ``warmup_lr`` (DeiT's 1e-6), by default a thousandth of the peak."""
    data = _data(64)
    for warmup_lr, first in ((1e-6, 1e-6), (None, 1e-3 * 1e-3)):
        config = TrainConfig(epochs=2, lr=1e-3, batch_size=32, warmup_epochs=1, warmup_lr=warmup_lr)
        trainer = Trainer(_small_model(), data, config)
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(first)
        trainer.scheduler.step_update(num_updates=1)  # halfway up the warm-up's 2 steps
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(first + (1e-3 - first) / 2)


class SeesDropPath(TrainHooks):
    """Records each block's drop-path rates at the first optimisation step."""

    def on_step_start(self, trainer: Trainer) -> None:
        if trainer.step == 0:
            self.rates = _drop_rates(trainer.model)


def _drop_rates(model) -> list[float]:
    return [getattr(module, "drop_prob", 0.0) for view in vitprune.get_adapter(model).blocks()
            for module in (view.drop_path1, view.drop_path2)]


def test_drop_path_is_set_on_the_blocks_while_training():
    """Stochastic depth rises linearly from 0 at the first block to ``drop_path`` at the last (timm's rule) while
    the run trains; the model leaves with its own modules, which its recipe rebuilds."""
    model = vitprune.create_model("digits-vit", depth=3)
    own = [module for view in vitprune.get_adapter(model).blocks() for module in (view.drop_path1, view.drop_path2)]
    seen = SeesDropPath()
    Trainer(model, _data(64), TrainConfig(epochs=1, batch_size=32, drop_path=0.2), hooks=seen).fit()
    assert seen.rates == pytest.approx([0.0, 0.0, 0.1, 0.1, 0.2, 0.2])
    assert [m for v in vitprune.get_adapter(model).blocks() for m in (v.drop_path1, v.drop_path2)] == own
    untouched = SeesDropPath()
    Trainer(vitprune.create_model("digits-vit", depth=3), _data(64), TrainConfig(epochs=1, batch_size=32),
            hooks=untouched).fit()
    assert untouched.rates == [0.0] * 6
    with pytest.raises(VitpruneError, match="drop path needs the model's blocks"):
        Trainer(torch.nn.Linear(4, 2), TensorDataset(torch.zeros(4, 4), torch.zeros(4, dtype=torch.long)),
                TrainConfig(epochs=1, batch_size=2, drop_path=0.1))


def test_repeated_augmentation_repeats_each_image_in_the_epoch():
    trainer = Trainer(_small_model(), _data(60), TrainConfig(epochs=1, batch_size=30, aug_repeats=3))
    trainer.sampler.set_epoch(0)
    keys = list(trainer.sampler)
    order = [index for index, _ in keys]
    assert len(order) == 60 and len(set(order)) == 20
    assert order == [i for i in order[::3] for _ in range(3)]
    assert len({seed for _, seed in keys}) == 60  # each copy of an image is augmented under its own seed
    assert trainer.fit()[0]["step"] == 2


def test_the_training_set_gets_the_runs_augmentation(tmp_path):
    """RandAugment and random erasing reach the images the run trains on: the Trainer rebuilds the training
    transform of a dataset from build_dataset (and of a Subset of one); the digits, which augment themselves, are
    refused in one line."""
    from PIL import Image
    from timm.data.auto_augment import RandAugment
    from timm.data.random_erasing import RandomErasing

    from vitprune.data import build_dataset

    for label in ("a", "b"):
        (tmp_path / "train" / label).mkdir(parents=True)
        for i in range(4):
            Image.new("L", (32, 32), 60 * i).save(tmp_path / "train" / label / f"{i}.png")
    model = _small_model()
    train = build_dataset(str(tmp_path), "train", input_size=vitprune.get_adapter(model).input_size)
    config = TrainConfig(epochs=1, batch_size=4, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25)
    trainer = Trainer(model, Subset(train, range(6)), config)
    steps = trainer.loader.dataset.dataset.dataset.transform.transforms  # SeededSamples(Subset(the rebuilt set))
    assert any(isinstance(t, RandAugment) for t in steps) and any(isinstance(t, RandomErasing) for t in steps)
    assert not any(isinstance(t, RandAugment) for t in train.transform.transforms)  # the caller's set is left alone
    assert trainer.fit()[0]["step"] == 2
    with pytest.raises(VitpruneError, match="the digits data augments itself"):
        Trainer(_small_model(), build_dataset("digits", "train", input_size=(1, 32, 32)), config)


def test_loader_workers_change_nothing_but_the_speed():
    """Each image is augmented under its own seed, so worker processes draw exactly what the main process would."""
    config = TrainConfig(epochs=1, lr=2e-3, batch_size=16, seed=3)
    runs = []
    for workers in (0, 2):
        model = _small_model()
        Trainer(model, _data(48), replace(config, workers=workers)).fit()
        runs.append(model.state_dict())
    for name, value in runs[0].items():
        torch.testing.assert_close(runs[1][name], value, rtol=0, atol=0, msg=name)


def test_an_image_is_augmented_by_its_seed_alone():
    data = SeededSamples(_data(4))
    first, again, other = data[(1, 7)][0], data[(1, 7)][0], data[(1, 8)][0]
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    data[(1, 9)]  # reading a sample leaves the caller's generator where it was
    assert torch.equal(torch.rand(3), before)
    assert torch.equal(first, again) and not torch.equal(first, other)
