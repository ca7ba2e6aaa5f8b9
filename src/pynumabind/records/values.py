"""The values an advice holds: measurements, the firmware's claims, and the verdict.

Pure: values in, values out, no I/O; nothing here decides.  The measurement
(:mod:`pynumabind.advisor._memory`, :mod:`pynumabind.advisor._copies`) fills
the measured values (:class:`MemoryMatrix`, :class:`GpuCopies`, each figure a
:class:`Spread`), the rule (:func:`pynumabind.advisor.rule.decide`) makes the
verdict (:class:`Recommendation`, with its :class:`Comparison` and
:class:`GpuAdvice` values), and :class:`pynumabind.Advice`
(:mod:`pynumabind.records.advice`) carries them all.  Each value's
``to_dict`` is its part of the documented JSON (``pynumabind advise
--json``, and the advice record); :mod:`pynumabind.records._json` reads it
back.

Users import these names from :mod:`pynumabind.advisor` (the home of
``advise()``'s results; the reference documents them there), and
:class:`Recommendation` from ``pynumabind`` too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..options import Options

__all__ = [
    "Comparison",
    "CopyCell",
    "Firmware",
    "GpuAdvice",
    "GpuCopies",
    "HmatEntry",
    "InterleaveCell",
    "MemoryCell",
    "MemoryMatrix",
    "Placement",
    "Recommendation",
    "Spread",
]

#: The smallest relative difference the rule counts (10%); see :mod:`pynumabind.advisor.rule`.
DEFAULT_MIN_EFFECT = 0.10


# ------------------------------------------------------------- measurements


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


def _weights_dict(weights: Optional[Mapping[int, int]]) -> Optional[Dict[str, int]]:
    """Weights as JSON: node ids as keys (text, as JSON's keys are), ascending."""
    return None if weights is None else {str(n): w for n, w in sorted(weights.items())}


@dataclass(frozen=True)
class InterleaveCell:
    """Weighted interleave from CPU node ``cpu_node`` over its own memory and other nodes.

    ``weights`` (node -> weight, the CPU node's ``local`` memory node among
    them) are proportional to the bandwidth each node gave this CPU node in
    the matrix (:func:`pynumabind._weights.from_bandwidth`); ``predicted``
    is the sum of those bandwidths over the local one's, what interleaving
    could gain at best.  ``bandwidth`` is weighted interleave itself,
    measured with buffers laid out by those weights (``bind_memory``'s
    runs) and copied by the CPU node's threads, and ``local_bandwidth`` the
    local node's, sampled in turn with it (the same load on both: the rule
    compares these two); ``placement`` where the
    source buffer's sampled pages were (``wanted``: the local node);
    ``skipped`` says why it was not measured (nothing to gain predicted),
    ``error`` why the measurement failed.
    """

    cpu_node: int
    local: int
    weights: Mapping[int, int]
    predicted: float
    bandwidth: Optional[Spread] = None  # GB/s, read + write, as the matrix's
    placement: Optional[Placement] = None
    threads: int = 0
    error: Optional[str] = None
    skipped: Optional[str] = None
    local_bandwidth: Optional[Spread] = None  # GB/s, the local node's, taken in turn

    @property
    def nodes(self) -> Tuple[int, ...]:
        return tuple(sorted(self.weights))

    def to_dict(self) -> Dict[str, Any]:
        return {
            "cpu_node": self.cpu_node,
            "local": self.local,
            "weights": _weights_dict(self.weights),
            "predicted": self.predicted,
            "bandwidth_gbs": None if self.bandwidth is None else self.bandwidth.median,
            "bandwidth_spread": None if self.bandwidth is None else self.bandwidth.to_dict(),
            "local_gbs": None if self.local_bandwidth is None else self.local_bandwidth.median,
            "local_spread": None
            if self.local_bandwidth is None
            else self.local_bandwidth.to_dict(),
            "placement": None if self.placement is None else self.placement.to_dict(),
            "threads": self.threads,
            "error": self.error,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class MemoryMatrix:
    """Bandwidth (and latency) from each CPU node's threads to each memory node's buffer.

    ``cells[i][j]`` is CPU node ``cpu_nodes[i]`` against memory node
    ``memory_nodes[j]``.  ``interleave``: weighted interleave from each CPU
    node that has other nodes to interleave with (:class:`InterleaveCell`).
    """

    cpu_nodes: Tuple[int, ...]
    memory_nodes: Tuple[int, ...]
    cells: Tuple[Tuple[MemoryCell, ...], ...]
    buffer_bytes: int = 0
    llc_bytes: Optional[int] = None
    latency_overhead: Optional[Spread] = None  # ns per step of the chase loop itself
    method: str = ""
    notes: Tuple[str, ...] = ()
    interleave: Tuple[InterleaveCell, ...] = ()

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
            "interleave": [cell.to_dict() for cell in self.interleave],
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


# ------------------------------------------------------------------ verdict


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
    ``weights`` (node -> weight) come with policy ``weighted-interleave`` and
    only with it: the interleave weights mode ``advised`` binds with.
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
    weights: Optional[Mapping[int, int]] = None

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
        ``preferred``, or ``weighted-interleave`` with its ``weights``);
        when some GPU's copies are fastest from a node other than the one it
        reports, and every GPU measured (indices 0..n-1) is
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
        return Options(
            mode=CpuMode(self.mode),
            policy=MemoryPolicy(self.policy),
            nodes=nodes,
            weights=None if self.weights is None else dict(self.weights),
        )

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
            "weights": _weights_dict(self.weights),
            "rule": (
                f"a difference counts when the median ratio is at least {1 + self.min_effect:.2f}"
                " and better.min / worse.max > 1 (see pynumabind.advisor.rule)"
            ),
        }
