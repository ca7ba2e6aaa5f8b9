"""The advice record's JSON: what makes a file a record, writing one, and reading one back.

Pure: values in, values out, no I/O (:mod:`pynumabind.records._file` reads
and writes the file).  The record that ``pynumabind advise --save`` writes is
the document ``pynumabind advise --json`` prints
(:meth:`pynumabind.Advice.to_dict`, same schema, same keys) with four keys
added (:func:`record_dict`):

* ``"record": "pynumabind advice"``: what the file is.  A file without it is
  not an advice record: the writer refuses to overwrite it, the readers to
  use it (:func:`is_record`);
* ``"machine"``: the :class:`~pynumabind.records._machine.Machine` the
  measurement ran on, what must still hold for the record to apply
  (:mod:`pynumabind.records._machine` says what makes it stale);
* ``"saved"``: when (UTC, ISO 8601), and ``"pynumabind"``: which version.

Reading a record back
---------------------
:func:`read_record` turns the text into the values of a record: the
advice's fields, its machine, when and by which version it was saved
(:func:`pynumabind.records.advice.parse_record` makes the
:class:`~pynumabind.records.advice.Record` of them; this module does not
import the :class:`~pynumabind.Advice` class, whose ``save`` writes files).
The text is untrusted: its size is bounded (:data:`MAX_RECORD_BYTES`), every
key is checked for its type, a mode or policy must be one the rule can
recommend, and anything wrong is an :class:`~pynumabind.AdviceRecordError`
naming the file and the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    cast,
)

from .._text import clipped
from ..cpulist import parse_cpulist
from ..errors import AdviceRecordError, ListParseError
from ..model import SCHEMA_VERSION
from ._machine import Machine, MachineGpu, MachineNode
from .values import (
    DEFAULT_MIN_EFFECT,
    Comparison,
    CopyCell,
    Firmware,
    GpuAdvice,
    GpuCopies,
    HmatEntry,
    MemoryCell,
    MemoryMatrix,
    Placement,
    Recommendation,
    Spread,
)

if TYPE_CHECKING:  # pragma: no cover
    from .advice import Advice

__all__ = [
    "MAX_RECORD_BYTES",
    "RECORD_KIND",
    "Found",
    "advice_fields",
    "is_record",
    "read_record",
    "record_dict",
]

RECORD_KIND = "pynumabind advice"
#: Far more than any record (a 16-node, 16-GPU one is about 1 MB).
MAX_RECORD_BYTES = 16 << 20

_T = TypeVar("_T")
_KINDS: Dict[type, str] = {
    int: "an integer",
    float: "a finite number",
    str: "a string",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}


# ------------------------------------------------------------------ record


@dataclass(frozen=True)
class Found:
    """What :func:`read_record` found: the advice's fields (the keywords of
    :class:`~pynumabind.Advice`), its machine, when and by which version it was saved."""

    advice: Dict[str, Any]
    machine: Machine
    saved: str
    version: str


def record_dict(advice: Advice, machine: Machine, saved: str, version: str) -> Dict[str, Any]:
    """The record's JSON: ``advise --json``'s document, plus what it is, machine, saved, version."""
    document = advice.to_dict()
    document.update(
        {"record": RECORD_KIND, "machine": machine.to_dict(), "saved": saved, "pynumabind": version}
    )
    return document


def is_record(document: object) -> bool:
    """Whether ``document`` (parsed JSON) says it is an advice record."""
    return isinstance(document, dict) and document.get("record") == RECORD_KIND


def read_record(text: str, path: Optional[str] = None) -> Found:
    """The record in ``text``.

    Not a record, or a corrupt one: an :class:`~pynumabind.AdviceRecordError`
    naming ``path`` and the key.
    """
    where = f"advice record {path}" if path else "advice record"
    if len(text) > MAX_RECORD_BYTES:
        raise AdviceRecordError(f"{where} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AdviceRecordError(f"{where} is not valid JSON: {exc}") from exc
    if not is_record(document):
        raise AdviceRecordError(
            f'{path or "the file"} is not an advice record (no "record": {RECORD_KIND!r} '
            "key; pynumabind advise --save writes one)"
        )
    reader = _Reader(where)
    schema = reader.get(document, "schema", int)
    if schema != SCHEMA_VERSION:
        raise AdviceRecordError(
            f"{where} has schema {schema}; this pynumabind reads schema {SCHEMA_VERSION}: "
            "measure again with pynumabind advise --save"
        )
    return Found(
        advice=advice_fields(document, reader),
        machine=_read_machine(reader.get(document, "machine", dict), reader.at("machine")),
        saved=reader.get(document, "saved", str),
        version=reader.get(document, "pynumabind", str),
    )


# ------------------------------------------------------- checked JSON reads


class _Reader:
    """Typed reads from parsed JSON; every error names the record and the key path."""

    def __init__(self, where: str, key: str = "") -> None:
        self.where = where
        self.key = key

    def at(self, key: str) -> _Reader:
        return _Reader(self.where, f"{self.key}.{key}" if self.key else key)

    def fail(self, key: str, expected: str, value: object) -> AdviceRecordError:
        name = self.at(key).key if key else self.key
        return AdviceRecordError(
            f"{self.where}: {name}: expected {expected}, not {clipped(repr(value), 60)}"
        )

    def get(self, data: Mapping[str, Any], key: str, kind: Type[_T]) -> _T:
        if key not in data:
            raise AdviceRecordError(f"{self.where}: {self.at(key).key} is missing")
        return self.check(data[key], key, kind)

    def optional(self, data: Mapping[str, Any], key: str, kind: Type[_T]) -> Optional[_T]:
        value = data.get(key)
        return None if value is None else self.check(value, key, kind)

    def check(self, value: object, key: str, kind: Type[_T]) -> _T:
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)  # type: ignore[arg-type]
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise self.fail(key, _KINDS.get(kind, kind.__name__), value)
        return cast(_T, float(value) if kind is float else value)  # type: ignore[arg-type]

    def objects(self, data: Mapping[str, Any], key: str) -> List[Tuple[_Reader, Dict[str, Any]]]:
        """The list ``data[key]`` of JSON objects, each with its own reader."""
        return [(child, child.check(v, "", dict)) for child, v in self.items(data, key)]

    def items(self, data: Mapping[str, Any], key: str) -> List[Tuple[_Reader, Any]]:
        values = self.get(data, key, list)
        child = self.at(key)
        return [(child.at(str(i)), value) for i, value in enumerate(values)]


def _ints(reader: _Reader, data: Mapping[str, Any], key: str) -> Tuple[int, ...]:
    values = reader.get(data, key, list)
    return tuple(reader.at(key).check(v, str(i), int) for i, v in enumerate(values))


def _spread(reader: _Reader, value: object, key: str) -> Optional[Spread]:
    if value is None:
        return None
    data = reader.check(value, key, dict)
    here = reader.at(key)
    spread = Spread(
        n=here.get(data, "n", int),
        median=here.get(data, "median", float),
        q1=here.get(data, "q1", float),
        q3=here.get(data, "q3", float),
        min=here.get(data, "min", float),
        max=here.get(data, "max", float),
    )
    if spread.n < 1:
        raise here.fail("n", "at least 1", spread.n)
    return spread


def _placement(reader: _Reader, value: object, key: str) -> Optional[Placement]:
    if value is None:
        return None
    data = reader.check(value, key, dict)
    here = reader.at(key)
    pages = here.get(data, "pages", dict)
    counts: Dict[int, int] = {}
    for name, count in pages.items():
        try:
            node = int(name)
        except ValueError:
            raise here.fail("pages", "node ids as keys", name) from None
        counts[node] = here.at("pages").check(count, name, int)
    return Placement(wanted=here.get(data, "wanted", int), pages=counts)


def _grid(
    reader: _Reader, data: Mapping[str, Any], key: str, rows: int, columns: int
) -> List[List[Any]]:
    grid = reader.get(data, key, list)
    if len(grid) != rows or any(not isinstance(r, list) or len(r) != columns for r in grid):
        raise reader.fail(key, f"a {rows} x {columns} grid", grid)
    return grid


def _memory(reader: _Reader, data: Mapping[str, Any]) -> MemoryMatrix:
    cpu_nodes = _ints(reader, data, "cpu_nodes")
    memory_nodes = _ints(reader, data, "memory_nodes")
    shape = (len(cpu_nodes), len(memory_nodes))
    bandwidth = _grid(reader, data, "bandwidth_spread", *shape)
    latency = _grid(reader, data, "latency_spread", *shape)
    placement = _grid(reader, data, "placement", *shape)
    threads = _grid(reader, data, "threads", *shape)
    errors = _grid(reader, data, "errors", *shape)
    cells = []
    for i in range(shape[0]):
        row = []
        for j in range(shape[1]):
            key = f"{i}.{j}"
            error = errors[i][j]
            row.append(
                MemoryCell(
                    bandwidth=_spread(reader.at("bandwidth_spread"), bandwidth[i][j], key),
                    latency=_spread(reader.at("latency_spread"), latency[i][j], key),
                    placement=_placement(reader.at("placement"), placement[i][j], key),
                    threads=reader.at("threads").check(threads[i][j], key, int),
                    error=None if error is None else reader.at("errors").check(error, key, str),
                )
            )
        cells.append(tuple(row))
    notes = reader.get(data, "notes", list)
    return MemoryMatrix(
        cpu_nodes=cpu_nodes,
        memory_nodes=memory_nodes,
        cells=tuple(cells),
        buffer_bytes=reader.get(data, "buffer_bytes", int),
        llc_bytes=reader.optional(data, "llc_bytes", int),
        latency_overhead=_spread(reader, data.get("latency_overhead_ns"), "latency_overhead_ns"),
        method=reader.get(data, "method", str),
        notes=tuple(reader.at("notes").check(n, str(i), str) for i, n in enumerate(notes)),
    )


def _copies(reader: _Reader, data: Mapping[str, Any]) -> GpuCopies:
    nodes = _ints(reader, data, "cpu_nodes")
    columns: Dict[str, List[Any]] = {}
    for key in ("h2d_spread", "d2h_spread", "placement", "errors"):
        values = reader.get(data, key, list)
        if len(values) != len(nodes):
            raise reader.fail(key, f"{len(nodes)} entries (one per CPU node)", values)
        columns[key] = values
    cells = []
    for i, node in enumerate(nodes):
        error = columns["errors"][i]
        cells.append(
            CopyCell(
                cpu_node=node,
                h2d=_spread(reader.at("h2d_spread"), columns["h2d_spread"][i], str(i)),
                d2h=_spread(reader.at("d2h_spread"), columns["d2h_spread"][i], str(i)),
                placement=_placement(reader.at("placement"), columns["placement"][i], str(i)),
                error=None if error is None else reader.at("errors").check(error, str(i), str),
            )
        )
    return GpuCopies(
        index=reader.get(data, "index", int),
        name=reader.optional(data, "name", str),
        pci_bus_id=reader.optional(data, "pci_bus_id", str),
        numa_node=reader.optional(data, "numa_node", int),
        cells=tuple(cells),
        buffer_bytes=reader.get(data, "buffer_bytes", int),
    )


def _firmware(reader: _Reader, data: Mapping[str, Any]) -> Firmware:
    slit = reader.get(data, "slit", dict)
    here = reader.at("slit")
    nodes = _ints(here, slit, "nodes")
    rows = _grid(here, slit, "distances", len(nodes), len(nodes))
    distances = tuple(
        tuple(
            None if v is None else here.at("distances").check(v, f"{i}.{j}", int)
            for j, v in enumerate(row)
        )
        for i, row in enumerate(rows)
    )
    hmat = []
    for child, entry in reader.objects(data, "hmat"):
        hmat.append(
            HmatEntry(
                target=child.get(entry, "target", int),
                access=child.get(entry, "access", int),
                initiators=_ints(child, entry, "initiators"),
                read_bandwidth_mbs=child.optional(entry, "read_bandwidth_mbs", int),
                write_bandwidth_mbs=child.optional(entry, "write_bandwidth_mbs", int),
                read_latency_ns=child.optional(entry, "read_latency_ns", int),
                write_latency_ns=child.optional(entry, "write_latency_ns", int),
            )
        )
    return Firmware(nodes, distances, tuple(hmat), reader.optional(data, "hmat_note", str))


def _recommendation(reader: _Reader, data: Mapping[str, Any]) -> Recommendation:
    min_effect = reader.optional(data, "min_effect", float)
    min_effect = DEFAULT_MIN_EFFECT if min_effect is None else min_effect
    gpus = []
    for child, entry in reader.objects(data, "per_gpu"):
        gpus.append(
            GpuAdvice(
                gpu=child.get(entry, "gpu", int),
                bind=child.get(entry, "bind", bool),
                node=child.optional(entry, "node", int),
                mode=child.get(entry, "mode", str),
                policy=child.get(entry, "policy", str),
                reasons=_strings(child, entry, "reasons"),
                reported_node=child.optional(entry, "reported_node", int),
            )
        )
    comparisons = []
    for child, entry in reader.objects(data, "comparisons"):
        comparisons.append(
            Comparison(
                subject=child.get(entry, "subject", str),
                better=child.get(entry, "better", str),
                worse=child.get(entry, "worse", str),
                ratio=child.get(entry, "ratio", float),
                low=child.get(entry, "low", float),
                high=child.get(entry, "high", float),
                n=child.get(entry, "n", int),
                min_effect=min_effect,
            )
        )
    return Recommendation(
        bind=reader.get(data, "bind", bool),
        mode=_choice(reader, data, "mode", ("node", "none")),
        policy=_choice(reader, data, "policy", ("preferred", "none")),
        verdict=reader.get(data, "verdict", str),
        reasons=_strings(reader, data, "reasons"),
        per_gpu=tuple(gpus),
        comparisons=tuple(comparisons),
        basis=reader.get(data, "basis", str),
        min_effect=min_effect,
    )


def _choice(reader: _Reader, data: Mapping[str, Any], key: str, choices: Sequence[str]) -> str:
    """A mode or policy the rule can recommend: nothing else is ever acted on."""
    value = reader.get(data, key, str)
    if value not in choices:
        raise reader.fail(key, " or ".join(repr(c) for c in choices), value)
    return value


def _strings(reader: _Reader, data: Mapping[str, Any], key: str) -> Tuple[str, ...]:
    return tuple(child.check(v, "", str) for child, v in reader.items(data, key))


def advice_fields(document: Mapping[str, Any], reader: Optional[_Reader] = None) -> Dict[str, Any]:
    """The :class:`~pynumabind.Advice` of an ``advise --json`` document (a record's too).

    As the keywords ``Advice(**fields)`` takes, each value checked.
    """
    reader = reader or _Reader("advice document")
    memory = reader.optional(document, "memory", dict)
    firmware = reader.optional(document, "firmware", dict)
    status = reader.get(document, "copies_status", dict)
    status_reader = reader.at("copies_status")
    notes = _strings(reader, document, "notes")
    return dict(
        memory=None if memory is None else _memory(reader.at("memory"), memory),
        copies=tuple(_copies(child, entry) for child, entry in reader.objects(document, "copies")),
        copies_status=status_reader.get(status, "reason", str),
        copies_backend=status_reader.optional(status, "backend", str),
        firmware=None if firmware is None else _firmware(reader.at("firmware"), firmware),
        recommendation=_recommendation(
            reader.at("recommendation"), reader.get(document, "recommendation", dict)
        ),
        quick=reader.get(document, "quick", bool),
        seconds=reader.get(document, "seconds", float),
        notes=notes,
    )


def _read_machine(data: Mapping[str, Any], reader: _Reader) -> Machine:
    nodes = []
    for child, entry in reader.objects(data, "nodes"):
        text = child.get(entry, "cpus", str)
        try:
            cpus = parse_cpulist(text) if text else frozenset()
        except ListParseError as exc:
            raise child.fail("cpus", "a CPU list", text) from exc
        nodes.append(
            MachineNode(
                id=child.get(entry, "id", int),
                cpus=cpus,
                memory_bytes=child.optional(entry, "memory_bytes", int),
            )
        )
    rows = _grid(reader, data, "distances", len(nodes), len(nodes))
    distances = tuple(
        tuple(
            None if v is None else reader.at("distances").check(v, f"{i}.{j}", int)
            for j, v in enumerate(row)
        )
        for i, row in enumerate(rows)
    )
    gpus = []
    for child, entry in reader.objects(data, "gpus"):
        gpus.append(
            MachineGpu(
                pci_bus_id=child.get(entry, "pci_bus_id", str),
                model=child.optional(entry, "model", str),
            )
        )
    return Machine(
        cpu_model=reader.optional(data, "cpu_model", str),
        nodes=tuple(nodes),
        distances=distances,
        gpus=tuple(gpus),
        kernel=reader.get(data, "kernel", str),
    )
