"""HetDPT's MAP: the paper's App. C.6 numbers reproduced; known surfaces recovered; errors, JSON and the figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vitprune import VitpruneError
from vitprune.methods.hetdpt import (
    PredictorFit, fit_predictor, load_predictor, plot_predictor, save_predictor, search_split,
)
from vitprune.methods.hetdpt.plots import _accuracy_levels

#: The 16 (a, t, top-1 %) points of the paper's reference code (App. C.6), DeiT-B with L = 12.
#: They, and not the 22-point Table 10, give the paper's fitted MAP (Eq. 8).
DEIT_B = [
    (1.00, 1.00, 81.8), (0.92, 1.00, 81.31), (0.83, 1.00, 80.9), (0.75, 1.00, 80.2), (0.67, 1.00, 78.2),
    (0.58, 1.00, 77.4), (1.00, 0.92, 81.26), (1.00, 0.83, 80.4), (1.00, 0.75, 78.9), (1.00, 0.67, 77.8),
    (1.00, 0.58, 76.7), (0.92, 0.92, 80.34), (0.92, 0.83, 80.03), (0.83, 0.83, 78.88), (0.83, 0.75, 78.08),
    (0.75, 0.75, 76.52),
]

L = 12
#: A 5 x 5 grid of pruned layer counts (0..4 of each type), as retained ratios.
GRID = [((L - n) / L, (L - g) / L) for n in range(5) for g in range(5)]


def _quadratic(m_a, m_g):
    """Accuracy in pruning ratios; on ``m_a + m_g = s`` it peaks at ``m_a = s/3``."""
    return 80 - 40 * m_a**2 - 20 * m_g**2


def _cubic(m_a, m_g):
    return 80 - 40 * m_a**2 - 20 * m_g**2 - 90 * m_g**3 + 30 * m_a * m_g**2


def _sample(truth, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return [(a, t, truth(1 - a, 1 - t) + noise * rng.standard_normal()) for a, t in GRID]


@pytest.fixture(scope="module")
def deit_b():
    return fit_predictor(DEIT_B)


def test_paper_appendix_c6_fit(deit_b):
    assert deit_b.degree == 2
    assert (round(deit_b.mae, 4), round(deit_b.rmse, 4)) == (0.4066, 0.4870)
    assert deit_b.cv[2] == {"mae": deit_b.mae, "rmse": deit_b.rmse}
    assert min(deit_b.cv, key=lambda d: deit_b.cv[d]["rmse"]) == 2 and sorted(deit_b.cv) == [1, 2, 3, 4]
    expected = {(0, 0): 31.684374, (1, 0): 50.653461, (0, 1): 39.298158,
                (2, 0): -19.795489, (1, 1): -8.338992, (0, 2): -11.704586}
    assert {term: round(deit_b.coefficient(*term), 6) for term in expected} == expected
    assert deit_b.terms == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0)]  # the reference code's order
    assert deit_b.coefficient(3, 0) == 0.0


@pytest.mark.parametrize("budget, attention, predicted", [(6, 3, 76.739), (8, 4, 73.946), (10, 5, 70.600)])
def test_paper_deit_b_splits(deit_b, budget, attention, predicted):
    split = search_split(deit_b, budget, L)
    assert (split.attention, split.activation, round(split.predicted, 3)) == (attention, budget - attention, predicted)


def test_budget_line_and_min_per_type(deit_b):
    # Algorithm 3 allows pruning no layer of a type; the reference code prunes at least one of each.
    line = search_split(deit_b, 8, L).line
    assert [(s["attention"], round(s["predicted"], 3)) for s in line] == [
        (0, 71.562), (1, 72.640), (2, 73.397), (3, 73.832), (4, 73.946), (5, 73.738), (6, 73.208), (7, 72.356),
        (8, 71.183)]
    assert line[3] == {"attention": 3, "activation": 5, "a": 9 / 12, "t": 7 / 12, "predicted": line[3]["predicted"]}
    # The endpoints are not optimal at k = 8, so the code's range gives the same answer (note §1.4.5) ...
    coded = search_split(deit_b, 8, L, min_per_type=1)
    assert (coded.attention, coded.activation) == (4, 4) and coded.line == line[1:-1]
    # ... but at k = 2 the best split prunes two attention layers and no activation.
    assert [(s.attention, s.activation, round(s.predicted, 3))
            for s in (search_split(deit_b, 2, L), search_split(deit_b, 2, L, min_per_type=1))] == [
        (2, 0, 80.793), (1, 1, 80.664)]


def test_exact_quadratic_is_recovered():
    fit = fit_predictor(_sample(_quadratic))
    assert fit.degree == 2 and fit.rmse < 1e-9 and fit.cv[1]["rmse"] > 0.5
    # 80 - 40(1-a)² - 20(1-t)² = 20 + 80a + 40t - 40a² - 20t²
    expected = {(0, 0): 20, (1, 0): 80, (0, 1): 40, (2, 0): -40, (1, 1): 0, (0, 2): -20}
    assert [fit.coefficient(*term) for term in expected] == pytest.approx(list(expected.values()), abs=1e-9)
    split = search_split(fit, 9, L)  # m_a = (9/12)/3: three attention layers, six activations
    assert (split.attention, split.activation) == (3, 6) and split.predicted == pytest.approx(72.5, abs=1e-9)


def test_exact_cubic_is_recovered():
    fit = fit_predictor(_sample(_cubic))
    assert fit.degree == 3 and fit.rmse < 1e-9 and fit.cv[2]["rmse"] > 0.1
    expected = {(0, 0): -40, (0, 1): 250, (1, 0): 50, (0, 2): -260, (1, 1): 60, (2, 0): -40,
                (0, 3): 90, (1, 2): -30, (2, 1): 0, (3, 0): 0}
    assert fit.coef == pytest.approx([expected[term] for term in fit.terms], abs=1e-7)
    for budget in (6, 8, 10):
        best = max(range(budget + 1), key=lambda n: _cubic(n / L, (budget - n) / L))
        assert search_split(fit, budget, L).attention == best
    assert [search_split(fit, k, L).attention for k in (6, 8, 10)] == [3, 5, 6]


def test_noisy_quadratic_keeps_its_degree():
    for seed in range(4):
        fit = fit_predictor(_sample(_quadratic, noise=0.3, seed=seed))
        assert fit.degree == 2
        # The optimum is flat (72.08 one layer either side of 72.5), so noise may move it by one.
        assert abs(search_split(fit, 9, L).attention - 3) <= 1


def test_predict_broadcasts(deit_b):
    a = np.array([[1.0, 0.75], [0.5, 0.25]])
    values = deit_b.predict(a, 0.9)
    assert values.shape == (2, 2) and values[0, 1] == deit_b.predict(0.75, 0.9)
    assert isinstance(deit_b.predict(1.0, 1.0), float)


def test_ridge_shrinks_towards_the_mean():
    assert fit_predictor(DEIT_B, ridge=0.0) == fit_predictor(DEIT_B)
    fit = fit_predictor(DEIT_B, degrees=[2], ridge=1e12)
    assert fit.ridge == 1e12 and list(fit.cv) == [2]
    assert fit.coef[0] == pytest.approx(np.mean([y for _, _, y in DEIT_B]), abs=1e-3)
    assert max(abs(c) for c in fit.coef[1:]) < 1e-3


@pytest.mark.parametrize("points, match", [
    (DEIT_B[:2], "at least 3 points, got 2"),
    ([(1.0, 1.0)] * 3, r"\(a, t, accuracy\) triples"),
    ([(1.0, 1.0, "x")] * 3, "number triples"),
    ([(1.0, 1.0, float("nan"))] * 3, "finite"),
    ([(12, 12, 81.8), (11, 12, 81.3), (12, 11, 81.2)], r"retained ratios .* not layer counts"),
])
def test_bad_points(points, match):
    with pytest.raises(VitpruneError, match=match):
        fit_predictor(points)


@pytest.mark.parametrize("degrees", [[], [-1], [1.5], [True]])
def test_bad_degrees(degrees):
    with pytest.raises(VitpruneError, match="degrees must be"):
        fit_predictor(DEIT_B, degrees=degrees)


def test_bad_ridge():
    with pytest.raises(VitpruneError, match="ridge must be"):
        fit_predictor(DEIT_B, ridge=-1.0)


@pytest.mark.parametrize("budget, num_layers, min_per_type, match", [
    (0, 12, 0, "budget must be between 1 and 2 \\* num_layers = 24, got 0"),
    (25, 12, 0, "got 25"),
    (1, 12, 1, "no split of 1 pruned layers prunes at least min_per_type=1"),
    (20, 12, 11, "no split of 20"),
    (8, 0, 0, "num_layers must be >= 1"),
    (8.0, 12, 0, "budget must be an integer"),
    (8, 12, -1, "min_per_type must be >= 0"),
])
def test_bad_search(deit_b, budget, num_layers, min_per_type, match):
    with pytest.raises(VitpruneError, match=match):
        search_split(deit_b, budget, num_layers, min_per_type)


def test_whole_line_when_budget_exceeds_one_type(deit_b):
    line = search_split(deit_b, 20, L).line
    assert [(s["attention"], s["activation"]) for s in line] == [(n, 20 - n) for n in range(8, 13)]


def test_json_round_trip(deit_b, tmp_path):
    assert PredictorFit.from_dict(json.loads(json.dumps(deit_b.to_dict()))) == deit_b
    path = save_predictor(deit_b, tmp_path / "sub" / "map.json")
    assert load_predictor(path) == deit_b
    assert [p.name for p in path.parent.iterdir()] == ["map.json"]


@pytest.mark.parametrize("content, match", [
    ("{not json", "MAP file .*map.json is not valid JSON"),
    ("[1, 2]", "corrupt MAP file .*map.json: expected a JSON object"),
    ('{"degree": 2}', "corrupt MAP file .*map.json: malformed MAP fit: KeyError"),
])
def test_corrupt_file(deit_b, tmp_path, content, match):
    path = tmp_path / "map.json"
    path.write_text(content)
    with pytest.raises(VitpruneError, match=match):
        load_predictor(path)


def test_mismatched_terms_are_rejected(deit_b):
    data = deit_b.to_dict()
    data["coef"] = data["coef"][:-1]
    with pytest.raises(VitpruneError, match="do not match degree 2"):
        PredictorFit.from_dict(data)


def test_missing_file(tmp_path):
    with pytest.raises(VitpruneError, match="no MAP fit at .*absent.json"):
        load_predictor(tmp_path / "absent.json")


def test_plot_is_written_atomically(deit_b, tmp_path):
    split = search_split(deit_b, 8, L)
    out = tmp_path / "sub"
    plot_predictor(deit_b, out / "counts.png", num_layers=L, split=split)
    plot_predictor(deit_b, out / "budget.png", budget=10, num_layers=L)
    plot_predictor(deit_b, out / "ratios.png")
    assert sorted(p.name for p in out.iterdir()) == ["budget.png", "counts.png", "ratios.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in out.iterdir())
    with pytest.raises(VitpruneError, match="needs num_layers"):
        plot_predictor(deit_b, out / "bad.png", split=split)


def test_plot_colours_span_the_measured_accuracies():
    # The digits MAP: measured 10-97.8%, while the degree-4 fit reaches -640% where nothing was measured.
    levels = _accuracy_levels(np.array([97.78, 10.0, 95.3]))
    assert levels[0] == 10.0 and levels[-1] == 100.0 and len(levels) == 21
    assert list(_accuracy_levels(np.array([81.2, 83.9]), steps=2)) == [80.0, 82.5, 85.0]
    assert list(_accuracy_levels(np.array([40.0, 40.0]), steps=1)) == [40.0, 45.0]  # one value: a band of 5


def test_a_later_step_reuses_the_predictor_of_an_earlier_one_with_a_budget_no_smaller(tmp_path):
    """Step 1's points reach the budget they were collected for (or its sweeps' ``sweep_layers``): a step of a
    smaller or equal budget and otherwise the same settings takes the fitted predictor; a larger budget, another
    setting or a fixed split do not."""
    from vitprune.runs.method import get_method

    hetdpt = get_method("hetdpt")
    earlier = {"method": "hetdpt", "seed": 0, "budget": 6, "split": "auto", "preset": "digits"}
    (tmp_path / "predictor.json").write_text("{}")
    assert hetdpt.reuse({**earlier, "budget": 4}, earlier, tmp_path) == {"predictor": str(tmp_path / "predictor.json")}
    assert hetdpt.reuse(earlier, earlier, tmp_path) != {}
    for step in ({**earlier, "budget": 7}, {**earlier, "budget": 4, "seed": 1},
                 {**earlier, "budget": 4, "split": [2, 2]}, {**earlier, "budget": 4, "probe_images": 64}):
        assert hetdpt.reuse(step, earlier, tmp_path) == {}, step
    reaching = {**earlier, "budget": 3, "sweep_layers": 6}  # a smaller budget whose sweeps reach 6
    assert hetdpt.reuse({**reaching, "budget": 6}, reaching, tmp_path) == {
        "predictor": str(tmp_path / "predictor.json")}
    assert hetdpt.reuse({**reaching, "budget": 7}, reaching, tmp_path) == {}
