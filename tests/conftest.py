"""Shared fixtures: the supported-architecture matrix every exactness test runs over."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

# Tests never reach the network: huggingface_hub reads this when first imported (by timm), so set it first.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# No example database: a test never depends on what an earlier run left behind. CI draws the same examples each
# run; a developer's runs draw new ones.
settings.register_profile("vitprune", database=None, deadline=None, derandomize=bool(os.environ.get("CI")),
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("vitprune")

#: (test id, timm name, constructor kwargs, fast). Covers one/two/zero prefix tokens, LayerScale, GAP, four widths.
#: The fast lane runs the fast rows; the others (224 px at widths 384-768) run only in the full suite.
SUPPORTED_MODELS = [
    ("deit_tiny", "deit_tiny_patch16_224", {}, True),
    ("deit_tiny_distilled", "deit_tiny_distilled_patch16_224", {}, True),
    ("dinov2_small_ls", "vit_small_patch14_dinov2", {"img_size": 56}, True),
    ("deit_small", "deit_small_patch16_224", {}, False),
    ("deit_base", "deit_base_patch16_224", {}, False),
    ("deit_small_distilled", "deit_small_distilled_patch16_224", {}, False),
    ("vit_base_gap", "vit_base_patch16_gap_224", {"img_size": 112}, False),
]

#: Hugging Face transformers rows (family ``hf:``, then the classifier class): tiny models built from a config and
#: saved with ``save_pretrained`` (:func:`build`); twelve layers, so that tests pick the same block indices as above.
HF_TINY = {"hidden_size": 64, "num_hidden_layers": 12, "num_attention_heads": 4, "intermediate_size": 256,
           "image_size": 32, "patch_size": 8, "num_labels": 10}
SUPPORTED_MODELS += [
    ("hf_vit", "hf:ViTForImageClassification", HF_TINY, True),
    ("hf_deit", "hf:DeiTForImageClassification", HF_TINY, True),
    ("hf_deit_teacher", "hf:DeiTForImageClassificationWithTeacher", HF_TINY, True),
]

#: vitprune's own families (``vitprune:`` then the model name), with tiny configurations of the same classes.
LVVIT_TINY = {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 12, "num_heads": 4, "stem_channels": 8,
              "num_classes": 10}
SUPPORTED_MODELS += [
    ("lvvit_tiny", "vitprune:lvvit-s", LVVIT_TINY, True),
]
#: timm's ConvNeXt at tiny widths: twelve blocks in four stages, 32 px; a layer scale of 1 (timm starts it at 1e-6,
#: which would hide every MLP below the tests' tolerances).
CONVNEXT_TINY = {"depths": (3, 3, 3, 3), "dims": (8, 16, 32, 64), "num_classes": 10, "ls_init_value": 1.0,
                 "pretrained_cfg_overlay": {"input_size": (3, 32, 32)}}
SUPPORTED_MODELS += [
    ("convnext_tiny", "convnext_tiny", CONVNEXT_TINY, True),
    # The 1x1-convolution MLP, which the factory (and build) prepare into the Linear MLP it equals.
    ("convnext_tiny_conv_mlp", "convnext_tiny", {**CONVNEXT_TINY, "conv_mlp": True}, True),
]
#: timm's Swin at tiny widths: twelve blocks in Swin-T's four stages (2, 2, 6, 2), 32 px in 2-px patches, windows of 4
#: tokens a side, so that the first two stages' odd blocks shift their windows (with the mask) and the last stage's
#: 2x2 map shrinks its window to fit.
SWIN_TINY = {"img_size": 32, "patch_size": 2, "embed_dim": 16, "depths": (2, 2, 6, 2), "num_heads": (2, 4, 4, 8),
             "window_size": 4, "num_classes": 10, "pretrained_cfg_overlay": {"input_size": (3, 32, 32)}}
SUPPORTED_MODELS += [
    ("swin_tiny", "swin_tiny_patch4_window7_224", SWIN_TINY, True),
]

#: The fast rows, for tests that build many models: one, two and zero-plus-registers prefix tokens, LayerScale,
#: and each Hugging Face classifier.
SMALL_MODELS = [m for m in SUPPORTED_MODELS if m[3]]


def _family(name: str) -> type:
    from vitprune.adapters import ConvNeXtAdapter, HFViTAdapter, LVViTAdapter, SwinAdapter, TimmViTAdapter

    if name.startswith(VITPRUNE_PREFIX):
        return LVViTAdapter
    if name.startswith("convnext"):
        return ConvNeXtAdapter
    if name.startswith("swin"):
        return SwinAdapter
    return HFViTAdapter if name.startswith(HF_PREFIX) else TimmViTAdapter


def _params(models, needs: tuple[str, ...]):
    """One parameter per row whose family has the capabilities ``needs``: a test that needs, say, token pruning
    runs on every family that can prune tokens (the others' refusals are tested in tests/adapters)."""
    return [pytest.param((name, kwargs), id=mid, marks=() if fast else pytest.mark.slow)
            for mid, name, kwargs, fast in models if set(needs) <= _family(name).capabilities]


def pytest_generate_tests(metafunc):
    """Parametrise ``model_spec`` over every supported model (the large ones marked slow) and ``small_model_spec``
    over the fast rows, both less the families that lack what the test's ``needs`` marker names."""
    needs = tuple(arg for mark in metafunc.definition.iter_markers("needs") for arg in mark.args)
    if "model_spec" in metafunc.fixturenames:
        metafunc.parametrize("model_spec", _params(SUPPORTED_MODELS, needs))
    if "small_model_spec" in metafunc.fixturenames:
        metafunc.parametrize("small_model_spec", _params(SMALL_MODELS, needs))


#: An unmarked test that takes longer than this (setup, call and teardown together) belongs in the slow lane.
SLOW_SECONDS = 10.0


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name every test not marked ``slow`` that took over :data:`SLOW_SECONDS`, so the fast lane cannot grow slow
    unnoticed (a report, not a failure: timings vary by machine)."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport) and "slow" not in report.keywords:
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
    over = sorted(((t, nodeid) for nodeid, t in seconds.items() if t > SLOW_SECONDS), reverse=True)
    terminalreporter.section(f"unmarked tests over {SLOW_SECONDS:g} s")
    if not over:
        terminalreporter.write_line(f"none: every test over {SLOW_SECONDS:g} s is marked slow")
    for t, nodeid in over:
        terminalreporter.write_line(f"{t:6.1f} s  {nodeid}  (mark it slow or make it faster)")


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Tests never read or write the user's cache: VITPRUNE_CACHE points at one directory per session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VITPRUNE_CACHE", str(tmp_path_factory.mktemp("vitprune-cache")))
        yield


@pytest.fixture(scope="session")
def _trained_digits_session():
    from vitprune.models.zoo import trained_digits_vit

    return trained_digits_vit(progress=False)


@pytest.fixture
def trained_digits(request):
    """The embedded default, trained once per session into the session cache (about a minute on 2 cores), for
    tests marked ``slow`` only: the fast lane builds its models in the test."""
    if request.node.get_closest_marker("slow") is None:
        pytest.fail(f"{request.node.nodeid} uses the trained digits model (a minute of training): mark it slow")
    return request.getfixturevalue("_trained_digits_session")


HF_PREFIX = "hf:"
VITPRUNE_PREFIX = "vitprune:"
_HF_SAVES: dict[tuple, Path] = {}


def build(name: str, kwargs: dict, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised model in eval mode (deterministic for a seed): a timm model, for ``vitprune:NAME`` one
    of vitprune's own (with its recipe), or for ``hf:CLASS`` a transformers classifier built from ``kwargs`` as its
    config, saved with ``save_pretrained`` and loaded from there as a user's model is (with its recipe)."""
    if name.startswith(VITPRUNE_PREFIX):
        from vitprune.models import create_model

        torch.manual_seed(seed)
        return create_model(name.removeprefix(VITPRUNE_PREFIX), **kwargs).eval()
    if not name.startswith(HF_PREFIX):
        from vitprune.adapters import prepare_model

        torch.manual_seed(seed)
        return prepare_model(timm.create_model(name, pretrained=False, **kwargs)).eval()
    from vitprune.models.factory import resolve_model

    key = (name, tuple(sorted(kwargs.items())), seed)
    if key not in _HF_SAVES:
        directory = Path(os.environ["VITPRUNE_CACHE"]) / "hf-test-models" / str(len(_HF_SAVES))
        _HF_SAVES[key] = save_hf(directory, name.removeprefix(HF_PREFIX), kwargs, seed)
    return resolve_model(str(_HF_SAVES[key])).eval()


def save_hf(directory: Path, architecture: str, config: dict, seed: int = 0) -> Path:
    """A randomly initialised transformers model (class name ``architecture``, ``config`` its config's fields) saved
    with ``save_pretrained`` to ``directory``, as a user's model arrives."""
    import transformers

    cls = getattr(transformers, architecture)
    torch.manual_seed(seed)
    cls(cls.config_class(architectures=[architecture], **config)).save_pretrained(directory)
    return directory


def benchmark_module(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module; the scripts import their siblings, so ``benchmarks/`` is on the
    path while it is imported."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
        return importlib.import_module(name)


def shallow(name: str, kwargs: dict, blocks: int) -> dict:
    """A row's ``kwargs`` for the same family with fewer blocks: ``blocks`` of them, or for ConvNeXt, whose stages
    each need one, one per stage."""
    if name.startswith(HF_PREFIX):
        return {**kwargs, "num_hidden_layers": blocks}
    if "depths" in kwargs:
        return {**kwargs, "depths": (1,) * len(kwargs["depths"])}
    return {**kwargs, "depth": blocks}


def tracked(name: str, kwargs: dict, seed: int = 0) -> torch.nn.Module:
    """:func:`build`'s model with a recipe, so that it can be pruned and saved."""
    from vitprune.recipe import get_recipe, track

    model = build(name, kwargs, seed)
    return model if get_recipe(model) is not None else track(model, name, **kwargs)


def random_hiap_gates(model: torch.nn.Module, seed: int = 1):
    """HiAP gates for ``model`` with logits drawn around +0.8 (most units open, some closed), for extraction tests."""
    from vitprune.methods.hiap import HiAPGates, layer_shapes

    gates = HiAPGates(layer_shapes(model))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in gates.parameters():
            if p.requires_grad:  # value gates a family cannot use (Swin's) stay open
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


def quick_context(run_dir: Path, **options):
    """A method's run context with a short timing, for tests that do not check the timing."""
    from vitprune.measure import SpeedConfig
    from vitprune.runs import RunContext

    return RunContext(run_dir, **{"speed": SpeedConfig(batch_size=4, pairs=3), **options})


def claim_holder(out: Path) -> subprocess.Popen:
    """Another process that claims ``out`` (``vitprune.runs.claim``) and holds it until its input closes or it is
    killed; it imports no torch, so it starts at once."""
    script = textwrap.dedent(f"""
        import sys
        from vitprune.runs.claim import claimed
        with claimed({str(out)!r}):
            print("held", flush=True)
            sys.stdin.read()
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def max_diff(a, b) -> float:
    """The largest absolute difference, in float64, between two numbers or tensors of one shape, or two equally keyed
    dicts or equally long lists of them, nested (empty tensors count 0): how far a multi-process result is from one
    process's."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((max_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return max((max_diff(x, y) for x, y in zip(a, b)), default=0.0)
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape
    return float((a - b).abs().max()) if a.numel() else 0.0


#: Variables torchrun sets; a test launching its own torchrun must not inherit them.
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_command(script: Path | str, *args: str, nproc: int = 2) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``torchrun --nproc_per_node nproc script args`` on CPU (gloo, loopback
    only, a free port, one thread each); a ``script`` of ``-m`` runs the module ``args[0]``."""
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
    return command, env


def run_torchrun(script: Path | str, *args: str, nproc: int = 2, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``script`` under ``torchrun --nproc_per_node nproc`` (:func:`torchrun_command`). Returns the finished
    process, its output captured."""
    command, env = torchrun_command(script, *args, nproc=nproc)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout}\n{proc.stderr}"
    return proc
