"""Every method runs end to end on each family beyond timm's ViT (a Hugging Face classifier, LV-ViT, ConvNeXt,
Swin), through chains: the result counts what it runs, saves, loads in a fresh model equal to it, and exports to
ONNX within tolerance (the chain's consistency check)."""

from __future__ import annotations

import pytest
from conftest import CONVNEXT_TINY, HF_TINY, LVVIT_TINY, SWIN_TINY, tracked

import vitprune
from vitprune.data import balanced_subset, build_dataset
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.hetdpt.predictor import fit_predictor, save_predictor
from vitprune.runs import MethodData, RunContext
from vitprune.runs.chain import MODEL_DIR, run_chain
from vitprune.runs.steps import parse_chain

pytest.importorskip("torch_pruning")
pytest.importorskip("onnxruntime")


#: Each family's tiny model, at four blocks and one input channel (the digits); LV-ViT with its token-labelling
#: head and with its class head alone (which STAR's LRP prior needs).
FAMILIES = {
    "hf": ("hf:ViTForImageClassification", {**HF_TINY, "num_hidden_layers": 4, "num_channels": 1}),
    "lvvit": ("vitprune:lvvit-s", {**LVVIT_TINY, "depth": 4, "in_chans": 1}),
    "lvvit_cls": ("vitprune:lvvit-s-cls", {**LVVIT_TINY, "depth": 4, "in_chans": 1}),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def setting(request):
    return _setting(*FAMILIES[request.param])


def _setting(name, kwargs):
    """The model ``build`` makes of a row, and small balanced digits splits at its input size."""
    model = tracked(name, kwargs)
    size = vitprune.get_adapter(model).input_size
    train = balanced_subset(build_dataset("digits", "train", input_size=size), 96, seed=0)
    val = balanced_subset(build_dataset("digits", "val", input_size=size), 60, seed=0)
    return model, train, val


def _chain(setting, steps, run_dir):
    model, train, val = setting
    report = run_chain(model, MethodData(train, val), parse_chain(steps),
                       RunContext(run_dir, speed=SpeedConfig(batch_size=2, pairs=3)))
    macs = [step["macs_full"] for step in report.steps]
    assert all(b <= a for a, b in zip(macs, macs[1:])) and macs[-1] < macs[0], macs
    final = vitprune.load(run_dir / MODEL_DIR)
    assert count_macs(final).macs == macs[-1] == report.pruned["macs_full"]
    # The MACs equal FlopCounterMode's, a save loads bit-exact and the ONNX export agrees within 1e-4.
    consistency = report.consistency
    assert consistency["ok"] and consistency["onnx_max_diff"] is not None, consistency
    return report, final


@pytest.mark.slow
def test_depth_width_vbp_and_star(setting, tmp_path):
    adapter = vitprune.get_adapter(setting[0])
    # STAR fuses the LRP prior where the family propagates relevance, and ranks by [CLS] attention alone elsewhere.
    alpha = 0.5 if "lrp" in adapter.capabilities else 1.0
    report, final = _chain(setting, [
        {"method": "depth", "attention": [1], "activation": [2]},
        {"method": "width", "ratio": 0.25},
        {"method": "vbp", "ratio": 0.3, "calibration_images": 32, "calibration_batch": 16},
        {"method": "star", "rates": [1, 1, 0.7, 0.6], "alpha": alpha, "lrp_images": 16},
    ], tmp_path)
    ops = [e.op for e in vitprune.get_recipe(final).edits]
    assert ops[:2] == ["remove_attention", "remove_activation"] and ops.count("prune_tokens") == 2
    assert type(vitprune.get_adapter(final)) is type(adapter)


@pytest.mark.slow
def test_hetdpt_then_finetune_and_hiap(setting, tmp_path):
    # A fitted MAP that says accuracy falls with the activations removed only: HetDPT removes attention.
    points = [(a, t, 0.9 - 0.5 * (1 - t)) for a in (0.5, 0.75, 1.0) for t in (0.5, 0.75, 1.0)]
    predictor = save_predictor(fit_predictor(points, degrees=(1,)), tmp_path / "predictor.json")
    report, final = _chain(setting, [
        {"method": "hetdpt", "budget": 2, "predictor": str(predictor), "preset": "digits", "search_epochs": 1,
         "batch_size": 32},
        {"method": "finetune", "epochs": 1, "lr": 1e-3, "batch_size": 32},
    ], tmp_path / "hetdpt")
    hetdpt = report.steps[1]["summary"]
    assert len(hetdpt["attention"]) == 2 and hetdpt["activation"] == []
    assert [e.op for e in vitprune.get_recipe(final).edits] == ["remove_attention"] * 2
    # HiAP gates every block's heads and neurons, so it runs on the dense model (not after depth pruning).
    _, final = _chain(setting, [{"method": "hiap", "epochs": 1, "batch_size": 32, "target_macs": 2.0e6}],
                      tmp_path / "hiap")
    assert {e.op for e in vitprune.get_recipe(final).edits} & {"prune_attention_dims", "prune_heads",
                                                               "prune_mlp_neurons"}


@pytest.mark.slow
def test_convnext_vbp_activation_removal_finetune_and_hiap(tmp_path):
    """ConvNeXt has no attention and no tokens: activation removal (with γ merged) and VBP are its methods. Merging
    first: after VBP has thinned an MLP below half its width, one d x d Linear would cost more than the two left."""
    setting = _setting("convnext_tiny", {**CONVNEXT_TINY, "in_chans": 1,
                                         "pretrained_cfg_overlay": {"input_size": (1, 32, 32)}})
    report, final = _chain(setting, [
        {"method": "depth", "activation": [2, 5]},
        {"method": "vbp", "ratio": 0.4, "calibration_images": 32, "calibration_batch": 16},
        {"method": "finetune", "epochs": 1, "lr": 1e-3, "batch_size": 32},
    ], tmp_path)
    ops = [e.op for e in vitprune.get_recipe(final).edits]
    assert "prune_mlp_neurons" in ops and ops.count("remove_activation") == 2
    views = vitprune.get_adapter(final).blocks()
    assert views[2].mlp.merged and views[5].mlp.merged and report.steps[2]["summary"]["removed"] > 0
    _hiap(setting, tmp_path / "hiap")


def _hiap(setting, run_dir):
    """HiAP on the dense model to 85% of its MACs: what it keeps is cut out as recipe edits (a staged family's heads
    whole, or its neurons alone)."""
    target = 0.85 * count_macs(setting[0]).macs
    report, final = _chain(setting, [{"method": "hiap", "epochs": 1, "batch_size": 32, "lr": 1e-2,
                                      "target_macs": target}], run_dir)
    assert report.pruned["macs_full"] <= target
    assert {e.op for e in vitprune.get_recipe(final).edits} <= {"prune_heads", "prune_mlp_neurons"}


@pytest.mark.slow
def test_swin_depth_vbp_hetdpt_finetune_and_hiap(tmp_path):
    """Swin: attention and GELU removal by hand, VBP over its windows' positions, then HetDPT's gated search (its
    transfer entropy on the last stage's pooled features) and fine-tuning; shifted blocks among those pruned."""
    setting = _setting("swin_tiny_patch4_window7_224", {**SWIN_TINY, "depths": (2, 2, 2, 2), "in_chans": 1,
                                                         "pretrained_cfg_overlay": {"input_size": (1, 32, 32)}})
    points = [(a, t, 0.9 - 0.5 * (1 - t)) for a in (0.5, 0.75, 1.0) for t in (0.5, 0.75, 1.0)]
    predictor = save_predictor(fit_predictor(points, degrees=(1,)), tmp_path / "predictor.json")
    report, final = _chain(setting, [
        {"method": "depth", "attention": [1], "activation": [2]},
        {"method": "vbp", "ratio": 0.3, "calibration_images": 32, "calibration_batch": 16},
        {"method": "hetdpt", "budget": 2, "predictor": str(predictor), "preset": "digits", "search_epochs": 1,
         "batch_size": 32},
        {"method": "finetune", "epochs": 1, "lr": 1e-3, "batch_size": 32},
    ], tmp_path / "run")
    ops = [e.op for e in vitprune.get_recipe(final).edits]
    assert ops[:2] == ["remove_attention", "remove_activation"] and "prune_mlp_neurons" in ops
    assert ops.count("remove_attention") == 3  # HetDPT's two on top
    views = vitprune.get_adapter(final).blocks()
    assert sum(v.attn is None for v in views) == 3 and views[2].mlp.merged
    _hiap(setting, tmp_path / "hiap")
