"""Token pruning on blocks whose attention is HiAP's ``VariableHeadAttention``: uneven value widths, narrow uniform
widths, and blocks with no head left (which cannot prune)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tracked

import vitprune
from vitprune.adapters.timm_blocks import DepthBlock, VariableHeadAttention, attention_with_signal
from vitprune.adapters.tokens import TokenState
from vitprune.consistency import check_consistency
from vitprune.measure import count_macs
from vitprune.surgery import prune_attention_dims, prune_depth, prune_tokens, set_token_prior, token_pruning_blocks

#: Block -> (kept heads, value dims kept per head; ``None``: the whole head). Block 1 keeps no head.
LAYOUT = {0: ([0, 2], [[1, 5, 7], None]), 1: ([], []), 2: ([0, 1, 2], [[0, 2, 4]] * 3), 4: ([1], [[3, 13]])}
#: The blocks of LAYOUT that keep heads (the others of the 6 are timm's Attention).
HEADED = [0, 2, 3, 4, 5]


def _variable(name: str, kwargs: dict) -> torch.nn.Module:
    """A 6-block model with uneven (0), headless (1), uniformly narrowed (2) and single narrow-head (4) attention."""
    kwargs = {**kwargs, "depth": 6}
    model = tracked(name, kwargs)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # timm starts biases at 0, which would make the headless branch vanish
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    head_dim = vitprune.get_adapter(model).block(0).attn.head_dim
    for block, (heads, dims) in LAYOUT.items():
        prune_attention_dims(model, block, heads, [list(range(head_dim)) if d is None else d for d in dims])
    return model


def _images(model, n=2, seed=0):
    return torch.randn(n, *vitprune.get_adapter(model).input_size, generator=torch.Generator().manual_seed(seed))


def test_variable_head_model_has_the_block_forms_under_test():
    model = _variable("deit_tiny_patch16_224", {})
    attns = [b.attn for b in model.blocks]
    assert [type(a).__name__ for a in attns] == ["VariableHeadAttention"] * 3 + ["Attention",
                                                                                "VariableHeadAttention", "Attention"]
    assert [attns[i].value_dims for i in (0, 1, 2, 4)] == [[3, 64], [], [3, 3, 3], [2]]
    assert isinstance(model.blocks[1], DepthBlock)  # a headless attention is a constant the block skips


@pytest.mark.needs("token_reduction", "value_width")
def test_keep_all_on_variable_heads_is_the_identity(small_model_spec):
    model = _variable(*small_model_spec)
    x = _images(model)
    with torch.no_grad():
        dense = model(x)
        for block in HEADED:
            prune_tokens(model, block, 1.0, alpha=0.15)
        torch.testing.assert_close(model(x), dense, rtol=1e-5, atol=1e-5)
    assert sorted(token_pruning_blocks(model)) == HEADED


def _by_hand(attn: VariableHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """``softmax(q_cls · k_j / sqrt(head_dim))`` over keys ``j``, per head, straight from qkv's rows."""
    qkv = x @ attn.qkv.weight.T + attn.qkv.bias
    rows = []
    for h in range(attn.num_heads):
        q = qkv[:, 0, h * attn.head_dim:(h + 1) * attn.head_dim]
        start = (attn.num_heads + h) * attn.head_dim
        k = qkv[:, :, start:start + attn.head_dim]
        rows.append(torch.einsum("bd,bnd->bn", q, k).div(math.sqrt(attn.head_dim)).softmax(dim=-1))
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("block", [0, 2, 4], ids=["uneven", "uniform-narrow", "one-head"])
def test_cls_row_of_variable_heads_is_the_cls_querys_softmax(block):
    attn = _variable("deit_tiny_patch16_224", {}).blocks[block].attn
    x = torch.randn(2, 30, attn.qkv.in_features, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out, row = attention_with_signal(attn, x, "cls_row")
        torch.testing.assert_close(row, _by_hand(attn, x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out, attn(x), rtol=0, atol=0)  # the same fused path as the plain forward
        # a-STAR padding: the last 7 tokens of image 0 and the last 3 of image 1 are padding, never attended.
        real = [23, 27]
        mask = torch.arange(30) < torch.tensor(real)[:, None]
        bias = TokenState(valid=mask[:, 1:]).key_bias(x)  # the [CLS] token is the prefix
        out, row = attention_with_signal(attn, x, "cls_row", bias)
        for i, n in enumerate(real):
            assert torch.all(row[i, :, n:] == 0)
            torch.testing.assert_close(row[i:i + 1, :, :n], _by_hand(attn, x[i:i + 1, :n]), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(out[i:i + 1, :n], attn(x[i:i + 1, :n]), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(out[i:i + 1, :n], attn(x[i:i + 1], attn_mask=mask[i:i + 1, None, None]
                                                              )[:, :n], rtol=1e-5, atol=1e-6)


def test_a_headless_block_cannot_prune_tokens():
    model = _variable("deit_tiny_patch16_224", {})
    with pytest.raises(ValueError, match=r"blocks\.1 has no attention head left, so no \[CLS\] attention or keys "
                                         r"to reduce its tokens by"):
        prune_tokens(model, 1, 0.5)
    with pytest.raises(ValueError, match="no attention head left"):  # nor at keep-all: there is nothing to score
        prune_tokens(model, 1, 1.0)
    with pytest.raises(ValueError, match="an attention without heads has no"):
        attention_with_signal(model.blocks[1].attn, torch.randn(1, 5, model.embed_dim), "cls_row")
    assert token_pruning_blocks(model) == {} and vitprune.get_recipe(model).edits[-1].op == "prune_attention_dims"
    prune_depth(model, attention=[3])  # attention removed by depth pruning: the same reason
    with pytest.raises(ValueError, match=r"blocks\.3 has no attention head left"):
        prune_tokens(model, 3, 0.5)


def _a_star(name="deit_small_distilled_patch16_224"):
    """a-STAR in blocks 0, 2 and 4 (variable heads) and 3 (timm's); 5 runs masked attention over the padding."""
    model = _variable(name, {})
    patches = vitprune.get_adapter(model).num_patches
    for block in (0, 2, 3, 4):
        prune_tokens(model, block, 0.8, alpha=0.5, adaptive=True)
        set_token_prior(model, block, torch.linspace(0.5, 1.5, patches).roll(block * 7))
    return model


def test_a_star_batch_with_variable_heads_gives_each_image_its_own_output():
    model = _a_star()
    x = _images(model, n=3, seed=4)
    counts = {}
    hooks = [b.register_forward_hook(lambda m, a, out, i=i: counts.__setitem__(i, out[1].valid.sum(1).tolist()))
             for i, b in token_pruning_blocks(model).items()]
    with torch.no_grad():
        batched = model(x)
        for h in hooks:
            h.remove()
        alone = torch.cat([model(x[i:i + 1]) for i in range(3)])
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-4)
    # The images kept different numbers of tokens in block 2, so blocks 3 to 5 ran over padding.
    assert len(set(counts[2])) > 1, counts
    # In training mode the headless attention and the later variable-head block run on the padding mask too.
    with torch.no_grad():
        torch.testing.assert_close(model.train()(x), batched, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_token_pruned_variable_heads_count_and_stay_consistent(tmp_path):
    """Static STAR below keep-all: ceil(rate · n) tokens leave each block; MACs = FlopCounterMode (with the value
    padding), save/load is exact, the recipe rebuilds the model, ONNX agrees."""
    model = _variable("deit_tiny_patch16_224", {})
    rates = {0: 0.7, 2: 0.55, 4: 0.9}
    for block, rate in rates.items():
        prune_tokens(model, block, rate, alpha=1.0)
    tokens, n = [b.tokens for b in count_macs(model).blocks], 196
    expected = []
    for block in range(6):
        expected.append(1 + n)
        n = math.ceil(rates.get(block, 1.0) * n)
    assert tokens == expected == [197, 139, 139, 77, 77, 70]
    report = check_consistency(model, directory=tmp_path)
    assert report.ok, report.to_dict()
    assert report.macs_padding > 0
    assert report.onnx_max_diff is not None


def test_a_star_on_variable_heads_counts_macs_on_the_padded_batch(tmp_path):
    report = check_consistency(_a_star("deit_tiny_patch16_224"), directory=tmp_path)
    assert report.ok, report.to_dict()
    assert report.onnx_skipped == "blocks.0 keeps a per-image number of tokens (a-STAR)"


def test_a_block_with_an_output_activation_still_cannot_prune_tokens():
    model = _variable("deit_tiny_patch16_224", {})
    vitprune.get_adapter(model).set_output_activation(0, torch.nn.GELU())  # HetDPT's compatibility option
    with pytest.raises(ValueError, match=r"blocks\.0: token reduction needs timm's Block with ungated attention"):
        prune_tokens(model, 0, 0.5)
