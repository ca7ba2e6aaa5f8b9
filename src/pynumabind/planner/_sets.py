"""The set algorithms the exclusive modes use: values in, values out.

Nothing here knows about a :class:`~pynumabind.model.Topology`: CPUs are
ints, a core is a frozenset of its SMT siblings, and what a CPU shares (its
core, its L3 cache) comes in as a function.  That keeps each rule testable
with a handful of ints.

* :func:`cores` groups a pool of CPUs into physical cores, ordered by their
  lowest CPU.
* :func:`balanced` splits ``count`` items into contiguous ranges whose sizes
  differ by at most one (the larger ones first).
* :func:`exclusive` gives each rank a disjoint slice of whole cores when
  there are enough, else splits SMT threads, else lets ranks share.
* :func:`core_perf` gives each core's highest performance (ACPI CPPC), or
  None when the cores do not differ (or it is unknown): then nothing
  changes.  Where they differ, :func:`exclusive` deals the cores out
  highest-performance first, in turn (:func:`by_performance`): every core is
  still given out, sizes stay balanced within one core, and every rank gets
  an equal share (within one core) of the cores at or above any performance
  level, so each rank holds priority cores to run its busiest thread on.
  :func:`fastest` is the top level alone (mode ``node``'s ``priority_cores``).
* :func:`l3_groups` groups cores by shared last-level cache;
  :func:`core_complex` gives ranks whole groups when there are enough, else
  seats ranks per group by core count (:func:`dhondt`) and slices each
  group exclusively.
"""

from __future__ import annotations

from .._text import counted, format_ids

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Callable, Dict, Iterable, List, Optional, Tuple

__all__ = [
    "balanced",
    "by_performance",
    "core_complex",
    "core_perf",
    "cores",
    "dhondt",
    "exclusive",
    "fastest",
    "l3_groups",
    "levels",
    "union",
]

if TYPE_CHECKING:  # pragma: no cover
    PerfOf = Callable[[int], Optional[int]]  # a CPU's highest performance, None when unknown
    Slices = Tuple[List[frozenset[int]], List[str], bool]  # per-rank CPUs, notes, shared cores


def union(sets: Iterable[AbstractSet[int]]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for s in sets:
        out |= s
    return out


def cores(
    pool: AbstractSet[int], core_of: Callable[[int], AbstractSet[int]]
) -> List[frozenset[int]]:
    """Physical cores of ``pool`` (SMT siblings together), ordered by lowest CPU.

    ``core_of(cpu)`` gives the CPUs of ``cpu``'s core; siblings outside the
    pool are left out, and a CPU is always in its own core.
    """
    remaining = set(pool)
    out: List[frozenset[int]] = []
    for cpu in sorted(pool):
        if cpu not in remaining:
            continue
        core = frozenset((frozenset(core_of(cpu)) & remaining) | {cpu})
        remaining -= core
        out.append(core)
    return out


def balanced(count: int, parts: int) -> List[Tuple[int, int]]:
    """Contiguous [start, end) ranges splitting ``count`` items, sizes within one."""
    base, extra = divmod(count, parts)
    out = []
    start = 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def _sizes(count: int, parts: int) -> str:
    return "/".join(map(str, sorted({b - a for a, b in balanced(count, parts)}, reverse=True)))


def _each(count: int, parts: int, noun: str) -> str:
    """``2/1 whole cores each``, ``1 whole core each``: the sizes of a balanced split."""
    sizes = _sizes(count, parts)
    return f"{sizes} whole {noun}{'' if sizes == '1' else 's'} each"


def core_perf(core_list: List[frozenset[int]], perf_of: Optional[PerfOf]) -> Optional[List[int]]:
    """Each core's highest performance (its best CPU's); None unless known for all and unequal."""
    if perf_of is None:
        return None
    out: List[int] = []
    for core in core_list:
        values = [perf_of(cpu) for cpu in core]
        known = [v for v in values if v is not None]
        if len(known) != len(values):
            return None
        out.append(max(known))
    return out if len(set(out)) > 1 else None


def by_performance(
    core_list: List[frozenset[int]], perfs: List[int], ranks: int
) -> List[frozenset[int]]:
    """Deal whole cores to ``ranks`` in turn, highest performance first (ties: core order).

    Rank ``r`` gets the cores at positions ``r, r + ranks, ...`` of that
    order: the sizes are :func:`balanced`'s (the larger ones first), and any
    run of the order -- the cores at or above a performance level -- is
    shared out within one core.
    """
    order = sorted(range(len(core_list)), key=lambda i: (-perfs[i], i))
    return [union(core_list[i] for i in order[r::ranks]) for r in range(ranks)]


def fastest(core_list: List[frozenset[int]], perfs: List[int]) -> List[frozenset[int]]:
    """The cores with the highest performance of ``perfs`` (one per core)."""
    top = max(perfs)
    return [core for core, perf in zip(core_list, perfs) if perf == top]


def levels(perfs: List[int]) -> str:
    """``3800 (8 cores), 3400 (40 cores)``: the performance levels, highest first."""
    counts: Dict[int, int] = {}
    for perf in perfs:
        counts[perf] = counts.get(perf, 0) + 1
    return ", ".join(f"{p} ({counted(counts[p], 'core')})" for p in sorted(counts, reverse=True))


def exclusive(
    core_list: List[frozenset[int]],
    ranks: int,
    where: str,
    perf_of: Optional[PerfOf] = None,
) -> Tuple[List[frozenset[int]], str, bool]:
    """Split cores among ``ranks``: disjoint whole cores when there are enough.

    Returns the per-rank CPU sets, a note saying how, and whether ranks
    share physical cores.  ``perf_of``: where the cores differ in it, they
    are dealt out highest-performance first (:func:`by_performance`).
    """
    if ranks == 1:  # nothing to split
        note = f"{where}: the one rank gets every allowed core ({len(core_list)})"
        return [union(core_list)], note, False
    perfs = core_perf(core_list, perf_of) if len(core_list) >= ranks else None
    if perfs is not None:
        slices = by_performance(core_list, perfs, ranks)
        note = (
            f"{where}: {len(core_list)} allowed cores differ in highest performance (CPPC "
            f"highest_perf {levels(perfs)}): the {counted(ranks, 'rank')} take the "
            f"highest-performance cores first, in turn, {_each(len(core_list), ranks, 'core')}"
        )
        return slices, note, False
    if len(core_list) >= ranks:
        slices = [union(core_list[a:b]) for a, b in balanced(len(core_list), ranks)]
        note = (
            f"{where}: {counted(len(core_list), 'allowed core')} split among "
            f"{counted(ranks, 'rank')}, {_each(len(core_list), ranks, 'core')} (SMT siblings "
            "kept together)"
        )
        return slices, note, False
    threads = [cpu for core in core_list for cpu in sorted(core)]
    if len(threads) >= ranks:
        slices = [frozenset(threads[a:b]) for a, b in balanced(len(threads), ranks)]
        note = (
            f"{where}: more ranks ({ranks}) than allowed cores ({len(core_list)}): SMT threads "
            "are split, so ranks share physical cores"
        )
        return slices, note, True
    slices = [core_list[i * len(core_list) // ranks] for i in range(ranks)]
    note = f"{where}: more ranks ({ranks}) than allowed CPUs ({len(threads)}): ranks share cores"
    return slices, note, True


def l3_groups(
    core_list: List[frozenset[int]], l3_of: Callable[[int], AbstractSet[int]]
) -> Optional[List[List[frozenset[int]]]]:
    """Cores grouped by shared L3, in core order; None when any core's L3 is unknown.

    ``l3_of(cpu)`` gives the CPUs sharing ``cpu``'s L3 (empty when unknown);
    a core is looked up by its lowest CPU.
    """
    groups: Dict[frozenset[int], List[frozenset[int]]] = {}
    for core in core_list:
        l3 = frozenset(l3_of(min(core)))
        if not l3:
            return None
        groups.setdefault(l3, []).append(core)
    return list(groups.values())  # dicts keep insertion (core) order


def dhondt(weights: List[int], seats: int) -> List[int]:
    """Seats per group, proportional to ``weights`` (highest average, ties by order)."""
    given = [0] * len(weights)
    for _ in range(seats):
        best = max(range(len(weights)), key=lambda i: (weights[i] / (given[i] + 1), -i))
        given[best] += 1
    return given


def core_complex(
    core_list: List[frozenset[int]],
    groups: Optional[List[List[frozenset[int]]]],
    ranks: int,
    where: str,
    perf_of: Optional[PerfOf] = None,
) -> Slices:
    """Whole L3 groups per rank when there are enough, else exclusive within groups.

    ``groups`` is :func:`l3_groups` of ``core_list``; None falls back to
    :func:`exclusive` over all the cores.  ``perf_of`` reaches every
    :func:`exclusive` split (within a group, or without groups); whole groups
    are given out as they are.
    """
    if groups is None:
        slices, note, shared = exclusive(core_list, ranks, where, perf_of)
        return (
            slices,
            [f"{where}: L3 cache groups unknown; falling back to exclusive", note],
            shared,
        )
    described = ", ".join(format_ids(union(g)) for g in groups)
    if ranks == 1:  # nothing to split
        note = f"{where}: the one rank gets every L3 group ({len(groups)}: {described})"
        return [union(union(g) for g in groups)], [note], False
    if len(groups) >= ranks:
        slices = [union(union(g) for g in groups[a:b]) for a, b in balanced(len(groups), ranks)]
        note = (
            f"{where}: {counted(len(groups), 'L3 group')} ({described}) split among "
            f"{counted(ranks, 'rank')}, {_each(len(groups), ranks, 'group')}"
        )
        return slices, [note], False
    seats = dhondt([len(g) for g in groups], ranks)
    out: List[frozenset[int]] = []
    notes = [
        f"{where}: fewer L3 groups ({len(groups)}: {described}) than ranks ({ranks}); "
        f"ranks per group {'/'.join(map(str, seats))} (by core count), exclusive within groups"
    ]
    shared = False
    for index, (group, count) in enumerate(zip(groups, seats)):
        if count:
            part, note, group_shared = exclusive(
                group, count, f"{where}, L3 group {index}", perf_of
            )
            out.extend(part)
            notes.append(note)
            shared = shared or group_shared
    return out, notes, shared
