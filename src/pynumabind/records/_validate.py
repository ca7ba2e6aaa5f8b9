"""What an advice record must hold before anything in it is followed: values in, problems out.

Pure: no I/O, importing only the values floor and the folder's pure modules.
A record is untrusted input.  It sits on shared storage that other accounts
and machines write (NFS, a ConfigMap, a Slurm shared file system), it may be
a copy from another machine, a hand edit or a hostile file, and every worker
of every job reads it.  So it is checked in four steps, each one cheap next
to what it guards, and each problem names the field by its JSON path
(``recommendation.per_gpu[1].node``) and says what is wrong:

1. **Before it is parsed** (:func:`text_problems`): at most
   :data:`~pynumabind.records._json.MAX_RECORD_BYTES` and at most
   :data:`MAX_VALUES` JSON values, counted as the text's commas and opening
   brackets (``str.count``, at C speed; those inside strings count too, so
   the count is an upper bound).  Parsing costs time per value: a 9.8 MB
   record whose machine lists 1,800 nodes cost every worker 8 s before it was
   rejected, and is now rejected unparsed (``python -m
   benchmarks.bench_records`` measures it).  Nesting deeper than the
   interpreter's recursion limit is the JSON parser's own error, raised as
   soon as it is reached.
2. **Before the typed read** (:func:`shape_problems`): the lists a record
   holds per NUMA node or per GPU are no longer than a machine can have:
   :data:`MAX_NODES` nodes (the kernel's largest ``MAX_NUMNODES``),
   :data:`MAX_GPUS` GPUs.  The typed read
   (:mod:`pynumabind.records._json`) then checks each key's type, keeps every
   integer within 64 bits and every string within :data:`MAX_TEXT`
   characters, and escapes every string (:func:`pynumabind._text.escaped`):
   no text taken from a record can forge an output line.
3. **After the typed read** (:func:`record_problems`): the values on their
   own.  Every node id (the machine's, the measurements', each GPU's) is a
   node id the kernel can have, from 0 to ``MAX_NODES - 1``, and every GPU
   index one from 0 to ``MAX_GPUS - 1``; ids listed once; a CPU in one node
   only; counts, sizes, distances and ratios not negative; page counts keyed
   by node id or by ``-errno``; the verdict and each GPU's advice one the
   rule can give (bind: mode ``node``, and for a GPU its node; do not bind:
   mode ``none``, policy ``none``).  A problem here makes the record
   unreadable: :class:`~pynumabind.AdviceRecordError` from
   :func:`~pynumabind.load_advice`, and in mode ``advised`` one warning and
   the default plan.
4. **Before it is followed** (:func:`follow_problems`): against the machine
   being planned -- the :class:`~pynumabind.Topology`, with this process's
   allowed CPUs -- not the record's own fingerprint.  Each GPU of that
   topology which the record moves to another node must be moved to a node
   with CPUs on that machine, and with CPUs this process may use (its
   affinity or cpuset); each node of the recommended interleave weights
   must have memory on that machine and be one this process may allocate
   on (``allowed_mems``).  A node id that is valid on its own (99) but not a
   CPU node here, or a node the job's cpuset leaves out, does not make the
   file unreadable (:func:`~pynumabind.load_advice` returns it); the store
   (:func:`~pynumabind.records.store.resolve_advised`) follows nothing of
   the record, logs one warning naming the record, the field and the node,
   and plans the default mode.

Why whole records: a record is one measurement, and following part of it
(the mode, but not a GPU's node) would bind by evidence that does not hold
here, while the reasons said the record was followed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from .._text import counted, escaped, format_ids
from .._weights import MAX_WEIGHT, MIN_WEIGHT

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Gpu, Topology
    from ._machine import Machine
    from .advice import Record
    from .values import GpuAdvice, GpuCopies, MemoryMatrix, Placement, Recommendation

__all__ = [
    "MAX_ERRNO",
    "MAX_GPUS",
    "MAX_NODES",
    "MAX_TEXT",
    "MAX_VALUES",
    "Problem",
    "first",
    "follow_problems",
    "record_problems",
    "shape_problems",
    "text_problems",
    "unfollowable",
]

#: NUMA node ids run from 0 to this less one: the kernel's largest ``MAX_NUMNODES``
#: (``CONFIG_NODES_SHIFT=10``), so no machine has more nodes, nor a higher id.
MAX_NODES = 1024
#: GPU indices run from 0 to this less one (one host has tens at most).
MAX_GPUS = 1024
#: The most JSON values a record may hold, counted before parsing.  A record of a
#: 64-node, 16-GPU machine, every measurement made, holds about 212,000.
MAX_VALUES = 1 << 19
#: The longest string a record may hold: a verdict, a reason, an error, a CPU list.
MAX_TEXT = 16384
#: Placement counts pages the kernel could not place under ``-errno`` keys.
MAX_ERRNO = 4095


@dataclass(frozen=True)
class Problem:
    """What is wrong with a record: the field, as a JSON path, and what.

    ``field`` is empty for the record as a whole (its size).
    """

    field: str
    what: str

    def text(self) -> str:
        return f"{self.field}: {self.what}" if self.field else self.what


def first(problems: Sequence[Problem]) -> Optional[str]:
    """The first problem's text, saying how many more there are; None when there is none."""
    if not problems:
        return None
    more = f" (and {counted(len(problems) - 1, 'more problem')})" if len(problems) > 1 else ""
    return problems[0].text() + more


# ------------------------------------------------------------ 1. the text


def text_problems(text: str, max_bytes: int) -> List[Problem]:
    """Before parsing: the size (``max_bytes``, in characters) and the number of JSON values."""
    if len(text) > max_bytes:
        return [Problem("", f"is larger than {max_bytes} bytes")]
    values = text.count(",") + text.count("[") + text.count("{")
    if values > MAX_VALUES:
        return [
            Problem(
                "",
                f"holds up to {values} JSON values (its commas and brackets), more than the "
                f"{MAX_VALUES} any record needs (a 64-node, 16-GPU machine's holds about "
                "212,000): not parsed",
            )
        ]
    return []


# ------------------------------------------------------------ 2. the shape

#: (JSON path, the most entries, what an entry is): lists held per node or per GPU.
_SHAPES: Tuple[Tuple[Tuple[str, ...], int, str], ...] = (
    (("machine", "nodes"), MAX_NODES, "NUMA node"),
    (("machine", "distances"), MAX_NODES, "row"),
    (("machine", "gpus"), MAX_GPUS, "GPU"),
    (("memory", "cpu_nodes"), MAX_NODES, "CPU node"),
    (("memory", "memory_nodes"), MAX_NODES, "memory node"),
    (("memory", "interleave"), MAX_NODES, "CPU node"),
    (("copies",), MAX_GPUS, "GPU"),
    (("recommendation", "per_gpu"), MAX_GPUS, "GPU"),
    (("firmware", "slit", "nodes"), MAX_NODES, "NUMA node"),
)


def shape_problems(document: Mapping[str, Any]) -> List[Problem]:
    """Before the typed read: no list held per node or per GPU is longer than a machine's.

    Only lists are measured; a key of another type is the typed read's error.
    """
    out: List[Problem] = []
    for path, most, noun in _SHAPES:
        here: Any = document
        for key in path:
            here = here.get(key) if isinstance(here, dict) else None
        if isinstance(here, list) and len(here) > most:
            what = f"{counted(len(here), noun)}, more than a machine has ({most})"
            out.append(Problem(".".join(path), what))
    return out


# ------------------------------------------------------------ 3. the values


def _node(field: str, value: Optional[int]) -> Iterator[Problem]:
    if value is not None and not 0 <= value < MAX_NODES:
        yield Problem(field, f"expected a NUMA node id from 0 to {MAX_NODES - 1}, not {value}")


def _gpu(field: str, value: int) -> Iterator[Problem]:
    if not 0 <= value < MAX_GPUS:
        yield Problem(field, f"expected a GPU index from 0 to {MAX_GPUS - 1}, not {value}")


def _count(field: str, value: Optional[float], least: float = 0) -> Iterator[Problem]:
    if value is not None and not value >= least:
        yield Problem(field, f"expected {least:g} or more, not {value}")


def _nodes(field: str, values: Iterable[int], key: str = "") -> Iterator[Problem]:
    """Node ids, each valid and listed once (``field[i]``, or ``field[i].key``)."""
    seen = set()
    for i, value in enumerate(values):
        here = f"{field}[{i}]{key}"
        yield from _node(here, value)
        if value in seen:
            yield Problem(here, f"node {value} is listed twice")
        seen.add(value)


def _distances(field: str, rows: Sequence[Sequence[Optional[int]]]) -> Iterator[Problem]:
    for i, row in enumerate(rows):
        if all(v is None or v >= 0 for v in row):
            continue
        j = next(j for j, v in enumerate(row) if v is not None and v < 0)
        yield Problem(f"{field}[{i}][{j}]", f"expected a distance of 0 or more, not {row[j]}")


def _machine(machine: Machine) -> Iterator[Problem]:
    yield from _nodes("machine.nodes", (n.id for n in machine.nodes), ".id")
    owner: Dict[int, int] = {}  # CPU -> its node
    for i, node in enumerate(machine.nodes):
        field = f"machine.nodes[{i}]"
        yield from _count(f"{field}.memory_bytes", node.memory_bytes)
        shared = sorted(cpu for cpu in node.cpus if cpu in owner)
        if shared:
            other = owner[shared[0]]
            yield Problem(f"{field}.cpus", f"CPU {shared[0]} is in node {other} too")
        owner.update((cpu, node.id) for cpu in node.cpus)
    yield from _distances("machine.distances", machine.distances)
    buses = [g.pci_bus_id.lower() for g in machine.gpus]
    for i, bus in enumerate(buses):
        if bus in buses[:i]:
            yield Problem(f"machine.gpus[{i}].pci_bus_id", f"GPU {bus} is listed twice")


def _placement(field: str, placement: Optional[Placement]) -> Iterator[Problem]:
    if placement is None:
        return
    yield from _node(f"{field}.wanted", placement.wanted)
    for key, count in placement.pages.items():
        if not -MAX_ERRNO <= key < MAX_NODES:
            yield Problem(
                f"{field}.pages",
                f"expected node ids (0 to {MAX_NODES - 1}) or -errno as keys, not {key}",
            )
        yield from _count(f"{field}.pages.{key}", count)


def _placed(placement: Optional[Placement]) -> bool:
    """Whether ``placement`` keeps every rule (to name a problem only where there is one)."""
    return placement is None or (
        0 <= placement.wanted < MAX_NODES
        and all(-MAX_ERRNO <= k < MAX_NODES and c >= 0 for k, c in placement.pages.items())
    )


def _memory(memory: MemoryMatrix) -> Iterator[Problem]:
    yield from _nodes("memory.cpu_nodes", memory.cpu_nodes)
    yield from _nodes("memory.memory_nodes", memory.memory_nodes)
    yield from _count("memory.buffer_bytes", memory.buffer_bytes)
    yield from _count("memory.llc_bytes", memory.llc_bytes)
    for i, row in enumerate(memory.cells):  # a spread's count is the reader's (at least 1)
        for j, cell in enumerate(row):
            if cell.threads < 0:
                yield from _count(f"memory.threads[{i}][{j}]", cell.threads)
            if not _placed(cell.placement):
                yield from _placement(f"memory.placement[{i}][{j}]", cell.placement)


def _weights(
    field: str, weights: Optional[Mapping[int, int]], machine: Machine
) -> Iterator[Problem]:
    """Interleave weights: 1 to 255 each, on nodes of the record's machine."""
    if weights is None:
        return
    if not weights:
        yield Problem(field, "names no node")
    known = {n.id for n in machine.nodes}
    for node, weight in sorted(weights.items()):
        yield from _node(f"{field}.{node}", node)
        if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
            yield Problem(
                f"{field}.{node}",
                f"expected a weight from {MIN_WEIGHT} to {MAX_WEIGHT}, not {weight}",
            )
        if 0 <= node < MAX_NODES and node not in known:
            yield Problem(f"{field}.{node}", f"node {node} is not a node of the record's machine")


def _interleave(memory: MemoryMatrix, machine: Machine) -> Iterator[Problem]:
    yield from _nodes("memory.interleave", (c.cpu_node for c in memory.interleave), ".cpu_node")
    for i, cell in enumerate(memory.interleave):
        field = f"memory.interleave[{i}]"
        yield from _node(f"{field}.local", cell.local)
        yield from _weights(f"{field}.weights", cell.weights, machine)
        if cell.local not in cell.weights:
            yield Problem(f"{field}.weights", f"names no weight for the local node {cell.local}")
        yield from _count(f"{field}.predicted", cell.predicted)
        yield from _count(f"{field}.threads", cell.threads)
        if not _placed(cell.placement):
            yield from _placement(f"{field}.placement", cell.placement)


def _copies(copies: Sequence[GpuCopies]) -> Iterator[Problem]:
    indices = set()
    buses = set()
    for g, gpu in enumerate(copies):
        field = f"copies[{g}]"
        yield from _gpu(f"{field}.index", gpu.index)
        if gpu.index in indices:
            yield Problem(f"{field}.index", f"GPU {gpu.index} is listed twice")
        indices.add(gpu.index)
        if gpu.pci_bus_id is not None:
            if gpu.pci_bus_id.lower() in buses:
                yield Problem(f"{field}.pci_bus_id", f"GPU {gpu.pci_bus_id} is listed twice")
            buses.add(gpu.pci_bus_id.lower())
        yield from _node(f"{field}.numa_node", gpu.numa_node)
        yield from _count(f"{field}.buffer_bytes", gpu.buffer_bytes)
        yield from _nodes(f"{field}.cpu_nodes", (c.cpu_node for c in gpu.cells))
        for i, cell in enumerate(gpu.cells):
            if not _placed(cell.placement):
                yield from _placement(f"{field}.placement[{i}]", cell.placement)


def _firmware(record: Record) -> Iterator[Problem]:
    firmware = record.advice.firmware
    if firmware is None:
        return
    yield from _nodes("firmware.slit.nodes", firmware.nodes)
    yield from _distances("firmware.slit.distances", firmware.distances)
    for i, entry in enumerate(firmware.hmat):
        field = f"firmware.hmat[{i}]"
        yield from _node(f"{field}.target", entry.target)
        yield from _count(f"{field}.access", entry.access)
        for j, node in enumerate(entry.initiators):
            yield from _node(f"{field}.initiators[{j}]", node)
        for name in ("read_bandwidth_mbs", "write_bandwidth_mbs", "read_latency_ns"):
            yield from _count(f"{field}.{name}", getattr(entry, name))
        yield from _count(f"{field}.write_latency_ns", entry.write_latency_ns)


def _verdict(field: str, bind: bool, mode: str, policy: str) -> Iterator[Problem]:
    """Bind with mode ``node``; do not bind with mode and policy ``none``: as the rule gives."""
    if bind and mode == "none":
        yield Problem(f"{field}.mode", "says bind, but mode 'none' binds nothing")
    if not bind and (mode, policy) != ("none", "none"):
        yield Problem(
            f"{field}.bind",
            f"says do not bind, but mode {mode!r}, policy {policy!r} would bind",
        )


def _recommendation(rec: Recommendation, machine: Machine) -> Iterator[Problem]:
    yield from _verdict("recommendation", rec.bind, rec.mode, rec.policy)
    weighted = rec.policy == "weighted-interleave"
    if weighted and rec.weights is None:
        yield Problem("recommendation.weights", "policy weighted-interleave, but no weights")
    if not weighted and rec.weights is not None:
        yield Problem(
            "recommendation.weights", f"weights with policy {rec.policy!r}, which takes none"
        )
    yield from _weights("recommendation.weights", rec.weights, machine)
    yield from _count("recommendation.min_effect", rec.min_effect)
    seen = set()
    for i, advice in enumerate(rec.per_gpu):
        field = f"recommendation.per_gpu[{i}]"
        yield from _gpu(f"{field}.gpu", advice.gpu)
        if advice.gpu in seen:
            yield Problem(f"{field}.gpu", f"GPU {advice.gpu} is listed twice")
        seen.add(advice.gpu)
        yield from _node(f"{field}.node", advice.node)
        yield from _node(f"{field}.reported_node", advice.reported_node)
        yield from _verdict(field, advice.bind, advice.mode, advice.policy)
        if advice.bind and advice.node is None:
            yield Problem(f"{field}.node", "says bind, but names no node")
    for i, comparison in enumerate(rec.comparisons):
        field = f"recommendation.comparisons[{i}]"
        for name in ("ratio", "low", "high"):
            yield from _count(f"{field}.{name}", getattr(comparison, name))
        yield from _count(f"{field}.n", comparison.n, 1)


def record_problems(record: Record) -> List[Problem]:
    """The values on their own (see the module docstring, step 3); [] when none."""
    advice = record.advice
    problems: List[Problem] = [
        *_machine(record.machine),
        *(_memory(advice.memory) if advice.memory is not None else ()),
        *(_interleave(advice.memory, record.machine) if advice.memory is not None else ()),
        *_copies(advice.copies),
        *_firmware(record),
        *_recommendation(advice.recommendation, record.machine),
    ]
    if not (math.isfinite(advice.seconds) and advice.seconds >= 0):
        problems.append(Problem("seconds", f"expected 0 or more, not {advice.seconds}"))
    return problems


# ------------------------------------------------- 4. against the machine planned


def follow_problems(
    record: Record,
    topology: Topology,
    advice_for: Callable[[Gpu], Optional[GpuAdvice]],
    reported: Callable[[Topology, Gpu], frozenset[int]],
) -> List[Problem]:
    """What of ``record`` cannot be followed on ``topology`` (see the module docstring, step 4).

    The store's own rules say which GPU the record moves, so that this checks
    exactly what following it would do: ``advice_for`` matches a GPU of the
    topology to the record's advice for it (by PCI bus id), ``reported`` is
    the CPU node(s) the GPU's own report places it on (advice for one of
    them moves nothing).  Each GPU moved must go to a node with CPUs on the
    machine planned, and with CPUs in ``topology.allowed_cpus``.
    """
    rec = record.advice.recommendation
    if not rec.bind:  # "do not bind" moves nothing
        return []
    per_gpu = rec.per_gpu
    cpu_nodes = topology.cpu_nodes
    out: List[Problem] = list(_weights_here(rec, topology))
    for gpu in topology.gpus:
        advice = advice_for(gpu)
        if advice is None or not advice.bind or advice.node is None:
            continue
        if advice.node in reported(topology, gpu):
            continue
        position = next(i for i, entry in enumerate(per_gpu) if entry is advice)
        field = f"recommendation.per_gpu[{position}].node"
        moved = f"GPU {gpu.index} ({gpu.pci_bus_id}) is to be bound to node {advice.node}"
        node = topology.nodes.get(advice.node)
        if node is None or not node.cpus:
            out.append(
                Problem(
                    field,
                    f"{moved}, which is not a NUMA node with CPUs on this machine (its CPU "
                    f"nodes are {format_ids(cpu_nodes)})",
                )
            )
        elif not node.cpus & topology.allowed_cpus:
            out.append(
                Problem(
                    field,
                    f"{moved}, whose CPUs {format_ids(node.cpus)} this process may not use "
                    f"(it may use CPUs {format_ids(topology.allowed_cpus)}: its affinity or "
                    "cpuset)",
                )
            )
    return out


def _weights_here(rec: Recommendation, topology: Topology) -> Iterator[Problem]:
    """Each node of the recommended weights: memory on ``topology``, allowed to this process."""
    for node in sorted(rec.weights or {}):
        field = f"recommendation.weights.{node}"
        here = topology.nodes.get(node)
        if here is None or not here.has_memory:
            with_memory = [n.id for n in topology.nodes.values() if n.has_memory]
            yield Problem(
                field,
                f"weighted interleave over node {node}, which is not a NUMA node with memory "
                f"on this machine (its nodes with memory are {format_ids(with_memory)})",
            )
        elif node not in topology.allowed_mems:
            yield Problem(
                field,
                f"weighted interleave over node {node}, which this process may not allocate "
                f"on (it may use nodes {format_ids(topology.allowed_mems)}: its cpuset)",
            )


def unfollowable(
    record: Record,
    topology: Topology,
    advice_for: Callable[[Gpu], Optional[GpuAdvice]],
    reported: Callable[[Topology, Gpu], frozenset[int]],
) -> Optional[str]:
    """Why ``record`` cannot be followed on ``topology``, naming it and the field; None: it can.

    :func:`follow_problems`, as the one sentence the store logs.
    """
    problem = first(follow_problems(record, topology, advice_for, reported))
    if problem is None:
        return None
    where = f"the advice record {escaped(record.path)}" if record.path else "the advice record"
    return f"{where} (saved {record.saved}) cannot be followed here: {problem}"
