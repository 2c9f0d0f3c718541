"""The HetDPT pipeline end to end: stages decide, save what they decided, resume, and the report is exact."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch
from conftest import quick_context
from reports import assert_written
from torch.utils.data import Dataset

import vitprune
from vitprune.data import balanced_subset, build_dataset, build_loader
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import MacTarget, SpeedConfig, count_macs, format_count
from vitprune.methods.hetdpt import HetDPTRun, transfer_entropy
from vitprune.methods.hetdpt.config import MergeConfig
from vitprune.methods.hetdpt.importance import shortlist_size
from vitprune.methods.hetdpt.merge import run_merge
from vitprune.methods.hetdpt.pipeline import (
    MODEL_DIR, POINTS_FILE, PREDICTOR_FILE, PREDICTOR_PLOT, REPORT_FILE, SELECTION_FILE, HetDPTConfig, budget_for_macs,
    configure, parse_split, preset, run_hetdpt,
)
from vitprune.runs import MethodData
from vitprune.surgery import prune_depth
from vitprune.training import TrainConfig, evaluate

TINY = TrainConfig(epochs=1, lr=5e-4, batch_size=64)


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=4)
    size = vitprune.get_adapter(model).input_size
    train, val = (build_dataset("digits", split, input_size=size) for split in ("train", "val"))
    config = replace(preset("digits"), probe=TINY, probe_images=256, te_images=64, sweep_layers=2,
                     interleaved_rounds=1, search=TINY, finetune=TINY)
    return model, train, val, config


@pytest.mark.slow  # 10.5-11 s on 2 quiet cores
def test_full_pipeline_on_a_small_model(setting, tmp_path):
    model, train, val, config = setting
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = run_hetdpt(model, MethodData(train, val), HetDPTRun(3, config=config), quick_context(tmp_path))
    split = report.split
    assert split["chosen_by"] == "predictor" and split["attention"] + split["activation"] == 3
    assert (len(report.attention), len(report.activation)) == (split["attention"], split["activation"])
    assert report.merged_blocks == report.activation
    points = json.loads((tmp_path / POINTS_FILE).read_text())
    assert len(points) == 1 + 2 + 2 + 1  # dense, two sweeps of 2, one interleaved round (first step shared)
    assert report.predictor["fit"]["points"] == [[p["a"], p["t"], p["top1"]] for p in points]
    line = report.predictor["split"]["line"]
    best = max(line, key=lambda p: p["predicted"])
    assert (best["attention"], best["activation"]) == (split["attention"], split["activation"])
    for name in (PREDICTOR_FILE, PREDICTOR_PLOT, SELECTION_FILE, REPORT_FILE):
        assert (tmp_path / name).is_file()
    pruned = vitprune.load(tmp_path / MODEL_DIR)
    views = vitprune.get_adapter(pruned).blocks()
    assert [v.index for v in views if v.attn is None] == report.attention
    assert [v.index for v in views if v.mlp.merged] == report.activation
    assert report.pruned["params"] == count_macs(pruned).params < report.dense["params"]
    assert report.pruned["macs_linear"] == count_macs(pruned, convention="linear").macs
    loader = build_loader(val, 64, shuffle=False, seed=0)
    assert report.top1["finetuned"] == evaluate(pruned, loader)["top1"]
    assert report.top1["dense"] == evaluate(model, loader)["top1"]
    assert set(report.seconds) >= {"step 1: predictor of accuracy per split", "stage 2: fine-tune and merge"}
    assert json.loads((tmp_path / REPORT_FILE).read_text())["attention"] == report.attention
    assert_written(report, tmp_path / REPORT_FILE)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_fixed_split_and_resume_reuse_finished_stages(setting, tmp_path):
    model, train, val, config = setting
    first = run_hetdpt(model, MethodData(train, val), HetDPTRun(2, split=(1, 1), config=config),
                       quick_context(tmp_path))
    assert first.predictor is None and first.split["chosen_by"] == "user"
    assert not (tmp_path / POINTS_FILE).exists()
    weights = vitprune.load(tmp_path / MODEL_DIR).state_dict()
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        run_hetdpt(model, MethodData(train, val), HetDPTRun(2, split=(1, 1), config=config), quick_context(tmp_path))
    again = run_hetdpt(model, MethodData(train, val), HetDPTRun(2, split=(1, 1), config=config), quick_context(tmp_path,
                       resume=True))
    assert (again.attention, again.activation) == (first.attention, first.activation)
    assert again.top1 == first.top1  # nothing retrained: the best epoch is read back from the fine-tune's log
    reloaded = vitprune.load(tmp_path / MODEL_DIR).state_dict()
    assert all(torch.equal(weights[k], v) for k, v in reloaded.items())


@pytest.mark.slow
def test_a_saved_predictor_serves_another_budget(setting, tmp_path):
    model, train, val, config = setting
    run_hetdpt(model, MethodData(train, val), HetDPTRun(3, config=config), quick_context(tmp_path / "a"))
    report = run_hetdpt(model, MethodData(train, val), HetDPTRun(2, config=config,
                        predictor=tmp_path / "a" / PREDICTOR_FILE), quick_context(tmp_path / "b"))
    assert not (tmp_path / "b" / POINTS_FILE).exists()
    assert report.predictor["fit"] == json.loads((tmp_path / "a" / PREDICTOR_FILE).read_text())
    assert report.split["attention"] + report.split["activation"] == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"budget": 0}, r"budget 0 is out of range: the model has 4 attention and 4 activation layers \(8 in all\)"),
    ({"budget": 9}, "budget 9 is out of range"),
    ({"budget": 3, "split": (1, 1)}, "split 1,1 removes 2 layers, not the budget of 3"),
    ({"budget": 5, "split": (5, 0)}, "split asks for 5 attention layers, but the model has only 4"),
    ({"budget": 2, "predictor": "missing.json"}, "predictor file missing.json does not exist"),
    ({"budget": 2, "distill": "strong"}, r"unknown distill 'strong' \(choose from: none, soft, hard\)"),
], ids=["zero", "too-many", "split-sum", "split-too-big", "missing-predictor", "bad-setting"])
def test_bad_input_is_one_clear_error(setting, tmp_path, kwargs, message):
    model, train, val, config = setting
    if "distill" in kwargs:
        config = replace(config, distill=kwargs.pop("distill"))
    with pytest.raises(VitpruneError, match=message):
        run_hetdpt(model, MethodData(train, val), HetDPTRun(config=config, **kwargs), quick_context(tmp_path / "run"))


def test_split_and_configure_parse_the_command_line():
    assert parse_split("auto") is None and parse_split("2,3") == (2, 3)
    with pytest.raises(VitpruneError, match="split takes 'auto' or two counts"):
        parse_split("2")
    config = configure("digits", epochs=3, batch_size=32, lr=1e-3, distill="hard", shortlist=0.5)
    assert config.finetune.epochs == 3 and config.finetune.lr == 1e-3
    assert {c.batch_size for c in (config.probe, config.search, config.finetune)} == {32}
    assert config.distill == "hard" and config.shortlist == 0.5 and config.search.epochs == preset("digits").search.epochs
    with pytest.raises(VitpruneError, match="unknown HetDPT preset 'cifar'"):
        preset("cifar")


def test_a_new_batch_scales_each_stages_learning_rate():
    """Presets give each stage's lr for its own global batch (lr = 5e-5 · batch / 512, DeiT's rule): another batch
    scales it, unless an lr is given; the run report holds the scaled values (its config)."""
    imagenet = preset("imagenet")
    config = configure("imagenet", batch_size=1024)
    assert imagenet.finetune.lr == pytest.approx(5e-5 * 4096 / 512)
    assert config.probe.lr == pytest.approx(5e-5 * 1024 / 512) == config.search.lr
    assert config.finetune.lr == pytest.approx(imagenet.finetune.lr * 1024 / 4096)
    given = configure("imagenet", batch_size=1024, lr=3e-4)
    assert given.finetune.lr == 3e-4 and given.probe.lr == config.probe.lr
    assert configure("imagenet").finetune.lr == imagenet.finetune.lr
    assert config.to_dict()["finetune"]["lr"] == config.finetune.lr


def test_the_shortlist_is_on_by_default():
    """Step 2 chooses among each type's lowest-TE layers unless told otherwise: 2/3 of them, the reference code's 8 of
    12 (tests/methods/hetdpt/test_importance.py checks the sizes)."""
    assert HetDPTConfig().shortlist == preset("digits").shortlist == preset("imagenet").shortlist == 2 / 3
    for share in (0, 1.5):
        with pytest.raises(VitpruneError, match=r"shortlist is a share of each type's layers, in \(0, 1\]"):
            replace(HetDPTConfig(), shortlist=share).validate()


class _Blanked(Dataset):
    """``dataset`` with every image blanked: an augmentation no transfer entropy could be estimated on (constant
    features), which tells whether TE looked at the augmented training images or at the calibration ones."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        image, label = self.dataset[index]
        return torch.zeros_like(image), label


@pytest.fixture(scope="module")
def calibrated(setting, tmp_path_factory):
    """Steps 1 and 2 with TE on the calibration images (the training split, evaluation transform) while training on
    blanked ones, the reference code's output GELU on, saved without Stage 2 and unmerged."""
    model, _, val, config = setting
    plain = build_dataset("digits", "train", input_size=vitprune.get_adapter(model).input_size, is_training=False)
    # At least one layer of each type, whatever the predictor makes of training on blank images.
    config = replace(config, finetune=None, output_gelu=True, merge=False, min_per_type=1, probe_images=128)
    run_dir = tmp_path_factory.mktemp("calibrated")
    # Few images, for few steps: what is checked is which images TE saw.
    train, val = _Blanked(balanced_subset(plain, 128, seed=1)), balanced_subset(val, 64, seed=0)
    report = run_hetdpt(model, MethodData(train, val, plain), HetDPTRun(3, config=config), quick_context(run_dir,
                        speed=SpeedConfig(enabled=False)))
    return model, plain, config, run_dir, report


def test_te_is_estimated_on_the_calibration_images(calibrated):
    model, plain, config, run_dir, report = calibrated
    assert report.split["chosen_by"] == "predictor"  # Step 1 ran: its TE did not see the blanked images either
    batches = list(build_loader(balanced_subset(plain, config.te_images, seed=0), 64, shuffle=False, seed=0))
    selection = report.selection
    for kind, removed in (("attention", report.attention), ("activation", report.activation)):
        te = transfer_entropy(model, kind, batches, output_gelu=True)
        assert selection["transfer_entropy"][kind] == {str(b): v for b, v in te.items()}
        # Step 2 chose among the lowest-TE layers of the type: 3 of the 4 blocks (2/3, rounded).
        assert selection["candidates"][kind] == sorted(te, key=te.get)[:shortlist_size(2 / 3, 4, len(removed))]
        assert set(removed) <= set(selection["candidates"][kind])
    assert json.loads((run_dir / SELECTION_FILE).read_text())["transfer_entropy"] == selection["transfer_entropy"]


def test_without_merge_the_saved_model_keeps_fc1_and_fc2_apart(calibrated, tmp_path):
    """``merge`` off: model/ holds the depth-pruned model unmerged (a recipe that loads on its own), which
    :func:`run_merge` turns, exactly, into the merged one."""
    _, _, _, run_dir, report = calibrated
    pruned = vitprune.load(run_dir / MODEL_DIR)
    views = vitprune.get_adapter(pruned).blocks()
    assert report.merged_blocks == [] and report.activation
    assert [v.index for v in views if not v.mlp.has_activation] == report.activation
    assert not any(v.mlp.merged for v in views)
    assert "merge_mlp" not in [e.op for e in vitprune.get_recipe(pruned).edits]
    both = sorted(set(report.attention) & set(report.activation))
    assert [v.index for v in views if isinstance(v.act, torch.nn.GELU)] == both  # output_gelu
    merged = run_merge(pruned, MethodData(), MergeConfig(), quick_context(tmp_path / "merged",
                       speed=SpeedConfig(enabled=False)))
    assert merged.merged_blocks == report.activation and merged.max_abs_difference <= 1e-5


def test_budget_for_macs_counts_the_whole_layers_that_stay_above_a_target():
    """As many of the costliest removals as keep the model above the target (a later step trims to it), the edges
    as every rate search has them: at or above the model, one error; below any single removal, unreachable, saying
    what the smallest one leaves."""
    model = vitprune.create_model("digits-vit", depth=4)
    base = count_macs(model).macs
    savings = []
    for kind in ("attention", "activation"):
        for block in range(4):
            trial = copy.deepcopy(model)
            prune_depth(trial, **{kind: [block]})
            savings.append(base - count_macs(trial).macs)
    most, least = max(savings), min(savings)
    assert budget_for_macs(model, MacTarget.absolute(base - 2.5 * most)) == 2
    assert budget_for_macs(model, MacTarget.absolute(base - 2 * most)) == 1  # two would land on it, not above
    assert budget_for_macs(model, MacTarget.absolute(1000)) == 8  # every layer, and a trim goes on from there
    with pytest.raises(VitpruneError, match="is not below the model's"):
        budget_for_macs(model, MacTarget.absolute(base))
    with pytest.raises(UnreachableTargetError, match=f"HetDPT removes whole layers, and none fits above .*; the "
                                                     f"smallest removal leaves {format_count(base - least)}"):
        budget_for_macs(model, MacTarget.absolute(base - 0.5 * least))
