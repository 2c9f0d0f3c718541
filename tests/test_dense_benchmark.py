"""benchmarks/dense.py: the whole run end to end on tiny ViTs (arms at the HetDPT backbone's MACs, a second run
measuring nothing, the page and figures), and mIoU from per-image counts as torchmetrics counts it."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import numpy as np
import pytest
import torch
from conftest import benchmark_module, tracked

from vitprune.atomic import read_json, write_json

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None
                                or importlib.util.find_spec("torchmetrics") is None,
                                reason="needs vitprune[bench] and vitprune[dense]")

#: A tiny ViT on the cluttered-MNIST classifier's input (40 px, 5-px patches).
TINY = {"img_size": 40, "in_chans": 1, "patch_size": 5, "embed_dim": 32, "depth": 4, "num_heads": 2, "num_classes": 10}


@pytest.fixture(scope="module")
def dense() -> ModuleType:
    return benchmark_module("dense")


def test_miou_from_summed_counts_is_torchmetrics(dense):
    from torchmetrics.classification import MulticlassJaccardIndex

    from vitprune.dense import segmentation_scores

    gen = torch.Generator().manual_seed(0)
    masks, guesses = torch.randint(0, 4, (6, 8, 8), generator=gen), torch.randint(0, 4, (6, 8, 8), generator=gen)

    class Replay(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def forward(self, images):
            return torch.nn.functional.one_hot(guesses, 4).permute(0, 3, 1, 2).float()

    scores = segmentation_scores(Replay(), [(torch.zeros(6, 1, 8, 8), [{"mask": m} for m in masks])], 4,
                                 per_image=True)
    counts = torch.stack([scores["intersection"], scores["union"]], dim=2).numpy().astype(float)
    expected = MulticlassJaccardIndex(num_classes=4, average="macro")(guesses.flatten(), masks.flatten())
    assert dense._miou(counts.sum(axis=0)) == pytest.approx(100 * float(expected))


@pytest.mark.slow
def test_the_run_brings_every_arm_to_the_hetdpt_backbones_macs_and_resumes(dense, tmp_path):
    claims_store = tmp_path / "claims.store.json"
    write_json(claims_store, {"units": {f"hetdpt/step2/seed{s}": {"value": {"attention": [3], "activation": [1]}}
                                        for s in (0, 1)}})
    budget = dense.Budget(seeds=[0, 1], size=45, calibration_images=64, tune_images=64, train_images=32,
                          seg_epochs=1, det_epochs=1, val_images=8, speed_pairs=2, resamples=200)

    def checkpoints(seed: int) -> torch.nn.Module:
        return tracked("deit_tiny_patch16_224", TINY, seed=seed)

    report = dense.run(budget, tmp_path, "tiny", claims_store, checkpoints)
    for seed in (0, 1):
        rows = report["rows"][seed]
        target = rows["hetdpt"]["backbone"]["macs"]
        assert target < rows["dense"]["backbone"]["macs"]
        for arm in ("vbp", "width"):
            assert target * (1 - dense.MATCH) <= rows[arm]["backbone"]["macs"] <= target
        for arm in dense.ARMS:
            assert 0 <= rows[arm]["segmentation"]["miou"] <= 1 and 0 <= rows[arm]["detection"]["map"] <= 1
            assert rows[arm]["segmentation"]["macs"] > rows[arm]["backbone"]["macs"]
            assert rows[arm]["detection"]["macs"] > rows[arm]["backbone"]["macs"]
    assert set(report["stats"]) == {"hetdpt", "vbp", "width"} and set(report["speed"]) == {"hetdpt", "vbp", "width"}
    miou = report["stats"]["vbp"]["miou"]
    assert miou["low"] <= miou["effect"] <= miou["high"]
    per_seed = report["stats"]["vbp"]["map"]["per_seed"]
    assert report["stats"]["vbp"]["map"]["effect"] == pytest.approx(np.mean(per_seed))
    assert dense.run(budget, tmp_path, "tiny", claims_store, checkpoints)["seconds"]["measured_now"] == 0
    dense.write({**report, "command": "python benchmarks/dense.py"}, tmp_path, "tiny")
    page = (tmp_path / "tiny.md").read_text(encoding="utf-8")
    assert "![masks](tiny_masks.png)" in page and "| HetDPT (depth) |" in page
    # The page renders from the report alone (what --render does): again from its JSON, byte for byte.
    dense.write(read_json(tmp_path / "tiny.json"), tmp_path, "tiny")
    assert (tmp_path / "tiny.md").read_text(encoding="utf-8") == page
    assert (tmp_path / "tiny_masks.png").stat().st_size > 0 and (tmp_path / "tiny_boxes.png").stat().st_size > 0


def test_without_the_claims_runs_layers_the_run_says_what_to_run_first(dense, tmp_path):
    from vitprune.errors import VitpruneError

    with pytest.raises(VitpruneError, match="run python benchmarks/claims.py --seeds 3 first"):
        dense.hetdpt_layers(tmp_path / "claims.store.json", 3)
