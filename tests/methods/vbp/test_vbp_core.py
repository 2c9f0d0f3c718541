"""VBP core: exact streaming statistics, global selection, and mean-shift compensation equal to mean replacement."""

from __future__ import annotations

import copy
import textwrap

import pytest
import torch
from conftest import run_torchrun, tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.measure import count_macs
from vitprune.methods.vbp import mlp_statistics, prune_by_selection, select_neurons


def _model(name="deit_tiny_patch16_224", kwargs=None):
    kwargs = kwargs or {}
    return tracked(name, kwargs)


def _images(model, n=6, seed=3):
    torch.manual_seed(seed)
    return torch.randn(n, *vitprune.get_adapter(model).input_size)


def _batches(images, size):
    return [(images[i:i + size], torch.zeros(len(images[i:i + size]), dtype=torch.long))
            for i in range(0, len(images), size)]


def _captured(model, batches, place="post"):
    """Every hidden activation of every MLP, all tokens flattened, in one tensor per block (the two-pass reference),
    from the same batches (a convolution's kernel, hence its last bits, may depend on the batch size)."""
    seen = {}
    hooks = []
    views = vitprune.get_adapter(model).blocks()
    for block in views:
        if place == "post":
            hooks.append(block.mlp.fc2.register_forward_pre_hook(
                lambda m, a, b=block: seen.setdefault(id(b), []).append(a[0].reshape(-1, a[0].shape[-1]))))
        else:
            hooks.append(block.mlp.fc1.register_forward_hook(
                lambda m, a, o, b=block: seen.setdefault(id(b), []).append(o.reshape(-1, o.shape[-1]))))
    with torch.no_grad():
        for images, _ in batches:
            model.eval()(images)
    for h in hooks:
        h.remove()
    return [torch.cat(seen[id(b)]).double() for b in views]


@pytest.mark.parametrize("place", ["post", "pre"])
@pytest.mark.parametrize("batch", [1, 4, 6])
def test_statistics_equal_a_two_pass_float64_reference(small_model_spec, place, batch):
    name, kwargs = small_model_spec
    model = _model(name, kwargs)
    images = _images(model)
    batches = _batches(images, batch)
    stats = mlp_statistics(model, batches, place=place)
    for index, acts in enumerate(_captured(model, batches, place)):
        assert stats[index].count == acts.shape[0]  # every token of every image is a sample
        torch.testing.assert_close(stats[index].mean, acts.mean(0), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(stats[index].var, acts.var(0, unbiased=True), rtol=1e-9, atol=1e-12)


def test_compensated_pruning_equals_mean_replacement(small_model_spec):
    name, kwargs = small_model_spec
    model = _model(name, kwargs)
    images = _images(model)
    stats = mlp_statistics(model, _batches(images, 3))
    removed = select_neurons({b: s.var for b, s in stats.items()}, 0.5)
    reference = copy.deepcopy(model)

    def replace(block):
        gone = torch.tensor(removed[block], dtype=torch.long)

        def hook(_m, args):
            h = args[0].clone()
            h[..., gone] = stats[block].mean[gone].to(h.dtype)
            return (h,)
        return hook

    for block in removed:
        vitprune.get_adapter(reference).block(block).mlp.fc2.register_forward_pre_hook(replace(block))
    prune_by_selection(model, removed, stats)
    x = _images(model, n=2, seed=9)
    with torch.no_grad():
        assert (model(x) - reference(x)).abs().max().item() <= 1e-5
    hidden = sum(v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks())
    assert hidden == sum(v.mlp.hidden_features for v in vitprune.get_adapter(reference).blocks()) // 2


def test_zero_variance_neuron_is_removed_without_any_change():
    model = _model()
    with torch.no_grad():  # neuron 7 of block 3: fc1 row zero, so GELU(b1) is the same constant for every token
        model.blocks[3].mlp.fc1.weight[7] = 0
    images = _images(model)
    stats = mlp_statistics(model, _batches(images, 2))
    assert stats[3].var[7].item() == 0
    removed = select_neurons({b: s.var for b, s in stats.items()}, 1 / 9216)
    assert removed[3] == [7] and sum(map(len, removed.values())) == 1
    x = _images(model, n=2, seed=9)
    with torch.no_grad():
        before = model(x)
    prune_by_selection(model, removed, stats)
    with torch.no_grad():
        assert (model(x) - before).abs().max().item() <= 1e-5


def test_a_layer_can_lose_every_neuron_and_still_work(tmp_path):
    model = _model()
    scores = {b: torch.ones(768) for b in range(12)}
    scores[5] = torch.zeros(768)  # block 5 goes entirely
    images = _images(model)
    stats = mlp_statistics(model, _batches(images, 3))
    removed = select_neurons(scores, 768 / 9216)
    assert removed[5] == list(range(768)) and all(not removed[b] for b in range(12) if b != 5)
    x = _images(model, n=2, seed=9)
    prune_by_selection(model, removed, stats)
    mlp = model.blocks[5].mlp
    assert mlp.fc1.out_features == 0 and vitprune.get_adapter(model).block(5).mlp.hidden_features == 0
    with torch.no_grad():
        out = model(x)
        # The MLP now outputs its (compensated) fc2 bias for every token.
        torch.testing.assert_close(mlp(torch.randn(2, 7, 192)), mlp.fc2.bias.expand(2, 7, 192))
    assert count_macs(model).blocks[5].mlp == 0
    vitprune.save(model, tmp_path / "zero")
    with torch.no_grad():
        assert torch.equal(vitprune.load(tmp_path / "zero")(x), out)


def test_min_width_and_bad_ratios():
    scores = {0: torch.tensor([0.0, 1.0, 2.0]), 1: torch.tensor([0.5, 3.0])}
    assert select_neurons(scores, 0.6) == {0: [0, 1], 1: [0]}  # ceil(0.6 * 5) = 3, globally lowest
    assert select_neurons(scores, 0.4, min_width=1) == {0: [0], 1: [0]}
    with pytest.raises(VitpruneError, match="cannot remove 80% of the neurons while keeping 1 per MLP"):
        select_neurons(scores, 0.8, min_width=1)
    assert select_neurons({0: torch.arange(10.0)}, 0.7) == {0: list(range(7))}  # 0.7 * 10 is not 7.000000000000001
    with pytest.raises(VitpruneError, match="between 0 and 1"):
        select_neurons(scores, 1.5)
    assert select_neurons(scores, 0.5, rounding="floor") == {0: [0], 1: [0]}


# Paper Table 1 (ImageNet, 224px): params after VBP with ceil(p * total) neurons removed (note section 7).
PAPER_ROWS = [
    ("deit_tiny_patch16_224", 0.45, 4.12e6, 0.94e9),
    ("deit_small_patch16_224", 0.50, 14.96e6, 3.21e9),
    ("deit_base_patch16_224", 0.55, 55.40e6, 11.45e9),
    ("deit_base_patch16_224", 0.20, 75.24e6, 15.35e9),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, ratio, params, macs", PAPER_ROWS, ids=["T45", "S50", "B55", "B20"])
def test_paper_table1_params_and_macs(name, ratio, params, macs):
    model = _model(name)
    dense = count_macs(model)
    dim = vitprune.get_adapter(model).embed_dim
    hidden = {v.index: v.mlp.hidden_features for v in vitprune.get_adapter(model).blocks()}
    torch.manual_seed(0)
    removed = select_neurons({b: torch.rand(h) for b, h in hidden.items()}, ratio)
    count = sum(map(len, removed.values()))
    assert count == -(-round(ratio * sum(hidden.values()) * 1e6) // 10**6)  # ceil(p * total)
    prune_by_selection(model, removed)
    report = count_macs(model)
    assert dense.params - report.params == count * (2 * dim + 1)
    assert dense.macs - report.macs == count * 197 * 2 * dim
    assert round(report.params / 1e6, 2) == round(params / 1e6, 2)
    # Full convention. The paper's dense DeiT-B is 17.58 G where this counter (checked against torch's
    # FlopCounterMode) gives 17.56 G, so its pruned DeiT-B rows sit 0.02 G above ours.
    assert abs(report.macs / 1e9 - macs / 1e9) <= 0.025


_WORKER = textwrap.dedent('''
    import sys
    import torch
    import vitprune
    from vitprune.data import DigitsDataset
    from vitprune.methods.vbp import mlp_statistics
    from vitprune.training.distributed import init_distributed, shutdown_distributed

    ctx = init_distributed("cpu")
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    data = DigitsDataset("train")
    # Unequal shards, so the merge must weight the ranks by their sample counts.
    shard = slice(0, 13) if ctx.rank == 0 else slice(13, 40)
    stats = mlp_statistics(model, [(data.images[shard], data.labels[shard])], dist=ctx)
    single = mlp_statistics(model, [(data.images[:40], data.labels[:40])]) if ctx.is_main else None
    torch.save({"stats": {b: (s.count, s.mean, s.var) for b, s in stats.items()},
                "single": None if single is None else {b: (s.count, s.mean, s.var) for b, s in single.items()}},
               f"{sys.argv[1]}.{ctx.rank}")
    shutdown_distributed()
''')


@pytest.mark.slow
def test_statistics_are_merged_across_ranks(tmp_path):
    script = tmp_path / "vbp_worker.py"
    script.write_text(_WORKER)
    run_torchrun(script, str(tmp_path / "out"), timeout=180)
    ranks = [torch.load(tmp_path / f"out.{rank}") for rank in (0, 1)]
    single = ranks[0]["single"]
    for result in ranks:
        for block, (count, mean, var) in result["stats"].items():
            assert count == single[block][0]
            torch.testing.assert_close(mean, single[block][1], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(var, single[block][2], rtol=1e-10, atol=1e-12)
