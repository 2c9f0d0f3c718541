"""The Hugging Face ``transformers`` family (ViT and DeiT classifiers, the optional extra ``vitprune[hf]``), in one
home: the modules it is edited into (:mod:`.modules`), its adapter (:mod:`.adapter`) and its loading and saving
(:mod:`.hub`)."""

from vitprune.adapters.hf.adapter import MIN_TRANSFORMERS, HFViTAdapter, data_config
import os

from vitprune.adapters.hf.hub import config_dict, from_config, from_pretrained, load_config
from vitprune.adapters.hf.modules import CLASSIFIERS, HFImageClassifier


def save_pretrained(model: HFImageClassifier, directory: str | os.PathLike, *, atol: float = 1e-4) -> float:
    """Write a pruned classifier as a plain transformers directory (:func:`~vitprune.adapters.hf.hub.write_pretrained`:
    refused in one line where transformers' config cannot describe it); returns the largest logit difference of the
    reloaded model."""
    return HFViTAdapter(model).save_native(directory, atol=atol)


__all__ = ["CLASSIFIERS", "MIN_TRANSFORMERS", "HFImageClassifier", "HFViTAdapter", "config_dict", "data_config",
           "from_config", "from_pretrained", "load_config", "save_pretrained"]
