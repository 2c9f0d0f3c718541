"""Helpers every adapter uses to check modules, to install edited parts and to cut channels out of the residual
stream."""

from __future__ import annotations

import torch
from torch import nn

from vitprune.errors import UnsupportedArchitectureError
from vitprune.layers import Gate, GatedLayer


def reject(path: str, module: nn.Module, why: str) -> UnsupportedArchitectureError:
    """The one-line error for a module at ``path`` that an adapter cannot handle."""
    return UnsupportedArchitectureError(f"unsupported architecture: {path} is {type(module).__name__} ({why})")


def unwrap(module: nn.Module | None) -> tuple[nn.Module | None, Gate | None]:
    """The layer inside a gate, and the gate (``None`` for an ungated layer)."""
    if isinstance(module, GatedLayer):
        return module.inner, module.gate
    return module, None


def parameters_named(owner: nn.Module, names: tuple[str, ...]) -> list[nn.Parameter]:
    """The parameters ``owner`` has among ``names``, in that order (a missing or ``None`` one is left out)."""
    params = (getattr(owner, name, None) for name in names)
    return [p for p in params if isinstance(p, nn.Parameter)]


def linear_modules(*modules: nn.Module | None) -> list[nn.Module]:
    """The ``modules`` that are ``nn.Linear``, in order (a classifier's heads, without identities and ``None``)."""
    return [m for m in modules if isinstance(m, nn.Linear)]


def set_mlp_linears(mlp: nn.Module, path: str, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
    """Install new linears in the ``fc1 → activation → fc2`` MLP at ``path`` (timm's ``Mlp``, transformers' ViT MLP;
    ``fc2=None``: the single Linear of a merged one, whose ``fc2`` is an identity)."""
    merged = isinstance(mlp.fc2, nn.Identity)
    if (fc2 is None) != merged:
        raise ValueError(f"{path}: " + ("is merged, so it takes a single Linear" if merged else
                                        "is not merged; merge it with merge_mlp"))
    if fc2 is not None and fc1.out_features != fc2.in_features:
        raise ValueError(f"{path}: fc1 gives {fc1.out_features} features, fc2 takes {fc2.in_features}")
    mlp.fc1 = fc1
    if fc2 is not None:
        mlp.fc2 = fc2


def set_prenorm(path: str, block: nn.Module, position: int, norm: nn.Module,
                names: tuple[str, str] = ("norm1", "norm2")) -> None:
    """Install ``norm`` as the first (``position=1``) or second of ``names`` of the pre-norm block at ``path``, which
    must have that norm (a removed attention may have left none)."""
    if position not in (1, 2):
        raise ValueError(f"norm position must be 1 or 2, got {position}")
    name = names[position - 1]
    if getattr(block, name) is None:
        raise ValueError(f"{path} has no {name}")
    setattr(block, name, norm)


def slice_head_inputs(heads: list[nn.Module], keep: list[int]) -> None:
    """Make the classifier ``heads`` (linears) read only embedding channels ``keep``."""
    for head in heads:
        slice_parameter(head, "weight", 1, keep)
        head.in_features = len(keep)


def keep_channels(tensor: torch.Tensor, dim: int, keep: list[int]) -> torch.Tensor:
    """The slices ``keep`` of ``tensor`` along ``dim`` (detached)."""
    return tensor.detach().index_select(dim, torch.as_tensor(keep, dtype=torch.long, device=tensor.device))


def slice_parameter(owner: nn.Module, name: str, dim: int, keep: list[int]) -> None:
    """Replace ``owner.<name>`` by its slices ``keep`` along ``dim``; absent or ``None`` is left alone."""
    param = getattr(owner, name, None)
    if param is not None:
        setattr(owner, name, nn.Parameter(keep_channels(param, dim, keep), requires_grad=param.requires_grad))


def slice_norm(norm: nn.Module | None, keep: list[int], path: str) -> nn.Module | None:
    """``norm`` over the channels ``keep`` only; a LayerNorm's statistics then run over those channels."""
    if norm is None or isinstance(norm, nn.Identity):
        return norm
    if not isinstance(norm, nn.LayerNorm):
        raise reject(path, norm, "only LayerNorm can lose channels")
    new = nn.LayerNorm(len(keep), eps=norm.eps, elementwise_affine=norm.elementwise_affine,
                       bias=norm.bias is not None, device=norm.weight.device if norm.weight is not None else None,
                       dtype=norm.weight.dtype if norm.weight is not None else None)
    with torch.no_grad():
        if norm.weight is not None:
            new.weight.copy_(keep_channels(norm.weight, 0, keep))
        if norm.bias is not None:
            new.bias.copy_(keep_channels(norm.bias, 0, keep))
    return new.train(norm.training)


def slice_conv_outputs(conv: nn.Conv2d, keep: list[int]) -> nn.Conv2d:
    """A copy of ``conv`` (a patch embedding) that writes only output channels ``keep``."""
    new = nn.Conv2d(conv.in_channels, len(keep), conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                    conv.groups, bias=conv.bias is not None, padding_mode=conv.padding_mode,
                    device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(keep_channels(conv.weight, 0, keep))
        if conv.bias is not None:
            new.bias.copy_(keep_channels(conv.bias, 0, keep))
    return new.train(conv.training)
