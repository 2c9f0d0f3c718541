"""STAR's outputs as the code before the token-reduction capability computed them, on every family that prunes tokens:
``python tests/star_reference.py`` wrote ``tests/fixtures/star_outputs.safetensors`` at 68b735e (+ 2241ff2); the test
in ``tests/surgery/test_tokens.py`` recomputes them with the current code."""

from __future__ import annotations

from pathlib import Path

import torch

import vitprune
from vitprune.measure import count_macs
from vitprune.surgery import prune_tokens, set_token_prior

FIXTURE = Path(__file__).parent / "fixtures" / "star_outputs.safetensors"
#: Block -> (keep rate, alpha): a prior-weighted block, an attention-only one and a late one.
SCHEDULE = {2: (0.7, 0.15), 5: (0.5, 1.0), 9: (0.6, 0.3)}


def star_outputs(model: torch.nn.Module, adaptive: bool) -> torch.Tensor:
    """``model``'s logits for four seeded images after STAR's edits (:data:`SCHEDULE`, seeded priors)."""
    adapter = vitprune.get_adapter(model)
    gen = torch.Generator().manual_seed(3)
    for block, (rate, alpha) in SCHEDULE.items():
        prune_tokens(model, block, rate, alpha=alpha, adaptive=adaptive)
        set_token_prior(model, block, torch.rand(adapter.num_patches, generator=gen) + 0.01)
    images = torch.randn(4, *adapter.input_size, generator=gen)
    with torch.no_grad():
        out = model.eval()(images)
    return out.contiguous()


def main() -> None:
    from conftest import SMALL_MODELS, _family, tracked
    from safetensors.torch import save_file

    outputs = {}
    for mid, name, kwargs, _ in SMALL_MODELS:
        if "token_reduction" not in _family(name).capabilities:
            continue
        for adaptive in (False, True):
            model = tracked(name, kwargs)
            outputs[f"{mid}.{'adaptive' if adaptive else 'static'}"] = star_outputs(model, adaptive)
            if not adaptive:
                totals = count_macs(model).totals()
                outputs[f"{mid}.macs"] = torch.tensor([totals["macs_full"], totals["macs_linear"]])
    FIXTURE.parent.mkdir(exist_ok=True)
    save_file(outputs, str(FIXTURE))
    print(sorted(outputs))


if __name__ == "__main__":
    main()
