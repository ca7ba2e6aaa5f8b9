"""Advice records are untrusted input: checked before followed, bounded in cost, printed escaped.

Each hostile record here is the valid record of ``record_builders`` with one
field changed, as a user with write access to shared storage, a copy from
another machine or a hand edit would leave it.  What cannot be followed is
one warning naming the record and the field (its JSON path), then the
default plan; what cannot be read is an AdviceRecordError, never another
exception; an absurd size or shape is refused before it is parsed; and no
text taken from a record reaches the output unescaped.  The rules are
:mod:`pynumabind.records._validate`'s; the properties over many mutations
are in ``test_record_properties.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import types
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pynumabind.errors import AdviceRecordError
from pynumabind.model import CpuMode, MemoryPolicy
from pynumabind.options import Options
from pynumabind.planner import plan_for
from pynumabind.records import _json, _validate, store
from pynumabind.records._json import MAX_RECORD_BYTES, record_dict
from pynumabind.records.advice import parse_record
from pynumabind.records.report import render_text

from ..support.cli_helpers import SCRIPT, clean_env, two_node_snapshot
from ..support.cli_helpers import run as run_cli
from ..support.topology_builders import make_topology
from .record_builders import (
    BUSES,
    advice,
    document,
    edited,
    machine,
    two_socket,
    write,
)

PER_GPU_1 = "recommendation.per_gpu[1].node"


def follow(tmp_path: Path, doc: Dict[str, Any], topology=None, **given: object) -> store.Advised:  # type: ignore[no-untyped-def]
    """Mode advised on ``topology`` (default two_socket) with ``doc`` as the record."""
    topology = topology or two_socket()
    path = write(tmp_path / "advice.json", doc)
    options = Options(mode="advised", rank=1, **given)  # type: ignore[arg-type]
    return store.resolve_advised(
        options, topology, {"PYNUMABIND_ADVICE": path}, machine=machine(topology)
    )


def assert_default_plan(advised: store.Advised, warnings: List[str], *words: str) -> None:
    """One warning naming the record and ``words``; the default plan, claiming nothing."""
    assert warnings == [f"pynumabind: {advised.fallback}"], warnings
    for word in words:
        assert word in warnings[0], (word, warnings[0])
    assert advised.options.mode is None and advised.options.cpu_mode is CpuMode.NODE
    assert advised.reasons == (advised.fallback,)
    assert not any('says "' in r or "; bound to node" in r for r in advised.reasons)


# --------------------------------------------- following it: every node checked


def test_the_valid_record_is_followed(tmp_path: Path, store_warnings: List[str]) -> None:
    advised = follow(tmp_path, document())
    assert store_warnings == [] and advised.fallback is None
    assert advised.topology.gpus[1].numa_node == 0  # moved where its copies were fastest
    plan = advised.finish(plan_for(advised.topology, advised.options))
    assert plan.node == 0 and plan.policy is MemoryPolicy.PREFERRED


@pytest.mark.parametrize("node", [99, 1023, 2])
def test_a_gpu_moved_to_a_node_this_machine_lacks_is_not_followed(
    tmp_path: Path, store_warnings: List[str], node: int
) -> None:
    # 99 and 1023 are node ids a kernel can have, but not this machine; 2 is
    # this machine's, but has no CPUs (a GPU memory node, as on GB200).
    topology = make_topology(
        {0: "0-7", 1: "8-15", 2: ""}, gpus=two_socket().gpus, distance=lambda a, b: 10 + (a != b)
    )
    doc = edited(document(topology), ["recommendation", "per_gpu", 1, "node"], node)
    advised = follow(tmp_path, doc, topology)
    assert_default_plan(
        advised, store_warnings, str(tmp_path / "advice.json"), PER_GPU_1,
        f"GPU 1 ({BUSES[1]}) is to be bound to node {node}, which is not a NUMA node with CPUs "
        "on this machine (its CPU nodes are 0-1)",
    )  # fmt: skip
    assert advised.topology == topology  # nothing moved
    plan = advised.finish(plan_for(advised.topology, advised.options))
    assert plan.node == 1 and plan.cpus == topology.nodes[1].cpus  # its own node: the default


@pytest.mark.parametrize("node", [-1, -99, 1024, 2**40])
def test_a_gpu_node_no_machine_can_have_makes_the_record_unreadable(
    tmp_path: Path, store_warnings: List[str], node: int
) -> None:
    doc = edited(document(), ["recommendation", "per_gpu", 1, "node"], node)
    advised = follow(tmp_path, doc)
    assert_default_plan(
        advised, store_warnings, str(tmp_path / "advice.json"),
        f"{PER_GPU_1}: expected a NUMA node id from 0 to 1023, not {node}",
    )  # fmt: skip
    with pytest.raises(AdviceRecordError, match=re.escape(PER_GPU_1)):
        store.load_advice(str(tmp_path / "advice.json"), check_machine=False)


@pytest.mark.parametrize("fallback", [None, "nearest"])
def test_a_gpu_moved_outside_the_cpuset_names_the_record_the_field_and_its_node(
    tmp_path: Path, store_warnings: List[str], fallback: str
) -> None:
    # The job may use node 1's CPUs only; the record moves GPU 1 (which reports
    # node 1) to node 0.  Followed, rank 1 was a PlanError naming node 0 and
    # not the record (or, with the fallback, a warning blaming GPU 1's node 0).
    job = two_socket(allowed_cpus=frozenset(range(8, 16)))
    advised = follow(tmp_path, document(job), job, fallback=fallback)
    assert_default_plan(
        advised, store_warnings, str(tmp_path / "advice.json"), PER_GPU_1,
        f"GPU 1 ({BUSES[1]}) is to be bound to node 0, whose CPUs 0-7 this process may not use "
        "(it may use CPUs 8-15: its affinity or cpuset)",
    )  # fmt: skip
    plan = advised.finish(plan_for(advised.topology, advised.options))
    assert plan.node == 1 and plan.cpus == frozenset(range(8, 16))
    assert plan.warnings == (advised.fallback,)  # no fallback warning about a node 0


def test_a_record_node_that_moves_nothing_is_not_a_problem_of_the_record(
    tmp_path: Path, store_warnings: List[str]
) -> None:
    # GPU 0 is advised onto its own node 0, outside this job's cpuset: the
    # record changes nothing there (the default plan has the same node), so
    # the record is followed and the planner's own rule answers for GPU 0.
    job = two_socket(allowed_cpus=frozenset(range(8, 16)))
    doc = edited(document(job), ["recommendation", "per_gpu", 1, "node"], 1)
    advised = follow(tmp_path, doc, job)
    assert store_warnings == [] and advised.fallback is None
    assert advised.topology == job


def test_exec_in_a_cpuset_follows_the_default_plan_with_one_warning(tmp_path: Path) -> None:
    """The real command, confined to CPU 1, with a record moving GPU 1 to node 0 (CPU 0)."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    snapshot = two_node_snapshot(tmp_path / "snapshot.json")
    here = store.this_machine()
    buses = ("0000:17:00.0", "0000:65:00.0")  # the snapshot's GPUs
    copies = tuple(replace(g, pci_bus_id=bus) for g, bus in zip(advice().copies, buses))
    doc = json.loads(json.dumps(record_dict(replace(advice(), copies=copies), here, "t", "v")))
    record = write(tmp_path / "moved.json", doc)
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "PYNUMABIND_ADVICE": record}
    done = subprocess.run(
        [SCRIPT, "exec", "--rank", "1", "--nprocs", "2", "--mode", "advised", "--",
         "grep", "Cpus_allowed_list", "/proc/self/status"],
        capture_output=True, text=True, env=clean_env(env), timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {1}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Cpus_allowed_list:", "1"]  # GPU 1's own node 1
    warned = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 1, done.stderr
    assert record in warned[0] and PER_GPU_1 in warned[0]
    assert "to be bound to node 0, whose CPUs 0 this process may not use" in warned[0]
    assert "its node(s) 0" not in done.stderr


# --------------------------------------------- reading it: AdviceRecordError, and only that

#: (JSON path, value, what the error says of it): each breaks one rule.
BROKEN = [
    ("machine.nodes[0].id", -1, "expected a NUMA node id from 0 to 1023, not -1"),
    ("machine.nodes[1].id", 0, "node 0 is listed twice"),
    ("machine.nodes[1].cpus", "7-15", "CPU 7 is in node 0 too"),
    ("machine.nodes[0].memory_bytes", -5, "expected 0 or more, not -5"),
    ("machine.nodes[0].memory_bytes", 2**64, "expected an integer within 64 bits"),
    ("machine.distances[0][1]", -21, "expected a distance of 0 or more, not -21"),
    ("machine.gpus[1].pci_bus_id", BUSES[0].upper(), f"GPU {BUSES[0]} is listed twice"),
    ("memory.cpu_nodes[1]", -3, "expected a NUMA node id from 0 to 1023, not -3"),
    ("memory.memory_nodes[1]", 0, "node 0 is listed twice"),
    ("memory.threads[0][1]", -8, "expected 0 or more, not -8"),
    ("memory.bandwidth_spread[1][0].n", 0, "expected at least 1, not 0"),
    ("memory.placement[0][0].pages", {"-5000": 1}, "expected node ids (0 to 1023) or -errno"),
    ("memory.placement[0][0].pages", {"1_0": 1}, "expected node ids or -errno as keys, not '1_0'"),
    ("memory.placement[0][0].pages.0", -1, "expected 0 or more, not -1"),
    ("memory.buffer_bytes", -1, "expected 0 or more, not -1"),
    ("copies[1].index", 0, "GPU 0 is listed twice"),
    ("copies[0].index", -2, "expected a GPU index from 0 to 1023, not -2"),
    ("copies[0].numa_node", -1, "expected a NUMA node id from 0 to 1023, not -1"),
    ("copies[0].cpu_nodes[1]", 0, "node 0 is listed twice"),
    ("firmware.slit.nodes[0]", 4096, "expected a NUMA node id from 0 to 1023, not 4096"),
    ("firmware.hmat[0].initiators[0]", -1, "expected a NUMA node id from 0 to 1023, not -1"),
    ("firmware.hmat[0].read_latency_ns", -80, "expected 0 or more, not -80"),
    ("recommendation.per_gpu[1].gpu", 0, "GPU 0 is listed twice"),
    ("recommendation.per_gpu[1].reported_node", -1, "expected a NUMA node id"),
    ("recommendation.per_gpu[1].mode", "exclusive", "expected 'node' or 'none', not 'exclusive'"),
    ("recommendation.per_gpu[1].mode", "none", "says bind, but mode 'none' binds nothing"),
    ("recommendation.per_gpu[1].node", None, "says bind, but names no node"),
    ("recommendation.per_gpu[0].bind", False, "says do not bind, but mode 'node'"),
    ("recommendation.bind", False, "says do not bind, but mode 'node', policy 'preferred'"),
    ("recommendation.mode", "none", "says bind, but mode 'none' binds nothing"),
    (
        "recommendation.policy",
        "bind",
        "expected 'preferred', 'weighted-interleave' or 'none', not 'bind'",
    ),
    ("recommendation.comparisons[0].ratio", -1.5, "expected 0 or more, not -1.5"),
    ("recommendation.comparisons[0].n", 0, "expected 1 or more, not 0"),
    ("recommendation.min_effect", -0.1, "expected 0 or more, not -0.1"),
    ("recommendation.verdict", "x" * 20000, "expected a string of at most 16384 characters"),
    ("seconds", -1, "expected 0 or more, not -1"),
    ("seconds", 10**30, "expected a finite number below 2**63"),
    ("schema", [[[[1]]]], "expected an integer within 64 bits, not a list of 1 item"),
]

_STEP = re.compile(r"\.?([A-Za-z_0-9]+)|\[(\d+)\]")


def json_path(text: str) -> List[Any]:
    """``a.b[1].c`` as the keys ``["a", "b", 1, "c"]``."""
    return [int(index) if index else key for key, index in _STEP.findall(text)]


@pytest.mark.parametrize("field, value, words", BROKEN, ids=[f for f, _, _ in BROKEN])
def test_a_broken_record_is_an_advice_record_error_naming_the_field(
    field: str, value: object, words: str
) -> None:
    text = json.dumps(edited(document(), json_path(field), value))
    with pytest.raises(AdviceRecordError) as caught:
        parse_record(text, "/srv/advice.json")
    message = str(caught.value)
    assert message.startswith("advice record /srv/advice.json: "), message
    assert f"{field}: {words}" in message, message


def test_a_number_past_the_parsers_digit_limit_is_invalid_json() -> None:
    text = json.dumps(document()).replace('"seconds": 12.5', '"seconds": ' + "9" * 5000)
    with pytest.raises(AdviceRecordError, match="is not valid JSON: Exceeds the limit"):
        parse_record(text, "/srv/advice.json")


def test_a_negative_node_id_in_the_fingerprint_is_an_advice_record_error(tmp_path: Path) -> None:
    # It used to pass the typed read and reach the staleness check, whose
    # id formatting raised ValueError: load_advice's callers got no
    # AdviceRecordError, and exec --mode advised a traceback.
    here = json.loads(json.dumps(record_dict(advice(), store.this_machine(), "t", "v")))
    path = write(tmp_path / "advice.json", edited(here, ["machine", "nodes", 0, "id"], -1))
    for check_machine in (True, False):
        with pytest.raises(AdviceRecordError, match=re.escape("machine.nodes[0].id")):
            store.load_advice(path, check_machine=check_machine)
    done = run_cli(
        "exec", "--rank", "0", "--mode", "advised", "--", "true", env={"PYNUMABIND_ADVICE": path}
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (warned,) = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert path in warned and "machine.nodes[0].id: expected a NUMA node id" in warned


# --------------------------------------------- absurd sizes and shapes: refused unparsed


def _huge_fingerprint(nodes: int, distances: bool = True) -> str:
    doc = document()
    doc["machine"]["nodes"] = [{"id": i, "cpus": str(i), "memory_bytes": 1} for i in range(nodes)]
    rows = [[10 if i == j else 20 for j in range(nodes)] for i in range(nodes)] if distances else []
    doc["machine"]["distances"] = rows
    return json.dumps(doc, separators=(",", ":"))


@pytest.fixture
def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's JSON must not be parsed at all."""

    def refuse(text: str) -> None:
        raise AssertionError(f"parsed {len(text)} characters")

    monkeypatch.setattr(_json, "json", types.SimpleNamespace(loads=refuse))


@pytest.fixture
def no_typed_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsed JSON must not be read into values."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("read into values")

    monkeypatch.setattr(_json, "advice_fields", refuse)
    monkeypatch.setattr(_json, "_read_machine", refuse)


def test_a_record_listing_1800_nodes_is_refused_before_it_is_parsed(no_parsing: None) -> None:
    # 9.8 MB: every worker used to spend 8 s on it before refusing it.
    text = _huge_fingerprint(1800)
    assert 9_000_000 < len(text) < MAX_RECORD_BYTES
    with pytest.raises(AdviceRecordError, match="more than the 524288 any record needs"):
        parse_record(text, "/srv/advice.json")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 2_000_000,  # nesting
        '{"record": "pynumabind advice", "x": [' + "0," * 1_000_000 + "0]}",  # a huge list
        '{"record": "pynumabind advice", "x": [' + "{}," * 600_000 + "{}]}",  # many objects
    ],
    ids=["2 MB of nesting", "a list of a million values", "600,000 objects"],
)
def test_absurd_shapes_are_refused_before_they_are_parsed(no_parsing: None, text: str) -> None:
    with pytest.raises(AdviceRecordError, match=r"JSON values .* not parsed"):
        parse_record(text, "/srv/advice.json")


def test_too_many_nodes_or_gpus_are_refused_before_the_typed_read(no_typed_read: None) -> None:
    with pytest.raises(AdviceRecordError, match=re.escape("machine.nodes: 1800 NUMA nodes, more")):
        parse_record(_huge_fingerprint(1800, distances=False), "/srv/advice.json")
    doc = edited(document(), ["copies"], [{}] * 1025)
    with pytest.raises(AdviceRecordError, match=re.escape("copies: 1025 GPUs, more than")):
        parse_record(json.dumps(doc), "/srv/advice.json")


def test_nesting_past_the_parsers_limit_is_its_error() -> None:
    text = '{"record": "pynumabind advice", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert _validate.text_problems(text, MAX_RECORD_BYTES) == []  # within the bounds: parsed
    with pytest.raises(AdviceRecordError, match="is not valid JSON: maximum recursion depth"):
        parse_record(text, "/srv/advice.json")


def test_a_deep_value_where_a_number_belongs_is_named_not_printed() -> None:
    deep: object = 1
    for _ in range(500):
        deep = [deep]
    text = json.dumps(edited(document(), ["seconds"], deep))
    words = "seconds: expected a finite number below 2**63, not a list of 1 item"
    with pytest.raises(AdviceRecordError, match=re.escape(words)):
        parse_record(text, "/srv/advice.json")


def test_the_largest_valid_record_is_read(tmp_path: Path) -> None:
    """A record at the limits a real machine can reach is not refused: 64 nodes, 16 GPUs."""
    doc = document()
    nodes = 64
    doc["machine"]["nodes"] = [
        {"id": i, "cpus": f"{8 * i}-{8 * i + 7}", "memory_bytes": 1 << 38} for i in range(nodes)
    ]
    doc["machine"]["distances"] = [[10 + 11 * (i != j) for j in range(nodes)] for i in range(nodes)]
    doc["machine"]["gpus"] = [{"pci_bus_id": f"0000:{g:02x}:00.0", "model": "m"} for g in range(16)]
    record = parse_record(json.dumps(doc, indent=2), "/srv/advice.json")
    assert len(record.machine.nodes) == nodes


# --------------------------------------------- text from a record is printed escaped

FORGED = "all 4 workers bound as planned"
HOSTILE = f"binding makes no measurable difference\n\x1b[2J\x1b[1;1H{FORGED}\r\u2028\ud800\u202e"


def _no_forged_line(output: str) -> None:
    assert "\x1b" not in output and "\u2028" not in output and "\u202e" not in output
    for line in output.splitlines():
        assert not line.strip().startswith(FORGED), line


def _do_not_bind(tmp_path: Path, verdict: str = HOSTILE, kernel: str = "") -> str:
    """A "do not bind" record of this machine, its verdict (and kernel, when given) hostile."""
    here = store.this_machine()
    doc = json.loads(json.dumps(record_dict(advice(), here, "2026-12-03T10:00:00Z", "test")))
    doc["recommendation"].update(
        bind=False, mode="none", policy="none", verdict=verdict, per_gpu=[], reasons=[verdict]
    )
    if kernel:
        doc["machine"]["kernel"] = kernel
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(doc), encoding="utf-8")  # ensure_ascii: the surrogate survives
    return str(path)


def test_the_reader_escapes_every_string_it_takes_from_a_record(tmp_path: Path) -> None:
    record = store.load_record(_do_not_bind(tmp_path))
    verdict = record.advice.recommendation.verdict
    assert verdict == (
        "binding makes no measurable difference\\n\\x1b[2J\\x1b[1;1H"
        f"{FORGED}\\r\\u2028\\ud800\\u202e"
    )
    assert len(record.quoted().splitlines()) == 1
    report = render_text(record.advice)  # the report advise prints, of a record
    _no_forged_line(report)
    report.encode("utf-8")  # a lone surrogate would not even encode


@pytest.mark.parametrize("command", [["plan"], ["check"], ["plan", "--json"], ["check", "--json"]])
def test_plan_and_check_print_a_hostile_verdict_on_one_line(
    tmp_path: Path, command: List[str]
) -> None:
    env = {"PYNUMABIND_MODE": "advised", "PYNUMABIND_ADVICE": _do_not_bind(tmp_path)}
    done = run_cli(*command, env=env)
    assert done.returncode == 0, done.stderr
    _no_forged_line(done.stdout + done.stderr)
    # The lines that quote the record (check's summary line says "not bound, on purpose" too).
    quoted = [line for line in done.stdout.splitlines() if "the advice record" in line]
    assert quoted and all(f"\\x1b[1;1H{FORGED}" in line for line in quoted), done.stdout


def test_a_warning_quoting_a_record_forges_no_log_line(tmp_path: Path) -> None:
    # A stale record: the warning quotes its kernel release, taken from the file.
    kernel = f"6.8.0\npynumabind: {FORGED}\x1b[0m"
    env = {"PYNUMABIND_ADVICE": _do_not_bind(tmp_path, verdict="v", kernel=kernel)}
    done = run_cli("exec", "--rank", "0", "--mode", "advised", "--", "true", env=env)
    assert done.returncode == 0, done.stderr
    (warned,) = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert f"the kernel was 6.8.0\\npynumabind: {FORGED}\\x1b[0m, now" in warned
    assert "\x1b" not in done.stderr
    assert not any(line.startswith(f"pynumabind: {FORGED}") for line in done.stderr.splitlines())


def test_a_record_file_name_is_printed_escaped_too(tmp_path: Path) -> None:
    # A shared directory's file names are text from outside as well.
    folder = tmp_path / f"x\n{FORGED}"
    folder.mkdir()
    path = folder / "advice.json"
    path.write_text(Path(_do_not_bind(tmp_path)).read_text(encoding="utf-8"), encoding="utf-8")
    done = run_cli("plan", env={"PYNUMABIND_MODE": "advised", "PYNUMABIND_ADVICE": str(path)})
    assert done.returncode == 0, done.stderr
    _no_forged_line(done.stdout + done.stderr)
    assert f"the advice record {tmp_path}/x\\n{FORGED}/advice.json" in done.stdout


def test_a_record_that_says_do_not_bind_moves_nothing_to_check(
    tmp_path: Path, store_warnings: List[str]
) -> None:
    # Its per-GPU advice is never followed: the process is left alone.
    doc = edited(
        document(),
        ["recommendation"],
        {**document()["recommendation"], "bind": False, "mode": "none", "policy": "none"},
    )
    doc = edited(doc, ["recommendation", "per_gpu", 1, "node"], 99)
    advised = follow(tmp_path, doc)
    assert store_warnings == [] and advised.fallback is None
    assert advised.not_bound is not None and "not bound, on purpose" in advised.not_bound
