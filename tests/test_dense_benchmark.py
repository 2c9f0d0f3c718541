"""benchmarks/dense.py: the whole run end to end on tiny ViTs (arms at the HetDPT backbone's MACs, both protocols, a
second run measuring nothing, the page and figures), the trained part run from cached tokens as the whole model runs,
and mIoU from per-image counts as torchmetrics counts it."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import benchmark_module, tracked

from vitprune.atomic import read_json, write_json

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None
                                or importlib.util.find_spec("segmentation_models_pytorch") is None,
                                reason="needs vitprune[bench] and vitprune[dense]")

#: A tiny ViT on the cluttered-MNIST classifier's input (40 px, 5-px patches).
TINY = {"img_size": 40, "in_chans": 1, "patch_size": 5, "embed_dim": 64, "depth": 4, "num_heads": 2, "num_classes": 10}


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


@pytest.mark.parametrize("tail_blocks", [0, 2])
def test_the_trained_part_from_cached_tokens_is_the_whole_models_function(dense, tail_blocks):
    """Training runs the backbone's last blocks (none: frozen) from the tokens entering them, cached once: the pyramid
    and head then see what the whole model computes from the canvas, for the segmenter (its logits) and the detector
    (its pyramid), and the canvases are resized as both models resize them."""
    from vitprune.data import ClutteredDenseDataset, collate_dense
    from vitprune.surgery import prune_depth, set_input_size

    budget = dense.Budget(pyramid_channels=32)
    backbone = tracked("deit_tiny_patch16_224", TINY)
    prune_depth(backbone, attention=[1], activation=[3])
    set_input_size(backbone, budget.size, budget.size)
    images, _ = collate_dense([ClutteredDenseDataset("val")[i] for i in range(3)])
    for task in dense.TASKS:
        torch.manual_seed(0)
        model = dense.build_model(task, backbone, budget).eval()
        resized = model.transform(list(images))[0].tensors if task == "detection" else F.interpolate(
            images, size=(budget.size, budget.size), mode="bilinear", align_corners=False)
        inner = dense.pyramid_of(model).maps.model
        tokens = dense.entering_tokens(inner, tail_blocks, resized)
        with torch.no_grad():
            cached = dense.head_forward(task, model, dense.Tail(inner, tail_blocks)(tokens), images)
            whole = model(images) if task == "segmentation" else dense.pyramid_of(model)(resized)
        if task == "segmentation":
            assert cached.shape == (3, 11, 64, 64) and torch.allclose(cached, whole, atol=1e-5)
        else:
            assert list(cached) == list(whole) and all(torch.allclose(cached[k], whole[k], atol=1e-5) for k in whole)
    detector_resize = dense.build_model("detection", backbone, budget).transform(list(images))[0].tensors
    assert torch.equal(detector_resize, F.interpolate(images, size=(budget.size, budget.size), mode="bilinear",
                                                      align_corners=False))


@pytest.mark.slow
def test_the_run_brings_every_arm_to_the_hetdpt_backbones_macs_and_resumes(dense, tmp_path):
    page = benchmark_module("dense_page")
    claims_store = tmp_path / "claims.store.json"
    write_json(claims_store, {"units": {f"hetdpt/step2/seed{s}": {"value": {"attention": [3], "activation": [1]}}
                                        for s in (0, 1)}})
    budget = dense.Budget(seeds=[0, 1], size=40, calibration_images=64, tune_images=64, train_images=16, seg_epochs=1,
                          det_epochs=1, tail_blocks=1, pyramid_channels=32, val_images=8, speed_pairs=2,
                          resamples=200, map_resamples=50)

    def checkpoints(seed: int) -> torch.nn.Module:
        return tracked("deit_tiny_patch16_224", TINY, seed=seed)

    store = tmp_path / "tiny.store.json"
    write_json(store, {"units": {"dense/seed0/segmentation": {"key": "from the first version"}}})
    report = dense.run(budget, tmp_path, "tiny", claims_store, checkpoints)
    for seed in (0, 1):
        rows = report["rows"][seed]
        target = rows["backbones"]["hetdpt"]["macs"]
        assert target < rows["backbones"]["dense"]["macs"]
        for arm in ("vbp", "width"):
            assert target * (1 - benchmark_module("claims").MATCH) <= rows["backbones"][arm]["macs"] <= target
        for protocol in dense.PROTOCOLS:
            for arm in dense.ARMS:
                scores = rows[protocol][arm]
                assert 0 <= scores["segmentation"]["miou"] <= 1 and 0 <= scores["detection"]["map"] <= 1
                assert scores["segmentation"]["macs"] > rows["backbones"][arm]["macs"]
                assert scores["detection"]["macs"] > rows["backbones"][arm]["macs"]
                assert "counts" not in scores["segmentation"] and "matches" not in scores["detection"]
    for protocol in dense.PROTOCOLS:
        assert set(report["stats"][protocol]) == {"hetdpt", "vbp", "width"}
        for metric in ("miou", "map"):
            d = report["stats"][protocol]["vbp"][metric]
            assert d["low"] <= d["effect"] <= d["high"] and d["margin"] == 1.0
            assert d["verdict"] in ("holds", "does not hold", "inconclusive") and d["seeds"] == 2
    assert set(report["speed"]) == {"hetdpt", "vbp", "width"}
    # the first version's unit is gone; the store holds the units the page reads, and a second run measures none
    units = read_json(store)["units"]
    assert "dense/seed0/segmentation" not in units and "joint/width/seed1/detection" in units
    assert dense.run(budget, tmp_path, "tiny", claims_store, checkpoints)["seconds"]["measured_now"] == 0
    dense.write({**report, "command": "python benchmarks/dense.py"}, tmp_path, "tiny")
    text = (tmp_path / "tiny.md").read_text(encoding="utf-8")
    assert "![masks](tiny_masks.png)" in text and "### Joint: the backbone's last blocks" in text
    assert "| HetDPT (depth) |" in text and "The two protocols: by mIoU they" in text
    threads = f"{' or '.join(map(str, report['threads']))} CPU threads"
    assert report["device"] == "cpu" and f"on {threads}, torch" in text and "cpu, float32" in text
    assert f"on cuda and {threads}" in page.to_markdown({**report, "device": "cuda"}, "python benchmarks/dense.py",
                                                           "tiny")
    assert "min, within the 90 min the benchmark is meant to take on 2 CPU cores." in text
    slow = {**report, "seconds": {**report["seconds"], "measurements": 180 * 60}}
    assert "180.0 min, 2.0x the 90 min" in page.to_markdown(slow, "python benchmarks/dense.py", "tiny")
    # The page renders from the report alone (what --render does): again from its JSON, byte for byte.
    dense.write(read_json(tmp_path / "tiny.json"), tmp_path, "tiny")
    assert (tmp_path / "tiny.md").read_text(encoding="utf-8") == text
    assert (tmp_path / "tiny_masks.png").stat().st_size > 0 and (tmp_path / "tiny_boxes.png").stat().st_size > 0
    (summary,) = page.summary(read_json(tmp_path / "tiny.json"))
    assert summary.startswith("**Pruned backbones under dense heads:** [dense.md](dense.md)") and "HetDPT" in summary


def test_the_width_arm_lands_on_the_hetdpt_backbones_macs_at_the_embedded_checkpoints_shape(dense):
    """The embedded checkpoint's shape on the dense input, 80 px against its own 40, where the attention matmuls weigh
    more: a search that planned on the classifier's count did not converge there, for the trained seed-0 checkpoint
    and for these untrained weights (seeds 3 and 4 of 0-5)."""
    import vitprune

    torch.manual_seed(3)
    setting = dense.Setting(0, dense.Budget(calibration_images=64), {"attention": [7], "activation": [1, 2, 3, 5]},
                            vitprune.create_model("cluttered-mnist-vit").eval())
    model = setting._width()
    assert setting.target * (1 - benchmark_module("claims").MATCH) <= setting.dense_macs(model) <= setting.target


def test_without_the_claims_runs_layers_the_run_says_what_to_run_first(dense, tmp_path):
    from vitprune.errors import VitpruneError

    with pytest.raises(VitpruneError, match="run python benchmarks/claims.py --seeds 3 first"):
        dense.hetdpt_layers(tmp_path / "claims.store.json", 3)


def test_the_page_names_the_differences_the_recovery_may_explain():
    """Only the pruned backbones are recovered: the page says so, and names the differences above dense that the
    recovery, not the pruning, may explain, the ones shown above zero marked."""
    page = benchmark_module("dense_page")

    def scores(miou: tuple[float, float], box: tuple[float, float]) -> dict[str, dict[str, float]]:
        return {"miou": dict(zip(("effect", "low"), miou)), "map": dict(zip(("effect", "low"), box))}

    stats = {"joint": {"hetdpt": scores((1.2, 0.3), (-0.5, -1.0)), "vbp": scores((-2.0, -3.0), (-1.0, -2.0))},
             "frozen": {"hetdpt": scores((0.4, -0.2), (-0.1, -0.5)), "vbp": scores((-2.0, -3.0), (0.6, -0.1))}}
    text = page._recovery(stats, {"tune_epochs": 1, "tune_images": 2000})
    assert "fine-tuned before its heads trained (1 epoch on 2,000 classification images" in text
    assert text.endswith("that training may be the reason, not the pruning: HetDPT (depth) by mIoU joint (+1.20, its "
                         "interval above zero); HetDPT (depth) by mIoU frozen (+0.40); VBP (FFN neurons) by box mAP "
                         "frozen (+0.60).")
    below = {p: {arm: scores((-1.0, -2.0), (-1.0, -2.0)) for arm in arms} for p, arms in stats.items()}
    assert page._recovery(below, {"tune_epochs": 4, "tune_images": 500}).endswith(
        "No pruned backbone scores above dense.")
    assert "(4 epochs on 500 classification images" in page._recovery(below, {"tune_epochs": 4, "tune_images": 500})


def test_the_page_says_which_differences_beyond_the_margin_the_checkpoints_do_not_confirm():
    page = benchmark_module("dense_page")

    def d(low: float, high: float, verdict: str = "inconclusive") -> dict[str, Any]:
        return {"effect": (low + high) / 2, "low": low, "high": high, "seed_low": low - 2, "seed_high": high + 2,
                "margin": 1.0, "seeds": 3, "verdict": verdict}

    stats = {"joint": {"vbp": {"miou": d(-4.0, -2.0), "map": d(-0.5, 0.5)}},
             "frozen": {"vbp": {"miou": d(1.5, 2.5, "does not hold"), "map": d(1.25, 2.25)}}}
    assert page._undecided(stats) == (
        "Beyond the margin over seeds and images, yet inconclusive: the t-test over the 3 checkpoints, "
        "Holm-corrected, does not show it: VBP (FFN neurons), joint mIoU: -3.00 [-4.00, -2.00], and [-6.00, +0.00] "
        "over the checkpoints alone; VBP (FFN neurons), frozen box mAP: +1.75 [+1.25, +2.25], and [-0.75, +4.25] "
        "over the checkpoints alone.")
    stats["joint"]["vbp"]["miou"]["verdict"] = stats["frozen"]["vbp"]["map"]["verdict"] = "does not hold"
    assert page._undecided(stats) == ""
