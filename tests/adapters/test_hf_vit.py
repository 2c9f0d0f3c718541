"""Hugging Face transformers ViT and DeiT through the adapter: what it refuses, the forms edits leave, and the same
counts as timm for the same architecture. The exactness suite runs on them with every other family (conftest's
rows); loading them as a command's MODEL: tests/cli/test_hf_models.py."""

from __future__ import annotations

import sys

import pytest
import timm
import torch
import transformers
from conftest import HF_TINY, build, tracked

import vitprune
from vitprune.adapters import HFImageClassifier, HFViTAdapter, get_adapter, hf
from vitprune.errors import UnsupportedArchitectureError, VitpruneError
from vitprune.measure import count_macs
from vitprune.surgery import prune_depth, prune_embed_dims, prune_head_dims, prune_heads, prune_mlp_neurons

VIT = "hf:ViTForImageClassification"
SMALL = {**HF_TINY, "num_hidden_layers": 2}


def test_other_transformers_models_are_refused():
    with pytest.raises(UnsupportedArchitectureError, match="ViTModel is not one of the transformers classifiers"):
        HFImageClassifier(transformers.ViTModel(transformers.ViTConfig(**SMALL)))


def test_a_pooler_is_refused():
    model = HFImageClassifier(transformers.ViTForImageClassification(transformers.ViTConfig(**SMALL)))
    model.hf.vit.pooler = torch.nn.Linear(64, 64)
    with pytest.raises(UnsupportedArchitectureError, match=r"hf\.vit\.pooler is Linear \(a pooler is not supported\)"):
        get_adapter(model)


def test_the_distillation_head_splits_in_training_only():
    model = tracked("hf:DeiTForImageClassificationWithTeacher", SMALL)
    adapter = get_adapter(model)
    assert isinstance(adapter, HFViTAdapter) and adapter.set_distillation_split(True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        cls_logits, dist_logits = model.train()(x)
        torch.testing.assert_close(model.eval()(x), (cls_logits + dist_logits) / 2)
    assert not get_adapter(build(VIT, SMALL)).set_distillation_split(True)


def test_edits_keep_transformers_modules_where_they_can(tmp_path):
    """Fewer heads and neurons and a merged MLP stay transformers' own layer (what save_pretrained could write);
    a removed attention needs vitprune's block."""
    model = tracked(VIT, SMALL)
    prune_heads(model, 0, [1, 3])
    prune_mlp_neurons(model, 0, list(range(100)))
    prune_depth(model, attention=[], activation=[1])
    assert [type(layer).__name__ for layer in model.hf.vit.layers] == ["ViTLayer", "ViTLayer"]
    prune_depth(model, attention=[1])
    assert [type(layer).__name__ for layer in model.hf.vit.layers] == ["ViTLayer", "HFBlock"]
    vitprune.save(model, tmp_path / "saved")
    keys = set(vitprune.load(tmp_path / "saved").state_dict())
    assert keys == set(model.state_dict()) and "hf.vit.layers.1.mlp.fc1.weight" in keys


@pytest.mark.parametrize("name", ["hf:ViTForImageClassification", "hf:DeiTForImageClassificationWithTeacher"])
def test_uniform_width_pruning_is_written_back_as_a_plain_transformers_directory(tmp_path, name):
    model = tracked(name, SMALL)
    for block in range(2):
        prune_heads(model, block, [0, 2, 3])
        prune_head_dims(model, block, list(range(0, 16, 2)))
        prune_mlp_neurons(model, block, list(range(0, 256, 4)))
    prune_embed_dims(model, list(range(48)))
    hf.save_pretrained(model, tmp_path / "plain")
    loaded = getattr(transformers, name.removeprefix("hf:")).from_pretrained(tmp_path / "plain").eval()
    config = loaded.config
    assert (config.hidden_size, config.num_attention_heads, config.head_dim, config.intermediate_size) == (48, 3, 8, 64)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=x).logits, model(x), rtol=1e-5, atol=1e-5)


def test_what_a_transformers_config_cannot_describe_is_refused(tmp_path):
    uneven, shallow = tracked(VIT, SMALL), tracked(VIT, SMALL)
    prune_heads(uneven, 0, [0, 1])
    prune_depth(shallow, activation=[1])
    for model, why in [(uneven, r"layers of different widths \(\(heads, head dim, FFN\) \(2, 16, 256\), "
                                r"\(4, 16, 256\); VBP, width pruning and HiAP rank across layers and leave each its "
                                r"own width\)"),
                       (shallow, r"layers without attention or activation, or that prune tokens \(depth or token "
                                 r"pruning\)")]:
        with pytest.raises(VitpruneError, match=f"^transformers cannot describe {why} in a config: save the model "
                                                r"with vitprune \(recipe and weights\) or export it to ONNX$"):
            hf.save_pretrained(model, tmp_path / "plain")
    assert not (tmp_path / "plain").exists()


def test_a_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(VitpruneError, match=r"need the transformers package: pip install 'vitprune\[hf\]'"):
        hf.from_config("ViTForImageClassification", {})


@pytest.mark.slow
def test_vit_b16_counts_equal_timm_through_hetdpt_deit_b_10_layers():
    """Same architecture, same counts: ViT-B/16 from a transformers config and timm's vit_base_patch16_224, both
    random, through the HetDPT paper's DeiT-B 10-layer configuration (attention [0, 3, 7, 8, 11], GELU [2, 7, 8, 10,
    11]), to the last parameter and MAC."""
    config = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
              "image_size": 224, "patch_size": 16, "num_labels": 1000}
    hf = tracked(VIT, config)
    reference = vitprune.track(timm.create_model("vit_base_patch16_224", pretrained=False), "vit_base_patch16_224")
    counts = []
    for model in (hf, reference):
        prune_depth(model, attention=[0, 3, 7, 8, 11], activation=[2, 7, 8, 10, 11])
        counts.append(count_macs(model).totals())
    assert counts[0] == counts[1]
    # The paper's 10-layer row (54.9 M, 10.5 G) counts the distilled DeiT-B: 770,304 more parameters (its
    # distillation token and head) and 198 tokens (benchmarks/results/paper_tables.md).
    assert counts[0] == {"params": 54_096_616, "macs_full": 10_875_032_064, "macs_linear": 10_457_757_696}


def test_a_model_in_memory_is_taken_as_it_is(tmp_path):
    torch.manual_seed(0)
    hf = transformers.DeiTForImageClassification(transformers.DeiTConfig(**SMALL)).eval()
    model = vitprune.from_transformers(hf)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), hf(pixel_values=x).logits)
    prune_heads(model, 1, [0, 3])
    vitprune.save(model, tmp_path / "saved")
    loaded = vitprune.load(tmp_path / "saved")
    assert vitprune.get_recipe(loaded).base.weights == "user"
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))

