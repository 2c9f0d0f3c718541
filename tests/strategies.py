"""Hypothesis strategies for property tests: random small ViTs and random sequences of vitprune's edits.

Models are the digits ViT's architecture at random sizes (built through ``create_model``, so their
recipes rebuild them), with non-zero biases and perturbed norms so that no bias or affine path hides.
Edits are drawn one at a time from those that apply to the model as it is, so every sequence is one
a user could make; token pruning comes last, as a chain must order it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import vitprune
from vitprune.surgery import (prune_attention_dims, prune_depth, prune_embed_dims, prune_head_dims, prune_heads,
                              prune_mlp_neurons, prune_tokens, set_token_prior)

#: Examples per property: a few in the fast lane, many more in the slow one.
EXAMPLES = [pytest.param(20, id="fast"), pytest.param(300, id="thorough", marks=pytest.mark.slow)]


def property_test(examples: int, strategy: st.SearchStrategy):
    """Decorate a check of one drawn value as a Hypothesis test of ``examples`` examples."""
    def wrap(check):
        return settings(max_examples=examples)(given(strategy)(check))
    return wrap


@st.composite
def small_vits(draw, class_token: bool = False) -> nn.Module:
    """A randomly initialised ViT of 1-3 blocks: 1-3 heads of width 4 or 8, 2x2 to 6x6 patches, MLP ratio 1-4,
    a class token (always, with ``class_token``) or average pooling, 0-2 register tokens, LayerScale or not."""
    heads, head_dim, patch, grid = (draw(st.integers(1, 3)), draw(st.sampled_from([4, 8])),
                                    draw(st.sampled_from([4, 8])), draw(st.integers(2, 6)))
    pool = draw(st.sampled_from(["token", "avg"] if class_token else ["token", "avg", "avg-no-class"]))
    kwargs = dict(embed_dim=heads * head_dim, num_heads=heads, depth=draw(st.integers(1, 3)), patch_size=patch,
                  img_size=patch * grid, mlp_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
                  global_pool="token" if pool == "token" else "avg", class_token=pool != "avg-no-class",
                  reg_tokens=draw(st.integers(0, 2)), init_values=draw(st.sampled_from([None, 0.5])))
    torch.manual_seed(draw(st.integers(0, 2**16)))
    model = vitprune.create_model("digits-vit", **kwargs)
    with torch.no_grad():  # timm starts biases at 0 and norms at 1, which would hide the bias and affine paths
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif "norm" in name or "gamma" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def _subset(draw, n: int, *, min_size: int = 0) -> list[int]:
    return sorted(draw(st.sets(st.integers(0, n - 1), min_size=min_size, max_size=n))) if n else []


def _uniform(view) -> bool:
    return view.attn is not None and view.attn.value_dims is None and view.attn.gate is None


def _edits(model: nn.Module) -> dict:
    """The width and depth edits that apply to ``model`` now: name -> the blocks they apply to."""
    views = vitprune.get_adapter(model).blocks()
    return {
        "attention": [v.index for v in views if v.attn is not None],
        "activation": [v.index for v in views if v.mlp.has_activation],
        "heads": [v.index for v in views if _uniform(v)],
        "head_dims": [v.index for v in views if _uniform(v)],
        "value_dims": [v.index for v in views if _uniform(v)],
        "neurons": [v.index for v in views if not v.mlp.merged and v.mlp.hidden_features > 0],
        "embed": [0],
    }


def headed_blocks(model: nn.Module) -> list[int]:
    """The blocks that still have an attention head, so can rank tokens by their [CLS] attention."""
    return [v.index for v in vitprune.get_adapter(model).blocks() if v.attn is not None and v.attn.num_heads]


def draw_edits(draw, model: nn.Module, *, steps: int = 4, tokens: bool = True) -> list[str]:
    """Apply up to ``steps`` random depth and width edits to ``model``, then (``tokens``) token pruning on random
    blocks that still have a head; returns what was applied, for the failure report."""
    applied = []
    for _ in range(draw(st.integers(0, steps))):
        choices = {name: blocks for name, blocks in _edits(model).items() if blocks}
        name = draw(st.sampled_from(sorted(choices)))
        block = draw(st.sampled_from(choices[name]))
        attn = vitprune.get_adapter(model).block(block).attn
        if name == "attention":
            prune_depth(model, attention=[block], identity=draw(st.sampled_from(["norm", "skip"])))
        elif name == "activation":
            prune_depth(model, activation=[block], fold_norm=draw(st.booleans()))
        elif name == "heads":
            prune_heads(model, block, _subset(draw, attn.num_heads, min_size=1))
        elif name == "head_dims":
            prune_head_dims(model, block, _subset(draw, attn.head_dim, min_size=1))
        elif name == "value_dims":
            heads = _subset(draw, attn.num_heads)
            prune_attention_dims(model, block, heads, [_subset(draw, attn.head_dim, min_size=1) for _ in heads])
        elif name == "neurons":
            hidden = vitprune.get_adapter(model).block(block).mlp.hidden_features
            prune_mlp_neurons(model, block, _subset(draw, hidden))
        else:
            prune_embed_dims(model, _subset(draw, vitprune.get_adapter(model).embed_dim, min_size=1))
        applied.append(f"{name}@{block}")
    if tokens and model.cls_token is not None:  # token pruning ranks by the [CLS] attention
        headed = headed_blocks(model)
        patches = vitprune.get_adapter(model).num_patches
        for block in _subset(draw, len(headed)):
            rate = draw(st.floats(0.2, 1.0))
            prune_tokens(model, headed[block], rate, alpha=draw(st.floats(0.0, 1.0)), adaptive=draw(st.booleans()))
            # A per-position prior, as STAR's LRP pass installs: with the default ones, alpha would not matter.
            prior = torch.tensor(draw(st.lists(st.floats(0.01, 1.0), min_size=patches, max_size=patches)))
            set_token_prior(model, headed[block], prior)
            applied.append(f"tokens@{headed[block]}:{rate:.3f}")
    return applied


def images(model: nn.Module, batch: int = 2, seed: int = 0) -> torch.Tensor:
    """A batch of random images of the model's input size."""
    size = vitprune.get_adapter(model).input_size
    return torch.randn(batch, *size, generator=torch.Generator().manual_seed(seed))
