"""Hugging Face classifiers in and out: built from a config, loaded from the hub or a ``save_pretrained`` directory
(with the image processor's settings), and written back as a plain transformers directory.

transformers is imported only here, when a model is loaded or built, so vitprune costs nothing where the extra is
not installed.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vitprune.adapters.base import ViTAdapter
from vitprune.adapters.hf.modules import CLASSIFIERS, LAYERS, HFImageClassifier, transformers_module
from vitprune.atomic import atomic_directory
from vitprune.errors import UnsupportedArchitectureError, VitpruneError, first_line


def from_config(architecture: str, config: dict[str, Any],
                preprocessing: dict[str, Any] | None = None) -> HFImageClassifier:
    """A randomly initialised transformers classifier ``architecture`` (a class name) from a config dict, wrapped
    (``preprocessing``: its image processor's settings, see :class:`HFImageClassifier`)."""
    transformers = transformers_module()
    if architecture not in CLASSIFIERS:
        raise UnsupportedArchitectureError(f"unsupported architecture: {architecture} (vitprune supports "
                                           f"{', '.join(CLASSIFIERS)})")
    cls = getattr(transformers, architecture)
    return HFImageClassifier(cls(cls.config_class.from_dict(config)), preprocessing)


def load_config(source: str, *, local_files_only: bool) -> tuple[str, dict[str, Any]]:
    """The classifier class name and config dict of a ``save_pretrained`` directory or hub id (no weights)."""
    transformers = transformers_module()
    try:
        with _quiet_hub():
            config = transformers.AutoConfig.from_pretrained(source, local_files_only=local_files_only)
    except Exception as exc:  # hub, HTTP, offline and parse errors have no common base class
        hint = "" if local_files_only else "; without network, save the model with save_pretrained where there is " \
                                           "network and pass that directory"
        raise VitpruneError(f"cannot read the Hugging Face config of {source} ({type(exc).__name__}: "
                            f"{first_line(exc)}){hint}") from None
    architecture = (config.architectures or [""])[0]
    if architecture not in CLASSIFIERS:
        raise UnsupportedArchitectureError(f"unsupported architecture: {source} is a {architecture or 'model'} "
                                           f"(vitprune supports {', '.join(CLASSIFIERS)})")
    return architecture, config.to_dict()


def from_pretrained(source: str, *, local_files_only: bool) -> HFImageClassifier:
    """The classifier a ``save_pretrained`` directory or hub id holds, with its weights, wrapped."""
    architecture, _ = load_config(source, local_files_only=local_files_only)
    transformers = transformers_module()
    transformers.utils.logging.disable_progress_bar()  # vitprune shows its own progress
    try:
        model = getattr(transformers, architecture).from_pretrained(source, local_files_only=local_files_only)
    except Exception as exc:  # as in load_config
        raise VitpruneError(f"cannot load the Hugging Face weights of {source} ({type(exc).__name__}: "
                            f"{first_line(exc)})") from None
    # transformers maps the weights file into memory at whatever offsets it stores them; unaligned tensors take other
    # kernels than the same weights loaded anywhere else, which changes the last bits of the outputs. Own copies
    # make a model equal, bit for bit, to itself saved and loaded.
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.data = tensor.data.clone()
    return HFImageClassifier(model.eval(), _preprocessing(source, local_files_only))


def _preprocessing(source: str, local_files_only: bool) -> dict[str, Any] | None:
    """The ``preprocessor_config.json`` beside the weights, if there is one."""
    try:
        with _quiet_hub():
            path = transformers_module().utils.cached_file(source, "preprocessor_config.json",
                                                     local_files_only=local_files_only,
                                                     _raise_exceptions_for_missing_entries=False)
    except Exception:  # as in load_config; the weights loaded, so a missing processor file is no error
        return None
    return json.loads(Path(path).read_text()) if path else None


def write_pretrained(adapter: ViTAdapter, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
    """Write the adapter's pruned classifier as a plain transformers directory (``from_pretrained`` loads it, without
    vitprune); returns the largest difference between the reloaded model's logits and ``model``'s on random images.

    transformers' config describes one shape for every layer: width, heads, head dim and FFN width. A model whose
    layers all still have attention and activation and share those widths (uniform width pruning) fits; one with
    removed sublayers, merged MLPs or per-layer widths does not, and is refused in one line that says why. The
    directory (with the image processor's settings, if the model has them) is written under a temporary name,
    reloaded and compared, and renamed only if the logits agree within ``atol``.
    """
    model = adapter.model
    views = adapter.blocks()
    why = []
    if any(v.attn is None or not v.mlp.has_activation or type(v.module).__name__ not in LAYERS for v in views):
        why.append("layers without attention or activation, or that prune tokens (depth or token pruning)")
    shapes = sorted({(v.attn.num_heads, v.attn.head_dim, v.mlp.hidden_features) for v in views if v.attn is not None
                     and not v.mlp.merged})
    if len(shapes) > 1 or any(v.attn is not None and v.attn.value_dims is not None for v in views):
        # VBP, width pruning and HiAP rank across layers, so their models land here; say so, lest a user look for
        # a setting that would make the widths uniform.
        why.append(f"layers of different widths ((heads, head dim, FFN) {', '.join(map(str, shapes))}; VBP, width "
                   "pruning and HiAP rank across layers and leave each its own width)")
    if why:
        raise VitpruneError(f"transformers cannot describe {' or '.join(why)} in a config: save the model with "
                            "vitprune (recipe and weights) or export it to ONNX")
    heads, head_dim, hidden = shapes[0]
    hf = copy.deepcopy(model.hf).cpu().eval()
    config = hf.config
    config.hidden_size, config.num_attention_heads, config.intermediate_size = adapter.embed_dim, heads, hidden
    config.head_dim = head_dim  # transformers' ViT and DeiT attention read it where hidden_size / heads no longer is
    images = torch.randn(2, *adapter.input_size, generator=torch.Generator().manual_seed(0))
    with atomic_directory(directory) as tmp:
        hf.save_pretrained(tmp)
        if model.preprocessing:
            (tmp / "preprocessor_config.json").write_text(json.dumps(model.preprocessing, indent=2))
        reloaded = getattr(transformers_module(), type(hf).__name__).from_pretrained(tmp).eval()
        with torch.no_grad():
            diff = (reloaded(pixel_values=images).logits - hf(pixel_values=images).logits).abs().max().item()
        if not diff <= atol:
            raise VitpruneError(f"the written directory's logits differ from the model's by {diff:.2e} (> {atol:.0e})")
    return diff


def config_dict(model: HFImageClassifier) -> tuple[str, dict[str, Any]]:
    """The wrapped classifier's class name and the keyword arguments :func:`from_config` rebuilds it from (its config
    as a JSON-ready dict, and its preprocessing)."""
    return type(model.hf).__name__, {"config": model.hf.config.to_dict(), "preprocessing": model.preprocessing}


@contextmanager
def _quiet_hub():
    """The hub client logs each failed request before raising; the error vitprune raises says it once."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
