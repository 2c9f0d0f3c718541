"""Adapter for timm's ``ConvNeXt`` (VBP's Table 8): no attention, no tokens, one MLP per block.

A ConvNeXt block is ``x + γ · mlp(norm(conv_dw(x)))`` on channels-last features, so its view is a block whose
attention branch is gone (``attn``, ``norm1`` and ``ls1`` are ``None``): ``norm2`` is the block's LayerNorm,
``ls2`` its per-channel ``γ``. The depthwise convolution before the norm is outside the view; no method edits it.
What such a family can have done to it: FFN width (VBP's neuron pruning, with the mean shift folded into fc2's bias
before γ), activation removal with the exact merge (γ folded into the merged Linear), and gates (on activations;
HiAP's on FFN blocks and neurons). The stream changes width
stage by stage, and there are no tokens or heads: every other edit is refused in one line.

The 1×1-convolution MLP (``conv_mlp=True``: a channels-first LayerNorm2d, then 1×1 convolutions) is the Linear MLP on
channels-last features in another layout: :meth:`ConvNeXtAdapter.prepare` (which the model factory runs) rewrites it
so, with the same weights, and a checkpoint in the convolutional layout loads into it. ConvNeXt-V2's global response
norm, which makes the mean shift inexact, is refused.
"""

from __future__ import annotations


import torch
from timm.layers import LayerNorm2d, Mlp
from timm.models.convnext import ConvNeXt, ConvNeXtBlock
from torch import nn

from vitprune.adapters.base import ActivationRemoval, BlockView, FFNWidth, Gates, InputResize, MlpView
from vitprune.adapters.channels import reject, unwrap
from vitprune.adapters.timm_staged import TimmStagedAdapter
from vitprune.adapters.timm_vit import check_mlp, merge_mlp_linear


def _pointwise_linear(conv: nn.Conv2d) -> nn.Linear:
    """The Linear a 1x1 convolution is on channels-last features (same weights)."""
    linear = nn.Linear(conv.in_channels, conv.out_channels, bias=conv.bias is not None, device=conv.weight.device,
                       dtype=conv.weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.detach().flatten(1))
        if conv.bias is not None:
            linear.bias.copy_(conv.bias.detach())
    return linear.train(conv.training)


def _is_pointwise(module: nn.Module) -> bool:
    return type(module) is nn.Conv2d and module.kernel_size == (1, 1) and module.stride == (1, 1) \
        and module.groups == 1 and module.padding in ((0, 0), "valid")


def _channels_last_mlp(block: ConvNeXtBlock) -> None:
    """Run a block's 1x1-convolution MLP as timm's channels-last path does: LayerNorm, then Linears."""
    norm, mlp = block.norm, block.mlp
    if type(norm) is not LayerNorm2d or type(mlp) is not Mlp or not (_is_pointwise(mlp.fc1) and _is_pointwise(mlp.fc2)):
        return  # not the form this rewrites; the adapter refuses it in one line
    # LayerNorm2d permutes to channels-last around F.layer_norm: the same normalisation as nn.LayerNorm there.
    new = nn.LayerNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=norm.elementwise_affine,
                       bias=norm.bias is not None, device=norm.weight.device, dtype=norm.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(norm.weight.detach())
        if norm.bias is not None:
            new.bias.copy_(norm.bias.detach())
    block.norm = new.train(norm.training)
    mlp.fc1, mlp.fc2 = _pointwise_linear(mlp.fc1), _pointwise_linear(mlp.fc2)
    block.use_conv_mlp = False


class LayerScaleView(nn.Module):
    """A block's per-channel ``γ`` (a parameter of the block itself) shown as the LayerScale module views carry."""

    def __init__(self, gamma: nn.Parameter) -> None:
        super().__init__()
        self.gamma = gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class ConvNeXtAdapter(TimmStagedAdapter, ActivationRemoval, FFNWidth, Gates, InputResize):
    """timm ``ConvNeXt`` whose blocks are ``ConvNeXtBlock`` with timm's channels-last Linear MLP."""

    family = "timm-convnext"
    family_modules = ("timm.models.convnext", "vitprune.adapters.timm_convnext")
    family_attributes = frozenset({"stages", "conv_dw", "use_conv_mlp", "norm_pre"})
    stages_attribute = "stages"

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        for view_name, block in self._blocks():
            if type(block) is not ConvNeXtBlock:
                raise reject(view_name, block, "only timm's ConvNeXtBlock is supported")
            if block.use_conv_mlp:
                raise reject(f"{view_name}.mlp", block.mlp, "the 1x1-convolution MLP (conv_mlp=True) is edited as "
                                                            "the Linear MLP it equals: build the model with "
                                                            "vitprune.create_model, or call "
                                                            "vitprune.adapters.prepare_model(model) first")
            if type(block.mlp) is not Mlp:
                raise reject(f"{view_name}.mlp", block.mlp, "ConvNeXt-V2's global response norm normalises over the "
                                                            "positions, so removed neurons' means cannot be folded "
                                                            "exactly; only the plain MLP is supported")
            check_mlp(f"{view_name}.mlp", block.mlp)
            if not isinstance(block.shortcut, nn.Identity):
                raise reject(view_name, block, "a block that changes width or stride is not supported")

    def set_input_size(self, height: int, width: int) -> None:
        # A convolutional network has no grid to resample: any size its stride tiles runs with the same weights.
        self._check_size(height, width)
        self._record_size(height, width)

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return isinstance(model, ConvNeXt)

    @classmethod
    def prepare(cls, model: nn.Module) -> None:
        for stage in model.stages:
            for block in stage.blocks:
                if type(block) is ConvNeXtBlock and block.use_conv_mlp:
                    _channels_last_mlp(block)

    def checkpoint_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # A conv-MLP checkpoint's 1x1 kernels (out, in, 1, 1) are the prepared Linears' (out, in) weights.
        own = self.model.state_dict()
        return {key: value.flatten(1) if value.dim() == 4 and key in own and own[key].dim() == 2
                and value.shape[2:] == (1, 1) else value for key, value in state.items()}

    def blocks(self) -> list[BlockView]:
        views = []
        for index, (name, block) in enumerate(self._blocks()):
            m = block.mlp
            act, act_gate = unwrap(m.act)
            views.append(BlockView(
                index=index, name=name, module=block, norm1=None, attn=None, ls1=None, drop_path1=None,
                norm2=block.norm,
                mlp=MlpView(module=m, fc1=m.fc1, act=act, fc2=m.fc2 if isinstance(m.fc2, nn.Linear) else None,
                            gate=act_gate),
                ls2=LayerScaleView(block.gamma) if block.gamma is not None else nn.Identity(),
                drop_path2=block.drop_path, act=nn.Identity()))
        return views

    def block_tokens(self, x: torch.Tensor) -> int:
        return x.shape[-2] * x.shape[-1]  # channels-first (B, C, H, W)

    @property
    def stem(self) -> nn.Module:
        return self.model.stem[0]

    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        _, block = self._block(index)
        merge_mlp_linear(block.mlp, linear)
        block.gamma = None  # inside `linear` now

    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        if position != 2:
            raise ValueError(f"block {index} has only the norm before its MLP (position 2), not position {position}")
        self._block(index)[1].norm = norm
