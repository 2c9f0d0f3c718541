"""The timm block forms that surgery leaves behind where timm's ``Block`` cannot express the result:
blocks without attention (depth pruning), blocks with a sublayer that has no unit left (width
pruning down to zero) and blocks that run a token operation (token pruning or merging)."""

from __future__ import annotations

import torch
from timm.layers import Attention, Mlp
from timm.models.vision_transformer import Block
from torch import nn

from vitprune.adapters.heads import attend, merge_heads, split_heads
from vitprune.adapters.tokens import TokenHost, TokenOp, TokenState, attention_signal, run_token_blocks


class DepthBlock(nn.Module):
    """timm's pre-norm ``Block`` whose attention may be gone, followed by an output activation.

    Without attention (``attn is None``) the attention branch is either gone too (``norm1 is
    None``: ``x`` passes through) or reduced to ``x + drop_path1(ls1(norm1(x)))``, the reference
    HetDPT code's reading of "identity". ``act`` runs on the block output: ``nn.Identity`` unless
    the reference code's compatibility option put an activation there. Submodule names are
    ``Block``'s, so the state-dict keys of the surviving parts do not change.

    A sublayer with no unit left (an MLP without hidden neurons, an attention without heads) gives
    its output bias for every token; in eval mode the block adds that constant without running the
    sublayer or the norm before it (:func:`constant_output`).
    """

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.norm1, self.attn, self.ls1, self.drop_path1 = block.norm1, block.attn, block.ls1, block.drop_path1
        self.norm2, self.mlp, self.ls2, self.drop_path2 = block.norm2, block.mlp, block.ls2, block.drop_path2
        self.act = nn.Identity()
        self.train(block.training)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if self.attn is not None:
            out = constant_output(self.attn, self.training)
            if out is None:
                out = self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)
            x = x + self.drop_path1(self.ls1(out))
        elif self.norm1 is not None:
            x = x + self.drop_path1(self.ls1(self.norm1(x)))
        x = x + self.drop_path2(self.ls2(mlp_branch(self, x)))
        return self.act(x)


def constant_output(sublayer: nn.Module, training: bool = False) -> torch.Tensor | None:
    """The output of a sublayer that has no unit left, ``(D,)`` for every token: its output Linear's bias.

    ``None`` when ``sublayer`` has units left, or in ``training`` mode (where dropout would act on
    the broadcast output, so the sublayer must run). Such a sublayer's output does not depend on
    its input, so the block may skip the sublayer and the norm before it: at width 48 that norm and
    the empty matmuls cost as much as a small FFN.
    """
    if training:
        return None
    if isinstance(sublayer, Mlp) and isinstance(sublayer.fc2, nn.Linear) and sublayer.fc2.in_features == 0:
        linear = sublayer.fc2
    elif isinstance(sublayer, VariableHeadAttention) and sublayer.num_heads == 0:
        linear = sublayer.proj
    else:
        return None
    if linear.bias is None:
        return linear.weight.new_zeros(linear.out_features)
    # A copy: an in-place LayerScale must not scale the parameter itself.
    return linear.bias.clone()


def mlp_branch(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``mlp(norm2(x))`` of a pre-norm block, or its :func:`constant_output` without running either."""
    out = constant_output(block.mlp, block.training)
    return block.mlp(block.norm2(x)) if out is None else out


class VariableHeadAttention(nn.Module):
    """Self-attention whose heads share one query/key width but keep their own number of value dimensions.

    What HiAP's extraction leaves: ``qkv`` holds the kept heads' queries and keys (``head_dim`` each)
    and then their kept value dimensions, head by head; ``proj`` takes the concatenated values. The
    scale stays the original ``head_dim**-0.5``. With no head left the branch is ``proj``'s bias alone.

    All heads go through one fused ``scaled_dot_product_attention`` call: each head's values are
    zero-padded to the query width (the fused CPU and GPU kernels need equal widths; with narrower
    values PyTorch falls back to a kernel 2-4x slower on CPU) and cut back after. That wastes
    ``N²·(H·D_h − Σ widths)`` MACs of ``A·V``, which the MAC count leaves out, but is faster than a
    per-head loop of small unfused matmuls. Padding by head (``F.pad``, then slicing) rather than
    by scattering into index slots costs a third as much on CPU. An attention mask (a-STAR's padding)
    goes to the same kernel.
    """

    def __init__(self, attn: Attention, qkv: nn.Linear, proj: nn.Linear, value_dims: list[int]) -> None:
        super().__init__()
        self.qkv, self.proj = qkv, proj
        self.q_norm, self.k_norm = attn.q_norm, attn.k_norm
        self.attn_drop, self.proj_drop = attn.attn_drop, attn.proj_drop
        self.num_heads, self.head_dim, self.scale = len(value_dims), attn.head_dim, attn.scale
        self.value_dims = list(value_dims)
        if qkv.out_features != 2 * self.num_heads * self.head_dim + sum(value_dims) or \
                proj.in_features != sum(value_dims):
            raise ValueError(f"projections do not fit {self.num_heads} heads of query/key width {self.head_dim} "
                             f"and value widths {value_dims}")

    @property
    def attn_dim(self) -> int:
        """Width of the concatenated values (the input width of ``proj``)."""
        return sum(self.value_dims)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        """timm ``Attention``'s forward; ``attn_mask`` as timm takes it (additive, or boolean: ``True`` where a key
        may be attended to)."""
        if self.num_heads == 0:
            b, n, _ = x.shape
            return self.proj_drop(self.proj(x.new_zeros(b, n, 0)))
        return self._attend(*self._heads(x), attn_mask, is_causal)

    def forward_with_signal(self, x: torch.Tensor, reads: str,
                            key_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The output and what a token operation ``reads``, as :func:`attention_with_signal`."""
        if self.num_heads == 0:
            raise ValueError("an attention without heads has no [CLS] attention row or keys")
        q, k, v = self._heads(x)
        return self._attend(q, k, v, key_bias), attention_signal(reads, q, k, self.scale, key_bias)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Normed queries and keys and the zero-padded values, each ``(B, H, N, head_dim)``."""
        b, n, _ = x.shape
        heads, hd = self.num_heads, self.head_dim
        qkv = self.qkv(x)
        q, k = qkv[..., :2 * heads * hd].reshape(b, n, 2, heads, hd).permute(2, 0, 3, 1, 4)
        return self.q_norm(q), self.k_norm(k), split_heads(qkv[..., 2 * heads * hd:], self.value_dims, hd)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """All heads in one fused kernel, cut back to their value widths, then ``proj``."""
        out = attend(q, k, v, scale=self.scale, bias=attn_mask, is_causal=is_causal,
                     dropout=self.attn_drop.p if self.training else 0.0)
        return self.proj_drop(self.proj(merge_heads(out, self.value_dims)))


def attention_with_signal(attn: Attention | VariableHeadAttention, x: torch.Tensor, reads: str,
                          key_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention's output and what a token operation ``reads`` of it
    (:func:`~vitprune.adapters.tokens.attention_signal`: the [CLS] row or the keys).

    The output takes the attention's own path (timm's fused scaled-dot-product attention when
    enabled); ``key_bias`` ``(B, 1, 1, N)`` adds to the logits (padding, token sizes).
    """
    if isinstance(attn, VariableHeadAttention):
        return attn.forward_with_signal(x, reads, key_bias)
    b, n, _ = x.shape
    q, k, v = attn.qkv(x).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    signal = attention_signal(reads, q, k, attn.scale, key_bias)
    if attn.fused_attn:
        out = attend(q, k, v, bias=key_bias, dropout=attn.attn_drop.p if attn.training else 0.0)
    else:
        scores = (q * attn.scale) @ k.transpose(-2, -1)
        if key_bias is not None:
            scores = scores + key_bias
        out = attn.attn_drop(scores.softmax(dim=-1)) @ v
    out = attn.norm(out.transpose(1, 2).reshape(b, n, attn.attn_dim))
    return attn.proj_drop(attn.proj(out)), signal


class TokenBlock(TokenHost):
    """timm's pre-norm ``Block`` that runs a token operation (its ``tokens``) between its attention and its MLP.

    The attention is timm's or a :class:`VariableHeadAttention` with at least one head. The other submodule names
    are ``Block``'s, so their state-dict keys do not change.
    """

    def __init__(self, block: Block, op: TokenOp) -> None:
        super().__init__()
        self.norm1, self.attn, self.ls1, self.drop_path1 = block.norm1, block.attn, block.ls1, block.drop_path1
        self.norm2, self.mlp, self.ls2, self.drop_path2 = block.norm2, block.mlp, block.ls2, block.drop_path2
        self.tokens = op
        self.train(block.training)

    def forward(self, x: torch.Tensor, state: TokenState) -> tuple[torch.Tensor, TokenState]:
        out, signal = attention_with_signal(self.attn, self.norm1(x), self.tokens.reads, state.key_bias(x))
        x = x + self.drop_path1(self.ls1(out))
        x, state = self.tokens(x, state, signal)
        x = x + self.drop_path2(self.ls2(mlp_branch(self, x)))
        return x, state


class TokenBlocks(nn.Sequential):
    """The block sequence of a token-reduced ViT: hands what each token operation left (original positions, real
    slots, token sizes) from block to block."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_token_blocks(self, x, run_block)


def run_block(block: nn.Module, x: torch.Tensor, key_bias: torch.Tensor | None) -> torch.Tensor:
    """A timm block on tokens whose attention logits take ``key_bias`` ``(B, 1, 1, N)`` (padding, token sizes)."""
    return block(x) if key_bias is None else block(x, attn_mask=key_bias)
