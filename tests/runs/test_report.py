"""The methods' reports: their fields are the keys of the files the runs write (what every run measured first, then
the method's own), and a report comes back from its JSON form (the pipeline tests check each report a run returns against the file it wrote)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from vitprune.errors import VitpruneError
from vitprune.methods.depth import DepthReport
from vitprune.methods.hetdpt.pipeline import HetDPTReport
from vitprune.methods.hiap import HiAPReport
from vitprune.methods.star.pipeline import STARReport
from vitprune.methods.vbp.pipeline import VBPReport
from vitprune.methods.width.pipeline import WidthReport
from vitprune.runs.chain import ChainReport

#: What every run measured (:class:`~vitprune.runs.report.RunReport`), first in each run's report.
_MEASURED = ["top1", "dense", "pruned", "mac_conventions", "speed", "seconds", "model_dir"]

#: ``report.json``'s keys, in order: the measured ones, then the method's own; for depth and width pruning, the keys
#: ``--json`` prints (the saved model's metadata holds them but for ``speed``).
FILE_FORMATS = {
    HetDPTReport: [*_MEASURED, "budget", "split", "attention", "activation", "merged_blocks", "predictor",
                   "selection", "config"],
    VBPReport: [*_MEASURED, "ratio", "criterion", "compensate", "removed", "widths", "widths_dense", "retention",
                "config"],
    STARReport: [*_MEASURED, "rho", "alpha", "adaptive", "keep_rates", "acs", "retention", "config"],
    HiAPReport: [*_MEASURED, "target_macs", "threshold", "macs_predicted", "heads", "neurons", "ffn_closed", "layers",
                 "config", "train", "history", "plot"],
    ChainReport: [*_MEASURED, "steps", "consistency", "chain"],
    DepthReport: ["model", "out", "attention", "activation", "identity", "fold_norm", "output_gelu", "before", "after",
                  "speed"],
    WidthReport: ["model", "out", "ratio", "target_gmacs", "convention", "options", "taylor_images", "plan", "before",
                  "after", "speed"],
}


@pytest.mark.parametrize("cls", FILE_FORMATS, ids=lambda cls: cls.__name__)
def test_the_fields_are_the_file_format_and_come_back_from_it(cls):
    names = [f.name for f in fields(cls)]
    assert names == FILE_FORMATS[cls]
    report = cls(**{name: {"value of": [name, i]} for i, name in enumerate(names)})
    data = report.to_dict()
    assert list(data) == names and data[names[0]] == {"value of": [names[0], 0]}
    assert cls.from_dict(data) == report
    data[names[0]]["value of"].append("changed")  # the JSON form is a copy: editing it leaves the report alone
    assert report.to_dict()[names[0]] == {"value of": [names[0], 0]}


def test_a_dict_that_is_not_the_report_is_one_line():
    data = {f.name: None for f in fields(VBPReport)}
    del data["ratio"], data["widths"]
    with pytest.raises(VitpruneError, match="^not a VBPReport: missing ratio, widths; unknown model$"):
        VBPReport.from_dict({**data, "model": "digits-vit"})
    with pytest.raises(VitpruneError, match="^not a STARReport: unknown budget$"):
        STARReport.from_dict({**{f.name: None for f in fields(STARReport)}, "budget": 2})
