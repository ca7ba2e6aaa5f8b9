"""The advice record's interleave weights: schema 3, its checks, and mode advised following them.

A record recommending weighted interleave is what ``advise --save`` writes on
a one-socket machine with a CXL expander (node 1, memory only, a quarter of
the DRAM's bandwidth) where weighted interleave over both was measured 1.2x
the local node: policy ``weighted-interleave``, weights 0:4,1:1.  Schema 2
records (before weights) still read; weights out of range, on a node the
record's machine does not have, or with another policy make a record
unreadable, naming the field; weights on a node the machine planned has no
memory on, or that this process may not use, make it unfollowable (one
warning, the default plan), as a GPU moved to such a node does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from pynumabind.advisor.rule import decide, interleave_cells
from pynumabind.errors import AdviceRecordError
from pynumabind.model import CpuMode, MemoryPolicy, Topology
from pynumabind.options import Options
from pynumabind.planner import plan_for
from pynumabind.records import store
from pynumabind.records._json import READ_RECORD_SCHEMAS, RECORD_SCHEMA, record_dict
from pynumabind.records._machine import Machine, machine_of
from pynumabind.records.advice import Advice, parse_record
from pynumabind.records.values import MemoryMatrix, Placement

from ..support.advice_builders import matrix, spread
from ..support.topology_builders import make_topology

GiB = 1 << 30


def cxl_machine(**changes: Any) -> Topology:
    """One socket (node 0, CPUs 0-7) and a CXL expander (node 1, memory only)."""
    topology = make_topology({0: "0-7", 1: ""}, distance=lambda a, b: 10 if a == b else 20)
    return topology.replace(**changes) if changes else topology


def fingerprint(topology: Topology) -> Machine:
    sizes = {n: 64 * GiB for n in topology.nodes}
    return machine_of(topology, cpu_model="Test CPU 9000", kernel="6.12.0", memory_bytes=sizes)


def measured_memory(gain: float = 1.2) -> MemoryMatrix:
    memory = matrix([[100.0, 25.0]])
    (cell,) = interleave_cells(memory, memory_only={1})
    cell = replace(
        cell,
        bandwidth=spread(100.0 * gain),
        local_bandwidth=spread(100.0),
        placement=Placement(0, {0: 204, 1: 52}),
        threads=8,
    )
    return replace(memory, interleave=(cell,))


def weighted_advice(gain: float = 1.2) -> Advice:
    memory = measured_memory(gain)
    return Advice(memory, (), "not measured (test)", None, None, decide(memory))


def document(advice: Advice, topology: Topology) -> Dict[str, Any]:
    return json.loads(json.dumps(record_dict(advice, fingerprint(topology), "t", "v")))


def test_a_weighted_record_is_schema_3_and_reads_back_whole() -> None:
    advice = weighted_advice()
    assert advice.recommendation.policy == "weighted-interleave"
    data = document(advice, cxl_machine())
    assert data["schema"] == RECORD_SCHEMA == 3
    assert data["recommendation"]["weights"] == {"0": 4, "1": 1}
    (cell,) = data["memory"]["interleave"]
    assert cell["weights"] == {"0": 4, "1": 1}
    assert cell["bandwidth_gbs"] == pytest.approx(120.0) and cell["local_gbs"] == 100.0
    assert cell["predicted"] == pytest.approx(1.25)
    back = parse_record(json.dumps(data), "/r.json")
    assert back.advice.to_dict() == advice.to_dict()
    assert dict(back.advice.recommendation.weights or {}) == {0: 4, 1: 1}


def test_the_report_shows_the_measurement_beside_the_local_one_and_the_weights() -> None:
    text = str(weighted_advice())
    assert "Weighted interleave over the CPU node's memory and the memory-only nodes" in text
    row = next(line for line in text.splitlines() if line.startswith("node 0    0:4,1:1"))
    assert "1.25x" in row and "120 (" in row and "100 (" in row
    assert "204 on node 0, 52 on node 1" in row
    assert "memory policy: weighted-interleave   weights: 0:4,1:1" in text


def test_a_schema_2_record_without_weights_still_reads() -> None:
    memory = matrix([[100.0, 50.0], [50.0, 100.0]])
    advice = Advice(memory, (), "not measured (test)", None, None, decide(memory))
    topology = make_topology({0: "0-3", 1: "4-7"})
    data = document(advice, topology)
    data["schema"] = 2
    del data["recommendation"]["weights"]
    del data["memory"]["interleave"]
    assert 2 in READ_RECORD_SCHEMAS
    back = parse_record(json.dumps(data), "/old.json")
    assert back.advice.recommendation.weights is None
    assert back.advice.memory is not None and back.advice.memory.interleave == ()
    assert back.advice.recommendation.policy == "preferred"


def _edited(data: Dict[str, Any], path: List[Any], value: Any) -> str:
    here: Any = data
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return json.dumps(data)


BROKEN = [
    (["recommendation", "weights", "1"], 0, "recommendation.weights.1: expected a weight from 1"),
    (["recommendation", "weights", "1"], 256, "recommendation.weights.1: expected a weight from"),
    (["recommendation", "weights"], {"0": 4, "7": 1}, "node 7 is not a node of the record's"),
    (["recommendation", "weights"], {"0": "4"}, "recommendation.weights.0: expected an integer"),
    (["recommendation", "weights"], {"x": 4}, "recommendation.weights: expected node ids"),
    (["recommendation", "weights"], None, "policy weighted-interleave, but no weights"),
    (["recommendation", "policy"], "preferred", "weights with policy 'preferred'"),
    (["memory", "interleave", 0, "weights"], {"1": 1}, "no weight for the local node 0"),
    (["memory", "interleave", 0, "weights", "0"], 300, "memory.interleave[0].weights.0"),
    (["memory", "interleave", 0, "predicted"], -1.0, "memory.interleave[0].predicted"),
]


@pytest.mark.parametrize("path, value, words", BROKEN, ids=[w for _, _, w in BROKEN])
def test_broken_weights_make_the_record_unreadable_naming_the_field(
    path: List[Any], value: Any, words: str
) -> None:
    text = _edited(document(weighted_advice(), cxl_machine()), path, value)
    with pytest.raises(AdviceRecordError) as caught:
        parse_record(text, "/r.json")
    assert words in str(caught.value)


# ------------------------------------------------------------------ mode advised


@pytest.fixture
def warnings() -> Iterator[List[str]]:
    seen: List[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger(store.__name__)
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    store._WARNED.clear()
    yield seen
    logger.removeHandler(handler)
    logger.setLevel(level)


def resolve(tmp_path: Path, advice: Advice, recorded: Topology, planned: Topology) -> store.Advised:
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(document(advice, recorded)))
    return store.resolve_advised(
        Options(mode="advised", rank=0),
        planned,
        {"PYNUMABIND_ADVICE": str(path)},
        machine=fingerprint(recorded),
    )


def test_mode_advised_binds_with_the_records_weights(tmp_path: Path, warnings: List[str]) -> None:
    topology = cxl_machine()
    advised = resolve(tmp_path, weighted_advice(), topology, topology)
    assert advised.fallback is None and warnings == []
    options = advised.options
    assert (options.cpu_mode, options.policy) == (CpuMode.NODE, MemoryPolicy.WEIGHTED_INTERLEAVE)
    assert dict(options.weights or {}) == {0: 4, 1: 1}
    assert "policy weighted-interleave, weights 0:4,1:1 (measured)" in advised.reasons[0]
    plan = advised.finish(plan_for(advised.topology, options))
    assert plan.policy == "weighted-interleave"
    assert plan.mems == frozenset({0, 1})
    assert dict(plan.weights or {}) == {0: 4, 1: 1}
    assert plan.reasons[0] == advised.reasons[0]


def test_a_record_without_weights_gives_none(tmp_path: Path) -> None:
    topology = cxl_machine()
    advised = resolve(tmp_path, weighted_advice(gain=1.0), topology, topology)
    assert advised.options.weights is None
    assert advised.options.policy is MemoryPolicy.PREFERRED  # local 4x the CXL node


@pytest.mark.parametrize(
    "planned, words",
    [
        (
            lambda t: t.replace(allowed_mems=frozenset({0})),
            "weighted interleave over node 1, which this process may not allocate on",
        ),
        (
            lambda t: make_topology(
                {0: "0-7", 1: ""}, memoryless=[1], distance=lambda a, b: 10 if a == b else 20
            ),
            "weighted interleave over node 1, which is not a NUMA node with memory",
        ),
    ],
    ids=["cpuset", "no-memory"],
)
def test_weights_this_machine_cannot_follow_warn_once_and_plan_the_default(
    tmp_path: Path, warnings: List[str], planned: Any, words: str
) -> None:
    recorded = cxl_machine()
    advised = resolve(tmp_path, weighted_advice(), recorded, planned(recorded))
    assert advised.fallback is not None and words in advised.fallback
    assert "recommendation.weights.1" in advised.fallback
    assert advised.options.weights is None and advised.options.policy is None
    assert len(warnings) == 1 and words in warnings[0]


@pytest.mark.parametrize(
    "given, environ, named",
    [
        (Options(mode="advised", rank=0, tiers="all"), {}, "tiers="),
        (
            None,
            {"PYNUMABIND_MODE": "advised", "PYNUMABIND_TIERS": "all", "LOCAL_RANK": "0"},
            "PYNUMABIND_TIERS",
        ),
    ],
    ids=["keyword", "environment"],
)
def test_mode_advised_and_tiers_all_both_choosing_the_policy_is_refused(
    tmp_path: Path, given: Any, environ: Dict[str, str], named: str
) -> None:
    from pynumabind.discovery import _environ
    from pynumabind.errors import ConfigError

    topology = cxl_machine()
    options = _environ.resolve(environ, given)
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(document(weighted_advice(), topology)))
    with pytest.raises(ConfigError, match="mode 'advised' takes the memory policy") as caught:
        store.resolve_advised(
            options, topology, {"PYNUMABIND_ADVICE": str(path)}, machine=fingerprint(topology)
        )
    assert "tiers 'all'" in str(caught.value) and named in str(caught.value)
