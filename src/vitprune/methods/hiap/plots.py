"""HiAP's architecture figure: what each block of the extracted model keeps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitprune.plotting import figure, save_figure


def plot_architecture(layers: list[dict[str, Any]], path: str | os.PathLike, *, title: str = "") -> Path:
    """Two panels by block: value dimensions kept per head (stacked, one segment per surviving head) out of
    the dense width, and FFN neurons kept (a cross where the whole FFN block is closed).

    ``layers`` is :func:`~vitprune.methods.hiap.search.layer_summary`'s list.
    """
    fig = figure(figsize=(9, 5.5))
    attn, ffn = fig.subplots(2, 1, sharex=True)
    blocks = range(len(layers))
    for b, layer in zip(blocks, layers, strict=True):
        bottom = 0
        for h, dims in enumerate(layer["value_dims"]):
            attn.bar(b, dims, bottom=bottom, color=f"C{h % 10}", edgecolor="white", width=0.7)
            bottom += dims
        if not layer["ffn"]:
            ffn.plot(b, 0, "x", color="tab:red", markersize=10)
    # Per block: stages of Swin and ConvNeXt differ in width (a ConvNeXt has no attention at all).
    attn.step(blocks, [layer["heads_of"] * layer["head_dim"] for layer in layers], where="mid", color="gray", ls=":",
              label="dense (heads × head dim)")
    attn.set(ylabel="value dims kept\n(one colour per head)", title=title)
    attn.legend(fontsize=8, loc="lower left")
    ffn.bar(blocks, [layer["neurons"] for layer in layers], color="tab:green", width=0.7)
    ffn.step(blocks, [layer["neurons_of"] for layer in layers], where="mid", color="gray", ls=":", label="dense")
    ffn.set(xlabel="block", ylabel="FFN neurons kept\n(× = FFN block closed)", xticks=list(blocks))
    ffn.legend(fontsize=8, loc="lower left")
    return save_figure(fig, path)
