"""The ImageNet presets against the method notes: every setting of every preset, compared with a table written here
by hand from ``shared/notes/*.md`` (not from the code), the lr rule, and the methods that take their defaults from
them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt.pipeline import preset as hetdpt_preset
from vitprune.methods.hiap import TRAIN_DEFAULTS
from vitprune.methods.star.pipeline import STARConfig
from vitprune.methods.vbp.pipeline import VBPConfig
from vitprune.training import DistillConfig, TrainConfig
from vitprune.training.presets import PRESETS, get_preset

#: Settings no note names: the engine's own defaults.
ENGINE = {"momentum": 0.9, "clip_grad": None, "accum_steps": 1, "checkpoint_every": 0, "workers": 0}

#: DeiT's main.py defaults, which the HetDPT and STAR scripts run (hetdpt.md §2.2 Stage 2 row; star.md §1.9 "Other
#: DeiT-recipe defaults in the script"): AdamW, warm-up from 1e-6, cosine to 1e-5, smoothing 0.1, mixup 0.8, cutmix
#: 1.0, RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25, repeated augmentation (3 copies), drop path 0.1, AMP.
DEIT = {"optimizer": "adamw", "weight_decay": 0.05, "warmup_lr": 1e-6, "min_lr": 1e-5, "label_smoothing": 0.1,
        "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "auto_augment": "rand-m9-mstd0.5-inc1", "re_prob": 0.25,
        "aug_repeats": 3, "drop_path": 0.1, "amp": True, **ENGINE}

#: preset -> (base lr per 512 images, settings, distillation (kind, alpha, tau) or None).
NOTES = {
    # hetdpt.md §2.2 Stage 2 (the DeiT-B log): 400 epochs, 512/GPU x 8, base 5e-5 -> 4e-4, warm-up 10 from 1e-6,
    # cosine to 1e-5, wd 0.08, EMA 0.99996, seed 42, hard KD alpha 0.5 tau 1.
    "imagenet-hetdpt": (5e-5, {**DEIT, "epochs": 400, "batch_size": 4096, "lr": 4e-4, "warmup_epochs": 10.0,
                               "weight_decay": 0.08, "ema_decay": 0.99996, "seed": 42}, ("hard", 0.5, 1.0)),
    # hetdpt.md §2.1 "typically 10 epochs"; §2.2 Step 1 scripts: 4 GPUs x 256, lr 5e-5 scaled, cosine, warm-up 0.
    "imagenet-hetdpt-step1": (5e-5, {**DEIT, "epochs": 10, "batch_size": 1024, "lr": 1e-4, "warmup_epochs": 0.0,
                                     "ema_decay": None, "seed": 0}, ("none", 0.5, 1.0)),
    # hetdpt.md §1.5 [code] Step-2 defaults: 80 search epochs, 512/GPU x 8, lr 5e-5 scaled, min-lr 1e-5, wd 0.05,
    # warm-up 15 epochs.
    "imagenet-hetdpt-step2": (5e-5, {**DEIT, "epochs": 80, "batch_size": 4096, "lr": 4e-4, "warmup_epochs": 15.0,
                                     "ema_decay": None, "seed": 0}, ("none", 0.5, 1.0)),
    # star.md §1.9 and §5 #12: 120 epochs, cosine 2e-5 -> 2e-9 (the paper), 8 GPUs x 256, warm-up 0, hard
    # distillation alpha 0.25 (the README), EMA 0.99996 and DeiT's augmentation (the script's defaults).
    "imagenet-star": (2e-5, {**DEIT, "epochs": 120, "batch_size": 2048, "lr": 8e-5, "warmup_epochs": 0.0,
                             "min_lr": 2e-9, "ema_decay": 0.99996, "seed": 0}, ("hard", 0.25, 1.0)),
    # vbp.md §2: 10 epochs, AdamW, lr 1.5e-5, cosine, batch 32, wd 0.01; §5 #8-9: cosine to 0, no warm-up, standard
    # augmentation only, soft KD alpha 1 tau 1.
    "imagenet-vbp": (1.5e-5 * 512 / 32, {
        "epochs": 10, "batch_size": 32, "lr": 1.5e-5, "optimizer": "adamw", "weight_decay": 0.01,
        "warmup_epochs": 0.0, "warmup_lr": None, "min_lr": 0.0, "label_smoothing": 0.0, "mixup_alpha": 0.0,
        "cutmix_alpha": 0.0, "auto_augment": None, "re_prob": 0.0, "aug_repeats": 1, "drop_path": None, "amp": True,
        "ema_decay": None, "seed": 0, **ENGINE}, ("soft", 1.0, 1.0)),
    # hiap.md §2.1: 200 epochs, AdamW, lr 5e-5, global batch 256; §2.2: wd 0.05, DeiT's augmentation, drop path 0.1;
    # no EMA; the KD is HiAP's own (HiAPConfig).
    "imagenet-hiap": (5e-5 * 512 / 256, {**DEIT, "epochs": 200, "batch_size": 256, "lr": 5e-5, "warmup_epochs": 0.0,
                                         "ema_decay": None, "seed": 0}, None),
}


def test_the_table_covers_every_preset_and_every_setting():
    assert set(NOTES) == set(PRESETS)
    names = {field.name for field in dataclasses.fields(TrainConfig)}
    for name, (_, settings, _) in NOTES.items():
        assert set(settings) == names, name


@pytest.mark.parametrize("name", list(NOTES))
def test_each_preset_is_the_notes_recipe(name):
    base_lr, settings, distill = NOTES[name]
    preset = get_preset(name)
    actual = dataclasses.asdict(preset.train)
    assert actual.pop("lr") == pytest.approx(settings["lr"], rel=1e-12)
    assert actual == {k: v for k, v in settings.items() if k != "lr"}
    assert preset.base_lr == pytest.approx(base_lr, rel=1e-12)
    assert preset.distill == (None if distill is None else DistillConfig(*distill))
    assert preset.source and preset.doc


@pytest.mark.parametrize("name", list(NOTES))
@pytest.mark.parametrize("batch", [32, 256, 512, 1024, 8192])
def test_learning_rates_follow_the_global_batch(name, batch):
    """lr = base_lr x global batch / 512 at the preset's batch and at any other (DeiT's rule); the warm-up start
    and the cosine's floor do not scale (DeiT scales only --lr)."""
    base_lr, _, _ = NOTES[name]
    train = get_preset(name).train
    assert train.lr == pytest.approx(base_lr * train.batch_size / 512, rel=1e-12)
    moved = train.at_batch(batch)
    assert moved.batch_size == batch and moved.lr == pytest.approx(base_lr * batch / 512, rel=1e-12)
    assert (moved.warmup_lr, moved.min_lr) == (train.warmup_lr, train.min_lr)


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_validates(name):
    """Checked here rather than when the presets are defined, which would import torch and timm (for the
    augmentation) wherever the presets are read: in the command line's --help."""
    get_preset(name).train.validate()


def test_a_preset_is_a_copy():
    get_preset("imagenet-star").train.epochs = 1
    assert get_preset("imagenet-star").train.epochs == 120
    with pytest.raises(VitpruneError, match="unknown training preset 'imagenet-deit' \\(choose from: imagenet-hetdpt"):
        get_preset("imagenet-deit")


def test_hetdpt_wires_step1_step2_and_stage2():
    config = hetdpt_preset("imagenet-hetdpt")
    assert config.probe == get_preset("imagenet-hetdpt-step1").train
    assert config.search == get_preset("imagenet-hetdpt-step2").train
    assert config.finetune == get_preset("imagenet-hetdpt").train
    assert (config.distill, config.alpha, config.tau) == ("hard", 0.5, 1.0)
    assert hetdpt_preset("imagenet") == config


def test_star_vbp_and_hiap_take_their_defaults_from_their_presets():
    star, vbp = STARConfig(), VBPConfig(ratio=0.5)
    assert star.finetune == get_preset("imagenet-star").train
    assert (star.distill, star.distill_alpha, star.tau) == ("hard", 0.25, 1.0)
    assert vbp.finetune == get_preset("imagenet-vbp").train
    assert (vbp.distill, vbp.alpha, vbp.tau) == ("soft", 1.0, 1.0)
    hiap = get_preset("imagenet-hiap").train
    assert TRAIN_DEFAULTS == {"lr": hiap.lr, "batch_size": hiap.batch_size, "warmup_epochs": hiap.warmup_epochs}


def _cell(value) -> str:
    """A value as docs/recipes.md's table writes it."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_docs_table_is_the_presets():
    """docs/recipes.md tabulates every preset's settings: each cell is what the preset holds."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in page.splitlines()
            if line.startswith(("| `", "| base lr", "| setting"))]
    header, body = rows[0], {row[0]: row[1:] for row in rows[1:]}
    names = [cell.strip("`") for cell in header[1:]]
    assert names == list(PRESETS)
    fields = [field.name for field in dataclasses.fields(TrainConfig) if field.name not in ENGINE]
    assert set(body) == {"base lr (per 512 images)", *(f"`{name}`" for name in fields)}
    for column, name in enumerate(names):
        preset = get_preset(name)
        assert body["base lr (per 512 images)"][column] == _cell(preset.base_lr)
        for field in fields:
            assert body[f"`{field}`"][column] == _cell(getattr(preset.train, field)), (name, field)
