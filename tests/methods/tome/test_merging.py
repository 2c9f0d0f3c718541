"""ToMe's token merging (``merge_tokens``): the merge re-derived by hand, r = 0 is the dense model, token counts and
MACs per r as the implementation note finds them, and the MAC counter equal to FlopCounterMode."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import safetensors.torch
import torch
from conftest import HF_TINY, tracked

import vitprune
from vitprune.adapters.tokens import TokenState
from vitprune.measure import count_macs, flop_counter_macs
from vitprune.methods.tome import TokenMerging, merge_tokens
from vitprune.surgery import prune_tokens, token_ops

#: The note's example (§6.1): one head, five tokens of one channel, t0 the [CLS] token. A = (t0, t2, t4), B = (t1, t3);
#: t4's keys are most like t1's (cosine 0.995), t2's like t3's (0.707).
KEYS = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.1]])[None, None]
X = torch.tensor([10.0, 1.0, 2.0, 3.0, 4.0])[None, :, None]


def _merge(r: int, prefix: int = 1, size: torch.Tensor | None = None):
    out, state = TokenMerging(num_prefix_tokens=prefix, r=r)(X, TokenState(size=size), KEYS)
    return out[0, :, 0].tolist(), state.size[0].tolist()


def test_the_merge_is_the_size_weighted_mean_of_the_most_similar_pairs():
    assert _merge(0) == ([10, 1, 2, 3, 4], [1, 1, 1, 1, 1])
    assert _merge(1) == ([10, 2, 2.5, 3], [1, 1, 2, 1])  # t4 into t1; A's stayers (t0, t2), then B
    assert _merge(2) == ([10, 2.5, 2.5], [1, 2, 2])  # t2 into t3 as well
    assert _merge(3) == _merge(2)  # at most half the non-prefix tokens
    # Sizes weigh the mean: t4 (size 1, value 4) into t1 of size 2 gives (2·1 + 4) / 3.
    assert _merge(1, size=torch.tensor([[1.0, 2.0, 1.0, 1.0, 1.0]])) == ([10, 2, 2.0, 3], [1, 1, 3, 1])
    # A distillation token (t1) neither merges nor takes a token; t4 goes to t3; the prefix leads.
    assert _merge(1, prefix=2) == ([10, 1, 2, 3.5], [1, 1, 1, 2])


def test_proportional_attention_is_attention_over_duplicated_keys():
    """log(size) on a key's logit is that key and value repeated size times."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=gen) for n in (4, 3, 3))
    size = torch.tensor([[1.0, 3.0, 2.0]])
    bias = TokenState(size=size, proportional=True).key_bias(torch.zeros(1, 3, 8))
    weighted = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    repeats = torch.tensor([1, 3, 2])
    repeated = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(repeats, dim=2),
                                                                v.repeat_interleave(repeats, dim=2))
    torch.testing.assert_close(weighted, repeated, rtol=1e-5, atol=1e-6)


@pytest.mark.needs("token_reduction")
@pytest.mark.parametrize("proportional", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_merging_nothing_is_the_dense_model(small_model_spec, proportional):
    model = tracked(*small_model_spec)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        dense = model.eval()(x)
        for block in range(len(vitprune.get_adapter(model).blocks())):
            merge_tokens(model, block, 0, proportional=proportional)
        torch.testing.assert_close(model(x), dense, rtol=1e-5, atol=1e-5)
    assert len(token_ops(model)) == len(vitprune.get_adapter(model).blocks())


def _tome(name: str, r: int, kwargs: dict | None = None) -> torch.nn.Module:
    model = tracked(name, kwargs or {})
    for block in range(len(vitprune.get_adapter(model).blocks())):
        merge_tokens(model, block, r)
    return model


def test_tokens_per_block_follow_r_to_the_cap():
    counts = count_macs(_tome("deit_tiny_patch16_224", 16)).blocks
    assert [b.tokens for b in counts] == [197 - 16 * i for i in range(12)]  # the last block leaves 21 - 10 = 11
    distilled = count_macs(_tome("deit_tiny_distilled_patch16_224", 7)).blocks
    assert [b.tokens for b in distilled] == [198 - 7 * i for i in range(12)]  # 198 -> ... -> 121 -> 114


@pytest.mark.parametrize("name, r, full, linear", [
    # The note's §2 table, DeiT-S: full with the matching matmuls, and linear.
    ("deit_small_patch16_224", 7, 3.566e9, 3.325e9),
    ("deit_small_patch16_224", 16, 2.294e9, 2.153e9),
])
def test_macs_per_r_are_the_notes(name, r, full, linear):
    totals = count_macs(_tome(name, r)).totals()
    assert totals["macs_full"] == pytest.approx(full, abs=1e6) and totals["macs_linear"] == pytest.approx(linear,
                                                                                                          abs=1e6)


@pytest.mark.needs("token_reduction")
def test_macs_of_a_merging_model_equal_flop_counter(small_model_spec):
    name, kwargs = small_model_spec
    model = _tome(name, 2, kwargs)
    x = torch.randn(1, *vitprune.get_adapter(model).input_size)
    assert count_macs(model).macs == flop_counter_macs(model.eval(), x)


def test_an_image_merges_alike_alone_and_in_a_batch():
    model = _tome("deit_tiny_patch16_224", 8).eval()
    x = torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[1:2], model(x[1:2]), rtol=1e-4, atol=1e-5)


def test_merging_saves_and_loads(tmp_path):
    model = _tome("deit_tiny_patch16_224", 5)
    merge_tokens(model, 3, 9, proportional=False)  # again: the block's settings change
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        out = model.eval()(x)
    vitprune.save(model, tmp_path / "m")
    loaded = vitprune.load(tmp_path / "m")
    assert {i: (op.r, op.proportional) for i, op in token_ops(loaded).items()} == \
        {i: (9, False) if i == 3 else (5, True) for i in range(12)}
    with torch.no_grad():
        assert torch.equal(loaded(x), out)


@pytest.mark.slow  # a fresh interpreter (about 6 s)
def test_a_saved_merging_model_loads_where_tome_was_never_imported(tmp_path):
    """ToMe's operation and edit live in its folder; the edit's entry point (``vitprune.edits``) is what a fresh
    process that imports nothing of ToMe replays the recipe by, to the same outputs."""
    model = _tome("deit_tiny_patch16_224", 5)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        safetensors.torch.save_file({"x": x, "y": model.eval()(x)}, tmp_path / "io.safetensors")
    vitprune.save(model, tmp_path / "m")
    script = textwrap.dedent("""
        import sys
        import safetensors.torch, torch, vitprune
        assert "vitprune.methods.tome.merging" not in sys.modules
        model = vitprune.load(sys.argv[1] + "/m")
        io = safetensors.torch.load_file(sys.argv[1] + "/io.safetensors")
        with torch.no_grad():
            assert torch.equal(model(io["x"]), io["y"])
        print(type(model.blocks[0].tokens).__module__)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["vitprune.methods.tome.merging"]


def test_one_model_prunes_or_merges_tokens_not_both():
    model = tracked("deit_tiny_patch16_224", {})
    prune_tokens(model, 2, 0.5)
    with pytest.raises(ValueError, match="block 2 already prunes tokens; one model prunes or merges tokens, not both"):
        merge_tokens(model, 4, 8)
    with pytest.raises(ValueError, match=r"r \(tokens merged per block\) must be at least 0, got -1"):
        merge_tokens(tracked("deit_tiny_patch16_224", {}), 0, -1)
    with pytest.raises(ValueError, match="head pools over every token, which would count a merged token as one"):
        merge_tokens(tracked("vit_base_patch16_gap_224", {"img_size": 32, "depth": 2}), 0, 2)


@pytest.mark.slow  # an export (15 s); timm's blocks export in tests/test_consistency.py's depth-tome chain
def test_a_merging_transformers_model_exports_to_onnx(tmp_path):
    from vitprune.export import export_onnx

    report = export_onnx(_tome("hf:ViTForImageClassification", 3, HF_TINY), tmp_path / "tome.onnx")
    assert report.max_abs_diff <= 1e-4


def test_a_merged_token_has_no_place_on_the_feature_map():
    from vitprune.errors import VitpruneError

    model = _tome("deit_tiny_patch16_224", 4, {"img_size": 64})
    with pytest.raises(VitpruneError, match=r"blocks \[0, 1, .*\] merge tokens, which then stand for no one patch "
                                            r"position: a feature map needs a model without token merging"):
        vitprune.get_adapter(model).intermediates(torch.randn(1, 3, 64, 64))


def _by_definition(model: torch.nn.Module, image: torch.Tensor, merges: dict[int, int]) -> torch.Tensor:
    """timm ViT logits for one image with ToMe's merges, written from the algorithm's definition with none of
    vitprune's code: sizes as lists, proportional attention as attention over keys and values repeated size times,
    the matching as loops over the A tokens."""
    m = model
    tokens = m.norm_pre(m._pos_embed(m.patch_embed(image[None])))[0]
    sizes = [1] * len(tokens)
    for index, block in enumerate(m.blocks):
        attn = block.attn
        n, heads, d = len(tokens), attn.num_heads, attn.head_dim
        q, k, v = attn.qkv(block.norm1(tokens)).reshape(n, 3, heads, d).permute(1, 2, 0, 3)
        repeats = torch.tensor(sizes)
        weights = (q @ k.repeat_interleave(repeats, dim=1).transpose(-2, -1) * d ** -0.5).softmax(-1)
        out = (weights @ v.repeat_interleave(repeats, dim=1)).transpose(0, 1).reshape(n, heads * d)
        tokens = tokens + block.ls1(attn.proj(out))
        r = min(merges.get(index, 0), (n - 1) // 2)
        if r:
            keys = k.mean(dim=0)
            a_side, b_side = list(range(0, n, 2)), list(range(1, n, 2))
            edges = []
            for i in a_side[1:]:  # the [CLS] token (position 0) never merges
                cosines = [float(torch.cosine_similarity(keys[i], keys[j], dim=0)) for j in b_side]
                best = max(range(len(b_side)), key=lambda c: (cosines[c], -c))
                edges.append((-cosines[best], i, b_side[best]))
            merged = sorted(edges)[:r]  # most similar first, ties to the earlier token
            gone = {i for _, i, _ in merged}
            groups = {j: [j] for j in b_side}
            for _, i, j in merged:
                groups[j].append(i)
            kept = [i for i in a_side if i not in gone] + b_side
            new_sizes = [sizes[i] if i not in groups else sum(sizes[g] for g in groups[i]) for i in kept]
            tokens = torch.stack([tokens[i] if i not in groups else
                                  sum(sizes[g] * tokens[g] for g in groups[i]) / new_sizes[c]
                                  for c, i in enumerate(kept)])
            sizes = new_sizes
        tokens = tokens + block.ls2(block.mlp(block.norm2(tokens)))
    return m.head(m.norm(tokens)[0])


def test_the_merged_model_is_tome_by_its_definition():
    torch.manual_seed(0)
    dense = vitprune.create_model("deit_tiny_patch16_224", img_size=64, pretrained=False)
    merges = {1: 3, 2: 2, 5: 4, 9: 2}
    model = copy.deepcopy(dense)
    for block, r in merges.items():
        merge_tokens(model, block, r)
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        merged = model.eval()(images)
        expected = torch.stack([_by_definition(dense.eval(), image, merges) for image in images])
    torch.testing.assert_close(merged, expected, rtol=1e-5, atol=1e-5)
