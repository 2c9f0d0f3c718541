"""A MAC target has one spelling and one meaning wherever it is given (a share, or a count with its unit), and every
rate search reaches it through one search with one behaviour at the edges."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import vitprune
from vitprune.errors import UnreachableTargetError, VitpruneError
from vitprune.measure import MacTarget, count_macs
from vitprune.measure.target import first, goal, reach, resolve_shares
from vitprune.methods.vbp.config import VBPConfig
from vitprune.methods.width import WidthConfig


@pytest.mark.parametrize("spelled, share, value", [
    ("0.6", True, 0.6), ("60%", True, 0.6), (" 12.5 % ", True, 0.125), (0.6, True, 0.6),
    ("850M", False, 850e6), ("1.2G", False, 1.2e9), ("3.5k", False, 3500.0), ("2T", False, 2e12),
    ("1200000000", False, 1.2e9), ("1e9", False, 1e9), (1_200_000_000, False, 1.2e9), (1234567.5, False, 1234567.5),
])
def test_a_target_is_a_share_or_a_count_with_its_unit(spelled, share, value):
    target = MacTarget.parse(spelled)
    assert (target.share, target.value, target.convention) == (share, value, "full")
    assert MacTarget.parse(target.to_json()) == target and MacTarget.parse(target) is target


@pytest.mark.parametrize("spelled, message", [
    ("1.5", r"'1.5' is neither a share \(below 1\) nor a whole count of MACs; for GMACs write 1.5G"),
    ("150%", r"a share of the model's MACs lies between 0 and 1 \(0% and 100%\), got 1.5"),
    ("0", "got 0"), ("-1", "got '-1'"), ("1.2X", "got '1.2X'"), (True, "got True"), ("", "got ''"),
])
def test_anything_else_is_one_line_naming_the_spelling(spelled, message):
    with pytest.raises(VitpruneError, match=message):
        MacTarget.parse(spelled)


@given(st.one_of(st.floats(1e-6, 1 - 1e-9), st.integers(1, 10**13), st.floats(1.0, 1e13)),
       st.sampled_from(["full", "linear", "tp"]))
def test_the_json_form_reads_back_to_the_same_target(value, convention):
    target = MacTarget.parse(value, convention=convention)
    assert MacTarget.parse(target.to_json(), convention=convention) == target
    assert target.share == (value < 1)


def test_a_share_resolves_against_the_model_in_its_convention():
    model = vitprune.create_model("digits-vit", depth=2)
    full, linear = count_macs(model).macs, count_macs(model, convention="linear").macs
    assert MacTarget.relative(0.5).resolve(model) == 0.5 * full
    assert MacTarget.relative(0.5, convention="linear").resolve(model) == 0.5 * linear
    assert MacTarget.absolute(1000).resolve(model) == 1000
    assert str(MacTarget.relative(0.6)) == "60%" and str(MacTarget.absolute(1.2e9)) == "1.2G"
    assert MacTarget.relative(0.5).describe(model).startswith("50% of the MACs (")
    with pytest.raises(VitpruneError, match=r"the MAC target 1G is not below the model's .* there is nothing"):
        goal(MacTarget.absolute(1e9), model)


def test_configs_hold_targets_whatever_they_were_given():
    """A chain file's number, the command line's text and the Python API's target: one type in the config, and one
    JSON form in its report."""
    assert VBPConfig(ratio=None, target_macs=0.6).target_macs == MacTarget.relative(0.6)
    assert VBPConfig(ratio=None, target_macs="850M").target_macs == MacTarget.absolute(850e6)
    assert VBPConfig(ratio=None, target_macs=850e6).to_dict()["target_macs"] == 850_000_000
    width = WidthConfig(target_macs="60%", convention="tp")
    assert width.target_macs == MacTarget.relative(0.6, convention="tp") and width.to_dict()["target_macs"] == 0.6
    resolved = resolve_shares(VBPConfig(ratio=None, target_macs=0.5), vitprune.create_model("digits-vit", depth=2))
    assert not resolved.target_macs.share


@given(st.integers(0, 60), st.integers(-10, 10), st.sampled_from([1, -1]), st.data())
def test_first_finds_where_a_monotone_test_starts_to_hold(n, lo, direction, data):
    """Whole knobs, either direction, any guess: the first that holds, or None where none does; exactly."""
    hi = lo + direction * n
    answer = data.draw(st.one_of(st.none(), st.integers(0, n)))

    def ok(knob):
        return answer is not None and (knob - lo) * direction >= answer

    guess = data.draw(st.one_of(st.none(), st.floats(min(lo, hi) - 5, max(lo, hi) + 5)))
    assert first(ok, lo, hi, integer=True, guess=guess) == (None if answer is None else lo + direction * answer)


def test_first_bisects_a_continuous_knob_to_its_tolerance():
    found = first(lambda x: x >= 0.3, 0.0, 1.0, tol=1e-6)
    assert 0.3 <= found <= 0.3 + 1e-6
    assert first(lambda x: x >= 0.3, 0.0, 1.0, steps=3) == 0.375  # 0.5, 0.25, 0.375
    assert first(lambda x: x <= 0.3, 1.0, 0.0, tol=1e-6) == pytest.approx(0.3, abs=1e-6)


def test_reach_has_one_behaviour_at_the_edges():
    """A cost that falls with the knob: the knob nearest no pruning within the target; at or above the model's own
    MACs, one error; below anything reached, the nearest reached; past what the method can do (None), not an answer."""
    model = torch.nn.Linear(1, 1)  # not counted: ``dense`` gives the model's cost

    def cost(knob):
        return 100 - 10 * knob

    assert reach(cost, MacTarget.absolute(55), model, 0, 10, what="toy", dense=100, integer=True) == 5
    assert reach(cost, MacTarget.relative(0.55), model, 0, 10, what="toy", dense=100, integer=True) == 5
    with pytest.raises(VitpruneError, match="is not below the model's 100 MACs"):
        reach(cost, MacTarget.absolute(100), model, 0, 10, what="toy", dense=100, integer=True)
    with pytest.raises(UnreachableTargetError, match="toy cannot reach 5 MACs per image .*; the nearest it reaches "
                                                     "is 50"):
        reach(cost, MacTarget.absolute(5), model, 0, 5, what="toy", dense=100, integer=True)
    # Past knob 6 the method cannot go: the answer is the knob nearest the passing one that it can do.
    assert reach(lambda k: None if k > 6 else cost(k), MacTarget.absolute(55), model, 0, 10, what="toy", dense=100,
                 integer=True) == 5
    with pytest.raises(UnreachableTargetError, match="toy cannot reach 25 .*; the nearest it reaches is 40; it "
                                                     "stops there"):
        reach(lambda k: None if k > 6 else cost(k), MacTarget.absolute(25), model, 0, 10, what="toy", dense=100,
              integer=True, beyond="it stops there")


def test_above_stops_at_the_knob_next_to_the_answer_still_above_the_target():
    """A coarse knob (whole heads, tokens, gates) stops short of the target for a finer step to reach it: the knob
    tried next to the answer on the side of no pruning, whose cost is still above the target."""
    model = torch.nn.Linear(1, 1)

    def cost(knob):
        return 100 - 10 * knob

    assert reach(cost, MacTarget.absolute(55), model, 0, 10, what="toy", dense=100, integer=True, above=True) == 4
    # A continuous knob that prunes more as it falls (STAR's rho): the answer within the tolerance, and just above it.
    found = reach(lambda rho: 100 * rho, MacTarget.absolute(55), model, 1.0, 0.0, what="toy", dense=100, tol=1e-4)
    short = reach(lambda rho: 100 * rho, MacTarget.absolute(55), model, 1.0, 0.0, what="toy", dense=100, tol=1e-4,
                  above=True)
    assert 100 * found <= 55 < 100 * short and 0 < short - found <= 1e-4
