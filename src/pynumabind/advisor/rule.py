"""What ``pynumabind advise`` found, and the rule that turns it into a recommendation.

Pure: values in, values out, no I/O.  :mod:`pynumabind.advisor._memory` produces
the measurements (:class:`MemoryMatrix`, :class:`GpuCopies`),
:func:`decide` judges them, and :class:`Advice` carries both with the
firmware's own claims (:class:`Firmware`) to the caller, the table and the
JSON.  The rule is tested on recorded matrices from published numbers and
on generated ones (``tests/advisor/test_rule.py``).

The decision rule
-----------------

Every figure is a :class:`Spread` of repeated samples (median and
quartiles).  Two figures *differ measurably* when both hold:

* the ratio of their medians is at least ``1 + min_effect`` (default 10%:
  a smaller gain is not worth taking the scheduler's freedom away, and
  run-to-run drift of copy bandwidth on a shared server is a few percent);
* the ratio stays above 1 even when the noise is set against it:
  ``better.min / worse.max > 1``, every sample of the better placement
  beats every sample of the worse one.  That is the rank test (Mann-Whitney)
  at its strictest: with 5 samples each, two placements that do not differ
  at all produce it by chance once in 252 runs; it needs no assumption
  about the distribution, and one slow sample (a burst of load from
  elsewhere) makes it say "within noise" rather than "bind".  Quartiles
  are too weak with a handful of samples: in the QEMU guest, whose nodes
  are identical, they called one placement 1.4x faster than another.

Then:

1. **Memory.**  For each CPU node, its best memory node (highest median
   bandwidth) is compared with every other memory node it was measured on.
   Memory placement *matters* when any such pair differs measurably.  When
   the node that wins is not the CPU node's own, the reasons say so: local
   ("preferred") memory is then not the fastest, which points at firmware
   settings rather than at binding.
2. **Copies, per GPU.**  Each CPU node's pinned H2D and D2H bandwidth is
   taken relative to the fastest node in that direction; the GPU's best node
   is the one whose worse direction is highest (ties: the node the GPU
   reports, then the lowest id).  The best node is compared with every
   other node in both directions; copies *matter* for the GPU when any pair
   differs measurably.  A GPU whose copies matter is to be bound to its best
   node (mode ``node``, memory ``preferred``, so its pinned buffers are
   allocated there); if that is not the node the GPU reports, the reasons
   say so, since plans follow the reported node.
3. **Overall.**  Bind when memory or any GPU's copies matter: CPU mode
   ``node`` and memory policy ``preferred`` (local first, spill over rather
   than fail).  Otherwise do not bind (mode ``none``, memory ``none``), and
   say so plainly: "binding makes no measurable difference to memory or
   copies here".  When nothing could be compared (one node, or every
   measurement failed), the verdict says that instead of guessing; ``bind``
   is then False and :attr:`Recommendation.basis` tells why.

SLIT and HMAT are shown beside the measurements but do not enter the rule:
firmware tables are claims, the copies are what happened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..options import Options

from ..model import SCHEMA_VERSION  # one version for every JSON document (see model)

__all__ = [
    "DEFAULT_MIN_EFFECT",
    "NO_DIFFERENCE",
    "Advice",
    "Comparison",
    "CopyCell",
    "Firmware",
    "GpuAdvice",
    "GpuCopies",
    "HmatEntry",
    "MemoryCell",
    "MemoryMatrix",
    "Placement",
    "Recommendation",
    "Spread",
    "compare",
    "decide",
]

DEFAULT_MIN_EFFECT = 0.10
NO_DIFFERENCE = "binding makes no measurable difference to memory or copies here"


# ------------------------------------------------------------------ values


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Quantile ``q`` of sorted data, linear interpolation (numpy's default)."""
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    fraction = position - low
    return float(ordered[low]) * (1.0 - fraction) + float(ordered[high]) * fraction


@dataclass(frozen=True)
class Spread:
    """Median and spread of ``n`` repeated samples (all in one unit)."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        values = sorted(float(v) for v in samples)
        if not values:
            raise ValueError("a spread needs at least one sample")
        if any(math.isnan(v) or math.isinf(v) for v in values):
            raise ValueError("samples must be finite numbers")
        return cls(
            n=len(values),
            median=_quantile(values, 0.5),
            q1=_quantile(values, 0.25),
            q3=_quantile(values, 0.75),
            min=values[0],
            max=values[-1],
        )

    def scaled(self, factor: float) -> Spread:
        """The same spread with every value multiplied by ``factor`` (> 0)."""
        if factor <= 0:
            raise ValueError("scale factor must be positive")
        return Spread(
            self.n,
            self.median * factor,
            self.q1 * factor,
            self.q3 * factor,
            self.min * factor,
            self.max * factor,
        )

    def text(self) -> str:
        """``12.3 (11.9-12.8)``: median and quartiles, 3 significant digits."""
        return f"{self.median:.3g} ({self.q1:.3g}-{self.q3:.3g})"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "n": self.n,
            "median": self.median,
            "q1": self.q1,
            "q3": self.q3,
            "min": self.min,
            "max": self.max,
        }


@dataclass(frozen=True)
class Placement:
    """Where a measurement's buffer really was: ``move_pages`` on sampled pages.

    ``pages`` maps node -> pages found there; a negative key is ``-errno``
    for pages the kernel could not place (``-2``: not present).
    """

    wanted: int
    pages: Mapping[int, int]

    @property
    def checked(self) -> int:
        return sum(self.pages.values())

    @property
    def fraction(self) -> float:
        """Share of the checked pages on the wanted node (0.0 when none were checked)."""
        return self.pages.get(self.wanted, 0) / self.checked if self.checked else 0.0

    def text(self) -> str:
        if not self.checked:
            return "unchecked"
        if self.fraction == 1.0:
            return f"100% on node {self.wanted}"
        spots = ", ".join(
            f"{count} on node {node}" if node >= 0 else f"{count} error {-node}"
            for node, count in sorted(self.pages.items())
        )
        return f"{self.fraction:.0%} on node {self.wanted} ({spots})"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "wanted": self.wanted,
            "checked": self.checked,
            "fraction": self.fraction,
            "pages": {str(k): v for k, v in sorted(self.pages.items())},
        }


@dataclass(frozen=True)
class MemoryCell:
    """One (CPU node, memory node) measurement.

    ``error`` when it could not run; ``skipped`` (why) when it was not run
    because its buffers could not be made large enough to stream from
    memory rather than from the cache.
    """

    bandwidth: Optional[Spread] = None  # GB/s, read + write
    latency: Optional[Spread] = None  # ns per dependent load, overhead subtracted
    placement: Optional[Placement] = None
    threads: int = 0
    error: Optional[str] = None
    skipped: Optional[str] = None


@dataclass(frozen=True)
class MemoryMatrix:
    """Bandwidth (and latency) from each CPU node's threads to each memory node's buffer.

    ``cells[i][j]`` is CPU node ``cpu_nodes[i]`` against memory node
    ``memory_nodes[j]``.
    """

    cpu_nodes: Tuple[int, ...]
    memory_nodes: Tuple[int, ...]
    cells: Tuple[Tuple[MemoryCell, ...], ...]
    buffer_bytes: int = 0
    llc_bytes: Optional[int] = None
    latency_overhead: Optional[Spread] = None  # ns per step of the chase loop itself
    method: str = ""
    notes: Tuple[str, ...] = ()

    def cell(self, cpu_node: int, memory_node: int) -> MemoryCell:
        return self.cells[self.cpu_nodes.index(cpu_node)][self.memory_nodes.index(memory_node)]

    def bandwidth(self, cpu_node: int, memory_node: int) -> Optional[Spread]:
        return self.cell(cpu_node, memory_node).bandwidth

    def to_dict(self) -> Dict[str, Any]:
        def grid(pick: Any) -> List[List[Any]]:
            return [[pick(cell) for cell in row] for row in self.cells]

        def spread(value: Optional[Spread]) -> Optional[Dict[str, Any]]:
            return None if value is None else value.to_dict()

        return {
            "cpu_nodes": list(self.cpu_nodes),
            "memory_nodes": list(self.memory_nodes),
            "bandwidth_gbs": grid(lambda c: None if c.bandwidth is None else c.bandwidth.median),
            "bandwidth_spread": grid(lambda c: spread(c.bandwidth)),
            "latency_ns": grid(lambda c: None if c.latency is None else c.latency.median),
            "latency_spread": grid(lambda c: spread(c.latency)),
            "latency_overhead_ns": spread(self.latency_overhead),
            "placement": grid(lambda c: None if c.placement is None else c.placement.to_dict()),
            "threads": grid(lambda c: c.threads),
            "errors": grid(lambda c: c.error),
            "skipped": grid(lambda c: c.skipped),
            "buffer_bytes": self.buffer_bytes,
            "llc_bytes": self.llc_bytes,
            "method": self.method,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class CopyCell:
    """Pinned host<->GPU copies with the buffer and the copying thread on ``cpu_node``."""

    cpu_node: int
    h2d: Optional[Spread] = None  # GB/s
    d2h: Optional[Spread] = None  # GB/s
    placement: Optional[Placement] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class GpuCopies:
    """One GPU's copy bandwidth from each CPU node; ``numa_node`` is what the GPU reports."""

    index: int
    name: Optional[str]
    pci_bus_id: Optional[str]
    numa_node: Optional[int]
    cells: Tuple[CopyCell, ...]
    buffer_bytes: int = 0

    def to_dict(self) -> Dict[str, Any]:
        def medians(direction: str) -> List[Optional[float]]:
            values = [getattr(c, direction) for c in self.cells]
            return [None if v is None else v.median for v in values]

        def spreads(direction: str) -> List[Optional[Dict[str, Any]]]:
            values = [getattr(c, direction) for c in self.cells]
            return [None if v is None else v.to_dict() for v in values]

        return {
            "index": self.index,
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "numa_node": self.numa_node,
            "cpu_nodes": [c.cpu_node for c in self.cells],
            "h2d_gbs": medians("h2d"),
            "d2h_gbs": medians("d2h"),
            "h2d_spread": spreads("h2d"),
            "d2h_spread": spreads("d2h"),
            "placement": [
                None if c.placement is None else c.placement.to_dict() for c in self.cells
            ],
            "errors": [c.error for c in self.cells],
            "buffer_bytes": self.buffer_bytes,
        }


@dataclass(frozen=True)
class HmatEntry:
    """HMAT attributes of one memory node for its nearest initiators (``accessN``)."""

    target: int
    access: int
    initiators: Tuple[int, ...]
    read_bandwidth_mbs: Optional[int] = None
    write_bandwidth_mbs: Optional[int] = None
    read_latency_ns: Optional[int] = None
    write_latency_ns: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "target": self.target,
            "access": self.access,
            "initiators": list(self.initiators),
            "read_bandwidth_mbs": self.read_bandwidth_mbs,
            "write_bandwidth_mbs": self.write_bandwidth_mbs,
            "read_latency_ns": self.read_latency_ns,
            "write_latency_ns": self.write_latency_ns,
        }


@dataclass(frozen=True)
class Firmware:
    """What the ACPI tables say: SLIT distances (``distances[i][j]``) and HMAT entries."""

    nodes: Tuple[int, ...]
    distances: Tuple[Tuple[Optional[int], ...], ...]
    hmat: Tuple[HmatEntry, ...] = ()
    hmat_note: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "slit": {"nodes": list(self.nodes), "distances": [list(r) for r in self.distances]},
            "hmat": [h.to_dict() for h in self.hmat],
            "hmat_note": self.hmat_note,
        }


# ---------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Comparison:
    """``better`` against ``worse``: the median ratio and its noise range.

    ``low`` sets the noise against the difference (``better.min /
    worse.max``), ``high`` in its favour (``better.max / worse.min``).
    """

    subject: str  # what was measured, e.g. "CPU node 0 memory bandwidth"
    better: str
    worse: str
    ratio: float
    low: float
    high: float
    n: int  # fewest repeats of the two
    min_effect: float = DEFAULT_MIN_EFFECT

    @property
    def measurable(self) -> bool:
        return self.ratio >= 1.0 + self.min_effect and self.low > 1.0

    def text(self) -> str:
        verdict = "" if self.measurable else ", within noise"
        return (
            f"{self.subject}: {self.better} {self.ratio:.2f}x {self.worse} "
            f"(noise range {self.low:.2f}-{self.high:.2f}x, {self.n} repeats{verdict})"
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "subject": self.subject,
            "better": self.better,
            "worse": self.worse,
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "measurable": self.measurable,
        }


def compare(
    subject: str,
    better: Tuple[str, Spread],
    worse: Tuple[str, Spread],
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> Comparison:
    """``better`` / ``worse``, each ``(name, spread)`` (higher is better).

    Non-positive values compare as no difference.
    """
    better_name, high_side = better
    worse_name, low_side = worse
    if low_side.median <= 0 or low_side.min <= 0 or low_side.max <= 0:
        ratio = low = high = 1.0
    else:
        ratio = high_side.median / low_side.median
        low = high_side.min / low_side.max
        high = high_side.max / low_side.min
    return Comparison(
        subject, better_name, worse_name, ratio, low, high, min(high_side.n, low_side.n), min_effect
    )


@dataclass(frozen=True)
class GpuAdvice:
    """How to bind the process that drives GPU ``gpu``."""

    gpu: int
    bind: bool
    node: Optional[int]
    mode: str
    policy: str
    reasons: Tuple[str, ...]
    reported_node: Optional[int] = None  # the node the GPU reports

    @property
    def moved(self) -> bool:
        """Bound to a node other than the one the GPU reports."""
        return self.bind and self.node is not None and self.node != self.reported_node

    def to_dict(self) -> Dict[str, Any]:
        return {
            "gpu": self.gpu,
            "bind": self.bind,
            "node": self.node,
            "reported_node": self.reported_node,
            "mode": self.mode,
            "policy": self.policy,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Recommendation:
    """The verdict.

    ``basis`` is ``"measured"``, ``"nothing to compare"`` or ``"no measurements"``.
    """

    bind: bool
    mode: str
    policy: str
    verdict: str
    reasons: Tuple[str, ...]
    per_gpu: Tuple[GpuAdvice, ...] = ()
    comparisons: Tuple[Comparison, ...] = ()
    basis: str = "measured"
    min_effect: float = DEFAULT_MIN_EFFECT

    def gpu(self, index: int) -> Optional[GpuAdvice]:
        """The advice for the GPU the measurement called ``index``, if it was measured."""
        return next((g for g in self.per_gpu if g.gpu == index), None)

    def moved_text(self, advice: GpuAdvice) -> str:
        """Why GPU ``advice.gpu`` goes to a node it does not report, with the measured ratios.

        ``its copies are fastest from node 0, not node 1 which it reports:
        pinned H2D 1.42x, D2H 1.38x faster``.
        """
        ratios = [
            f"{c.subject.rsplit(' ', 1)[-1]} {c.ratio:.2f}x"
            for c in self.comparisons
            if c.subject.startswith(f"GPU {advice.gpu} pinned ")
            and c.better == f"node {advice.node}"
            and c.worse == f"node {advice.reported_node}"
        ]
        reported = "no node" if advice.reported_node is None else f"node {advice.reported_node}"
        text = f"its copies are fastest from node {advice.node}, not {reported} which it reports"
        return text + (f": pinned {', '.join(ratios)} faster" if ratios else "")

    def options(self) -> Options:
        """The :class:`~pynumabind.Options` a bind takes to follow this recommendation.

        Bind: the recommended CPU mode and memory policy (``node``,
        ``preferred``); when some GPU's copies are fastest from a node other
        than the one it reports, and every GPU measured (indices 0..n-1) is
        to be bound, also a ``nodes`` override giving rank ``i`` GPU ``i``'s
        measured node (one rank per GPU, the launchers' default; mode
        ``advised`` maps GPUs by PCI bus id instead and needs no such
        assumption).  Do not bind: mode ``none`` and policy ``none``, a bind
        that changes nothing.
        """
        from ..model import CpuMode, MemoryPolicy
        from ..options import Options

        nodes = None
        indices = sorted(g.gpu for g in self.per_gpu)
        every = indices == list(range(len(indices))) and all(g.bind for g in self.per_gpu)
        if self.bind and every and any(g.moved for g in self.per_gpu):
            by_index = {g.gpu: g.node for g in self.per_gpu}
            nodes = ",".join(str(by_index[i]) for i in indices)
        return Options(mode=CpuMode(self.mode), policy=MemoryPolicy(self.policy), nodes=nodes)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "bind": self.bind,
            "mode": self.mode,
            "policy": self.policy,
            "verdict": self.verdict,
            "basis": self.basis,
            "reasons": list(self.reasons),
            "per_gpu": [g.to_dict() for g in self.per_gpu],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "min_effect": self.min_effect,
            "rule": (
                f"a difference counts when the median ratio is at least {1 + self.min_effect:.2f}"
                " and better.min / worse.max > 1 (see pynumabind.advisor.rule)"
            ),
        }


def _memory_comparisons(matrix: MemoryMatrix, min_effect: float) -> List[Comparison]:
    """For each CPU node: its best memory node against every other one."""
    found: List[Comparison] = []
    for cpu in matrix.cpu_nodes:
        measured = [
            (mem, spread)
            for mem in matrix.memory_nodes
            if (spread := matrix.bandwidth(cpu, mem)) is not None
        ]
        if len(measured) < 2:
            continue
        # Best by median; on a tie the CPU node's own memory, then the lowest id.
        best_mem, best = max(measured, key=lambda item: (item[1].median, item[0] == cpu, -item[0]))
        for mem, spread in measured:
            if mem == best_mem:
                continue
            found.append(
                compare(
                    f"memory bandwidth from CPU node {cpu}",
                    (f"node {best_mem}" + (" (local)" if best_mem == cpu else ""), best),
                    (f"node {mem}" + (" (local)" if mem == cpu else ""), spread),
                    min_effect,
                )
            )
    return found


def _best_copy_node(gpu: GpuCopies) -> Optional[int]:
    """The node whose worse direction is highest, relative to each direction's fastest."""
    cells = [c for c in gpu.cells if c.h2d is not None and c.d2h is not None]
    if not cells:
        return None
    top_h2d = max(c.h2d.median for c in cells if c.h2d is not None)
    top_d2h = max(c.d2h.median for c in cells if c.d2h is not None)

    def score(cell: CopyCell) -> Tuple[float, bool, int]:
        assert cell.h2d is not None and cell.d2h is not None
        relative = min(
            cell.h2d.median / top_h2d if top_h2d > 0 else 1.0,
            cell.d2h.median / top_d2h if top_d2h > 0 else 1.0,
        )
        return relative, cell.cpu_node == gpu.numa_node, -cell.cpu_node

    return max(cells, key=score).cpu_node


def _gpu_advice(gpu: GpuCopies, min_effect: float) -> Tuple[Optional[GpuAdvice], List[Comparison]]:
    best = _best_copy_node(gpu)
    if best is None:
        return None, []
    cells = {c.cpu_node: c for c in gpu.cells if c.h2d is not None and c.d2h is not None}
    found: List[Comparison] = []
    for node, cell in sorted(cells.items()):
        if node == best:
            continue
        for direction in ("h2d", "d2h"):
            found.append(
                compare(
                    f"GPU {gpu.index} pinned {direction.upper()}",
                    (f"node {best}", getattr(cells[best], direction)),
                    (f"node {node}", getattr(cell, direction)),
                    min_effect,
                )
            )
    matters = [c for c in found if c.measurable]
    if not matters:
        span = _copy_span(list(cells.values()))
        reason = (
            f"GPU {gpu.index}: copies run at the same speed from every node measured "
            f"({span}): binding makes no measurable difference to its copies"
            if len(cells) > 1
            else f"GPU {gpu.index}: measured from one node only ({span}): nothing to compare"
        )
        advice = GpuAdvice(gpu.index, False, None, "none", "none", (reason,), gpu.numa_node)
        return advice, found
    reasons = [c.text() for c in matters]
    if gpu.numa_node is not None and gpu.numa_node != best:
        reasons.append(
            f"GPU {gpu.index} reports NUMA node {gpu.numa_node}, but its copies are fastest "
            f"from node {best}: override the node (PYNUMABIND_NODES / --nodes) to bind there"
        )
    advice = GpuAdvice(gpu.index, True, best, "node", "preferred", tuple(reasons), gpu.numa_node)
    return advice, found


def _copy_span(cells: Sequence[CopyCell]) -> str:
    parts = []
    for direction in ("h2d", "d2h"):
        values = [getattr(c, direction).median for c in cells]
        parts.append(f"{direction.upper()} {min(values):.3g}-{max(values):.3g} GB/s")
    return ", ".join(parts)


def decide(
    memory: Optional[MemoryMatrix],
    gpus: Sequence[GpuCopies] = (),
    *,
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> Recommendation:
    """Apply the documented rule (module docstring) to what was measured."""
    if min_effect < 0:
        raise ValueError("min_effect must not be negative")
    memory_found = _memory_comparisons(memory, min_effect) if memory is not None else []
    gpu_advice, gpu_found = _all_gpu_advice(gpus, min_effect)
    comparisons = tuple(memory_found + gpu_found)
    memory_matters = [c for c in memory_found if c.measurable]
    bound_gpus = [g for g in gpu_advice if g.bind]
    if memory_matters or bound_gpus:
        return Recommendation(
            True,
            "node",
            "preferred",
            "binding makes a measurable difference here: bind each worker to its GPU's node"
            if bound_gpus
            else "binding makes a measurable difference to memory here: bind to one node",
            _bind_reasons(memory_found, memory_matters, bound_gpus),
            tuple(gpu_advice),
            comparisons,
            "measured",
            min_effect,
        )
    if not comparisons:
        basis, why = _nothing_compared(memory, gpus)
        return Recommendation(
            False, "none", "none", why, (why,), tuple(gpu_advice), (), basis, min_effect
        )
    reasons = [c.text() for c in memory_found]
    for advice in gpu_advice:
        reasons += list(advice.reasons)
    return Recommendation(
        False,
        "none",
        "none",
        NO_DIFFERENCE,
        tuple(reasons),
        tuple(gpu_advice),
        comparisons,
        "measured",
        min_effect,
    )


def _all_gpu_advice(
    gpus: Sequence[GpuCopies], min_effect: float
) -> Tuple[List[GpuAdvice], List[Comparison]]:
    """Each GPU's advice (those with any), and every GPU comparison made."""
    gpu_advice: List[GpuAdvice] = []
    gpu_found: List[Comparison] = []
    for gpu in gpus:
        advice, found = _gpu_advice(gpu, min_effect)
        gpu_found += found
        if advice is not None:
            gpu_advice.append(advice)
    return gpu_advice, gpu_found


def _bind_reasons(
    memory_found: List[Comparison],
    memory_matters: List[Comparison],
    bound_gpus: List[GpuAdvice],
) -> Tuple[str, ...]:
    """The reasons of a recommendation to bind: what was measurable, and what it implies."""
    reasons = [c.text() for c in memory_matters]
    reasons += [
        f"{c.subject}: {c.better} beats the node's own memory, so 'preferred' (local) "
        "memory is not the fastest here: check the firmware's NUMA settings"
        for c in memory_matters
        if c.worse.endswith("(local)")
    ]
    for advice in bound_gpus:
        reasons += list(advice.reasons)
    if not memory_matters and memory_found:
        reasons.append("memory bandwidth is the same from every node (within noise)")
    return tuple(reasons)


def _nothing_compared(memory: Optional[MemoryMatrix], gpus: Sequence[GpuCopies]) -> Tuple[str, str]:
    """(basis, verdict) when no pair could be compared."""
    measured = memory is not None and any(
        cell.bandwidth is not None for row in memory.cells for cell in row
    )
    measured = measured or any(c.h2d is not None for g in gpus for c in g.cells)
    if measured:
        one = memory is not None and len(memory.memory_nodes) <= 1 and len(memory.cpu_nodes) <= 1
        where = (
            "one CPU node and one memory node: there is nothing remote to compare"
            if one
            else "no two placements could be compared"
        )
        return "nothing to compare", f"{NO_DIFFERENCE} ({where})"
    return (
        "no measurements",
        "nothing could be measured, so no recommendation: see the errors above",
    )


# ------------------------------------------------------------------ result


@dataclass(frozen=True)
class Advice:
    """Everything ``advise`` measured and read, and what it recommends.

    ``str(advice)`` (``print(advice)``) is the report ``pynumabind advise``
    prints (:func:`pynumabind.advisor.report.render_text`);
    :meth:`to_dict` is its JSON form.
    """

    memory: Optional[MemoryMatrix]
    copies: Tuple[GpuCopies, ...]
    copies_status: str  # why no copies were measured, or which backend measured them
    copies_backend: Optional[str]
    firmware: Optional[Firmware]
    recommendation: Recommendation
    quick: bool = False
    seconds: float = 0.0
    notes: Tuple[str, ...] = field(default=())

    @property
    def bind(self) -> bool:
        return self.recommendation.bind

    def __str__(self) -> str:
        """The report ``pynumabind advise`` prints (:func:`.report.render_text`)."""
        from .report import render_text

        return render_text(self)

    def to_dict(self) -> Dict[str, Any]:
        """The documented JSON form (``pynumabind advise --json``)."""
        return {
            "schema": SCHEMA_VERSION,
            "quick": self.quick,
            "seconds": round(self.seconds, 2),
            "memory": None if self.memory is None else self.memory.to_dict(),
            "copies": [g.to_dict() for g in self.copies],
            "copies_status": {
                "measured": bool(self.copies),
                "backend": self.copies_backend,
                "reason": self.copies_status,
            },
            "firmware": None if self.firmware is None else self.firmware.to_dict(),
            "recommendation": self.recommendation.to_dict(),
            "notes": list(self.notes),
        }
