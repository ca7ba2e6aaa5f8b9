"""Properties of reading and following hostile advice records, over generated mutations.

A valid record (``record_builders``: every part filled in) has one field
replaced -- by another type, a sign, a huge or tiny number, NaN, a long or
unicode string with control characters and lone surrogates, a deep or wide
nesting -- or removed, or its text cut or spliced.  Whatever the mutation:

* reading it (:func:`~pynumabind.records.advice.parse_record`, and
  :func:`~pynumabind.load_advice` on a file) returns a record or raises
  :class:`~pynumabind.AdviceRecordError`, never another exception;
* a record that is read holds only printable text and renders, compares and
  converts without error;
* mode ``advised`` (:func:`~pynumabind.records.store.resolve_advised`) never
  raises: it follows the record, or logs one warning naming the file and
  plans the default mode -- and what it follows plans for every rank.

``HYPOTHESIS_PROFILE=fuzz`` runs 100,000 examples per property.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynumabind.errors import AdviceRecordError
from pynumabind.options import Options
from pynumabind.planner import plan_for
from pynumabind.records import store
from pynumabind.records._machine import staleness
from pynumabind.records.advice import Record, parse_record
from pynumabind.records.report import render_text

from .record_builders import DELETE, Key, document, edited, machine, paths, two_socket

VALID = document()
PATHS: List[Tuple[Key, ...]] = list(paths(VALID))

#: Text a hostile writer would use: control characters, ESC, line separators,
#: bidirectional overrides, lone surrogates, and the rest of unicode.
hostile_text = st.text(
    alphabet=st.one_of(
        st.sampled_from("\n\r\t\x1b\x00\x7f\x85\u2028\u2029\u202e\ud800\udfff[0m;\\\"'"),
        st.characters(),
    ),
    max_size=40,
)

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-3, 1100),  # ids near the limits
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
    st.just("x" * 20000),
)

values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


replacements = st.one_of(
    values,
    st.just(DELETE),
    st.integers(1, 400).map(_nested),  # nesting
    st.integers(0, 3000).map(lambda n: [0] * n),  # wide lists
)


@st.composite
def mutated(draw: st.DrawFn) -> Dict[str, Any]:
    """The valid record with one to three fields replaced or removed."""
    doc = VALID
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        try:
            doc = edited(doc, path, draw(replacements))
        except (KeyError, IndexError, TypeError):  # an earlier edit removed its parent
            continue
    return doc


def _texts(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)


def _usable(record: Record) -> None:
    """A record that was read holds printable text only, and every use of it works."""
    advice = record.advice
    for text in _texts([advice.to_dict(), record.machine.to_dict(), record.saved]):
        assert text.isprintable(), repr(text)
    report = render_text(advice)
    report.encode("utf-8")
    assert len(record.quoted().splitlines()) == 1
    assert staleness(record.machine, record.machine) == []
    record.machine.text().encode("utf-8")
    advice.recommendation.options()
    json.dumps(advice.to_dict(), allow_nan=False)


def _read(text: str) -> None:
    try:
        record = parse_record(text, "/srv/advice.json")
    except AdviceRecordError as exc:
        assert "/srv/advice.json" in str(exc) or "the file" in str(exc)
        return
    _usable(record)


@given(mutated())
def test_a_mutated_record_is_read_or_refused_with_an_advice_record_error(
    doc: Dict[str, Any],
) -> None:
    _read(json.dumps(doc))


@given(mutated(), st.integers(0, 10**6), st.one_of(st.just(""), hostile_text))
def test_a_cut_or_spliced_record_is_read_or_refused(
    doc: Dict[str, Any], at: int, splice: str
) -> None:
    text = json.dumps(doc)
    at %= len(text) + 1
    _read(text[:at] + splice + text[at + len(splice) :])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3000) | st.just(json.dumps(VALID).encode()).map(bytearray), st.data())
def test_a_file_of_any_bytes_is_loaded_or_refused(folder: Path, data: bytes, draw: Any) -> None:
    data = bytearray(data)
    for _ in range(draw.draw(st.integers(0, 4))):  # flip bytes of the valid record
        if data:
            data[draw.draw(st.integers(0, len(data) - 1))] = draw.draw(st.integers(0, 255))
    path = folder / "bytes.json"
    path.write_bytes(bytes(data))
    try:
        record = store.load_record(str(path))
    except AdviceRecordError as exc:
        assert str(path) in str(exc) or "the file" in str(exc)
        return
    _usable(record)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="records-") as name:
        yield Path(name)


def _follow(folder: Path, doc: Dict[str, Any], cpuset: bool) -> None:
    """Mode advised with ``doc`` as the record: never an exception, one warning or followed."""
    topology = two_socket(allowed_cpus=frozenset(range(8, 16))) if cpuset else two_socket()
    path = folder / "advice.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    logger = logging.getLogger(store.__name__)
    handler = _Warnings()
    logger.addHandler(handler)
    store._WARNED.clear()
    try:
        advised = store.resolve_advised(
            Options(mode="advised"), topology, {"PYNUMABIND_ADVICE": str(path)},
            machine=machine(topology),
        )  # fmt: skip
    finally:
        logger.removeHandler(handler)
    if advised.fallback is not None:
        assert handler.messages == [f"pynumabind: {advised.fallback}"]
        assert str(path) in advised.fallback and advised.options.mode is None
        assert advised.topology == topology
    else:
        assert handler.messages == []
        assert advised.reasons[0].startswith(f"mode advised: the advice record {path}")
    for rank in range(len(topology.gpus)):  # what is followed can be planned, every rank
        options = replace(advised.options, rank=rank, nprocs=len(topology.gpus))
        if cpuset and advised.topology.gpus[rank].numa_node == 0:
            continue  # GPU 0's own node 0, outside the cpuset: the planner's error, not a record's
        plan_for(advised.topology, options)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated(), st.booleans())
def test_mode_advised_never_raises_for_a_mutated_record(
    folder: Path, doc: Dict[str, Any], cpuset: bool
) -> None:
    _follow(folder, doc, cpuset)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(-(2**64), 2**64) | st.integers(-3, 1030), st.booleans())
def test_mode_advised_follows_a_gpu_node_only_where_it_can(
    folder: Path, node: int, cpuset: bool
) -> None:
    doc = edited(VALID, ["recommendation", "per_gpu", 1, "node"], node)
    _follow(folder, doc, cpuset)


def test_the_mutations_reach_every_field() -> None:
    # The strategy samples every path of the valid record, leaves and containers.
    assert ("recommendation", "per_gpu", 1, "node") in PATHS
    assert ("machine", "nodes", 0, "id") in PATHS
    assert ("memory", "placement", 0, 0, "pages", "-2") in PATHS
    assert len(PATHS) > 300
