"""Merging after recovery: a model saved with fc1 and fc2 apart, trained since, merges exactly on every family."""

from __future__ import annotations

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.adapters import get_adapter
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig, count_macs
from vitprune.methods.hetdpt.config import MergeConfig
from vitprune.methods.hetdpt.merge import METADATA_KEY, run_merge
from vitprune.recipe import read_document
from vitprune.runs import MethodData, RunContext
from vitprune.surgery import prune_depth

NO_SPEED = SpeedConfig(enabled=False)


def _outputs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


@pytest.mark.needs("activation_removal")
def test_merging_a_saved_unmerged_model_is_exact(small_model_spec, tmp_path):
    """Saved unmerged, trained apart (every weight moved, so fc2·fc1 is no longer the one pruning saw), loaded
    back: the merge equals it at float tolerance, records its edits, and saves a model that loads to the same."""
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    attention = [1] if "attention_removal" in get_adapter(model).capabilities else []
    prune_depth(model, attention, [2, 5], merge=False)
    torch.manual_seed(4)
    with torch.no_grad():  # what a fine-tune of the unmerged model does to it
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vitprune.save(model, tmp_path / "unmerged")
    unmerged = vitprune.load(tmp_path / "unmerged")
    report = run_merge(unmerged, MethodData(), MergeConfig(), RunContext(tmp_path / "merged", name="unmerged",
                       speed=NO_SPEED))

    merged = vitprune.load(tmp_path / "merged")
    x = torch.randn(3, *get_adapter(model).input_size, generator=torch.Generator().manual_seed(1))
    expected = _outputs(unmerged, x)
    assert (_outputs(merged, x) - expected).abs().max().item() <= 1e-4 * max(1.0, expected.abs().max().item())
    assert report.merged_blocks == [2, 5] and 0 <= report.max_abs_difference <= 1e-4
    assert [v.index for v in get_adapter(merged).blocks() if v.mlp.merged] == [2, 5]
    edits = vitprune.get_recipe(merged).edits
    assert [(e.op, e.args["block"]) for e in edits[-2:]] == [("merge_mlp", 2), ("merge_mlp", 5)]
    assert report.after == count_macs(merged).totals() and report.before == count_macs(unmerged).totals()
    assert report.after["params"] < report.before["params"]
    assert read_document(tmp_path / "merged")["metadata"][METADATA_KEY]["merged_blocks"] == [2, 5]
    # The model handed in is not merged.
    assert not any(v.mlp.merged for v in get_adapter(unmerged).blocks())


def test_nothing_to_merge_is_one_clear_error(tmp_path):
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    with pytest.raises(VitpruneError, match="digits-vit has no fc1·fc2 pair kept apart to merge"):
        run_merge(model, MethodData(), MergeConfig(), RunContext(tmp_path / "a", name="digits-vit", speed=NO_SPEED))
    prune_depth(model, [], [0])  # removed and merged at once: nothing left apart
    with pytest.raises(VitpruneError, match="no fc1·fc2 pair kept apart"):
        run_merge(model, MethodData(), MergeConfig(), RunContext(tmp_path / "b", speed=NO_SPEED))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
