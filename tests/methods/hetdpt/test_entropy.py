"""Transfer entropy: the Gaussian entropy proxy matches numpy, and masking a layer equals removing it."""

from __future__ import annotations

import copy
import json
import math
import textwrap

import numpy as np
import pytest
import torch
from conftest import run_torchrun, tracked

import vitprune
from vitprune.adapters import get_adapter
from vitprune.data import DigitsDataset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt import feature_entropy, rank_layers, transfer_entropy
from vitprune.surgery import prune_depth


def _tiny(depth: int = 3, **kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    return vitprune.create_model("digits-vit", depth=depth, **kwargs)


def _batches(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = DigitsDataset("train")
    batches, start = [], 0
    for size in sizes:
        batches.append((data.images[start:start + size], data.labels[start:start + size]))
        start += size
    return batches


def _numpy_entropy(model: torch.nn.Module, images: torch.Tensor) -> float:
    """``Σ_d log σ_d`` of the pre-logit features, with timm's head path and numpy's population std."""
    with torch.no_grad():
        features = model.forward_head(model.forward_features(images), pre_logits=True)
    return float(np.log(features.double().numpy().std(axis=0)).sum())


def _removed_entropy(model, batches, identity: str, output_gelu: bool = False, **layers) -> float:
    pruned = copy.deepcopy(model)
    prune_depth(pruned, **layers, identity=identity, output_gelu=output_gelu, merge=False)
    return feature_entropy(pruned, batches)


def test_feature_entropy_is_the_numpy_gaussian_entropy():
    # Dropout makes train mode random: the entropy must be taken in eval mode, and the mode restored.
    model = _tiny(drop_rate=0.5).train()
    batches = _batches([7, 5, 9])
    value = feature_entropy(model, batches, max_images=15)
    assert model.training
    images = torch.cat([x for x, _ in batches])
    assert value == pytest.approx(_numpy_entropy(model.eval(), images[:15]), rel=1e-9)
    assert feature_entropy(model, batches) == pytest.approx(_numpy_entropy(model, images), rel=1e-9)


def test_feature_entropy_errors():
    model = _tiny()
    with pytest.raises(VitpruneError, match="at least 2 images, got 1"):
        feature_entropy(model, _batches([4]), max_images=1)
    with pytest.raises(VitpruneError, match="max_images must be at least 1, got 0"):
        feature_entropy(model, _batches([4]), max_images=0)
    with pytest.raises(VitpruneError, match="at least 2 images, got 0"):
        feature_entropy(model, [])


@pytest.mark.parametrize("identity, output_gelu", [("norm", False), ("skip", False), ("norm", True)],
                         ids=["norm", "skip", "norm-output-gelu"])
def test_te_equals_the_entropy_change_of_physical_removal(identity, output_gelu):
    """With ``output_gelu``, masking attention 2 or activation 1 leaves a block with neither: TE sees the GELU the
    pruned block has on its output."""
    model = _tiny(depth=4)
    # S is not empty: a layer of each type is already physically gone.
    prune_depth(model, attention=[1], activation=[2], identity=identity, output_gelu=output_gelu, merge=False)
    model.train()
    state = copy.deepcopy(model.state_dict())
    batches = _batches([10, 14])
    base = feature_entropy(model, batches)
    for kind, blocks in (("attention", [0, 2, 3]), ("activation", [0, 1, 3])):
        scores = transfer_entropy(model, kind, batches, identity=identity, output_gelu=output_gelu)
        signed = transfer_entropy(model, kind, batches, identity=identity, output_gelu=output_gelu, signed=True)
        assert list(scores) == blocks
        for block in blocks:
            difference = base - _removed_entropy(model, batches, identity, output_gelu, **{kind: [block]})
            # The gate's identity path is the removed layer's, operation for operation.
            assert scores[block] == pytest.approx(abs(difference), rel=1e-12, abs=1e-12)
            assert signed[block] == pytest.approx(difference, rel=1e-12, abs=1e-12)
    # The caller's model is untouched: same weights, same mode, no gates left behind.
    assert model.training
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert all(v.mlp.gate is None and (v.attn is None or v.attn.gate is None) for v in get_adapter(model).blocks())


@pytest.mark.needs("attention_removal")
def test_te_matches_surgery_on_every_family(small_model_spec):
    """LayerScale (folded into the norm by surgery) and the distilled DeiT's two tokens included."""
    name, kwargs = small_model_spec
    model = tracked(name, kwargs)
    torch.manual_seed(2)
    batches = [(torch.randn(4, *get_adapter(model).input_size), torch.zeros(4, dtype=torch.long))]
    base = feature_entropy(model, batches)
    for kind, candidates in (("attention", [11, 0]), ("activation", [5])):
        scores = transfer_entropy(model, kind, batches, candidates=candidates)
        assert list(scores) == sorted(candidates)
        for block, score in scores.items():
            expected = abs(base - _removed_entropy(model, batches, "norm", **{kind: [block]}))
            assert score == pytest.approx(expected, rel=1e-4, abs=1e-4)


class _FreshImages:
    """A loader that draws new random images on every pass, as an augmenting loader does."""

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)

    def __iter__(self):
        for _ in range(3):
            yield torch.randn(4, 1, 32, 32, generator=self.generator), torch.zeros(4, dtype=torch.long)


def test_every_candidate_is_scored_on_the_same_images():
    model = _tiny()
    scores = transfer_entropy(model, "activation", _FreshImages(), max_images=10)
    first = list(_FreshImages())  # what the first pass drew
    images = torch.cat([x for x, _ in first])[:10]
    fixed = [(images, None)]
    base = feature_entropy(model, fixed)
    for block, score in scores.items():
        assert score == pytest.approx(abs(base - _removed_entropy(model, fixed, "norm", activation=[block])), rel=1e-12)


def test_rank_layers_is_a_sorted_joint_ranking():
    model = _tiny(depth=4)
    prune_depth(model, attention=[2], merge=False)
    batches = _batches([16])
    ranking = rank_layers(model, batches)
    assert sorted((kind, block) for kind, block, _ in ranking) == sorted(
        [("attention", b) for b in (0, 1, 3)] + [("activation", b) for b in range(4)])
    assert [score for _, _, score in ranking] == sorted(score for _, _, score in ranking)
    for kind in ("attention", "activation"):
        assert {b: s for k, b, s in ranking if k == kind} == transfer_entropy(model, kind, batches)
    assert [k for k, _, _ in rank_layers(model, batches, kinds=("activation",))] == ["activation"] * 4
    signed = rank_layers(model, batches, signed=True)
    assert [s for _, _, s in signed] == sorted(s for _, _, s in signed)


def test_bad_arguments():
    model = _tiny()
    prune_depth(model, attention=[0], merge=False)
    batches = _batches([4])
    with pytest.raises(VitpruneError, match="unknown layer type 'mlp'"):
        transfer_entropy(model, "mlp", batches)
    with pytest.raises(VitpruneError, match="unknown layer type 'gelu'"):
        rank_layers(model, batches, kinds=("attention", "gelu"))
    with pytest.raises(VitpruneError, match="block 0 has no attention left to remove"):
        transfer_entropy(model, "attention", batches, candidates=[0])
    with pytest.raises(VitpruneError, match="attention index 5 is out of range"):
        transfer_entropy(model, "attention", batches, candidates=[5])
    with pytest.raises(VitpruneError, match="unknown attention identity"):
        transfer_entropy(model, "attention", batches, identity="zero")


_WORKER = textwrap.dedent('''
    import json, sys
    import torch
    import vitprune
    from vitprune.data import DigitsDataset, build_dataset, build_loader
    from vitprune.methods.hetdpt import feature_entropy, transfer_entropy
    from vitprune.training.distributed import init_distributed, shutdown_distributed

    ctx = init_distributed("cpu")
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    data = DigitsDataset("train")
    # Unequal shards, so the merge must weight the ranks by their image counts.
    shard = slice(0, 13) if ctx.rank == 0 else slice(13, 40)
    batches = [(data.images[shard], data.labels[shard])]
    result = {"entropy": feature_entropy(model, batches, dist=ctx),
              "te": transfer_entropy(model, "attention", batches, dist=ctx)}
    everything = [(data.images[:40], data.labels[:40])]
    if ctx.is_main:
        result["single"] = {"entropy": feature_entropy(model, everything),
                            "te": transfer_entropy(model, "attention", everything)}
    with open(f"{sys.argv[1]}.{ctx.rank}", "w") as f:
        json.dump(result, f)
    shutdown_distributed()
''')


@pytest.mark.slow
def test_entropy_is_reduced_across_ranks(tmp_path):
    script = tmp_path / "te_worker.py"
    script.write_text(_WORKER)
    run_torchrun(script, str(tmp_path / "out"), timeout=180)
    ranks = [json.loads((tmp_path / f"out.{rank}").read_text()) for rank in (0, 1)]
    single = ranks[0]["single"]
    for result in ranks:
        assert result["entropy"] == pytest.approx(single["entropy"], rel=1e-9)
        assert result["te"] == pytest.approx(single["te"], rel=1e-7)


def test_removing_the_last_attention_scores_infinite_te():
    """With no attention left the class token never sees a patch: constant features, an unbounded entropy drop."""
    model = _tiny(depth=2)
    prune_depth(model, attention=[0])
    data = build_dataset("digits", "val", input_size=vitprune.get_adapter(model).input_size)
    scores = transfer_entropy(model, "attention", list(build_loader(data, 32, shuffle=False, seed=0))[:2])
    assert scores == {1: math.inf}
