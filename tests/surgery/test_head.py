"""A new classifier head for other classes (``--num-classes``): every family's heads are replaced, start at zero, and
the edit saves, reloads and records the classes' names."""

from __future__ import annotations

import pytest
import torch
from conftest import shallow, tracked

import vitprune
from vitprune.errors import VitpruneError
from vitprune.surgery import prune_mlp_neurons, recorded_classes, replace_head

CLASSES = ["cat", "dog", "fox"]


def test_every_family_gets_new_heads_that_save_and_reload(tmp_path, small_model_spec):
    name, kwargs = small_model_spec
    model = tracked(name, shallow(name, kwargs, 2))
    adapter = vitprune.get_adapter(model)
    heads = max(len(adapter.classifier_heads()), 1)  # dinov2's row has none: reset_classifier(0)
    prune_mlp_neurons(model, 0, [0, 1, 2])  # the head follows whatever edits came first
    replace_head(model, 3, CLASSES)
    x = torch.randn(2, *adapter.input_size)
    assert adapter.num_classes == 3 and recorded_classes(model) == CLASSES
    new = adapter.classifier_heads()
    assert len(new) == heads and all((h.out_features, h.in_features) == (3, adapter.num_features) for h in new)
    with torch.no_grad():
        assert torch.equal(model(x), torch.zeros(2, 3))  # zero heads, as the ViT paper fine-tunes
        for head in new:
            head.weight.normal_()
            head.bias.normal_()
        expected = model(x)
    vitprune.save(model, tmp_path / "saved")
    loaded = vitprune.load(tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(loaded(x), expected)
    assert recorded_classes(loaded) == CLASSES
    assert vitprune.get_recipe(loaded).edits[-1].args == {"num_classes": 3, "classes": CLASSES}


def test_recorded_classes_follow_the_last_head():
    model = tracked("deit_tiny_patch16_224", {"depth": 1, "img_size": 32})
    assert recorded_classes(model) is None
    replace_head(model, 3, CLASSES)
    replace_head(model, 2)
    assert recorded_classes(model) is None and vitprune.get_adapter(model).num_classes == 2


@pytest.mark.parametrize("args, message", [
    ((0,), "^a classifier head needs at least 1 class, got 0$"),
    ((2, CLASSES), "^3 class names for a head of 2 classes$"),
])
def test_bad_heads_are_refused(args, message):
    model = tracked("deit_tiny_patch16_224", {"depth": 1, "img_size": 32})
    with pytest.raises(VitpruneError, match=message):
        replace_head(model, *args)
    assert vitprune.get_recipe(model).edits == []
