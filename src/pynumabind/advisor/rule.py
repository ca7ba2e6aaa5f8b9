"""The rule that turns what ``pynumabind advise`` measured into a recommendation.

Pure: values in, values out, no I/O.  :mod:`pynumabind.advisor._memory` produces
the measurements (:class:`~pynumabind.advisor.MemoryMatrix`,
:class:`~pynumabind.advisor.GpuCopies`), :func:`decide` judges them into a
:class:`~pynumabind.Recommendation`, and :class:`~pynumabind.Advice` carries
both with the firmware's own claims (:class:`~pynumabind.advisor.Firmware`)
to the caller, the table and the JSON.  Those values are the advice record's
and live below the binding (:mod:`pynumabind.records.values`), so a worker
reads a record without importing the advisor; this module holds only the
decision.  The rule is tested on recorded matrices from published numbers
and on generated ones (``tests/advisor/test_rule.py``).

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
3. **Weighted interleave.**  For each CPU node with its own memory, the
   *set* is that node plus every memory-only node measured from it (a node
   with memory, no CPUs, and no GPU's memory: a CXL expander or another
   slower tier; never another socket's memory, which is its own workers',
   nor a GPU's HBM).  Its weights are proportional to the bandwidth each
   node of the set gave the CPU node (:func:`pynumabind._weights.from_bandwidth`:
   integers 1 to 255, reduced; the rounding is documented there).  When the
   set's bandwidths add up to at least ``1 + min_effect`` times the local
   one's (:func:`interleave_cells`: what interleaving could gain at best),
   weighted interleave over the set is *measured* (``advise`` lays a buffer
   out by the weights, as :func:`~pynumabind.bind_memory` does, and copies
   it with the CPU node's threads), never inferred, and compared with the
   local node by the test above.  Where every CPU node measured gains
   measurably, with the same weights (one set for the whole machine: one
   CPU node, or CPU nodes sharing every node of it), the recommendation is
   policy ``weighted-interleave`` with those weights, which mode
   ``advised`` binds with; where CPU nodes gain with different sets, the
   reasons give each one's weights (one process-wide policy cannot carry
   them: place buffers with ``bind_memory(..., weights=...)``; when
   nothing else counts, the verdict is then not to bind, and says that
   weighted interleave would help where buffers are placed).  Every CPU
   node's weights are in the advice either way.
4. **Overall.**  Bind when memory or any GPU's copies matter: CPU mode
   ``node`` and memory policy ``preferred`` (local first, spill over rather
   than fail).  Otherwise do not bind (mode ``none``, memory ``none``), and
   say so plainly: "binding makes no measurable difference to memory or
   copies here".  When nothing could be compared (one node, or every
   measurement failed), the verdict says that instead of guessing; ``bind``
   is then False and :attr:`Recommendation.basis <pynumabind.Recommendation.basis>` tells why.

SLIT and HMAT are shown beside the measurements but do not enter the rule:
firmware tables are claims, the copies are what happened.  Where HMAT's
bandwidth figures and the measurement disagree, the advice says so with both
figures (:func:`hmat_disagreements`): HMAT gives a CPU node's bandwidth to a
node as a ratio of its local node's, and so does the measurement (with its
noise range, ``other.min / local.max`` to ``other.max / local.min``); they
disagree when HMAT's ratio lies outside that range widened by
``1 + min_effect`` on each side.  A QEMU guest whose HMAT gives a node a
quarter of the bandwidth disagrees: TCG makes no node slower.
"""

from __future__ import annotations

from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from .._weights import format_weights, from_bandwidth
from ..records.values import (
    DEFAULT_MIN_EFFECT,
    Comparison,
    CopyCell,
    Firmware,
    GpuAdvice,
    GpuCopies,
    InterleaveCell,
    MemoryMatrix,
    Recommendation,
    Spread,
)

__all__ = [
    "decide",
    "hmat_disagreements",
    "interleave_cells",
]

NO_DIFFERENCE = "binding makes no measurable difference to memory or copies here"


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


# ------------------------------------------------------- weighted interleave


def _no_gain_text(predicted: float, min_effect: float) -> str:
    """Why a set's weighted interleave is not measured: it cannot gain ``min_effect``."""
    return (
        f"not measured: the set's bandwidths add up to {predicted:.2f}x the local node's, "
        f"below the {1 + min_effect:.2f}x that would count"
    )


def interleave_cells(
    matrix: MemoryMatrix,
    memory_only: Collection[int],
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> Tuple[InterleaveCell, ...]:
    """Each CPU node's set, weights and predicted gain (rule 3), nothing measured yet.

    ``memory_only``: the nodes that may join a CPU node's own in a set (the
    caller's: memory, no CPUs, no GPU's memory).  A CPU node without its
    own memory measured, or without a memory-only node measured from it,
    has no set.  A set that cannot gain ``min_effect`` comes back
    ``skipped`` (with why); the others are for ``advise`` to measure.
    """
    cells: List[InterleaveCell] = []
    for cpu in matrix.cpu_nodes:
        if cpu not in matrix.memory_nodes:
            continue
        local = matrix.bandwidth(cpu, cpu)
        if local is None or local.median <= 0:
            continue
        measured: Dict[int, float] = {cpu: local.median}
        for mem in matrix.memory_nodes:
            spread = matrix.bandwidth(cpu, mem)
            if mem in memory_only and mem != cpu and spread is not None and spread.median > 0:
                measured[mem] = spread.median
        if len(measured) < 2:
            continue
        predicted = sum(measured.values()) / local.median
        skipped = None if predicted >= 1 + min_effect else _no_gain_text(predicted, min_effect)
        cells.append(InterleaveCell(cpu, cpu, from_bandwidth(measured), predicted, skipped=skipped))
    return tuple(cells)


def _interleave_comparisons(
    matrix: MemoryMatrix, min_effect: float
) -> List[Tuple[InterleaveCell, Comparison]]:
    """Each measured set against its CPU node's local memory, sampled in turn with it."""
    found: List[Tuple[InterleaveCell, Comparison]] = []
    for cell in matrix.interleave:
        local = cell.local_bandwidth  # taken in turn with it; a recorded one may lack it
        if local is None and cell.local in matrix.memory_nodes:
            local = matrix.bandwidth(cell.cpu_node, cell.local)
        if cell.bandwidth is None or local is None:
            continue
        comparison = compare(
            f"memory bandwidth from CPU node {cell.cpu_node}",
            (f"weighted interleave {format_weights(cell.weights)}", cell.bandwidth),
            (f"node {cell.local} (local)", local),
            min_effect,
        )
        found.append((cell, comparison))
    return found


def _interleave_verdict(
    matrix: Optional[MemoryMatrix], min_effect: float
) -> Tuple[Optional[Mapping[int, int]], List[Comparison], List[str]]:
    """(the weights to recommend, or None; the comparisons; the reasons about interleave)."""
    if matrix is None:
        return None, [], []
    pairs = _interleave_comparisons(matrix, min_effect)
    comparisons = [c for _, c in pairs]
    winners = [(cell, c) for cell, c in pairs if c.measurable]
    reasons = [c.text() for c in comparisons]
    if not winners:
        return None, comparisons, reasons
    with_memory = [c for c in matrix.cpu_nodes if c in matrix.memory_nodes]
    first = dict(winners[0][0].weights)
    if {cell.cpu_node for cell, _ in winners} == set(with_memory) and all(
        dict(cell.weights) == first for cell, _ in winners
    ):
        reasons.append(
            f"weighted interleave with weights {format_weights(first)} beats local memory "
            "from every CPU node: policy weighted-interleave with these weights"
        )
        return first, comparisons, reasons
    for cell, _ in winners:
        reasons.append(
            f"CPU node {cell.cpu_node}: weighted interleave with weights "
            f"{format_weights(cell.weights)} beats its local memory, but not every CPU node "
            "gains with the same weights, so no one process-wide policy is recommended: place "
            f"its buffers with bind_memory(..., policy='weighted-interleave', "
            f"weights='{format_weights(cell.weights)}')"
        )
    return None, comparisons, reasons


def _hmat_bandwidth(firmware: Firmware, initiator: int, target: int) -> Optional[int]:
    """HMAT's read bandwidth (MB/s) from ``initiator`` to ``target``: class 1 (CPUs), else 0."""
    for access in (1, 0):
        for entry in firmware.hmat:
            if (
                entry.target == target
                and entry.access == access
                and initiator in entry.initiators
                and entry.read_bandwidth_mbs
            ):
                return entry.read_bandwidth_mbs
    return None


def hmat_disagreements(
    matrix: Optional[MemoryMatrix],
    firmware: Optional[Firmware],
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> Tuple[str, ...]:
    """Where HMAT's bandwidth figures and the measurement disagree (module docstring), with both."""
    if matrix is None or firmware is None or not firmware.hmat:
        return ()
    notes: List[str] = []
    for cpu in matrix.cpu_nodes:
        if cpu not in matrix.memory_nodes:
            continue
        local = matrix.bandwidth(cpu, cpu)
        claimed_local = _hmat_bandwidth(firmware, cpu, cpu)
        if local is None or not claimed_local or local.min <= 0 or local.max <= 0:
            continue
        for mem in matrix.memory_nodes:
            other = matrix.bandwidth(cpu, mem)
            claimed = _hmat_bandwidth(firmware, cpu, mem)
            if mem == cpu or other is None or not claimed:
                continue
            hmat = claimed / claimed_local
            low, high = other.min / local.max, other.max / local.min
            if low / (1 + min_effect) <= hmat <= high * (1 + min_effect):
                continue
            notes.append(
                f"HMAT and the measurement disagree from CPU node {cpu}: HMAT gives node {mem} "
                f"{hmat:.2f}x the read bandwidth of node {cpu} (local) ({claimed} vs "
                f"{claimed_local} MB/s), measured {other.median / local.median:.2f}x "
                f"({other.median:.3g} vs {local.median:.3g} GB/s, noise range "
                f"{low:.2f}-{high:.2f}x); the weights follow the measurement"
            )
    return tuple(notes)


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
    weights, interleave_found, interleave_reasons = _interleave_verdict(memory, min_effect)
    gpu_advice, gpu_found = _all_gpu_advice(gpus, min_effect)
    comparisons = tuple(memory_found + interleave_found + gpu_found)
    memory_matters = [c for c in memory_found if c.measurable]
    bound_gpus = [g for g in gpu_advice if g.bind]
    if weights is not None or memory_matters or bound_gpus:
        return Recommendation(
            True,
            "node",
            "preferred" if weights is None else "weighted-interleave",
            _bind_verdict(bool(bound_gpus), weights),
            _bind_reasons(memory_found, memory_matters, bound_gpus) + tuple(interleave_reasons),
            tuple(gpu_advice),
            comparisons,
            "measured",
            min_effect,
            weights,
        )
    if not comparisons:
        basis, why = _nothing_compared(memory, gpus)
        return Recommendation(
            False, "none", "none", why, (why,), tuple(gpu_advice), (), basis, min_effect
        )
    reasons = [c.text() for c in memory_found] + interleave_reasons
    for advice in gpu_advice:
        reasons += list(advice.reasons)
    return Recommendation(
        False,
        "none",
        "none",
        _no_bind_verdict(interleave_found),
        tuple(reasons),
        tuple(gpu_advice),
        comparisons,
        "measured",
        min_effect,
    )


def _bind_verdict(gpus: bool, weights: Optional[Mapping[int, int]]) -> str:
    if gpus:
        return "binding makes a measurable difference here: bind each worker to its GPU's node"
    if weights is not None:
        return (
            "weighted interleave makes a measurable difference to memory here: bind to one "
            f"node, memory weighted-interleaved with weights {format_weights(weights)}"
        )
    return "binding makes a measurable difference to memory here: bind to one node"


def _no_bind_verdict(interleave_found: Sequence[Comparison]) -> str:
    """:data:`NO_DIFFERENCE`, and where weighted interleave gains with weights of its own."""
    gains = [c.subject.rsplit(" ", 1)[-1] for c in interleave_found if c.measurable]
    if not gains:
        return NO_DIFFERENCE
    return NO_DIFFERENCE + (
        f"; weighted interleave does, from CPU node{'s' if len(gains) > 1 else ''} "
        f"{', '.join(gains)}, each with weights of its own: place buffers with "
        "bind_memory (see the reasons)"
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
