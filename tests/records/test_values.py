"""The values an advice holds, their JSON, and the report ``str(advice)`` prints.

The values are :mod:`pynumabind.records.values`', the report
:mod:`pynumabind.records.report`'s; the advice of each test comes from the
rule (``advisor/test_rule.py`` tests the rule itself), on matrices built from
figures.
"""

from __future__ import annotations

import json

import pytest

from pynumabind.advisor.rule import decide
from pynumabind.model import SCHEMA_VERSION
from pynumabind.records._json import RECORD_SCHEMA
from pynumabind.records.advice import Advice
from pynumabind.records.report import render_text
from pynumabind.records.values import Placement, Spread

from ..support.advice_builders import gpu, matrix


def test_spread_of_known_samples() -> None:
    s = Spread.of([5, 1, 3, 2, 4])
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max) == (5, 3, 2, 4, 1, 5)
    with pytest.raises(ValueError, match="at least one"):
        Spread.of([])
    with pytest.raises(ValueError, match="finite"):
        Spread.of([1.0, float("nan")])


def test_placement_fraction_and_text() -> None:
    assert Placement(1, {1: 10}).text() == "100% on node 1"
    half = Placement(1, {0: 5, 1: 5, -2: 0})
    assert half.fraction == 0.5
    assert "5 on node 0" in half.text()
    assert Placement(0, {}).text() == "unchecked"


def test_advice_json_has_the_documented_fields() -> None:
    memory = matrix([[100, 50], [50, 100]])
    gpus = (gpu(0, 0, [28, 28], [28, 28]),)
    advice = Advice(memory, gpus, "measured with test", "test", None, decide(memory, gpus))
    data = json.loads(json.dumps(advice.to_dict()))
    assert data["schema"] == RECORD_SCHEMA == SCHEMA_VERSION + 1  # the advice's own number
    assert data["memory"]["cpu_nodes"] == [0, 1]
    assert data["memory"]["memory_nodes"] == [0, 1]
    assert data["memory"]["bandwidth_gbs"] == [[100, 50], [50, 100]]
    assert data["copies"][0]["h2d_gbs"] == [28, 28]
    rec = data["recommendation"]
    assert rec["bind"] is True and rec["mode"] == "node" and rec["policy"] == "preferred"
    assert isinstance(rec["reasons"], list) and rec["reasons"]


def test_str_of_an_advice_is_the_report_the_command_prints() -> None:
    memory = matrix([[100, 50], [50, 100]])
    gpus = (gpu(0, 0, [28, 20], [28, 20]),)
    advice = Advice(memory, gpus, "measured with test", "test", None, decide(memory, gpus))
    text = str(advice)
    assert text == render_text(advice)
    assert not text.startswith("Advice(")  # not the dataclass repr
    lines = text.splitlines()
    assert lines[0].startswith("Memory bandwidth, GB/s")
    assert "Pinned host<->GPU copies, GB/s: median (quartiles)" in lines
    assert f"Recommendation: {advice.recommendation.verdict}" in lines
    assert lines[lines.index("Reasons:") + 1].startswith("  - memory bandwidth from CPU node 0")
    method = next(i for i, line in enumerate(lines) if line.startswith("Method: "))
    assert lines[method - 1] == ""  # a paragraph of its own, after the tables


def test_a_reason_that_repeats_the_verdict_is_not_printed_again() -> None:
    memory = matrix([[100]])
    advice = Advice(memory, (), "CUDA is not usable", None, None, decide(memory))
    rec = advice.recommendation
    assert rec.reasons == (rec.verdict,)  # the data keeps it: JSON readers need a reason
    text = str(advice)
    assert text.count(rec.verdict) == 1
    assert "Reasons:" not in text
