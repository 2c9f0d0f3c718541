"""Two-method chains on the digits model stay consistent: MACs = FlopCounterMode, exact save/load, the recipe
rebuilds the architecture, ONNX agrees where the structure is static; orders that cannot apply say so."""

from __future__ import annotations

import pytest
import torch
from conftest import random_hiap_gates

import vitprune
from vitprune.consistency import check_consistency
from vitprune.errors import UnsupportedArchitectureError
from vitprune.methods.hiap.extract import extract
from vitprune.surgery import compensate_mean_shift, prune_depth, prune_mlp_neurons, prune_tokens


def _digits():
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit")
    with torch.no_grad():  # untrained biases are 0, which would hide the bias paths
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.05)
    return model


def _depth(model):
    prune_depth(model, attention=[1, 4], activation=[2, 4, 9], fold_norm=True)


def _width(model):
    pytest.importorskip("torch_pruning")
    from vitprune.methods.width import prune_width

    prune_width(model, 0.3)


def _vbp(model):
    view = vitprune.get_adapter(model).block(5)
    hidden = view.mlp.hidden_features
    removed = list(range(0, hidden, 2))
    compensate_mean_shift(model, 5, removed, torch.linspace(-1, 1, hidden))
    prune_mlp_neurons(model, 5, [i for i in range(hidden) if i not in removed])


def _hiap(model):
    gates = random_hiap_gates(model)
    with torch.no_grad():
        gates.head[2][:] = -1.0
        gates.block[6].fill_(-1.0)
        gates.head[3][0] = 3.0  # block 3 keeps a head, so token pruning there has a [CLS] row
    extract(model, gates)
    assert vitprune.get_adapter(model).block(3).attn.value_dims is not None  # uneven heads where tokens are pruned


def _tome(model):
    from vitprune.methods.tome import apply_merging

    apply_merging(model, [2] * len(vitprune.get_adapter(model).blocks()))  # blocks without attention merge none


def _star(model):
    for block, rate in ((3, 0.7), (7, 0.6)):
        prune_tokens(model, block, rate)


CHAINS = {
    "depth-width": (_depth, _width),
    "depth-star": (_depth, _star),
    "vbp-star": (_vbp, _star),
    "hiap-star": (_hiap, _star),
    "width-star": (_width, _star),
    "depth-vbp": (_depth, _vbp),
    "depth-tome": (_depth, _tome),
}


# Each chain exports to ONNX (5-12 s): the full suite runs them; the fast lane's chains are tests/test_export.py's.
@pytest.mark.slow
@pytest.mark.parametrize("chain", list(CHAINS))
def test_two_method_chain_stays_consistent(chain, tmp_path):
    model = _digits()
    for step in CHAINS[chain]:
        step(model)
    report = check_consistency(model, directory=tmp_path)
    assert report.ok, report.to_dict()
    assert report.onnx_max_diff is not None and report.macs_counted > 0


def test_adaptive_token_pruning_skips_onnx_with_the_reason(tmp_path):
    model = _digits()
    _depth(model)
    prune_tokens(model, 6, 0.8, adaptive=True)
    report = check_consistency(model, directory=tmp_path)
    assert report.ok and report.onnx_max_diff is None
    assert report.onnx_skipped == "blocks.6 keeps a per-image number of tokens (a-STAR)"


def test_orders_that_cannot_apply_say_why():
    model = _digits()
    _depth(model)
    with pytest.raises(ValueError, match="block 2 has no MLP hidden neurons to prune"):
        prune_mlp_neurons(model, 2, [0, 1])  # merged into one D×D Linear by depth surgery
    _star(model)
    with pytest.raises(ValueError, match="blocks.3 reduces tokens; depth surgery on such a block is not supported"):
        prune_depth(model, attention=[3])


#: What the second method says when it cannot follow the first (docs/composition.md's table); absent: it applies.
_CANNOT = {
    ("depth", "hiap"): "HiAP gates blocks.1's heads and neurons",
    ("star", "width"): "blocks.3 reduces tokens; prune width before tokens",
    ("star", "hiap"): "HiAP gates blocks.3's heads and neurons",
    ("hiap", "width"): r"blocks.\d+.attn has uneven or gated heads; torch-pruning cannot trace it",
    ("hiap", "hiap"): r"HiAP gates blocks.\d+'s heads and neurons",
}
_SECOND = {"depth": lambda m: prune_depth(m, attention=[5], activation=[8]), "width": _width, "star": _star,
           "vbp": _vbp, "hiap": _hiap}


@pytest.mark.parametrize("first", _SECOND)
@pytest.mark.parametrize("second", _SECOND)
def test_every_pair_of_methods_applies_or_says_why(first, second):
    model = _digits()
    (_depth if first == "depth" else _SECOND[first])(model)
    if (first, second) in _CANNOT:
        with pytest.raises(UnsupportedArchitectureError, match=_CANNOT[first, second]):
            _SECOND[second](model)
        return
    if first == second == "star":
        prune_tokens(model, 3, 0.5)  # a second STAR pass sets new rates
    else:
        _SECOND[second](model)
    assert check_consistency(model, onnx=False).ok
