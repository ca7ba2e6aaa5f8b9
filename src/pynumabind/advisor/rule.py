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
3. **Overall.**  Bind when memory or any GPU's copies matter: CPU mode
   ``node`` and memory policy ``preferred`` (local first, spill over rather
   than fail).  Otherwise do not bind (mode ``none``, memory ``none``), and
   say so plainly: "binding makes no measurable difference to memory or
   copies here".  When nothing could be compared (one node, or every
   measurement failed), the verdict says that instead of guessing; ``bind``
   is then False and :attr:`Recommendation.basis <pynumabind.Recommendation.basis>` tells why.

SLIT and HMAT are shown beside the measurements but do not enter the rule:
firmware tables are claims, the copies are what happened.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..records.values import (
    DEFAULT_MIN_EFFECT,
    Comparison,
    CopyCell,
    GpuAdvice,
    GpuCopies,
    MemoryMatrix,
    Recommendation,
    Spread,
)

__all__ = [
    "decide",
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
