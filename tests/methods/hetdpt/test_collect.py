"""MAP data collection: the sweeps' order and structures, greedy minimal-TE removal, and exact resumption."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import vitprune
from vitprune.adapters import get_adapter
from vitprune.data import DIGITS, balanced_subset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.methods.hetdpt import collect, collect_predictor_data, transfer_entropy
from vitprune.training import TrainConfig, Trainer

CONFIG = TrainConfig(epochs=1, lr=1e-3, batch_size=32, seed=3)
SETTINGS = dict(max_attention=2, max_activation=1, interleaved_rounds=2, finetune=CONFIG, te_images=40,
                te_batch_size=16)
#: The sweep and layer type of the removal each point after the dense one adds.
REMOVALS = [("attention", "attention"), ("attention", "attention"), ("activation", "activation"),
            ("interleaved", "activation"), ("interleaved", "attention"), ("interleaved", "activation")]
#: (algorithm, attention layers removed, activation layers removed) of each point. The interleaved sweep's
#: first step, one attention layer, repeats the attention sweep's first point, so it is replayed, not recorded.
LAYOUT = [("dense", 0, 0), ("attention", 1, 0), ("attention", 2, 0), ("activation", 0, 1),
          ("interleaved", 1, 1), ("interleaved", 2, 1), ("interleaved", 2, 2)]


def _tiny(depth: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return vitprune.create_model("digits-vit", depth=depth)


@pytest.fixture(scope="module")
def data():
    """Augmented training images (so the TE images are drawn with random shifts) and a validation subset."""
    train = balanced_subset(build_dataset("digits", "train", input_size=DIGITS.input_size), 64, seed=0)
    val = balanced_subset(build_dataset("digits", "val", input_size=DIGITS.input_size), 50, seed=0)
    return train, val


def _collect(data, model, settings=SETTINGS, **kwargs):
    """Run the collection, recording every TE call as (kind, remaining blocks of that kind, images, scores)."""
    calls = []

    def recording(model, kind, loader, **kw):
        scores = transfer_entropy(model, kind, loader, **kw)
        images = torch.cat([x for x, _ in loader])
        calls.append((kind, sorted(scores), images, scores))
        return scores

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(collect, "transfer_entropy", recording)
        points = collect_predictor_data(model, *data, **settings, **kwargs)
    return points, calls


@pytest.fixture(scope="module")
def run(data):
    model = _tiny()
    state = copy.deepcopy(model.state_dict())
    seen = []
    points, calls = _collect(data, model, on_point=lambda pts: seen.append(copy.deepcopy(pts)))
    return model, state, points, calls, seen


def test_points_follow_the_sweeps(run):
    model, state, points, _, seen = run
    assert [(p["algorithm"], len(p["attention_removed"]), len(p["activation_removed"])) for p in points] == LAYOUT
    for p in points:
        assert p["a"] == (3 - len(p["attention_removed"])) / 3 and p["t"] == (3 - len(p["activation_removed"])) / 3
        assert 0 <= p["top1"] <= 100
    assert json.loads(json.dumps(points)) == points
    # Each sweep starts from the dense model and removes one more layer per point.
    for prev, point in zip(points, points[1:]):
        if prev["algorithm"] == point["algorithm"]:
            grown = [(kind, point[f"{kind}_removed"][:-1] == prev[f"{kind}_removed"])
                     for kind in ("attention", "activation") if point[f"{kind}_removed"] != prev[f"{kind}_removed"]]
            assert len(grown) == 1 and grown[0][1]
    # The interleaved sweep (attention first) begins with the attention sweep's first removal.
    assert points[4]["attention_removed"] == points[1]["attention_removed"]
    assert seen == [points[:n] for n in range(1, len(points) + 1)]
    # The caller's model is untouched.
    assert all(v.attn is not None and v.mlp.has_activation for v in get_adapter(model).blocks())
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_each_removal_is_the_minimal_te_layer(run, data):
    model, _, points, calls, _ = run
    # One TE call per recorded point, none for the replayed first interleaved step.
    assert [(kind, points[i]["algorithm"]) for i, (kind, *_) in enumerate(calls, start=1)] == [
        (kind, algorithm) for algorithm, kind in REMOVALS]
    for i, (kind, candidates, _, scores) in enumerate(calls, start=1):
        removed = points[i][f"{kind}_removed"]
        # Candidates are the layers the sweep still has; the removed one has the least TE (ties: lower block).
        assert candidates == sorted(set(range(3)) - set(removed[:-1]))
        assert removed[-1] == min(scores, key=lambda b: (scores[b], b))
    # All rounds score on one fixed, class-balanced, seeded set of (augmented) training images ...
    for _, _, images, _ in calls:
        assert torch.equal(images, calls[0][2])
    # ... the one an independent draw with the fine-tuning seed gives.
    torch.manual_seed(CONFIG.seed)
    expected = list(build_loader(balanced_subset(data[0], 40, seed=CONFIG.seed), 16, shuffle=False, seed=CONFIG.seed))
    assert torch.equal(calls[0][2], torch.cat([x for x, _ in expected]))
    assert calls[0][3] == transfer_entropy(model, "attention", expected)


def test_te_once_ranks_each_type_once_on_the_starting_model(run, data):
    """TE-Static (``te_once``): one TE pass per type, on the dense model, and every sweep removes that type's layers
    in its order; the points' layout is the every-round collection's."""
    model = run[0]
    points, calls = _collect(data, _tiny(), te_once=True)
    assert [(p["algorithm"], len(p["attention_removed"]), len(p["activation_removed"])) for p in points] == LAYOUT
    assert [(kind, candidates) for kind, candidates, *_ in calls] == [("attention", [0, 1, 2]),
                                                                      ("activation", [0, 1, 2])]
    order = {kind: sorted(scores, key=lambda b: (scores[b], b)) for kind, _, _, scores in calls}
    assert calls[0][3] == pytest.approx(transfer_entropy(model, "attention", [(calls[0][2], None)]), rel=1e-9)
    for point in points:
        for kind in ("attention", "activation"):
            assert point[f"{kind}_removed"] == order[kind][:len(point[f"{kind}_removed"])]
    # A resumed collection ranks again on the starting model and goes on in the same order.
    assert _collect(data, _tiny(), te_once=True, resume_points=points[:3])[0] == points


@pytest.mark.parametrize("done", range(len(LAYOUT) + 1))
def test_resume_reproduces_the_points(run, data, done):
    _, _, points, calls, _ = run
    seen = []
    saved = json.loads(json.dumps(points[:done]))
    resumed, resumed_calls = _collect(data, _tiny(), resume_points=saved, on_point=lambda pts: seen.append(len(pts)))
    assert resumed == points
    assert seen == list(range(done + 1, len(points) + 1))
    # Only the missing points were searched for: recorded removals are replayed, not re-scored.
    assert len(resumed_calls) == len(REMOVALS) - max(done - 1, 0)


def test_interleaved_order_and_unshared_first_step(data):
    settings = dict(SETTINGS, max_attention=0, max_activation=0, interleaved_rounds=1, order="activation-first")
    points, _ = _collect(data, _tiny(), settings)
    # No activation sweep to share with: the interleaved sweep records its first half-step itself.
    assert [(p["algorithm"], len(p["attention_removed"]), len(p["activation_removed"])) for p in points] == [
        ("dense", 0, 0), ("interleaved", 0, 1), ("interleaved", 1, 1)]


def test_bad_settings(data):
    model = _tiny()
    cases = [
        (dict(max_attention=4), "max_attention=4 but the model has only 3 attention layer"),
        (dict(max_activation=-1), "max_activation must be at least 0, got -1"),
        (dict(interleaved_rounds=4), "interleaved_rounds=4 but the model has only 3 of each type layer"),
        (dict(order="random"), "unknown interleaving order 'random'"),
        (dict(identity="zero"), "unknown attention identity 'zero'"),
        (dict(te_images=1), "at least 2 images, got te_images=1"),
    ]
    for overrides, match in cases:
        with pytest.raises(VitpruneError, match=match):
            collect_predictor_data(model, *data, **{**SETTINGS, **overrides})


def test_bad_resume_points(run, data):
    points = run[2]

    def tampered(i, **changes):
        return [dict(p, **changes) if j == i else p for j, p in enumerate(points)]

    cases = [
        (points + [points[-1]], "cannot resume from 8 points: these settings collect only 7"),
        (tampered(0, top1="high"), "resume point 0 .*top1"),
        (tampered(1, algorithm="activation"), "resume point 1 .*algorithm"),
        (tampered(2, attention_removed=[points[1]["attention_removed"][0]] * 2), "resume point 2 .*should remove"),
        (tampered(3, t=0.5), "resume point 3 .*: t differ"),
        (tampered(4, attention_removed=[]), "resume point 4 .*attention_removed"),
    ]
    for saved, match in cases:
        with pytest.raises(VitpruneError, match=match):
            collect_predictor_data(_tiny(), *data, **SETTINGS, resume_points=saved)


@pytest.mark.slow
def test_trained_model_recovers_after_each_removal(trained_digits):
    train = build_dataset("digits", "train", input_size=DIGITS.input_size)
    val = build_dataset("digits", "val", input_size=DIGITS.input_size)
    config = TrainConfig(epochs=1, lr=5e-4, batch_size=64)
    points = collect_predictor_data(trained_digits, balanced_subset(train, 512, seed=0), val, max_attention=2,
                                    max_activation=2, interleaved_rounds=1, finetune=config, te_images=256)
    assert len(points) == 1 + 2 + 2 + 1
    assert points[0]["top1"] > 90
    # One or two of twelve layers removed and a short fine-tune: the digits model stays far above chance.
    assert all(p["top1"] > 70 for p in points)


def test_te_images_come_from_te_set_without_augmentation(data):
    """TE sees the training images through the evaluation transform (``te_set``), not the augmented images the fast
    fine-tunes train on."""
    plain = balanced_subset(build_dataset("digits", "train", input_size=DIGITS.input_size, is_training=False), 64,
                            seed=0)
    settings = dict(SETTINGS, max_attention=1, max_activation=0, interleaved_rounds=0)
    _, calls = _collect(data, _tiny(), settings, te_set=plain)

    def images(dataset):
        subset = balanced_subset(dataset, SETTINGS["te_images"], seed=CONFIG.seed)
        return torch.cat([x for x, _ in build_loader(subset, 16, shuffle=False, seed=0)])

    assert [kind for kind, *_ in calls] == ["attention"]
    assert torch.equal(calls[0][2], images(plain))
    assert not torch.equal(images(plain), images(data[0]))  # the same digits, augmented


@pytest.mark.parametrize("output_gelu", [False, True], ids=["paper", "output-gelu"])
def test_sweeps_fine_tune_the_block_the_pruned_model_has(data, output_gelu):
    """With ``output_gelu`` (the reference code's), a block that has lost both layers has the GELU on its output in
    the model the sweep fine-tunes and evaluates, as the pruned model will; without it (the paper's block), not."""
    outputs = []

    def recording(model, *args, **kwargs):
        outputs.append([type(v.act).__name__ for v in get_adapter(model).blocks()])
        return Trainer(model, *args, **kwargs)

    settings = dict(SETTINGS, max_attention=0, max_activation=0, interleaved_rounds=1, order="activation-first")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(collect, "Trainer", recording)
        points, _ = _collect(data, _tiny(depth=1), settings, output_gelu=output_gelu)
    assert [(p["attention_removed"], p["activation_removed"]) for p in points] == [([], []), ([], [0]), ([0], [0])]
    # Activation 0 goes, then attention 0: block 0 has neither.
    assert outputs == [["Identity"], ["GELU" if output_gelu else "Identity"]]
