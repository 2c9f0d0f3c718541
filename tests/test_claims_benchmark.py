"""benchmarks/claims.py: every claim measured end to end on a tiny ViT and the digits data, and the verdict rule."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import benchmark_module, tracked
from torch.utils.data import Subset

from vitprune.data import build_dataset
from vitprune.errors import VitpruneError

TINY = {"img_size": 32, "in_chans": 1, "patch_size": 4, "embed_dim": 32, "depth": 4, "num_heads": 2, "num_classes": 10}


@pytest.fixture(scope="module")
def claims() -> ModuleType:
    return benchmark_module("claims")


def _setting(claims: ModuleType):
    model = tracked("deit_tiny_patch16_224", TINY)
    data = {name: build_dataset("digits", split, input_size=(1, 32, 32), is_training=train)
            for name, split, train in (("train", "train", True), ("plain", "train", False), ("val", "val", False))}
    return claims.Setting("tiny test ViT (random weights)", model, Subset(data["train"], range(96)),
                          Subset(data["plain"], range(96)), Subset(data["val"], range(48)))


def _budget(claims: ModuleType):
    return claims.Budget(seeds=[0], tune_images=32, batch_size=16, calibration_images=32, vbp_ratios=[0.5],
                         probe_images=16, te_images=16, search_images=32, lrp_images=8, star_mac_images=2,
                         hiap_images=32, hiap_epochs=1)


@pytest.mark.slow
def test_every_claim_gets_a_verdict_on_a_tiny_configuration(claims, tmp_path):
    store = tmp_path / "claims.store.json"
    report = claims.run(_setting(claims), _budget(claims), store, progress=False)
    # each unit counts its own time only (a selection inside an arm is not counted twice)
    assert 0 < report["seconds"]["measurements"] <= report["seconds"]["this_call"]
    papers = {c["paper"] for c in report["claims"]}
    assert papers == {"HetDPT", "HetDPT+", "VBP", "STAR", "HiAP", "Width (Isomorphic)", "Composition"}
    assert len(report["claims"]) == 15
    unmatched = []
    for c in report["claims"]:
        assert c["comparisons"], c["statement"]
        assert c["verdict"] in ("holds", "does not hold", "inconclusive")
        for x in c["comparisons"]:
            assert x["verdict"] in ("holds", "does not hold", "inconclusive")
            # matched MACs: a comparison whose arms' MACs differ by more than 1% judges nothing
            if x["macs_gap"] is not None and x["macs_gap"] > claims.MATCH:
                assert x["verdict"] == "inconclusive", x["label"]
                unmatched.append(x["label"])
    # HiAP's variants land where their gates allow (the ±5% budget claim checks that); every other arm is matched
    assert set(unmatched) <= {"vs coarse only", "vs fine only"}, unmatched
    budget = next(c for c in report["claims"] if "±5%" in c["statement"])
    assert len(budget["comparisons"]) == 3  # one per HiAP variant and seed

    claims.write(report, tmp_path, "claims", "python benchmarks/claims.py --tiny")
    page = (tmp_path / "claims.md").read_text()
    for c in report["claims"]:
        assert f"### {c['statement']}: **{c['verdict']}**" in page
    assert "Starting checkpoint: tiny test ViT (random weights)" in page
    assert "Command: `python benchmarks/claims.py --tiny`" in page
    for plot in ("vbp", "hetdpt", "arms"):
        assert (tmp_path / f"claims_{plot}.png").stat().st_size > 0

    # A second run reads every measurement back instead of making it again.
    stored = claims.read_json(store)["units"]
    again = claims.run(_setting(claims), _budget(claims), store, progress=False)
    assert again["claims"] == report["claims"]
    assert claims.read_json(store)["units"] == stored
    with pytest.raises(VitpruneError, match="another budget"):
        claims.run(_setting(claims), claims.Budget(seeds=[1]), store, progress=False)


@pytest.mark.parametrize(("a", "b", "kind", "verdict"), [
    ([0.90, 0.91, 0.92], [0.80, 0.81, 0.82], "better", "holds"),
    ([0.80, 0.81, 0.82], [0.90, 0.91, 0.92], "better", "does not hold"),
    ([0.80, 0.85, 0.90], [0.82, 0.84, 0.86], "better", "inconclusive"),
    ([0.80, 0.85, 0.90], [0.82, 0.84, 0.86], "comparable", "holds"),
    ([0.90, 0.91, 0.92], [0.80, 0.81, 0.82], "comparable", "does not hold"),
])
def test_verdict_rule(claims, a, b, kind, verdict):
    rows = lambda values, macs=1000: [{"top1_tuned": v, "macs": macs} for v in values]  # noqa: E731
    result = claims.compare("x", "A", rows(a), "B", rows(b), "top1_tuned", kind=kind)
    assert result["verdict"] == verdict
    assert result["a_mean"] == pytest.approx(100 * sum(a) / 3)
    assert result["macs_gap"] == 0
    unmatched = claims.compare("x", "A", rows(a), "B", rows(b, macs=1011), "top1_tuned", kind=kind)
    assert unmatched["verdict"] == "inconclusive" and unmatched["macs_gap"] == pytest.approx(11 / 1011)


def test_a_few_images_of_difference_decide_nothing(claims):
    """Deterministic arms have no spread over seeds; their top-1 on 1,000 images still has a standard error."""
    rows = lambda top1: [{"top1_pruned": top1, "macs": 1000, "images": 1000}] * 3  # noqa: E731
    close = claims.compare("x", "A", rows(0.853), "B", rows(0.850), "top1_pruned")
    assert close["a_std"] == 0 and close["a_margin"] == pytest.approx(100 * (0.853 * 0.147 / 1000) ** 0.5)
    assert close["verdict"] == "inconclusive"
    assert claims.compare("x", "A", rows(0.88), "B", rows(0.85), "top1_pruned")["verdict"] == "holds"


def test_a_claim_holds_only_when_every_comparison_holds(claims):
    made = lambda *verdicts: claims.claim("P", "s", [{"verdict": v} for v in verdicts])["verdict"]  # noqa: E731
    assert made("holds", "holds") == "holds"
    assert made("holds", "inconclusive") == "inconclusive"
    assert made("holds", "does not hold", "inconclusive") == "does not hold"
