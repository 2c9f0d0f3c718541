"""Multiply-accumulate and parameter counts, measured on a real forward pass.

One dummy forward with hooks records what each layer actually receives, so the count follows the
model as it is now: pruned heads, narrowed or merged MLPs and per-block token counts (after token
pruning) all show up without the counter knowing how they were produced. MACs are then computed
analytically from the recorded shapes. The ``tp`` convention is torch-pruning's own counter,
``count_ops_and_params``, run on the same model: what papers measured with it print.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from vitprune.adapters import BlockView, ViTAdapter, get_adapter
from vitprune.errors import VitpruneError
from vitprune.measure.config import CONVENTIONS, format_count

#: The independent count :func:`flop_counter_macs` makes, as reports name it.
FLOP_COUNTER_REFERENCE = "torch FlopCounterMode, attention on the math backend"

_CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass
class BlockMacs:
    """MACs per image of one transformer block, with the structure that produced them."""

    index: int
    #: Tokens entering the block (the positions of a convolutional block's feature map).
    tokens: int
    heads: int
    #: ``None`` where the MLP was removed or merged into one Linear.
    mlp_hidden: int | None
    attn_linear: int = 0
    attn_matmul: int = 0
    mlp: int = 0
    #: torch-pruning's count of the whole block; ``None`` unless counted in the ``tp`` convention.
    tp: int | None = None

    def total(self, convention: str = "full") -> int:
        """MACs of this block under ``convention``."""
        if convention == "tp":
            if self.tp is None:
                raise VitpruneError(f"block {self.index} was not counted in the tp convention")
            return self.tp
        matmul = self.attn_matmul if convention == "full" else 0
        return self.attn_linear + matmul + self.mlp


@dataclass
class MacReport:
    """Result of :func:`count_macs`; all MAC figures are per image."""

    params: int
    trainable_params: int
    convention: str
    input_size: tuple[int, int, int]
    batch_size: int
    blocks: list[BlockMacs] = field(default_factory=list)
    #: MACs of layers outside the blocks (patch embedding, classifier heads), by module name.
    other: dict[str, int] = field(default_factory=dict)
    #: torch-pruning's total; ``None`` unless counted in the ``tp`` convention.
    tp_macs: int | None = None

    @property
    def macs(self) -> int:
        """Total MACs per image under :attr:`convention`."""
        if self.convention == "tp":
            return self.tp_macs
        return self.linear_macs + (self.attn_matmul_macs if self.convention == "full" else 0)

    @property
    def linear_macs(self) -> int:
        """MACs of all linear and conv layers."""
        return sum(b.attn_linear + b.mlp for b in self.blocks) + sum(self.other.values())

    @property
    def attn_matmul_macs(self) -> int:
        """MACs of the attention matmuls (QK^T and A.V) of all blocks."""
        return sum(b.attn_matmul for b in self.blocks)

    def totals(self) -> dict[str, int]:
        """Parameters and MACs per image in the full and linear conventions, whichever convention this report
        shows, and in the tp convention where it was counted in it (``macs_tp``)."""
        totals = {"params": self.params, "macs_full": self.linear_macs + self.attn_matmul_macs,
                  "macs_linear": self.linear_macs}
        return totals if self.tp_macs is None else {**totals, "macs_tp": self.tp_macs}

    @property
    def convention_description(self) -> str:
        """What :attr:`macs` includes, in words."""
        return CONVENTIONS[self.convention]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``macs`` follows ``convention``, the full convention's two components are given
        separately, ``tp_macs`` is ``None`` unless counted in the tp convention."""
        return {
            "macs": self.macs,
            "params": self.params,
            "trainable_params": self.trainable_params,
            "convention": self.convention,
            "convention_description": self.convention_description,
            "input_size": list(self.input_size),
            "batch_size": self.batch_size,
            "linear_macs": self.linear_macs,
            "attn_matmul_macs": self.attn_matmul_macs,
            "tp_macs": self.tp_macs,
            "blocks": [asdict(b) for b in self.blocks],
            "other": dict(self.other),
        }

    def summary(self) -> str:
        """A short human-readable report that names its convention."""
        c, h, w = self.input_size
        lines = [
            (f"MACs ({self.convention}: {self.convention_description}): {format_count(self.macs)} per image "
             f"at {c}x{h}x{w}"),
            f"params: {format_count(self.params)} ({format_count(self.trainable_params)} trainable)",
            (f"{'block':>5} {'tokens':>6} {'heads':>5} {'mlp_hidden':>10} {'attn_linear':>11} "
             f"{'attn_matmul':>11} {'mlp':>9}"),
        ]
        for b in self.blocks:
            hidden = "-" if b.mlp_hidden is None else str(b.mlp_hidden)
            lines.append(f"{b.index:>5} {b.tokens:>6} {b.heads:>5} {hidden:>10} {format_count(b.attn_linear):>11} "
                         f"{format_count(b.attn_matmul):>11} {format_count(b.mlp):>9}")
        lines += [f"other {name}: {format_count(macs)}" for name, macs in self.other.items()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def count_macs(model: nn.Module, *, input_size: tuple[int, int, int] | None = None, batch_size: int = 1,
               convention: str = "full", image: torch.Tensor | None = None) -> MacReport:
    """Count multiply-accumulates per image and parameters of a supported ViT.

    Linear layers count ``tokens * in * out``, conv layers ``output positions * k * k * Cin/groups *
    Cout``, and (``convention="full"``) each attention ``2 * heads * N^2 * head_dim`` for QK^T and
    A.V, with ``N`` the tokens that actually enter that block's attention. ``convention="linear"``
    leaves the attention matmuls out, as many paper tables do. Biases, norms, activations, softmax
    and residual additions are counted in neither of the two. ``convention="tp"`` reports what
    ``torch_pruning.utils.count_ops_and_params`` returns for one image (see :func:`tp_macs`), with
    each block's share; the per-block breakdown of the other conventions is given as well.

    The model is run once in eval mode, without gradients, on a random input of ``input_size``
    (default: the model's own); its training mode is restored afterwards. ``image`` ``(C, H, W)``
    replaces the random input (batch 1): a model whose cost depends on its input, such as a-STAR's
    adaptive token pruning, is counted on that image.
    """
    if convention not in CONVENTIONS:
        raise VitpruneError(f"unknown MAC convention {convention!r} (choose from: {', '.join(CONVENTIONS)})")
    if batch_size < 1:
        raise VitpruneError(f"batch size must be at least 1, got {batch_size}")
    adapter = get_adapter(model)
    if image is not None:
        input_size, batch_size = tuple(image.shape), 1
    size = resolve_input_size(model, input_size)
    x = image[None] if image is not None else torch.randn(batch_size, *size, generator=torch.Generator().manual_seed(0))
    blocks, other = _trace(model, adapter, x)
    tp_total = None
    if convention == "tp":
        tp_total, per_module = _tp_count(model, x[:1])
        for block, view in zip(blocks, adapter.blocks(), strict=True):
            block.tp = per_module[view.module]
    return MacReport(
        params=sum(p.numel() for p in model.parameters()),
        trainable_params=sum(p.numel() for p in model.parameters() if p.requires_grad),
        convention=convention,
        input_size=size,
        batch_size=batch_size,
        blocks=blocks,
        other=other,
        tp_macs=tp_total,
    )


def resolve_input_size(model: nn.Module, input_size: tuple[int, ...] | None = None) -> tuple[int, int, int]:
    """``input_size`` checked to be (channels, height, width); if ``None``, the model's own from its adapter."""
    size = tuple(input_size) if input_size is not None else get_adapter(model).input_size
    if len(size) != 3 or any(s < 1 for s in size):
        raise VitpruneError(f"input size must be (channels, height, width) of positive ints, got {size}")
    return size


def _first_tensor(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))


def _layer_macs(module: nn.Module, output: torch.Tensor) -> int:
    # Counting from the output covers any leading batch/token dims: each output element is one dot product.
    if isinstance(module, nn.Linear):
        return output.numel() * module.in_features
    return output.numel() * math.prod(module.kernel_size) * (module.in_channels // module.groups)


def _trace(model: nn.Module, adapter: ViTAdapter, x: torch.Tensor) -> tuple[list[BlockMacs], dict[str, int]]:
    """Run one forward; per-image MACs of each block and of each compute layer outside the blocks."""
    views = adapter.blocks()
    blocks = [BlockMacs(index=v.index, tokens=0, heads=v.attn.num_heads if v.attn else 0,
                        mlp_hidden=v.mlp.hidden_features if v.mlp else None) for v in views]
    other: dict[str, int] = {}
    # Where each compute layer's MACs go: (block, field), or its name under "other". Attention wins
    # over the rest of its block; anything else inside a block (MLP, a merged MLP Linear) is "mlp".
    targets: dict[nn.Module, tuple[BlockMacs, str] | str] = {}
    for block, view in zip(blocks, views, strict=True):
        targets.update({m: (block, "mlp") for m in view.module.modules() if _is_compute(m)})
        if view.attn is not None:
            targets.update({m: (block, "attn_linear") for m in view.attn.module.modules() if _is_compute(m)})
    for name, m in model.named_modules():
        if _is_compute(m) and m not in targets:
            targets[m] = name

    # Hooks accumulate batch totals; they are divided by the batch size at the end.
    def layer_hook(module: nn.Module, _args: tuple, output: torch.Tensor) -> None:
        target, macs = targets[module], _layer_macs(module, output)
        if isinstance(target, str):
            other[target] = other.get(target, 0) + macs
        else:
            setattr(target[0], target[1], getattr(target[0], target[1]) + macs)

    def block_hook(block: BlockMacs):
        def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            block.tokens = adapter.block_tokens(_first_tensor(args, kwargs))
        return hook

    # On the projections' input, not the attention module's: a token-reducing block runs the attention
    # through its submodules (to read the [CLS] row or the keys too), but every path projects the tokens that attend.
    # QK^T costs N^2 per query/key dimension, A.V N^2 per value dimension (heads may differ in value
    # width after HiAP); a block's token operation adds what it scores with (STAR's [CLS] row, ToMe's matching).
    # Window attention (Swin) projects (windows·B, N, C): N tokens per window, attending within it.
    def attn_hook(block: BlockMacs, view: BlockView):
        attn, op = view.attn, view.token_op
        qk_width, v_width = attn.num_heads * attn.head_dim, attn.attn_dim

        def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            x = _first_tensor(args, kwargs)
            tokens = x.shape[1]
            scoring = 0 if op is None else op.scoring_macs(tokens, attn.num_heads, attn.head_dim)
            block.attn_matmul += (tokens * tokens * (qk_width + v_width) + scoring) * x.shape[0]
        return hook

    handles = [m.register_forward_hook(layer_hook) for m in targets]
    for block, view in zip(blocks, views, strict=True):
        handles.append(view.module.register_forward_pre_hook(block_hook(block), with_kwargs=True))
        if view.attn is not None:
            handles.append(view.attn.qkv.linears[0].register_forward_pre_hook(attn_hook(block, view),
                                                                               with_kwargs=True))
    param, batch_size = next(model.parameters()), x.shape[0]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(x.to(device=param.device, dtype=param.dtype))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    for b in blocks:
        b.attn_linear, b.attn_matmul, b.mlp = (v // batch_size for v in (b.attn_linear, b.attn_matmul, b.mlp))
    return blocks, {name: macs // batch_size for name, macs in other.items()}


def _is_compute(module: nn.Module) -> bool:
    return isinstance(module, (nn.Linear, *_CONV_TYPES))


def tp_macs(model: nn.Module, x: torch.Tensor) -> int:
    """MACs per image that torch-pruning's ``count_ops_and_params`` counts in one forward of ``x``.

    Its hooks, picked by each module's exact type, count Linear and conv layers with their biases
    (a Linear's bias once per call, not per token), ``nn.LayerNorm`` (not timm's subclass), GELU,
    and, for timm's ViT and Swin attention modules only, the whole attention with its QK^T, A.V,
    softmax and scaling; it counts the Linear layers inside an attention module it has no hook for.
    Its per-image figure divides by the batch, so pass one image for one image's figure. A model
    with token-pruning blocks is refused: their attention module is not called, so torch-pruning
    counts nothing for it (nor for the Linear layers it holds).
    """
    return _tp_count(model, x)[0]


def _tp_count(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[nn.Module, int]]:
    """torch-pruning's total per image for ``x`` and its count of every module it reached, per image."""
    try:
        from torch_pruning.utils import count_ops_and_params
    except ImportError:
        raise VitpruneError("the tp convention counts with torch-pruning: pip install 'vitprune[width]'") from None
    reducing = [v.index for v in get_adapter(model).blocks() if v.token_op is not None]
    if reducing:
        raise VitpruneError(f"torch-pruning cannot count token-reducing blocks (here {reducing}): it would count none "
                            "of their attention, whose module they run part by part; use the full or linear convention")
    param = next(model.parameters())
    macs, _, per_module, _ = count_ops_and_params(model, x.to(device=param.device, dtype=param.dtype),
                                                  layer_wise=True)
    batch = x.shape[0]
    return round(macs), {m: round(v / batch) for m, v in per_module.items() if v is not None}


def value_padding_macs(model: nn.Module, *, image: torch.Tensor | None = None) -> int:
    """A·V MACs per image that uneven heads run on zero padding: kernels see them, :func:`count_macs` does not.

    HiAP's uneven heads pad each head's values to the query width so that one fused kernel runs
    all heads; that is ``N² · (heads · head_dim − Σ value widths)`` per block, with ``N`` the tokens
    entering it (on ``image``, as :func:`count_macs`). With :func:`count_macs` it accounts for
    everything ``torch.utils.flop_counter.FlopCounterMode`` sees.
    """
    tokens = {b.index: b.tokens for b in count_macs(model, image=image).blocks}
    return sum(tokens[v.index] ** 2 * (v.attn.num_heads * v.attn.head_dim - v.attn.attn_dim)
               for v in get_adapter(model).blocks() if v.attn is not None and v.attn.value_dims is not None)


def flop_counter_macs(model: nn.Module, x: torch.Tensor) -> int:
    """MACs (FLOPs / 2) that ``torch.utils.flop_counter.FlopCounterMode`` counts in one forward of ``x``.

    Attention runs on the math backend while counting: FlopCounterMode only counts a fused attention
    kernel its torch version has a formula for, and counts nothing for one it lacks (torch 2.14 has
    none for the CPU flash kernel), while the math backend computes the same attention as plain
    matrix products that every version counts. The result is independent of :func:`count_macs`.
    """
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return counter.get_total_flops() // 2
