"""The methods' reports: their fields are the keys of the files the runs write, in the order they always had, and a
report comes back from its JSON form (the pipeline tests check each report a run returns against the file it wrote)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from vitprune.errors import VitpruneError
from vitprune.methods.chain import ChainReport
from vitprune.methods.depth import DepthReport
from vitprune.methods.hetdpt.pipeline import HetDPTReport
from vitprune.methods.hiap import HiAPReport
from vitprune.methods.star.pipeline import STARReport
from vitprune.methods.vbp.pipeline import VBPReport
from vitprune.methods.width.pipeline import WidthReport

#: The tail every pruning pipeline's report ends with.
_MEASURED = ["top1", "dense", "pruned", "mac_conventions", "speed", "seconds", "config", "model_dir"]

#: ``report.json``'s keys, in order, as each method has always written them; for depth and width pruning, the keys
#: ``--json`` prints (the saved model's metadata holds them but for ``speed``).
FILE_FORMATS = {
    HetDPTReport: ["budget", "split", "attention", "activation", "merged_blocks", "predictor", "selection",
                   *_MEASURED],
    VBPReport: ["ratio", "criterion", "compensate", "removed", "widths", "widths_dense", "top1", "retention",
                *_MEASURED[1:]],
    STARReport: ["rho", "alpha", "adaptive", "keep_rates", "acs", "top1", "retention", *_MEASURED[1:]],
    HiAPReport: ["target_macs", "threshold", "macs_predicted", "heads", "neurons", "ffn_closed", "layers",
                 *_MEASURED[:-1], "train", "history", "model_dir", "plot"],
    ChainReport: ["steps", "top1", "dense", "pruned", "mac_conventions", "consistency", "speed", "seconds", "chain",
                  "model_dir"],
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
