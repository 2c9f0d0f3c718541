"""VBP's baselines: magnitude, SNIP, random, pre-activation variance, each scoring every hidden neuron."""

from __future__ import annotations

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.methods.vbp import CRITERIA, mlp_statistics, neuron_scores, snip_scores


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {}
    return tracked(name, kwargs)


def _batches(model, n=6, size=3, seed=3):
    torch.manual_seed(seed)
    images = torch.randn(n, *vitprune.get_adapter(model).input_size)
    labels = torch.randint(0, 10, (n,))
    return [(images[i:i + size], labels[i:i + size]) for i in range(0, n, size)]


def test_magnitude_is_the_norm_of_each_neurons_parameters(small_model_spec):
    model = _model(*small_model_spec)
    scores = neuron_scores(model, "magnitude")
    for view in vitprune.get_adapter(model).blocks():
        mlp, got = view.mlp, scores[view.index]
        expected = torch.cat([mlp.fc1.weight, mlp.fc1.bias[:, None], mlp.fc2.weight.T], dim=1).double().norm(dim=1)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


def test_random_scores_follow_the_seed():
    model = _model()
    first, again, other = (neuron_scores(model, "random", seed=s) for s in (0, 0, 1))
    assert all(torch.equal(first[b], again[b]) for b in first)
    assert not torch.equal(first[0], other[0])
    assert all(len(first[v.index]) == v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks())


def test_snip_is_the_gate_gradient_and_ignores_the_batch_split(small_model_spec):
    model = _model(*small_model_spec)
    batches = _batches(model)
    # Reference: dL/dh * h summed over every token, with h captured where it enters fc2.
    seen = []
    hooks = [b.mlp.fc2.register_forward_pre_hook(lambda m, a: seen.append(a[0]) or a[0].retain_grad())
             for b in vitprune.get_adapter(model).blocks()]
    model.eval()
    images = torch.cat([x for x, _ in batches])
    labels = torch.cat([y for _, y in batches])
    torch.nn.functional.cross_entropy(model(images), labels, reduction="sum").backward()
    for h in hooks:
        h.remove()
    # Every position of every image is a sample: tokens (B, N, C), or a channels-last feature map (B, H, W, C).
    reference = [(h.grad * h).reshape(-1, h.shape[-1]).sum(dim=0).abs().double() for h in seen]
    model.zero_grad(set_to_none=True)
    model.train()

    split = snip_scores(model, batches)
    whole = snip_scores(model, [(images, labels)])
    for index, expected in enumerate(reference):
        torch.testing.assert_close(split[index], expected, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(split[index], whole[index], rtol=1e-4, atol=1e-6)
    assert model.training  # mode restored
    assert all(p.grad is None for p in model.parameters())  # the weights got no gradient
    assert not any(m._forward_pre_hooks for m in model.modules())  # gates removed


def test_variance_criteria_come_from_the_statistics():
    model = _model()
    batches = _batches(model)
    post = mlp_statistics(model, batches)
    given = neuron_scores(model, "variance", stats=post)
    computed = neuron_scores(model, "variance", batches)
    pre = neuron_scores(model, "pre-variance", batches)
    expected_pre = mlp_statistics(model, batches, place="pre")
    for index, stats in post.items():
        assert torch.equal(given[index], stats.var)
        assert torch.equal(computed[index], stats.var)
        assert torch.equal(pre[index], expected_pre[index].var)
        assert not torch.equal(pre[index], stats.var)


def test_the_mean_criterion_is_the_absolute_post_activation_mean():
    model = _model()
    batches = _batches(model)
    post = mlp_statistics(model, batches)
    given = neuron_scores(model, "mean", stats=post)
    computed = neuron_scores(model, "mean", batches)
    for index, stats in post.items():
        assert torch.equal(given[index], stats.mean.abs())
        assert torch.equal(computed[index], stats.mean.abs())
        assert not torch.equal(given[index].argsort(), stats.var.argsort())  # not the variance's ranking


def test_criterion_mistakes():
    model = _model()
    assert set(CRITERIA) == {"variance", "pre-variance", "mean", "magnitude", "snip", "random"}
    with pytest.raises(VitpruneError, match="unknown criterion 'l1'"):
        neuron_scores(model, "l1")
    with pytest.raises(VitpruneError, match="the snip criterion needs data"):
        neuron_scores(model, "snip")
    with pytest.raises(VitpruneError, match="max_batches must be at least 1"):
        snip_scores(model, _batches(model), max_batches=0)
