"""The one interface through which every method sees a vision transformer.

Methods, surgery and measurement never touch a model family's attribute names directly: they ask
an adapter for :class:`BlockView` objects and hand edited modules back through the adapter's
setters. Adding a family (Swin, Hugging Face ViT) means adding an adapter, not touching methods.

Views are snapshots: after an edit, call :meth:`ViTAdapter.blocks` again.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from timm.layers import DropPath
from torch import nn

from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.layers import Gate
from vitprune.linear import slice_linear

#: What a family can have done to it, by name; an adapter has the ones whose mixin (:data:`CAPABILITY_MIXINS`) it
#: implements.
CAPABILITIES: dict[str, str] = {
    "attention_removal": "remove attention sublayers",
    "activation_removal": "remove MLP activations and merge fc1·fc2",
    "output_activation": "run an activation on a block's output",
    "ffn_width": "prune FFN neurons",
    "head_width": "prune heads and head dimensions",
    "value_width": "give each head its own number of value dimensions",
    "embed_width": "prune embedding channels",
    "token_reduction": "prune or merge tokens",
    "lrp": "propagate LRP relevance through its blocks",
    "gates": "train gates on its sublayers, heads and neurons",
    "dense_features": "give the feature maps of its blocks or stages to a detection or segmentation head",
    "input_resize": "take images of another size (its position embedding resampled)",
}


@dataclass(frozen=True)
class QKV:
    """The query, key and value projections of one attention, whatever their form.

    ``linears`` is one Linear whose output rows are ``[q | k | v]`` (timm) or three Linears
    ``(q, k, v)`` (Hugging Face); ``widths`` are the rows of q, k and v, each grouped head by head.
    Methods slice and run projections through this view only, never assuming either form.
    """

    linears: tuple[nn.Linear, ...]
    widths: tuple[int, int, int]

    def __post_init__(self) -> None:
        rows = [lin.out_features for lin in self.linears]
        if rows != ([sum(self.widths)] if len(self.linears) == 1 else list(self.widths)):
            raise ValueError(f"projections of {rows} rows do not hold q, k and v of {list(self.widths)} rows")

    @classmethod
    def of_heads(cls, linears: Sequence[nn.Linear], num_heads: int, head_dim: int,
                 value_dims: Sequence[int] | None = None) -> QKV:
        """The projections of ``num_heads`` heads of query/key width ``head_dim`` and value widths ``value_dims``
        (``None``: ``head_dim`` each)."""
        qk = num_heads * head_dim
        return cls(tuple(linears), (qk, qk, qk if value_dims is None else sum(value_dims)))

    @property
    def fused(self) -> bool:
        """Whether one Linear computes q, k and v."""
        return len(self.linears) == 1

    @property
    def in_features(self) -> int:
        """Width of the input the projections read."""
        return self.linears[0].in_features

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``x``, each ``(..., rows)``."""
        if self.fused:
            return self.linears[0](x).split(self.widths, dim=-1)
        q, k, v = (lin(x) for lin in self.linears)
        return q, k, v

    def pieces(self, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> list[tuple[nn.Linear, torch.Tensor]]:
        """Each Linear with the part of a per-row quantity (an output, a relevance) that belongs to its rows."""
        if self.fused:
            return [(self.linears[0], torch.cat([q, k, v], dim=-1))]
        return list(zip(self.linears, (q, k, v), strict=True))

    def select(self, q_rows: Sequence[int], k_rows: Sequence[int], v_rows: Sequence[int]) -> tuple[nn.Linear, ...]:
        """New projections of the same form with only rows ``q_rows``, ``k_rows`` and ``v_rows`` of q, k and v."""
        if self.fused:
            wq, wk, _ = self.widths
            rows = [*q_rows, *(wq + r for r in k_rows), *(wq + wk + r for r in v_rows)]
            return (slice_linear(self.linears[0], out_idx=rows),)
        return tuple(slice_linear(lin, out_idx=list(rows))
                     for lin, rows in zip(self.linears, (q_rows, k_rows, v_rows), strict=True))

    def select_inputs(self, keep: Sequence[int]) -> tuple[nn.Linear, ...]:
        """New projections that read only input channels ``keep``."""
        return tuple(slice_linear(lin, in_idx=list(keep)) for lin in self.linears)


@dataclass(frozen=True)
class AttentionView:
    """Multi-head self-attention of one block.

    ``qkv`` gives the query, key and value projections (:class:`QKV`), each ``num_heads * head_dim``
    rows grouped head by head (values: ``value_dims`` where heads differ); ``proj`` maps the
    concatenated heads back to the embedding width.
    """

    module: nn.Module
    qkv: QKV
    proj: nn.Linear
    num_heads: int
    head_dim: int
    #: The mask wrapped around this attention by :meth:`ViTAdapter.set_attention_module`, if any.
    gate: Gate | None = None
    #: Value width of each head where heads differ (HiAP's extraction); ``None``: every head has
    #: ``head_dim`` values.
    value_dims: tuple[int, ...] | None = None
    #: Norms of the queries and of the keys over the head dimension (``nn.Identity`` in most ViTs).
    q_norm: nn.Module = field(default_factory=nn.Identity)
    k_norm: nn.Module = field(default_factory=nn.Identity)
    #: The softmax scale of ``q·kᵀ`` (``head_dim**-0.5`` unless the family says otherwise).
    scale: float | None = None
    #: Tokens each query attends to where that is not the whole sequence (Swin: its window's); ``None``: all.
    context: int | None = None
    #: Parameters of ``module`` holding one column (last dimension) per head, besides the projections (Swin's
    #: relative-position bias table); :meth:`ViTAdapter.set_attention` keeps the kept heads' columns.
    head_parameters: tuple[nn.Parameter, ...] = ()

    @property
    def qk_norm(self) -> bool:
        """Whether queries and keys are normalised over the head dimension (which then cannot lose dimensions)."""
        return not (isinstance(self.q_norm, nn.Identity) and isinstance(self.k_norm, nn.Identity))

    @property
    def softmax_scale(self) -> float:
        """The factor on ``q·kᵀ`` before the softmax."""
        return self.head_dim ** -0.5 if self.scale is None else self.scale

    @property
    def attn_dim(self) -> int:
        """Width of the concatenated heads' values (the input width of ``proj``)."""
        return self.num_heads * self.head_dim if self.value_dims is None else sum(self.value_dims)


@dataclass(frozen=True)
class MlpView:
    """The feed-forward sublayer of one block: ``fc2(act(fc1(x)))``.

    ``act`` is ``nn.Identity`` once depth surgery removed the activation; ``fc2`` is ``None`` once
    ``fc2 · fc1`` has then been merged into the one linear layer ``fc1``.
    """

    module: nn.Module
    fc1: nn.Linear
    act: nn.Module
    fc2: nn.Linear | None
    #: The mask wrapped around ``act`` by :meth:`ViTAdapter.set_activation`, if any.
    gate: Gate | None = None

    @property
    def merged(self) -> bool:
        """Whether the MLP is a single merged linear layer."""
        return self.fc2 is None

    @property
    def has_activation(self) -> bool:
        """Whether the MLP still has its nonlinearity (a removed one leaves ``fc2(fc1(x))``, merged or not)."""
        return not self.merged and not isinstance(self.act, nn.Identity)

    @property
    def hidden_features(self) -> int | None:
        """Number of hidden neurons (output width of ``fc1``); ``None`` for a merged MLP."""
        return None if self.merged else self.fc1.out_features

    def select_embed(self, keep: Sequence[int]) -> tuple[nn.Linear, nn.Linear | None]:
        """New ``fc1`` and ``fc2`` (``None`` where merged) for an embedding that keeps only channels ``keep``: they read
        and write those channels alone."""
        keep = list(keep)
        if self.merged:
            return slice_linear(self.fc1, out_idx=keep, in_idx=keep), None
        return slice_linear(self.fc1, in_idx=keep), slice_linear(self.fc2, out_idx=keep)


@dataclass(frozen=True)
class TokenHead:
    """A classifier on every patch token whose per-class maximum over the patches, times ``weight``, is added to the
    class head's logits (LV-ViT's token-labelling head)."""

    linear: nn.Linear
    weight: float


@dataclass(frozen=True)
class BlockView:
    """One pre-norm transformer block: ``x + ls1(attn(norm1(x)))``, ``x + ls2(mlp(norm2(x)))``, then ``act``.

    ``attn`` is ``None`` where surgery removed the attention; the branch is then ``x +
    ls1(norm1(x))``, or gone altogether when ``norm1`` is ``None`` too. ``ls1``/``ls2`` are the
    LayerScale modules, or ``nn.Identity`` where the model has none; likewise ``drop_path1/2``.
    ``act`` is an activation on the block output, ``nn.Identity`` in every standard ViT.
    Views show the layers inside any gate (see :class:`AttentionView`'s ``gate``).
    ``token_op`` is the :class:`~vitprune.adapters.tokens.TokenOp` the block runs on its tokens between its
    attention and its MLP (:meth:`TokenReduction.set_token_op`: STAR's selection, ToMe's merging), ``None`` where it
    runs none.
    """

    index: int
    name: str
    module: nn.Module
    norm1: nn.Module | None
    attn: AttentionView | None
    ls1: nn.Module | None
    drop_path1: nn.Module | None
    norm2: nn.Module
    mlp: MlpView
    ls2: nn.Module
    drop_path2: nn.Module
    act: nn.Module
    token_op: nn.Module | None = None


class ViTAdapter(ABC):
    """What vitprune needs to know about one model family."""

    #: Short family name, recorded in recipes and shown in reports.
    family: str = ""
    #: The modules that define the family's classes; nothing outside ``adapters/`` and the model factory imports
    #: them (``tests/adapters/test_boundary.py``).
    family_modules: tuple[str, ...] = ()
    #: Attribute names only the family's modules have (the views' own names, such as ``attn`` or ``fc1``, are
    #: not among them); nothing outside ``adapters/`` and the model factory reads them.
    family_attributes: frozenset[str] = frozenset()
    #: Why the family lacks a capability, where a refusal should say (by capability name).
    lacking_reasons: dict[str, str] = {}
    #: The :data:`CAPABILITIES` this family supports: those whose mixin the adapter implements (set on the class;
    #: a subclass may declare fewer, for a variant that supports less).
    capabilities: frozenset[str] = frozenset()

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        implemented = frozenset(name for name, mixin in CAPABILITY_MIXINS.items() if issubclass(cls, mixin))
        declared = cls.__dict__.get("capabilities")
        if declared is not None and not declared <= implemented:
            raise TypeError(f"{cls.__name__} declares capabilities {sorted(declared - implemented)} without "
                            "implementing their mixins")
        cls.capabilities = implemented if declared is None else declared

    @classmethod
    @abstractmethod
    def matches(cls, model: nn.Module) -> bool:
        """Whether this adapter is the right one for ``model`` (validation happens in ``__init__``)."""

    @classmethod
    def prepare(cls, model: nn.Module) -> None:
        """Bring a model of the family, as its library builds it, into the form the adapter edits, in place and
        without changing its function. Most families need nothing; ConvNeXt's 1x1-convolution MLP becomes the
        Linear MLP it equals. The model factory runs it on every model it builds."""

    def checkpoint_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A checkpoint in the family's original layout, mapped to the prepared model's (unchanged by default)."""
        return state

    @abstractmethod
    def blocks(self) -> list[BlockView]:
        """The transformer blocks in forward order."""

    @property
    @abstractmethod
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: class, distillation and register tokens."""

    @property
    @abstractmethod
    def input_size(self) -> tuple[int, int, int]:
        """Expected input as (channels, height, width)."""

    @property
    @abstractmethod
    def num_classes(self) -> int:
        """Classes the classifier heads predict."""

    @property
    def data_config(self) -> dict[str, Any] | None:
        """How images are prepared for the model's weights, as a timm data config (``mean``, ``std``,
        ``interpolation``, ``crop_pct``); ``None``: ImageNet's defaults."""
        return None

    def set_distillation_split(self, on: bool) -> bool:
        """Make a model with a distillation head return (class, distillation) logits in training mode (``on``), or
        their mean; returns whether it has such a head (by default none, and nothing changes)."""
        return False

    @property
    @abstractmethod
    def num_features(self) -> int:
        """Width of the features the classifier reads (:meth:`pre_logits`)."""

    def block_tokens(self, x: torch.Tensor) -> int:
        """Tokens (positions) in ``x``, a block's input: ``(B, tokens, C)`` by default."""
        return x.shape[1]

    @property
    @abstractmethod
    def pools_class_token(self) -> bool:
        """Whether the class head reads the [CLS] token alone (no average, no distillation token); a
        :attr:`token_head` may add to its logits."""

    @property
    def token_head(self) -> TokenHead | None:
        """The head on every patch token whose maximum adds to the logits, if the family has one (LV-ViT)."""
        return None

    def patch_features(self, x: torch.Tensor) -> torch.Tensor:
        """The normalised patch tokens the :attr:`token_head` reads, from the last block's output ``x``."""
        raise VitpruneError(f"{self.family} models have no token head")

    @abstractmethod
    def pre_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The features the classifier reads for images ``x``: ``(B, C, H, W)`` in, ``(B, F)`` out.

        That is the pooled, normalised output of the last block, whatever the pooling (class
        token, average of the patch tokens, the two tokens of a distilled DeiT).
        """

    @property
    @abstractmethod
    def stem(self) -> nn.Module:
        """The layer that first writes the residual stream (the patch embedding's projection)."""

    @property
    def stream_writers(self) -> list[nn.Module]:
        """Every layer outside the blocks that writes a residual stream: the stem, and where a family changes width
        between stages, each stage's first layer (Swin's patch merging)."""
        return [self.stem]

    @abstractmethod
    def token_parameters(self) -> list[nn.Parameter]:
        """The learned tokens and position embedding added to the stream, each ``(1, tokens, embed_dim)``."""

    def no_decay_parameters(self) -> list[nn.Parameter]:
        """Parameters trained without weight decay besides the 1-D ones (timm's convention): the learned tokens and
        position embedding, and what the model's own ``no_weight_decay`` names (Swin's bias tables)."""
        named = getattr(self.model, "no_weight_decay", None)
        names = set(named()) if callable(named) else set()
        found = [*self.token_parameters(), *(p for n, p in self.model.named_parameters() if n in names)]
        return list({id(p): p for p in found}.values())

    @abstractmethod
    def classifier_heads(self) -> list[nn.Module]:
        """The classification heads (two for distilled DeiT, none after ``reset_classifier(0)``)."""

    @abstractmethod
    def set_num_classes(self, num_classes: int) -> None:
        """Replace every classification head (:meth:`classifier_heads`, the distillation and token-labelling heads
        too) by a new Linear reading the same features for ``num_classes`` classes."""

    @abstractmethod
    def set_norm(self, index: int, position: int, norm: nn.Module) -> None:
        """Install ``norm`` as ``norm1`` (``position=1``) or ``norm2`` (``position=2``) of block ``index``."""

    @abstractmethod
    def set_activation(self, index: int, act: nn.Module) -> None:
        """Install ``act`` as the MLP activation of block ``index`` (for instance a gate around the original)."""

    def set_drop_path(self, rate: float) -> Callable[[], None]:
        """Stochastic depth for training: block ``i`` of ``n`` drops each residual branch with probability
        ``rate · i / (n − 1)`` (timm's and DeiT's ``drop_path_rate`` rule); ``rate`` 0 turns it off. The blocks'
        :attr:`BlockView.drop_path1`/``drop_path2`` modules are replaced; returns the function that puts the
        replaced ones back (so that a model leaves training with the structure its recipe rebuilds). A family whose
        branches end in anything but an identity or a timm ``DropPath`` (Hugging Face's shared hidden dropout) is
        refused in one line, before anything changes."""
        if not 0 <= rate < 1:
            raise VitpruneError(f"drop-path rate must lie in [0, 1), got {rate}")
        views = self.blocks()
        slots = []  # (block module, attribute name, current module, new rate)
        for view, block_rate in zip(views, torch.linspace(0, rate, len(views)).tolist()):
            for current in (view.drop_path1, view.drop_path2):
                if current is None:  # the branch is gone (attention removed without a norm)
                    continue
                if type(current) not in (nn.Identity, DropPath):
                    raise VitpruneError(f"{self.family} blocks have no stochastic depth to set: their residual "
                                        f"branches end in a {type(current).__name__}")
                names = [name for name, child in view.module.named_children() if child is current]
                if not names:
                    raise RuntimeError(f"{view.name}: its drop-path module is not one of the block's own")
                slots += [(view.module, name, current, block_rate) for name in names]
        for block, name, _, block_rate in slots:
            module = DropPath(block_rate) if block_rate > 0 else nn.Identity()
            setattr(block, name, module.train(block.training))

        def restore() -> None:
            for block, name, previous, _ in slots:
                setattr(block, name, previous)

        return restore

    def save_native(self, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
        """Write the model in its own library's format, which loads without vitprune, kept only if the reloaded
        model's logits are within ``atol`` of the model's; returns the largest difference. A family without such a
        format, or a model its format cannot describe, is refused in one line."""
        raise VitpruneError(f"vitprune writes {self.family} models only as its own save (recipe and weights) or as "
                            "ONNX")

    def require(self, *needed: str, by: str, without: Mapping[str, str] = {}) -> None:
        """Refuse, in one line naming the family and what it lacks, a method ``by`` that needs ``needed``;
        ``without`` says, by capability, how the method runs without it (the line ends with those ways where they
        cover everything the family lacks: a way that leaves the method refused would mislead)."""
        unknown = [name for name in needed if name not in CAPABILITIES]
        if unknown:
            raise ValueError(f"unknown capabilities {unknown} (known: {', '.join(CAPABILITIES)})")
        lacking = [name for name in needed if name not in self.capabilities]
        if lacking:
            reasons = list(dict.fromkeys(self.lacking_reasons[n] for n in lacking if n in self.lacking_reasons))
            ways = [without[name] for name in lacking] if all(name in without for name in lacking) else []
            raise UnsupportedArchitectureError(
                f"{by} needs to {' and '.join(CAPABILITIES[name] for name in lacking)}, which vitprune cannot do on "
                f"{self.family} models" + "".join(f": {reason}" for reason in reasons[:1])
                + "".join(f"; {part}" for part in [*reasons[1:], *ways]))

    def block(self, index: int) -> BlockView:
        """One block by index."""
        return self.blocks()[index]


# --- capabilities: a family has one by implementing its mixin ------------------------------------------------------


class AttentionRemoval(ABC):
    """``attention_removal``: the attention slot of a block can be emptied, or wrapped (a gate that learns whether to
    empty it)."""

    @abstractmethod
    def remove_attention(self, index: int, norm: nn.Module | None) -> None:
        """Remove the attention of block ``index``: its branch becomes ``x + norm(x)``, or just ``x`` for ``None``.

        ``norm`` replaces both ``norm1`` and the LayerScale after the attention (the caller folds them).
        """

    @abstractmethod
    def set_attention_module(self, index: int, module: nn.Module) -> None:
        """Install ``module`` as the attention of block ``index``: the unwrapped attention, or a gate around it."""


class ActivationRemoval(ABC):
    """``activation_removal``: an MLP whose activation is gone merges into one Linear."""

    @abstractmethod
    def merge_mlp(self, index: int, linear: nn.Linear) -> None:
        """Replace the MLP of block ``index`` and the LayerScale after it by ``linear``, which already includes both.

        Dropout between the two linears has no place left and goes; dropout after them stays.
        """


class OutputActivation(ABC):
    """``output_activation``: a block can run an activation on its output (the HetDPT code's GELU where a block lost
    both sublayers, and HetDPT's learned removal)."""

    @abstractmethod
    def set_output_activation(self, index: int, act: nn.Module) -> None:
        """Run ``act`` on the output of block ``index`` (``nn.Identity()`` removes it)."""


class FFNWidth(ABC):
    """``ffn_width``: an MLP's hidden neurons can be pruned."""

    @abstractmethod
    def set_mlp(self, index: int, fc1: nn.Linear, fc2: nn.Linear | None) -> None:
        """Install new MLP linears in block ``index`` (the hidden width may change).

        ``fc2=None`` replaces the single Linear of an already merged MLP.
        """


class HeadWidth(ABC):
    """``head_width``: heads and head dimensions can be pruned."""

    @abstractmethod
    def set_attention(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, num_heads: int,
                      head_dim: int | None = None, heads: Sequence[int] | None = None) -> None:
        """Install new attention projections in block ``index`` with ``num_heads`` heads of ``head_dim``
        (``None``: unchanged); a new head dim gets the softmax scale ``head_dim**-0.5``. ``qkv`` has the form
        of the block's :attr:`AttentionView.qkv` (as :meth:`QKV.select` returns). ``heads`` names which of the
        block's current heads the projections hold, in order (``None``: all of them): a family whose heads own
        parameters besides the projections (Swin's relative-position bias) keeps those of these heads."""


class ValueWidth(ABC):
    """``value_width``: heads can have value widths of their own."""

    @abstractmethod
    def set_value_dims(self, index: int, qkv: Sequence[nn.Linear], proj: nn.Linear, value_dims: list[int]) -> None:
        """Install heads of uneven value widths in block ``index``: ``qkv`` (the form of :attr:`AttentionView.qkv`)
        holds every kept head's full query and key rows, then ``value_dims[h]`` value rows per head; ``proj``
        reads the concatenated values."""


class EmbedWidth(ABC):
    """``embed_width``: the model has one residual-stream width, and its channels can be pruned."""

    @property
    @abstractmethod
    def embed_dim(self) -> int:
        """Width of the residual stream."""

    @abstractmethod
    def prune_embed_dims(self, keep: list[int]) -> None:
        """Keep only the residual-stream channels ``keep`` (sorted) everywhere the stream is read or written.

        That is the patch embedding and the prefix tokens, the position embedding, every block's
        norms, the inputs of ``qkv`` and ``fc1`` and the outputs of ``proj`` and ``fc2`` (or of a
        merged MLP), the LayerScales, the final norms and the classifier inputs.
        """


class TokenSequence(ABC):
    """What token pruning and LRP read: the model is one sequence of tokens on one patch grid, from the embedding
    through the blocks to the pooling (a staged family, whose stages change the grid, is not)."""

    @property
    @abstractmethod
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, columns) at the model's input size."""

    @property
    def num_patches(self) -> int:
        """Patch tokens at the model's input size."""
        rows, cols = self.grid_size
        return rows * cols

    @property
    def num_tokens(self) -> int:
        """Tokens entering the first block: prefix tokens plus patch tokens."""
        return self.num_prefix_tokens + self.num_patches

    @abstractmethod
    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """The tokens entering the first block for ``images``: ``(B, C, H, W)`` in, ``(B, tokens, embed_dim)`` out."""

    @abstractmethod
    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """The features the classifier reads, from the last block's output ``x`` (final norm and pooling):
        ``pre_logits(images) == pool(blocks(embed(images)))``."""


class TokenReduction(TokenSequence):
    """``token_reduction``: a block can run a token operation (:class:`~vitprune.adapters.tokens.TokenOp`) between
    its attention and its MLP; the sequence hands the state the operations leave (positions, padding, sizes) from
    block to block, and every block's attention takes the bias it implies."""

    @property
    def pools_every_token(self) -> bool:
        """Whether the class head pools over every token (an average, an attention pool) rather than reading prefix
        tokens: merged tokens would then count as one each, whatever they stand for."""
        return False

    @abstractmethod
    def set_token_op(self, index: int, op: nn.Module) -> None:
        """Make block ``index`` run ``op`` on its tokens after its attention's residual and before its MLP (in place
        of any operation it ran). A block that cannot give ``op`` what it reads of its attention (no head left, a
        gate, another block form) raises ``ValueError``."""


class LRPRelevance(TokenSequence):
    """``lrp``: LRP relevance propagates from the pooling back through the family's blocks as its views describe
    them (STAR's prior); nothing to implement beyond the token sequence."""


class Gates:
    """``gates``: gates can be trained on the family's sublayers, heads and neurons through its views (HetDPT's
    learned importance, HiAP); a family declares it by this base (nothing to implement)."""


class DenseFeatures(ABC):
    """``dense_features``: the feature maps a detection or segmentation head reads, as timm's ``forward_intermediates``
    gives them, from a pruned model as from a dense one."""

    @abstractmethod
    def intermediates(self, images: torch.Tensor, indices: int | Sequence[int] | None = None,
                      norm: bool = False) -> list[torch.Tensor]:
        """The ``(B, C, H, W)`` feature maps of ``images`` after blocks (a staged family: stages) ``indices``, in
        timm's convention: ``None`` every one, an int ``n`` the last ``n``, a sequence those (negative from the end).

        A block that depth pruning emptied still counts. ``norm`` applies the final norm to each map. Where blocks
        prune tokens, a pruned position holds its token as the last block that kept it left it, so every map
        covers the whole patch grid.
        """

    def feature_modules(self) -> list[str]:
        """The name in the model of the module each map of :meth:`intermediates` (``indices=None``) comes from:
        its blocks' (a staged family names its stages)."""
        named = {id(module): name for name, module in self.model.named_modules()}
        return [named[id(block.module)] for block in self.blocks()]


class InputResize(ABC):
    """``input_resize``: the model can take images of another size, as detection and segmentation fine-tunes do (a
    ViT's position embedding resampled to the new patch grid)."""

    @abstractmethod
    def set_input_size(self, height: int, width: int) -> None:
        """Take ``height`` x ``width`` images from now on; a size the patches do not tile is a ``ValueError``."""


#: Each capability's mixin.
CAPABILITY_MIXINS: dict[str, type] = {
    "attention_removal": AttentionRemoval, "activation_removal": ActivationRemoval,
    "output_activation": OutputActivation, "ffn_width": FFNWidth, "head_width": HeadWidth, "value_width": ValueWidth,
    "embed_width": EmbedWidth, "token_reduction": TokenReduction, "lrp": LRPRelevance, "gates": Gates,
    "dense_features": DenseFeatures, "input_resize": InputResize,
}
