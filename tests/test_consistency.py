"""Two-method chains on the digits model stay consistent: MACs = FlopCounterMode, exact save/load, the recipe
rebuilds the architecture, ONNX agrees where the structure is static; orders that cannot apply say so."""

from __future__ import annotations

import pytest
import torch

import vitprune
from vitprune.consistency import check_consistency
from vitprune.methods.hiap import HiAPGates, layer_shapes
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
    gates = HiAPGates(layer_shapes(model))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in gates.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) + 0.8)
        gates.head[2][:] = -1.0
        gates.block[6].fill_(-1.0)
        for block in (3, 7):  # token pruning needs timm's own attention there: whole heads
            gates.dim[block].fill_(3.0)
            gates.head[block][0] = 3.0
    extract(model, gates)


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
}


@pytest.mark.parametrize("chain", CHAINS)
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
    with pytest.raises(ValueError, match="blocks.3 prunes tokens; depth surgery on such a block is not supported"):
        prune_depth(model, attention=[3])
