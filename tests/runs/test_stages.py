"""The pipelines' shared stages: a stage's value cached in the run directory for resuming, recovery's best epoch."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import quick_context
from interrupts import Batches
from torch.utils.data import Subset

import vitprune
from vitprune.data import DigitsDataset, build_dataset, build_loader
from vitprune.errors import VitpruneError
from vitprune.measure import SpeedConfig
from vitprune.measure.target import MacTarget
from vitprune.runs import MethodData
from vitprune.runs.method import get_method
from vitprune.runs.stages import Stages, cached, recover
from vitprune.training import TrainConfig
from vitprune.training.engine import METRICS_FILE


def test_cached_computes_writes_reads_back_and_recomputes_a_stale_file(tmp_path):
    path = tmp_path / "stage.json"
    computed = []

    def compute() -> dict:
        computed.append(len(computed))
        return {"value": len(computed)}

    def run(resume: bool, read=lambda: json.loads(path.read_text())) -> dict:
        return cached(path, resume, read, compute, lambda value: path.write_text(json.dumps(value)))

    assert run(resume=True) == {"value": 1}  # nothing to resume from: computed and written
    assert json.loads(path.read_text()) == {"value": 1}
    assert run(resume=True) == {"value": 1} and len(computed) == 1  # read back, not recomputed
    assert run(resume=False) == {"value": 2}  # without resume the file is not looked at
    assert run(resume=True, read=lambda: None) == {"value": 3}  # read found it stale: recomputed, overwritten
    assert json.loads(path.read_text()) == {"value": 3} and len(computed) == 3


def test_the_best_epoch_of_a_resumed_recovery_counts_the_epochs_before_the_interrupt(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=2)
    train, val = Subset(DigitsDataset("train"), range(32)), Subset(DigitsDataset("val"), range(16))

    def run(resume: bool) -> dict:
        return recover(Stages(), model, model, train, build_loader(val, 16, shuffle=False, seed=0),
                       TrainConfig(epochs=2, lr=1e-3, batch_size=16), val_set=val, distill="none", alpha=0.5, tau=1.0,
                       run_dir=tmp_path, device=torch.device("cpu"), progress=False, resume=resume)

    with monkeypatch.context() as patch:
        Batches(patch, stop=3)  # epoch 2's second batch: epoch 1 is logged
        with pytest.raises(KeyboardInterrupt):
            run(resume=False)
    log = tmp_path / METRICS_FILE
    first = json.loads(log.read_text())
    log.write_text(json.dumps({**first, "val_top1": 1.0}) + "\n")  # marked the best, as no real epoch here is
    assert run(resume=True)["finetune_best"] == 1.0


def test_a_resumed_run_must_start_from_the_same_weights(tmp_path):
    """Stage files are computed from the starting weights: another seed's random model may not resume them."""
    from vitprune.errors import VitpruneError
    from vitprune.runs.stages import START_FILE, prepare_run_dir, weights_fingerprint

    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=1)
    run_dir = prepare_run_dir(tmp_path / "run", resume=False, start=model, seed=3)
    assert json.loads((run_dir / START_FILE).read_text()) == {"weights": weights_fingerprint(model), "seed": 3}
    (run_dir / "stage.json").write_text("{}")
    assert prepare_run_dir(run_dir, resume=True, start=model, seed=3) == run_dir
    with pytest.raises(VitpruneError, match=r"cannot resume .*run: it ran with --seed 3, not 4$"):
        prepare_run_dir(run_dir, resume=True, start=model, seed=4)
    torch.manual_seed(1)
    other = vitprune.create_model("digits-vit", depth=1)
    with pytest.raises(VitpruneError, match=r"cannot resume .*run: it started from other weights \(another MODEL, "
                                            r"--checkpoint or --seed\)"):
        prepare_run_dir(run_dir, resume=True, start=other, seed=3)
    with pytest.raises(VitpruneError, match="is not empty; pass --resume"):
        prepare_run_dir(run_dir, resume=False, start=model)


def test_the_fingerprint_takes_scalar_buffers_and_tells_weights_apart():
    from vitprune.runs.stages import weights_fingerprint

    model = torch.nn.BatchNorm1d(3)  # num_batches_tracked: a 0-d int64 buffer
    before = weights_fingerprint(model)
    assert before == weights_fingerprint(model)
    with torch.no_grad():
        model.weight[0] = 2.0
    assert weights_fingerprint(model) != before


#: Per method that keeps a stage's tensors for later runs: its settings on a tiny model, the setting that gives an
#: earlier run's file, the file, where its computation lives and one of the settings that decide it (with another
#: value).
_TAKEN = {
    "star": ({"alpha": 0.3, "acs_images": 16, "lrp_images": 8, "classes": 2, "finetune": None}, "prior",
             "inter.safetensors", "vitprune.methods.star.pipeline.inter_layer_scores", ("lrp_images", 4)),
    "vbp": ({"calibration_images": 32, "finetune": None}, "statistics", "statistics.safetensors",
            "vitprune.methods.vbp.pipeline.mlp_statistics", ("calibration_images", 16)),
}


@pytest.mark.parametrize("name", sorted(_TAKEN))
def test_a_run_takes_what_an_earlier_run_computed_on_the_same_model_and_refuses_another(name, tmp_path, monkeypatch):
    """An earlier run's stage tensors (STAR's LRP prior, VBP's statistics) give the model a run computing them gives,
    and are not computed again; from other weights or other settings they are refused in one line."""
    method = get_method(name)
    settings, option, file, computation, (setting, other) = _TAKEN[name]
    torch.manual_seed(0)
    model = vitprune.create_model("digits-vit", depth=3)
    size = vitprune.get_adapter(model).input_size
    # Calibration without augmentation, as the command line passes it: the earlier run's images are these.
    data = MethodData(*(build_dataset("digits", split, input_size=size) for split in ("train", "val")),
                      build_dataset("digits", "train", input_size=size, is_training=False))

    def run(out: str, share: float, **more):
        target = {"target_macs": MacTarget.relative(share)}
        config = method.config(**{**settings, **method.defaults(target), **target, **more})
        method.run(model, data, config, quick_context(tmp_path / out, speed=SpeedConfig(enabled=False)))
        return vitprune.load(tmp_path / out / "model").state_dict()

    run("first", 0.95)
    fresh = run("fresh", 0.9)
    earlier = str(tmp_path / "first" / file)
    with monkeypatch.context() as patch:
        patch.setattr(computation, lambda *a, **k: pytest.fail("computed again"))
        taken = run("taken", 0.9, **{option: earlier})
    assert taken.keys() == fresh.keys() and all(torch.equal(taken[k], fresh[k]) for k in fresh)
    assert (tmp_path / "taken" / file).read_bytes() == (tmp_path / "first" / file).read_bytes()
    with pytest.raises(VitpruneError, match=rf"other settings \({setting} "):
        run("other-settings", 0.9, **{option: earlier, setting: other})
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)
    with pytest.raises(VitpruneError, match=f"computed on other weights; leave {option} out"):
        run("other-weights", 0.9, **{option: earlier})
