"""Shared fixtures: the supported-architecture matrix every exactness test runs over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

# Tests never reach the network: huggingface_hub reads this when first imported (by timm), so set it first.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402

#: (test id, timm name, constructor kwargs). Covers one/two/zero prefix tokens, LayerScale, GAP, three widths.
SUPPORTED_MODELS = [
    ("deit_tiny", "deit_tiny_patch16_224", {}),
    ("deit_small", "deit_small_patch16_224", {}),
    ("deit_base", "deit_base_patch16_224", {}),
    ("deit_small_distilled", "deit_small_distilled_patch16_224", {}),
    ("dinov2_small_ls", "vit_small_patch14_dinov2", {"img_size": 56}),
    ("vit_base_gap", "vit_base_patch16_gap_224", {"img_size": 112}),
]

#: A cheap subset for tests that build many models.
SMALL_MODELS = [m for m in SUPPORTED_MODELS if m[0] in ("deit_tiny", "deit_small_distilled", "dinov2_small_ls")]


def _params(models):
    return [pytest.param(name, kwargs, id=mid) for mid, name, kwargs in models]


def pytest_generate_tests(metafunc):
    """Parametrise ``model_spec`` over every supported model and ``small_model_spec`` over the cheap subset."""
    if "model_spec" in metafunc.fixturenames:
        metafunc.parametrize("model_spec", [(n, k) for _, n, k in SUPPORTED_MODELS], ids=[m[0] for m in SUPPORTED_MODELS])
    if "small_model_spec" in metafunc.fixturenames:
        metafunc.parametrize("small_model_spec", [(n, k) for _, n, k in SMALL_MODELS], ids=[m[0] for m in SMALL_MODELS])


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Tests never read or write the user's cache: VITPRUNE_CACHE points at one directory per session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VITPRUNE_CACHE", str(tmp_path_factory.mktemp("vitprune-cache")))
        yield


@pytest.fixture(scope="session")
def trained_digits():
    """The embedded default, trained once per session into the session cache (about a minute on 2 cores)."""
    from vitprune.models.zoo import trained_digits_vit

    return trained_digits_vit(progress=False)


def build(name: str, kwargs: dict, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised timm model in eval mode (deterministic for a seed)."""
    torch.manual_seed(seed)
    return timm.create_model(name, pretrained=False, **kwargs).eval()


def random_hiap_gates(model: torch.nn.Module, seed: int = 1):
    """HiAP gates for ``model`` with logits drawn around +0.8 (most units open, some closed), for extraction tests."""
    from vitprune.methods.hiap import HiAPGates, layer_shapes

    gates = HiAPGates(layer_shapes(model))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gates.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) + 0.8)
    return gates


def digits_chain() -> torch.nn.Module:
    """A 4-block digits ViT after depth pruning (attention of block 1, GELU of block 2), a third of block 3's FFN
    neurons kept and static token pruning in block 2: a small model with every kind of static edit."""
    from vitprune import create_model
    from vitprune.surgery import prune_depth, prune_mlp_neurons, prune_tokens

    torch.manual_seed(0)
    model = create_model("digits-vit", depth=4)
    prune_depth(model, attention=[1], activation=[2])
    prune_mlp_neurons(model, 3, list(range(0, 192, 3)))
    prune_tokens(model, 2, 0.6)
    return model.eval()


#: Variables torchrun sets; a test launching its own torchrun must not inherit them.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def run_torchrun(script: Path, *args: str, nproc: int = 2, timeout: int = 300) -> None:
    """Run ``script`` under ``torchrun --nproc_per_node nproc`` on CPU (gloo, loopback only, one thread each)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {name: value for name, value in os.environ.items() if name not in TORCHRUN_VARS}
    # Two processes on two cores: more threads each would oversubscribe and slow torch down many times over.
    env["OMP_NUM_THREADS"] = "1"
    if sys.platform == "linux":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(port), str(script), *args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout}\n{proc.stderr}"
