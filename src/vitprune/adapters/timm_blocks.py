"""The timm block forms that surgery leaves behind where timm's ``Block`` cannot express the result:
blocks without attention (depth pruning), blocks with a sublayer that has no unit left (width
pruning down to zero) and blocks that drop patch tokens (token pruning)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import Attention, Mlp
from timm.models.vision_transformer import Block
from torch import nn

from vitprune.adapters.heads import merge_heads, split_heads
from vitprune.adapters.tokens import TokenSelection, cls_attention_row, run_token_blocks


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
        """timm ``Attention``'s forward; a boolean ``attn_mask`` is ``True`` where a key may be attended to."""
        if self.num_heads == 0:
            b, n, _ = x.shape
            return self.proj_drop(self.proj(x.new_zeros(b, n, 0)))
        return self._attend(*self._heads(x), attn_mask, is_causal)

    def forward_with_cls_row(self, x: torch.Tensor,
                             key_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The output and the [CLS] row, as :func:`attention_with_cls_row` (``key_mask``: ``False`` at padding)."""
        if self.num_heads == 0:
            raise ValueError("an attention without heads has no [CLS] attention row")
        q, k, v = self._heads(x)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        return self._attend(q, k, v, mask), cls_attention_row(q, k, self.scale, key_mask)

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
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=self.scale,
                                             dropout_p=self.attn_drop.p if self.training else 0.0)
        return self.proj_drop(self.proj(merge_heads(out, self.value_dims)))


def attention_with_cls_row(attn: Attention | VariableHeadAttention, x: torch.Tensor,
                           key_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention's output and the first ([CLS]) token's attention probabilities over all tokens, ``(B, H, N)``.

    The output takes the attention's own path (timm's fused scaled-dot-product attention when
    enabled); the [CLS] row is :func:`cls_attention_row`. ``key_mask`` ``(B, N)`` marks the tokens
    that may be attended to (padding is ``False``).
    """
    if isinstance(attn, VariableHeadAttention):
        return attn.forward_with_cls_row(x, key_mask)
    b, n, _ = x.shape
    q, k, v = attn.qkv(x).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    mask = None if key_mask is None else key_mask[:, None, None, :]
    cls_row = cls_attention_row(q, k, attn.scale, key_mask)
    if attn.fused_attn:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=attn.attn_drop.p if attn.training else 0.0)
    else:
        scores = (q * attn.scale) @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = attn.attn_drop(scores.softmax(dim=-1)) @ v
    out = attn.norm(out.transpose(1, 2).reshape(b, n, attn.attn_dim))
    return attn.proj_drop(attn.proj(out)), cls_row


class TokenPruneBlock(TokenSelection):
    """timm's pre-norm ``Block`` that keeps the prefix tokens and the top-scoring patch tokens before its MLP
    (:class:`~vitprune.adapters.tokens.TokenSelection` says which).

    The attention is timm's or a :class:`VariableHeadAttention` with at least one head. Submodule
    names are ``Block``'s, so state-dict keys do not change.
    """

    def __init__(self, block: Block, *, num_prefix_tokens: int, num_patches: int, keep_rate: float = 1.0,
                 alpha: float = 1.0, adaptive: bool = False) -> None:
        super().__init__(num_prefix_tokens=num_prefix_tokens, num_patches=num_patches, keep_rate=keep_rate,
                         alpha=alpha, adaptive=adaptive)
        self.norm1, self.attn, self.ls1, self.drop_path1 = block.norm1, block.attn, block.ls1, block.drop_path1
        self.norm2, self.mlp, self.ls2, self.drop_path2 = block.norm2, block.mlp, block.ls2, block.drop_path2
        self.train(block.training)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None,
                valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(tokens, positions, valid)`` after the block.

        ``positions`` ``(B, n)`` are the patch tokens' original indices; ``valid`` ``(B, n)`` marks
        the real ones where an adaptive block left padding (``None``: all real).
        """
        out, cls_row = attention_with_cls_row(self.attn, self.norm1(x), self.key_mask(x, valid))
        x = x + self.drop_path1(self.ls1(out))
        x, positions, valid = self.select(x, positions, valid, cls_row)
        x = x + self.drop_path2(self.ls2(mlp_branch(self, x)))
        return x, positions, valid


class TokenBlocks(nn.Sequential):
    """The block sequence of a token-pruned ViT: hands each patch token's original position (and, after an
    adaptive block, which slots are real) from block to block."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_token_blocks(self, x, run_block)


def run_block(block: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """A timm block on tokens where ``mask`` ``(B, N)`` is ``False`` at padding no token may attend to."""
    return block(x) if mask is None else block(x, attn_mask=mask[:, None, None, :])
