"""What vitprune's embedded models share: DeiT-style timm ViTs built with sin-cos position embeddings and trained
from scratch offline on CPU by one recipe dict."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import Dataset

from vitprune.data.datasets import build_loader
from vitprune.training import TrainConfig, Trainer, evaluate
from vitprune.training.progress import training_progress


def build_sincos_vit(**kwargs) -> VisionTransformer:
    """timm's ``VisionTransformer(**kwargs)`` whose patch position embeddings start from fixed 2-D sin-cos values.

    As in MoCo v3 (they stay learnable): with timm's near-zero random start a small model trained
    from scratch first sees a bag of patches and takes many epochs to learn where each patch is.
    """
    model = VisionTransformer(**kwargs)
    with torch.no_grad():
        model.pos_embed[0, model.num_prefix_tokens :] = build_sincos2d_pos_embed(
            list(model.patch_embed.grid_size), model.embed_dim
        )
    return model


def train_embedded_vit(build: Callable[[], VisionTransformer], train_set: Dataset, val_set: Dataset, recipe: dict,
                       *, seed: int, epochs: int, progress: bool) -> tuple[VisionTransformer, dict]:
    """Train ``build()`` (initialised under ``seed``) on ``train_set`` with ``recipe`` for ``epochs``, then evaluate it
    on ``val_set``; returns the model in eval mode and its metrics.

    ``recipe`` holds :class:`TrainConfig` fields (``epochs`` and ``seed`` are replaced). The metrics are
    ``val_top1`` and ``val_top5`` (fractions in [0, 1]), ``val_loss``, ``epochs``, ``seconds`` (wall
    time of training and evaluation) and ``seed``. The same seed gives the same model on the same
    machine and library versions.
    """
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    trainer = Trainer(model, train_set, TrainConfig(**{**recipe, "epochs": epochs, "seed": seed}), device="cpu")
    with training_progress(trainer, enabled=progress) as on_batch:
        trainer.fit(on_batch=on_batch)
    val = evaluate(model, build_loader(val_set, 256, shuffle=False, seed=seed))
    metrics = {
        "val_top1": val["top1"],
        "val_top5": val["top5"],
        "val_loss": val["loss"],
        "epochs": epochs,
        "seconds": time.perf_counter() - start,
        "seed": seed,
    }
    return model.eval(), metrics


def embedded_model(name: str, kwargs: dict, recipe: dict, dataset: Callable[..., Dataset]) -> tuple[
        Callable[..., VisionTransformer], Callable[..., tuple[VisionTransformer, dict]]]:
    """The builder and the trainer of the embedded model ``name`` (the same for each):

    - ``build(**overrides)``: a randomly initialised ViT of ``kwargs`` (``overrides`` replace entries) whose patch
      position embeddings start from fixed 2-D sin-cos values (:func:`build_sincos_vit`);
    - ``train(*, seed=0, epochs=recipe's, progress=True)``: it trained from scratch with ``recipe`` on
      ``dataset("train", augment=True)`` and evaluated on ``dataset("val")``, in eval mode, and its metrics
      (:func:`train_embedded_vit`'s).
    """

    def build(**overrides) -> VisionTransformer:
        return build_sincos_vit(**{**kwargs, **overrides})

    def train(*, seed: int = 0, epochs: int = recipe["epochs"],
              progress: bool = True) -> tuple[VisionTransformer, dict]:
        return train_embedded_vit(build, dataset("train", augment=True), dataset("val"), recipe, seed=seed,
                                  epochs=epochs, progress=progress)

    for function, verb in ((build, "build"), (train, "train")):
        function.__name__ = function.__qualname__ = f"{verb}_{name}_vit"
        function.__doc__ = f"The {name} model's ``{verb}`` (:func:`vitprune.models.embedded.embedded_model`)."
    return build, train
