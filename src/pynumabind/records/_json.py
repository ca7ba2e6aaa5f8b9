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

The document's ``"schema"`` is :data:`RECORD_SCHEMA`, the advice's own
number since it went up to 3 on its own: schema 3 may recommend policy
``weighted-interleave`` with ``recommendation.weights``, and holds
``memory.interleave`` (each CPU node's weighted interleave, measured), which
a pynumabind reading schema 2 would refuse or leave out; it still reads
schema 2 (:data:`READ_RECORD_SCHEMAS`: no weights, no interleave).  Every
other document keeps :data:`pynumabind.model.SCHEMA_VERSION`.

Reading a record back
---------------------
:func:`read_record` turns the text into the values of a record: the
advice's fields, its machine, when and by which version it was saved
(:func:`pynumabind.records.advice.parse_record` makes the
:class:`~pynumabind.records.advice.Record` of them; this module does not
import the :class:`~pynumabind.Advice` class, whose ``save`` writes files).
The text is untrusted: it is bounded before it is parsed (:data:`MAX_RECORD_BYTES`,
and a number of JSON values), its shape before the typed read, every key is
checked for its type (an integer within 64 bits, a finite number, a string of
at most :data:`~pynumabind.records._validate.MAX_TEXT` characters), a mode or
policy must be one the rule can recommend, and anything wrong is an
:class:`~pynumabind.AdviceRecordError` naming the file and the key by its JSON
path (``machine.nodes[0].id``).  The rules beyond types, and why, are
:mod:`pynumabind.records._validate`'s.

Every string read from a record is escaped as it is read
(:func:`pynumabind._text.escaped`): this reader is where record text enters
the program, so no verdict, reason, CPU model or kernel release taken from a
record can forge a line of ``plan``, ``check``, a report or a log warning.
"""

from __future__ import annotations

import json
import re
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
    Union,
    cast,
)

from .._text import clipped, escaped
from ..cpulist import parse_cpulist
from ..errors import AdviceRecordError, ListParseError
from . import _validate
from ._machine import Machine, MachineGpu, MachineNode
from .values import (
    DEFAULT_MIN_EFFECT,
    Comparison,
    CopyCell,
    Firmware,
    GpuAdvice,
    GpuCopies,
    HmatEntry,
    InterleaveCell,
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
    "READ_RECORD_SCHEMAS",
    "RECORD_KIND",
    "RECORD_SCHEMA",
    "Found",
    "advice_fields",
    "is_record",
    "read_record",
    "record_dict",
]

RECORD_KIND = "pynumabind advice"
#: The schema ``advise --json`` and the record it saves carry (see the module docstring).
RECORD_SCHEMA = 3
#: The advice schemas this pynumabind reads: 2 (before weights), 3.
READ_RECORD_SCHEMAS = (2, 3)
#: Far more than any record (a 16-node, 16-GPU one is about 1 MB).
MAX_RECORD_BYTES = 16 << 20

_T = TypeVar("_T")
#: A key of a JSON path: an object's key, a list's index, or a grid's indices.
Key = Union[str, int, Tuple[int, ...]]
#: JSON integers outside 64 bits are no count, size or id a record holds.
_INT_LIMIT = 1 << 63
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
    naming ``path`` (escaped: a file name is text from outside too) and the key.
    """
    where = f"advice record {escaped(path)}" if path else "advice record"
    problem = _validate.first(_validate.text_problems(text, MAX_RECORD_BYTES))
    if problem is not None:  # absurd: refused before any parsing
        raise AdviceRecordError(f"{where} {problem}")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AdviceRecordError(f"{where} is not valid JSON: {clipped(str(exc), 200)}") from exc
    if not is_record(document):
        raise AdviceRecordError(
            f'{escaped(path or "the file")} is not an advice record (no "record": {RECORD_KIND!r} '
            "key; pynumabind advise --save writes one)"
        )
    reader = _Reader(where)
    schema = reader.get(document, "schema", int)
    if schema not in READ_RECORD_SCHEMAS:
        raise AdviceRecordError(
            f"{where} has schema {schema}; this pynumabind reads schemas "
            f"{', '.join(map(str, READ_RECORD_SCHEMAS))}: measure again with pynumabind "
            "advise --save"
        )
    problem = _validate.first(_validate.shape_problems(document))
    if problem is not None:  # more nodes or GPUs than a machine has: not read further
        raise AdviceRecordError(f"{where}: {problem}")
    return Found(
        advice=advice_fields(document, reader),
        machine=_read_machine(reader.get(document, "machine", dict), reader.at("machine")),
        saved=reader.get(document, "saved", str),
        version=reader.get(document, "pynumabind", str),
    )


# ------------------------------------------------------- checked JSON reads


def _join(base: str, key: Key) -> str:
    """``base`` and ``key`` as a JSON path: ``a.b``, ``a[1]``, ``a[0][1]``."""
    if isinstance(key, tuple):
        return base + "".join(f"[{k}]" for k in key)
    if isinstance(key, int):
        return f"{base}[{key}]"
    if not key:
        return base
    return f"{base}.{key}" if base else key


def _preview(value: object) -> str:
    """``value`` for an error, in bounded time: a container by its size, a string cut short.

    Never the ``repr`` of a whole container: a record's lists can hold
    millions of values, or nest deeper than ``repr`` may recurse.
    """
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"an object of {len(value)} key{'' if len(value) == 1 else 's'}"
    if isinstance(value, str):
        return clipped(repr(value[:60]), 60)
    return clipped(repr(value), 60)


def _number(value: object) -> bool:
    """A JSON number a record may hold: an int or a finite float, below 2**63 either way."""
    kind = type(value)
    if kind is float:
        return -_INT_LIMIT < value < _INT_LIMIT  # type: ignore[operator]  # NaN compares False
    return kind is int and -_INT_LIMIT < value < _INT_LIMIT  # type: ignore[operator]


def _integer(value: object) -> bool:
    return type(value) is int and -_INT_LIMIT < value < _INT_LIMIT


class _Reader:
    """Typed reads from parsed JSON; every error names the record and the key's JSON path.

    A reader knows its parent and its own key; the path is only written out
    for an error, so reading a large record builds no strings.
    """

    __slots__ = ("_key", "_parent", "where")

    def __init__(self, where: str, key: Key = "", parent: Optional[_Reader] = None) -> None:
        self.where = where
        self._key = key
        self._parent = parent

    @property
    def key(self) -> str:
        return _join(self._parent.key if self._parent is not None else "", self._key)

    def at(self, key: Key) -> _Reader:
        return _Reader(self.where, key, self)

    def fail(self, key: Key, expected: str, value: object) -> AdviceRecordError:
        return AdviceRecordError(
            f"{self.where}: {_join(self.key, key)}: expected {expected}, not {_preview(value)}"
        )

    def get(self, data: Mapping[str, Any], key: str, kind: Type[_T]) -> _T:
        if key not in data:
            raise AdviceRecordError(f"{self.where}: {_join(self.key, key)} is missing")
        return self.check(data[key], key, kind)

    def optional(self, data: Mapping[str, Any], key: str, kind: Type[_T]) -> Optional[_T]:
        value = data.get(key)
        return None if value is None else self.check(value, key, kind)

    def check(self, value: object, key: Key, kind: Type[_T]) -> _T:
        """``value`` as ``kind``: an int within 64 bits, a finite number, an escaped string.

        Strings come back escaped (:func:`pynumabind._text.escaped`), at
        most :data:`~pynumabind.records._validate.MAX_TEXT` characters long.
        """
        if kind is float:
            if _number(value):
                return cast(_T, float(value))  # type: ignore[arg-type]
        elif kind is int:
            if _integer(value):
                return cast(_T, value)
        elif kind is str:
            if isinstance(value, str) and len(value) <= _validate.MAX_TEXT:
                return cast(_T, escaped(value))
        elif isinstance(value, kind):
            return value
        raise self.fail(key, _expected(kind), value)

    def objects(self, data: Mapping[str, Any], key: str) -> List[Tuple[_Reader, Dict[str, Any]]]:
        """The list ``data[key]`` of JSON objects, each with its own reader."""
        return [(child, child.check(v, "", dict)) for child, v in self.items(data, key)]

    def items(self, data: Mapping[str, Any], key: str) -> List[Tuple[_Reader, Any]]:
        values = self.get(data, key, list)
        child = self.at(key)
        return [(child.at(i), value) for i, value in enumerate(values)]


def _expected(kind: type) -> str:
    if kind is int:
        return "an integer within 64 bits"
    if kind is float:
        return "a finite number below 2**63"
    if kind is str:
        return f"a string of at most {_validate.MAX_TEXT} characters"
    return _KINDS.get(kind, kind.__name__)


def _ints(reader: _Reader, data: Mapping[str, Any], key: str) -> Tuple[int, ...]:
    values = reader.get(data, key, list)
    if all(map(_integer, values)):
        return tuple(values)  # the common case, checked at once
    here = reader.at(key)
    return tuple(here.check(v, i, int) for i, v in enumerate(values))


def _distance_rows(reader: _Reader, rows: List[List[Any]]) -> Tuple[Tuple[Optional[int], ...], ...]:
    """A grid of distances, ints or null (checked row by row at once; a bad one named)."""
    out = []
    for i, row in enumerate(rows):
        if not all(v is None or _integer(v) for v in row):
            for j, v in enumerate(row):
                if v is not None:
                    reader.check(v, (i, j), int)
        out.append(tuple(row))
    return tuple(out)


_SPREAD = ("median", "q1", "q3", "min", "max")


def _spread(reader: _Reader, value: object, key: Key) -> Optional[Spread]:
    if value is None:
        return None
    if type(value) is dict:  # the common case, checked at once
        n = value.get("n")
        figures = [value.get(name) for name in _SPREAD]
        if _integer(n) and n >= 1 and all(map(_number, figures)):  # type: ignore[operator]
            return Spread(n, *map(float, figures))  # type: ignore[arg-type]
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


def _placement(reader: _Reader, value: object, key: Key) -> Optional[Placement]:
    if value is None:
        return None
    data = reader.check(value, key, dict)
    here = reader.at(key)
    pages = here.get(data, "pages", dict)
    counts: Dict[int, int] = {}
    for name, count in pages.items():
        if _PAGE_KEY.match(name) is None:  # not int(): it takes "1_0", " 1" and other digits
            raise here.fail("pages", "node ids or -errno as keys", name)
        counts[int(name)] = here.at("pages").check(count, name, int)
    return Placement(wanted=here.get(data, "wanted", int), pages=counts)


_PAGE_KEY = re.compile(r"-?[0-9]{1,6}\Z")


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
    at = {name: reader.at(name) for name in ("bandwidth_spread", "latency_spread", "placement")}
    at.update(threads=reader.at("threads"), errors=reader.at("errors"))
    for i in range(shape[0]):
        row = []
        for j in range(shape[1]):
            key = (i, j)
            error = errors[i][j]
            row.append(
                MemoryCell(
                    bandwidth=_spread(at["bandwidth_spread"], bandwidth[i][j], key),
                    latency=_spread(at["latency_spread"], latency[i][j], key),
                    placement=_placement(at["placement"], placement[i][j], key),
                    threads=at["threads"].check(threads[i][j], key, int),
                    error=None if error is None else at["errors"].check(error, key, str),
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
        notes=tuple(reader.at("notes").check(n, i, str) for i, n in enumerate(notes)),
        interleave=_interleave(reader, data),
    )


def _weights(reader: _Reader, value: object, key: Key) -> Optional[Dict[int, int]]:
    """Weights as JSON (``{"0": 3, "2": 1}``): node ids as keys, integers as values.

    Their ranges are :mod:`pynumabind.records._validate`'s.
    """
    if value is None:
        return None
    data = reader.check(value, key, dict)
    here = reader.at(key)
    weights: Dict[int, int] = {}
    for name, weight in data.items():
        if _NODE_KEY.match(name) is None:
            raise reader.fail(key, "node ids as keys", name)
        weights[int(name)] = here.check(weight, name, int)
    return dict(sorted(weights.items()))


_NODE_KEY = re.compile(r"[0-9]{1,6}\Z")


def _interleave(reader: _Reader, data: Mapping[str, Any]) -> Tuple[InterleaveCell, ...]:
    """``memory.interleave``: each CPU node's weighted interleave (absent in schema 2)."""
    if data.get("interleave") is None:
        return ()
    cells = []
    for child, entry in reader.objects(data, "interleave"):
        weights = _weights(child, child.get(entry, "weights", dict), "weights") or {}
        error = entry.get("error")
        skipped = entry.get("skipped")
        cells.append(
            InterleaveCell(
                cpu_node=child.get(entry, "cpu_node", int),
                local=child.get(entry, "local", int),
                weights=weights,
                predicted=child.get(entry, "predicted", float),
                bandwidth=_spread(child, entry.get("bandwidth_spread"), "bandwidth_spread"),
                placement=_placement(child, entry.get("placement"), "placement"),
                threads=child.get(entry, "threads", int),
                error=None if error is None else child.check(error, "error", str),
                skipped=None if skipped is None else child.check(skipped, "skipped", str),
                local_bandwidth=_spread(child, entry.get("local_spread"), "local_spread"),
            )
        )
    return tuple(cells)


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
                h2d=_spread(reader.at("h2d_spread"), columns["h2d_spread"][i], i),
                d2h=_spread(reader.at("d2h_spread"), columns["d2h_spread"][i], i),
                placement=_placement(reader.at("placement"), columns["placement"][i], i),
                error=None if error is None else reader.at("errors").check(error, i, str),
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
    distances = _distance_rows(here.at("distances"), rows)
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
                mode=_choice(child, entry, "mode", ("node", "none")),
                policy=_choice(child, entry, "policy", ("preferred", "none")),
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
        policy=_choice(reader, data, "policy", ("preferred", "weighted-interleave", "none")),
        verdict=reader.get(data, "verdict", str),
        reasons=_strings(reader, data, "reasons"),
        per_gpu=tuple(gpus),
        comparisons=tuple(comparisons),
        basis=reader.get(data, "basis", str),
        min_effect=min_effect,
        weights=_weights(reader, data.get("weights"), "weights"),
    )


def _choice(reader: _Reader, data: Mapping[str, Any], key: str, choices: Sequence[str]) -> str:
    """A mode or policy the rule can recommend: nothing else is ever acted on."""
    value = reader.get(data, key, str)
    if value not in choices:
        named = [repr(c) for c in choices]
        raise reader.fail(key, f"{', '.join(named[:-1])} or {named[-1]}", value)
    return value


def _strings(reader: _Reader, data: Mapping[str, Any], key: str) -> Tuple[str, ...]:
    values = reader.get(data, key, list)
    if all(type(v) is str and len(v) <= _validate.MAX_TEXT for v in values):
        return tuple(map(escaped, values))  # the common case, checked at once
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
    distances = _distance_rows(reader.at("distances"), rows)
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
