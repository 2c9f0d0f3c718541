"""The one interface through which every method sees a vision transformer.

Methods, surgery and measurement never touch a model family's attribute names directly: they ask
an adapter for :class:`BlockView` objects and hand edited modules back through the adapter's
setters. Adding a family (Swin, Hugging Face ViT) means adding an adapter, not touching methods.

Views are snapshots: after an edit, call :meth:`ViTAdapter.blocks` again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class AttentionView:
    """Multi-head self-attention of one block.

    ``qkv`` holds the query, key and value projections fused along its output rows in the order
    ``[q | k | v]``, each ``num_heads * head_dim`` rows grouped head by head; ``proj`` maps the
    concatenated heads back to the embedding width.
    """

    module: nn.Module
    qkv: nn.Linear
    proj: nn.Linear
    num_heads: int
    head_dim: int

    @property
    def attn_dim(self) -> int:
        """Width of the concatenated heads (the input width of ``proj``)."""
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class MlpView:
    """The feed-forward sublayer of one block: ``fc2(act(fc1(x)))``.

    ``fc2`` is ``None`` once the activation is gone and ``fc2 · fc1`` has been merged into the one
    linear layer ``fc1`` (``act`` is then the identity).
    """

    module: nn.Module
    fc1: nn.Linear
    act: nn.Module
    fc2: nn.Linear | None

    @property
    def merged(self) -> bool:
        """Whether the MLP is a single merged linear layer."""
        return self.fc2 is None

    @property
    def hidden_features(self) -> int | None:
        """Number of hidden neurons (output width of ``fc1``); ``None`` for a merged MLP."""
        return None if self.merged else self.fc1.out_features


@dataclass(frozen=True)
class BlockView:
    """One pre-norm transformer block: ``x + ls1(attn(norm1(x)))`` then ``x + ls2(mlp(norm2(x)))``.

    ``attn`` or ``mlp`` is ``None`` where surgery removed that sublayer. ``ls1``/``ls2`` are the
    LayerScale modules, or ``nn.Identity`` where the model has none; likewise ``drop_path1/2``.
    """

    index: int
    name: str
    module: nn.Module
    norm1: nn.Module
    attn: AttentionView | None
    ls1: nn.Module
    drop_path1: nn.Module
    norm2: nn.Module
    mlp: MlpView | None
    ls2: nn.Module
    drop_path2: nn.Module


class ViTAdapter(ABC):
    """What vitprune needs to know about one model family."""

    #: Short family name, recorded in recipes and shown in reports.
    family: str = ""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    @classmethod
    @abstractmethod
    def matches(cls, model: nn.Module) -> bool:
        """Whether this adapter is the right one for ``model`` (validation happens in ``__init__``)."""

    @abstractmethod
    def blocks(self) -> list[BlockView]:
        """The transformer blocks in forward order."""

    @property
    @abstractmethod
    def embed_dim(self) -> int:
        """Width of the residual stream."""

    @property
    @abstractmethod
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: class, distillation and register tokens."""

    @property
    @abstractmethod
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, columns) at the model's input size."""

    @property
    @abstractmethod
    def input_size(self) -> tuple[int, int, int]:
        """Expected input as (channels, height, width)."""

    @abstractmethod
    def classifier_heads(self) -> list[nn.Module]:
        """The classification heads (two for distilled DeiT, none after ``reset_classifier(0)``)."""

    @abstractmethod
    def set_attention(self, index: int, qkv: nn.Linear, proj: nn.Linear, num_heads: int) -> None:
        """Install new attention projections in block ``index`` (head count may change, head dim may not)."""

    @abstractmethod
    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        """Install new MLP linears in block ``index`` (the hidden width may change).

        ``fc2=None`` installs ``fc1`` as a merged MLP; the block's activation must already be the identity.
        """

    @property
    def num_patches(self) -> int:
        """Patch tokens at the model's input size."""
        rows, cols = self.grid_size
        return rows * cols

    @property
    def num_tokens(self) -> int:
        """Tokens entering the first block: prefix tokens plus patch tokens."""
        return self.num_prefix_tokens + self.num_patches

    def block(self, index: int) -> BlockView:
        """One block by index."""
        return self.blocks()[index]
