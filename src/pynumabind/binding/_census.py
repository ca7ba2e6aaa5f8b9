"""Where a range's pages are after ``mbind``, why some are not on its nodes, and its edges.

The rules are "Moving" and "Huge pages" in
:mod:`pynumabind.binding.placement`; this is how they are met.

**The census** (:func:`count_pages`).  Each page of the range is asked where it is
(``move_pages`` with no target, at most ``MOVE_PAGES_CHUNK`` pages a call),
and judged against the nodes of its *segment*: the whole range and the
target's nodes, or, for requested weights, the run it lies in (one node).
Where some pages of a call are found and some not, the missing ones are
asked for twice more (1 ms, then 2 ms later) before they count as not
present: a page whose transparent huge page is being split, or that the
kernel's NUMA balancing is migrating, reads as not present for that moment
(a call with none present is taken as never written, and asked once).  With
``move=True``, a page still off the nodes gets one more explicit
``move_pages`` to the node (one-node targets), which either moves it or says
why not: a per-page errno, or nothing for a page the kernel tried and failed
to migrate, which it reports only as a count (:data:`NOT_MIGRATED`; its
status entry is left as written, ``STATUS_UNWRITTEN``).  When the kernel
refuses the whole call (``ENOMEM`` once the node is full, after moving what
fitted), each page still off the nodes gets that errno.  A page that was
present but is not found after that move (caught mid-migration) is asked
for again, up to three times; one still not found is :data:`VANISHED`,
never "not present" (it was written).  With ``move=False`` the pages off the
nodes are counted under :data:`NOT_ASKED`.  A denied read-back (a seccomp
profile denying ``move_pages``) leaves the counts unknown, with a note.

**The split** (the policy table's ``WEIGHTED`` judgement, as the verifier's):
under weighted interleave, the present pages' split over the nodes is
judged against the weights (the requested ones laid out in runs, or the
kernel's for its own mode) within the tolerance
:func:`pynumabind._weights.split_problems` states: 5 percentage points, or
one run of the node's pages.  The result's ``split_problems`` names each
node off by more.

**Boundaries between runs** (:func:`cut_huge_pages`, :func:`split_at`): a run
boundary inside a transparent huge page (small layouts, whose runs are not
whole huge pages) would have the kernel migrate the huge page whole with one
run's pages, so, when moving, the present pages just before such boundaries
have their huge page split first, as the range's edges do.

**The huge-page edges.**  :func:`neighbours_before` finds the present pages
outside the range that may share a transparent huge page with its first or
last page: the rest of the huge-page-aligned blocks holding them (the size
the kernel names in ``hpage_pmd_size``; a huge page, and any smaller large
folio, is aligned to its size).  :func:`split_edges` splits the huge pages
the edges cut (``madvise(MADV_COLD)`` on the edge page; best effort), after
``bind_memory`` has set the policy without moving and before it moves; and
:func:`count_pages` asks the neighbours again to count those that moved anyway
(``moved_outside``).
"""

from __future__ import annotations

import collections
import errno
import mmap
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .._os import libnuma as _libnuma
from .._text import format_ids
from .._weights import split_problems
from ..errors import NumaSyscallError
from ._target import fix

__all__ = [
    "NOT_ASKED",
    "NOT_MIGRATED",
    "NOT_PRESENT",
    "PINNED_REASONS",
    "REASONS",
    "VANISHED",
    "PageCount",
    "Segment",
    "count_pages",
    "cut_huge_pages",
    "neighbours_before",
    "page_count",
    "split_at",
    "split_edges",
]

#: Reason for pages the kernel tried and failed to migrate without a per-page errno.
NOT_MIGRATED = "not migrated"
#: Reason for pages left elsewhere because ``move=False``.
NOT_ASKED = "move=False"
#: Reason for a page seen present off the nodes, then not found when asked again.
VANISHED = "vanished"
#: What a page not yet allocated is (``-ENOENT``), or one backed by the shared zero page.
NOT_PRESENT = "not present"

#: What each reason a page was not moved means, for messages and docs.
REASONS: Mapping[str, str] = {
    NOT_MIGRATED: (
        "the kernel tried to migrate it and could not; it reports these only as a count "
        "(an extra reference holds the page: memory pinned by cudaHostAlloc, "
        "cudaHostRegister, RDMA or io_uring, or in use at that moment)"
    ),
    NOT_ASKED: "left where it was (move=False); pages allocated from now on follow the policy",
    VANISHED: (
        "present off the nodes before the move, not present when asked after it, three times "
        "(in migration at that moment, or freed meanwhile): where it lands is unknown"
    ),
    "EBUSY": "busy or locked in place at that moment (pinned memory, or under I/O)",
    "EACCES": (
        "shared with another process; moving it needs MPOL_MF_MOVE_ALL and CAP_SYS_NICE, "
        "which bind_memory does not use"
    ),
    "ENOMEM": "the target node is full (no free memory for it)",
    "EFAULT": "not an ordinary page (the shared zero page, or a special mapping)",
    "EIO": "the page could not be written back (a dirty file page)",
    "EINVAL": "a page the kernel cannot migrate (a special or device mapping)",
}

#: Reasons that mean page-locked (pinned) memory: the result then points to memory_on.
PINNED_REASONS = frozenset({NOT_MIGRATED, "EBUSY"})

_PINNED_HINT = (
    "page-locked (pinned) memory (cudaHostAlloc, cudaHostRegister, RDMA or io_uring "
    "registration) cannot be moved once pinned: allocate it inside "
    "'with pynumabind.memory_on(...)', or bind_memory the buffer before pinning it "
    "(cudaHostRegister after)"
)


# --------------------------------------------------------------- counting


def _chunks(start: int, length: int) -> Iterator[List[int]]:
    page = mmap.PAGESIZE
    step = _libnuma.MOVE_PAGES_CHUNK * page
    for base in range(start, start + length, step):
        yield list(range(base, min(base + step, start + length), page))


def _errno_name(status: int) -> str:
    return errno.errorcode.get(-status, str(-status))


#: One part of a range and the nodes its pages belong on: (start, length, nodes).
Segment = Tuple[int, int, "frozenset[int]"]


@dataclass
class _Census:
    """Page statuses as ``move_pages`` reports them, and the present pages off target.

    ``counts`` tallies every status (a node, or a ``-errno``) and, for the
    pages on the weighted nodes, ``on`` tallies each page on its own
    segment's nodes; ``stray`` maps each present page off its segment's
    nodes to (the node it is on, the nodes it belongs on).
    """

    counts: collections.Counter[int] = field(default_factory=collections.Counter)
    stray: Dict[int, Tuple[int, frozenset[int]]] = field(default_factory=dict)

    def add(self, addresses: List[int], status: List[int], nodes: frozenset[int]) -> None:
        tally = collections.Counter(status)
        self.counts.update(tally)
        if any(s >= 0 and s not in nodes for s in tally):
            for address, s in zip(addresses, status):
                if s >= 0 and s not in nodes:
                    self.stray[address] = (s, nodes)


def _query(segments: Sequence[Segment]) -> _Census:
    census = _Census()
    for start, length, nodes in segments:
        for addresses in _chunks(start, length):
            _, status = _libnuma.move_pages_status(addresses)
            if any(where >= 0 for where in status) and any(where < 0 for where in status):
                # Some pages present, some not: the missing ones may be mid-migration
                # (a chunk with none present is taken as never written, asked once).
                status = _ask_again(addresses, status)
            census.add(addresses, status, nodes)
    return census


def _retry_moves(census: _Census) -> Dict[str, int]:
    """Move each stray page once more, explicitly; the reason per page still off target.

    Pages that belong on one node are asked to move there; pages whose
    segment has several nodes are only asked where they are (the kernel's
    policy picks among them, so there is no one node to ask for).
    """
    reasons: collections.Counter[str] = collections.Counter()
    by_target: Dict[frozenset[int], List[int]] = {}
    for address, (_, nodes) in sorted(census.stray.items()):
        by_target.setdefault(nodes, []).append(address)
    for nodes, strays in by_target.items():
        one = next(iter(nodes)) if len(nodes) == 1 else None
        for index in range(0, len(strays), _libnuma.MOVE_PAGES_CHUNK):
            batch = strays[index : index + _libnuma.MOVE_PAGES_CHUNK]
            _retry_batch(census, batch, nodes, one, reasons)
    return dict(reasons)


def _retry_batch(
    census: _Census,
    batch: List[int],
    nodes: frozenset[int],
    one: Optional[int],
    reasons: collections.Counter[str],
) -> None:
    said: List[int] = [_libnuma.STATUS_UNWRITTEN] * len(batch)
    if one is not None:
        try:
            _, said = _libnuma.move_pages_status(batch, one, _libnuma.MPOL_MF_MOVE)
        except NumaSyscallError as exc:
            # The whole call refused (ENOMEM: the node is full, after moving what
            # fitted): each page still off the nodes is left for that reason.
            said = [-(exc.errno or errno.EIO)] * len(batch)
    now = _where_now(batch)
    for address, answer, where in zip(batch, said, now):
        old, _ = census.stray.pop(address)
        census.counts[old] -= 1
        if where < 0:  # was present: not "never written", so not counted as not present
            reasons[VANISHED] += 1
            continue
        census.counts[where] += 1
        if where in nodes:
            continue
        census.stray[address] = (where, nodes)
        if answer < 0 and answer != _libnuma.STATUS_UNWRITTEN:
            reasons[_errno_name(answer)] += 1
        else:
            reasons[NOT_MIGRATED] += 1


def _where_now(addresses: List[int]) -> List[int]:
    """Each page's node (``move_pages`` with no target), asking again for pages not found."""
    _, now = _libnuma.move_pages_status(addresses)
    return _ask_again(addresses, now)


def _ask_again(addresses: List[int], now: List[int], asks: int = 2) -> List[int]:
    """``now`` with the pages not found (negative status) asked for again, ``asks`` times.

    A present page whose entry is briefly a migration entry (caught while
    the kernel migrates it, or splits the transparent huge page it is part
    of) reads as not present; asked again a moment later (1 ms, then 2 ms),
    it is found.  Only the pages still not found are asked for each time.
    """
    for attempt in range(1, asks + 1):
        missing = [i for i, where in enumerate(now) if where < 0]
        if not missing:
            break
        time.sleep(0.001 * attempt)
        _, again = _libnuma.move_pages_status([addresses[i] for i in missing])
        for i, where in zip(missing, again):
            now[i] = where
    return now


def page_count(count: int) -> str:
    """``1 page``, ``2 pages``."""
    return f"{count} page" if count == 1 else f"{count} pages"


def _present(addresses: List[int]) -> Dict[int, int]:
    """The node of each present page among ``addresses`` (``move_pages`` query)."""
    found: Dict[int, int] = {}
    for index in range(0, len(addresses), _libnuma.MOVE_PAGES_CHUNK):
        batch = addresses[index : index + _libnuma.MOVE_PAGES_CHUNK]
        _, status = _libnuma.move_pages_status(batch)
        found.update((a, where) for a, where in zip(batch, status) if where >= 0)
    return found


def _edge_neighbours(start: int, length: int) -> List[int]:
    """The pages outside the range that may share a transparent huge page with its edges.

    A huge page (and any smaller large folio, which lies inside one) is
    aligned to its size, so those are the rest of the huge-page-aligned
    blocks holding the range's first and last pages.
    """
    huge, page = _libnuma.huge_page_size(), mmap.PAGESIZE
    if huge <= page:
        return []
    end = start + length
    low, high = start - start % huge, -(-end // huge) * huge
    return list(range(low, start, page)) + list(range(end, high, page))


def neighbours_before(start: int, length: int) -> Dict[int, int]:
    """Where the present pages sharing a possible huge page with the range's edges are."""
    neighbours = _edge_neighbours(start, length)
    if not neighbours:
        return {}
    try:
        return _present(neighbours)
    except NumaSyscallError:
        return {}  # the query is denied: so is the census, which says so


def split_edges(start: int, length: int, neighbours: Mapping[int, int]) -> None:
    """Split the huge pages the range's edges cut, where neighbours are present (best effort).

    ``madvise(MADV_COLD)`` on the range's edge page splits a huge page it
    covers only in part (and marks that one page as cold, a hint to
    reclaim: the only effect left).  It cannot split a huge page that is
    ``mlock``-ed, shared with another process or busy at that moment.
    """
    page, end = mmap.PAGESIZE, start + length
    edges = {start for a in neighbours if a < start} | {end - page for a in neighbours if a >= end}
    for edge in sorted(edges):
        try:
            _libnuma.madvise(edge, page, _libnuma.MADV_COLD)
        except NumaSyscallError:
            pass  # before Linux 5.4, or a locked or special mapping: counted afterwards


def _moved_outside(before: Mapping[int, int]) -> int:
    """How many of the neighbour pages ``before`` are now on another node."""
    if not before:
        return 0
    now = _present(sorted(before))
    return sum(1 for address, node in before.items() if now.get(address, node) != node)


@dataclass(frozen=True)
class PageCount:
    """What :func:`count_pages` found: the fields of a ``MemoryPlacement`` it fills.

    ``split_problems``: each node whose share of the present pages is off its
    weight's share beyond the tolerance (:func:`pynumabind._weights.split_problems`);
    empty when in proportion or when no weights are judged.
    """

    per_node: Optional[Dict[int, int]]
    not_present: int
    not_moved: Dict[str, int]
    moved_outside: int
    notes: Tuple[str, ...]
    split_problems: Tuple[str, ...] = ()


def count_pages(
    segments: Sequence[Segment],
    move: bool,
    neighbours: Mapping[int, int],
    *,
    weights: Optional[Mapping[int, int]] = None,
    run_pages: Optional[Mapping[int, int]] = None,
) -> PageCount:
    """Where the pages of ``segments`` are now, why some are off their nodes, and notes.

    ``segments`` are the range's parts in order with the nodes their pages
    belong on: one, the whole range and the target's nodes, or the runs of a
    weighted layout, one node each.  With ``move``, each page still off its
    nodes is moved once more, explicitly (:func:`_retry_moves`);
    ``neighbours`` (from :func:`neighbours_before`) are asked again to count
    the pages outside the range that moved with it.  With ``weights``, the
    split of the present pages is judged against them (``run_pages``: one
    run of each node, the tolerance's slack).  A denied read-back leaves the
    counts unknown (``per_node`` None), with a note.
    """
    outside = 0
    not_moved: Dict[str, int] = {}
    try:
        census = _query(segments)
        if census.stray:
            not_moved = _retry_moves(census) if move else {NOT_ASKED: len(census.stray)}
        outside = _moved_outside(neighbours)
    except NumaSyscallError as exc:
        unknown = (
            f"the policy was applied, but where the pages are is unknown: {exc} "
            f"({fix(exc.errno or 0, 'move_pages')})"
        )
        return PageCount(None, 0, not_moved, outside, (unknown,))
    per_node = {n: c for n, c in census.counts.items() if n >= 0 and c > 0}
    absent = sum(c for s, c in census.counts.items() if s < 0)
    nodes = frozenset().union(*(seg[2] for seg in segments))
    notes = _notes(nodes, not_moved, absent, outside)
    split = () if weights is None else split_problems(weights, per_node, run_pages)
    return PageCount(per_node, absent, not_moved, outside, notes, split)


def cut_huge_pages(segments: Sequence[Segment]) -> List[int]:
    """The pages just before the boundaries between segments that fall inside a huge page.

    Present ones only (one ``move_pages`` query): a transparent huge page
    there would be migrated whole with either segment's pages, so
    :func:`split_at` splits it first.  Empty without transparent huge pages.
    """
    huge, page = _libnuma.huge_page_size(), mmap.PAGESIZE
    if huge <= page or len(segments) < 2:
        return []
    cuts = [start - page for start, _, _ in segments[1:] if start % huge]
    try:
        return sorted(_present(cuts))
    except NumaSyscallError:
        return []  # the query is denied: so is the census, which says so


def split_at(pages: Sequence[int]) -> None:
    """Split the transparent huge page holding each page of ``pages`` (best effort).

    ``madvise(MADV_COLD)`` on the one page, as :func:`split_edges` does at the
    range's own edges (the page is also marked cold, a reclaim hint).
    """
    for address in pages:
        try:
            _libnuma.madvise(address, mmap.PAGESIZE, _libnuma.MADV_COLD)
        except NumaSyscallError:
            pass  # before Linux 5.4, or a locked or special mapping: counted afterwards


def _notes(
    nodes: frozenset[int], not_moved: Mapping[str, int], absent: int, outside: int
) -> Tuple[str, ...]:
    """What a user should know about pages that are not, or not only, where asked."""
    notes: List[str] = []
    if any(reason in PINNED_REASONS for reason in not_moved):
        notes.append(_PINNED_HINT)
    if "ENOMEM" in not_moved:
        notes.append(
            f"node {format_ids(nodes)} is full: {page_count(not_moved['ENOMEM'])} could "
            "not be moved there (ENOMEM); free memory on it, or place the buffer elsewhere"
        )
    if absent:
        notes.append(
            f"{page_count(absent)} not present yet (never written): allocated on "
            f"node {format_ids(nodes)} when first written"
        )
    if outside:
        notes.append(
            f"{page_count(outside)} outside the range moved with it: they shared a transparent "
            "huge page with its edges, which the kernel could not split (it moves a huge "
            "page whole)"
        )
    return tuple(notes)
