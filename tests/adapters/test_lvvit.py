"""LV-ViT: the model computes what the original architecture computes, loads the original checkpoint layout and counts
its MACs as FlopCounterMode does at the released sizes (its command-line refusals: tests/cli/test_lvvit_models.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import LVVIT_TINY

import vitprune
from vitprune.errors import RecipeError
from vitprune.measure import count_macs, flop_counter_macs


def _original_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A tiny LV-ViT's weights in the original layout (no LayerScale: the original divides by skip_lam), with
    BatchNorm statistics and biases drawn so that no path hides."""
    torch.manual_seed(seed)
    state = {k: v for k, v in vitprune.create_model("lvvit-s", **LVVIT_TINY).state_dict().items()
             if ".ls1." not in k and ".ls2." not in k}
    for key, value in state.items():
        if key.endswith("running_var"):
            state[key] = torch.rand_like(value) + 0.5
        elif key.endswith(("running_mean", "bias")):
            state[key] = 0.1 * torch.randn_like(value)
    return state


def _reference(state: dict[str, torch.Tensor], x: torch.Tensor, heads: int, skip_lam: float = 2.0) -> torch.Tensor:
    """LV-ViT's evaluation forward written from the paper's description (not vitprune's modules): the convolutional
    stem, pre-norm blocks whose branches are divided by skip_lam, LayerNorm eps 1e-5, and the class logits plus half
    the maximum over patch tokens of the token-labelling logits."""
    def bn(t, name):
        return F.batch_norm(t, state[f"{name}.running_mean"], state[f"{name}.running_var"], state[f"{name}.weight"],
                            state[f"{name}.bias"], training=False, eps=1e-5)

    def ln(t, name):
        return F.layer_norm(t, t.shape[-1:], state[f"{name}.weight"], state[f"{name}.bias"], eps=1e-5)

    def linear(t, name):
        return F.linear(t, state[f"{name}.weight"], state.get(f"{name}.bias"))

    x = F.relu(bn(F.conv2d(x, state["patch_embed.conv1.weight"], stride=2, padding=3), "patch_embed.bn1"))
    x = F.relu(bn(F.conv2d(x, state["patch_embed.conv2.weight"], padding=1), "patch_embed.bn2"))
    x = F.relu(bn(F.conv2d(x, state["patch_embed.conv3.weight"], padding=1), "patch_embed.bn3"))
    proj = state["patch_embed.proj.weight"]
    x = F.conv2d(x, proj, state["patch_embed.proj.bias"], stride=proj.shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([state["cls_token"].expand(len(x), -1, -1), x], dim=1) + state["pos_embed"]
    depth = len({key.split(".")[1] for key in state if key.startswith("blocks.")})
    for i in range(depth):
        h = ln(x, f"blocks.{i}.norm1")
        b, n, d = h.shape
        q, k, v = linear(h, f"blocks.{i}.attn.qkv").reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        attn = ((q * (d // heads) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        x = x + linear((attn @ v).transpose(1, 2).reshape(b, n, d), f"blocks.{i}.attn.proj") / skip_lam
        h = linear(F.gelu(linear(ln(x, f"blocks.{i}.norm2"), f"blocks.{i}.mlp.fc1")), f"blocks.{i}.mlp.fc2")
        x = x + h / skip_lam
    x = ln(x, "norm")
    return linear(x[:, 0], "head") + 0.5 * linear(x[:, 1:], "aux_head").max(dim=1).values


def test_an_original_checkpoint_loads_and_computes_what_the_original_does(tmp_path):
    state = _original_state()
    path = tmp_path / "lvvit.pth"
    torch.save(state, path)
    model = vitprune.create_model("lvvit-s", checkpoint=path, **LVVIT_TINY)
    x = torch.randn(3, *vitprune.get_adapter(model).input_size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _reference(state, x, heads=LVVIT_TINY["num_heads"]), rtol=1e-5,
                                   atol=1e-5)
    assert vitprune.get_recipe(model).base.weights == f"checkpoint:{path}"
    # skip_lam is a constant of the architecture: its LayerScales are not trained.
    blocks = vitprune.get_adapter(model).blocks()
    assert all(not view.ls1.gamma.requires_grad and not view.ls2.gamma.requires_grad for view in blocks)
    report = count_macs(model)
    assert report.params - report.trainable_params == 2 * LVVIT_TINY["depth"] * LVVIT_TINY["embed_dim"]


def test_a_mismatched_checkpoint_names_the_first_bad_key(tmp_path):
    state = _original_state()
    del state["aux_head.weight"]
    torch.save(state, tmp_path / "short.pth")
    with pytest.raises(RecipeError, match=r"1 missing \(first: aux_head.weight\)"):
        vitprune.create_model("lvvit-s", checkpoint=tmp_path / "short.pth", **LVVIT_TINY)
    state = _original_state()
    state["head.weight"] = state["head.weight"][:5]
    torch.save(state, tmp_path / "wide.pth")
    with pytest.raises(RecipeError, match=r"head.weight has shape \(5, 64\), the model expects \(10, 64\)"):
        vitprune.create_model("lvvit-s", checkpoint=tmp_path / "wide.pth", **LVVIT_TINY)


def test_the_token_labelling_head_is_a_token_head():
    """The adapter shows the token-labelling head as a token head (its maximum over the patches, halved, adds to the
    class head's logits), so relevance follows both (tests/methods/star/test_lrp.py); the class-head model has none."""
    model = vitprune.create_model("lvvit-s", **LVVIT_TINY)
    adapter = vitprune.get_adapter(model)
    assert adapter.token_head.linear is model.aux_head and adapter.token_head.weight == 0.5
    assert adapter.pools_class_token and "lrp" in adapter.capabilities
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tokens = adapter.embed(x)
        for view in adapter.blocks():
            tokens = view.module(tokens)
        patches = adapter.patch_features(tokens)
        assert patches.shape == (2, 16, 64)
        torch.testing.assert_close(model(x), model.head(adapter.pool(tokens)) + 0.5 * model.aux_head(patches).amax(1))
    assert vitprune.get_adapter(vitprune.create_model("lvvit-s-cls", **LVVIT_TINY)).token_head is None


def test_the_class_head_model_loads_an_original_checkpoint_without_its_token_labelling_head(tmp_path):
    state = _original_state()
    torch.save(state, tmp_path / "lvvit.pth")
    model = vitprune.create_model("lvvit-s-cls", checkpoint=tmp_path / "lvvit.pth", **LVVIT_TINY)
    x = torch.randn(2, *vitprune.get_adapter(model).input_size)
    cls_only = {k: v for k, v in state.items() if not k.startswith("aux_head.")}
    with torch.no_grad():
        features = model.forward_features(x)
        torch.testing.assert_close(model(x), F.linear(features[:, 0], cls_only["head.weight"], cls_only["head.bias"]))
    assert vitprune.get_adapter(model).classifier_heads() == [model.head]


@pytest.mark.slow
@pytest.mark.parametrize("name, params, macs_full, macs_linear", [
    ("lvvit-s", 26_164_112, 6_551_485_440, 6_074_600_448),
    ("lvvit-m", 55_851_024, 12_678_045_696, 11_883_237_376),
])
def test_released_sizes_count_as_flop_counter_mode(name, params, macs_full, macs_linear):
    """The released architectures at 224 px. Their constant LayerScales (2 × depth × width) are parameters here and
    not in the original's count: LV-ViT-S has 26,151,824 without them (the paper: 26M), and STAR's tables give
    6.5 and 12.6 GFLOPs for S and M."""
    model = vitprune.create_model(name)
    report = count_macs(model)
    assert (report.params, report.totals()["macs_full"], report.totals()["macs_linear"]) == (
        params, macs_full, macs_linear)
    assert report.params == sum(p.numel() for p in model.parameters())
    assert flop_counter_macs(model, torch.randn(1, 3, 224, 224)) == macs_full
