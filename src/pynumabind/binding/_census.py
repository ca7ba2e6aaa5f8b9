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
(a call with none present is asked once).  A page still missing is then
looked up in the page table (:func:`pynumabind._os.pages.locate`): under
automatic NUMA balancing, Linux 6.1's ``move_pages`` reports a written page
the balancer marked for a hinting fault as not present, and
``/proc/self/pagemap`` says it is there (and, to ``CAP_SYS_ADMIN``, its
frame, hence its node).  A present page whose node that cannot give is
counted as ``not_located``, unless ``/proc/self/numa_maps`` gives the
range's pages per node (the range is a run of whole mappings, which ``mbind``
makes it: it splits the mapping at its ends, and at each run's) and they
account for exactly those pages (for a layout of runs, ``numa_maps`` gives
their node, not their run: such pages are judged off target only on a node
none of the runs has, and count in the split by their node); a page
``move_pages`` missed while pagemap could not be read counts as
``not_located`` too when balancing is on (or unknown), with a note, never
silently as not present.  With ``move=True``, a page still off its nodes
gets one more explicit ``move_pages`` to the node (segments of one node),
which either moves it or says why not: a per-page errno, or nothing for a
page the kernel tried and failed to migrate, which it reports only as a
count (:data:`NOT_MIGRATED`; its status entry is left as written,
``STATUS_UNWRITTEN``).  When the kernel
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
folio, is aligned to its size).  Present means what the page table says
(the census's lookup), so a huge page the balancer marked still has
neighbours, and is still split.  :func:`split_edges` splits the huge pages
the edges cut (``madvise(MADV_COLD)`` on the edge page; best effort), after
``bind_memory`` has set the policy without moving and before it moves;
:func:`reread` then asks the neighbours where they are once more, just
before the move (splitting rewrites their entries, so 6.1's ``move_pages``
sees a marked huge page's pages again); and :func:`count_pages` asks them
again to count those that moved anyway (``moved_outside``).  A neighbour
whose node before the move could not be read and that is on the range's
nodes after it may have moved with it: a note says how many, uncounted.
"""

from __future__ import annotations

import collections
import errno
import mmap
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .._os import libnuma as _libnuma
from .._os import pages as _pages
from .._os import proc as _proc
from .._os.pages import UNLOCATED
from .._text import format_ids
from .._weights import split_problems
from ..errors import NumaSyscallError, PynumabindError
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
    "reread",
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
    """Page statuses as located (``move_pages``, then the page table), and the pages off target.

    ``counts`` is keyed by status: a node, :data:`~pynumabind._os.pages.UNLOCATED`,
    :data:`~pynumabind._os.pages.UNSURE`, or ``-errno`` for a page not there.
    ``stray`` maps each present page off its segment's nodes to (the node it
    is on, the nodes it belongs on).  ``unchecked``: pages ``move_pages``
    missed that the page table could not be read for (``why``).
    """

    counts: collections.Counter[int] = field(default_factory=collections.Counter)
    stray: Dict[int, Tuple[int, frozenset[int]]] = field(default_factory=dict)
    unchecked: int = 0
    why: str = ""

    def add(self, addresses: List[int], located: _pages.Located, nodes: frozenset[int]) -> None:
        tally = collections.Counter(located.status)
        self.counts.update(tally)
        self.unchecked += located.unchecked
        self.why = self.why or located.why
        if any(s >= 0 and s not in nodes for s in tally):
            for address, s in zip(addresses, located.status):
                if s >= 0 and s not in nodes:
                    self.stray[address] = (s, nodes)


def _where(addresses: List[int], status: List[int]) -> _pages.Located:
    """``status`` from ``move_pages`` with the pages it missed looked up in the page table."""
    return _pages.locate(addresses, status)


def _query(segments: Sequence[Segment]) -> _Census:
    census = _Census()
    for start, length, nodes in segments:
        for addresses in _chunks(start, length):
            _, status = _libnuma.move_pages_status(addresses)
            if any(where >= 0 for where in status) and any(where < 0 for where in status):
                # Some pages present, some not: the missing ones may be mid-migration
                # (a chunk with none present is asked once).
                status = _ask_again(addresses, status)
            census.add(addresses, _where(addresses, status), nodes)
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
        if _pages.not_there(where):  # was present: not "never written", not "not present"
            reasons[VANISHED] += 1
            continue
        census.counts[where] += 1
        if _pages.unknown(where) or where in nodes:
            continue  # there now, or present where nothing here can read
        census.stray[address] = (where, nodes)
        reasons[_why_not(answer)] += 1


def _why_not(answer: int) -> str:
    """The reason for a page the explicit move left off the nodes, from its status entry.

    ``ENOENT``/``EFAULT`` for a page the page table shows present means
    ``move_pages`` could not see it (NUMA balancing had marked it): no
    per-page reason, so ``mbind``'s own attempt is what the count reflects.
    """
    if answer >= 0 or answer == _libnuma.STATUS_UNWRITTEN:
        return NOT_MIGRATED
    if -answer in (errno.ENOENT, errno.EFAULT):
        return NOT_MIGRATED
    return _errno_name(answer)


def _where_now(addresses: List[int]) -> List[int]:
    """Each page's node (``move_pages`` then the page table), asking again for pages not found."""
    _, now = _libnuma.move_pages_status(addresses)
    return list(_where(addresses, _ask_again(addresses, now)).status)


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
    """The node of each present page among ``addresses`` (UNLOCATED: present, node unread)."""
    found: Dict[int, int] = {}
    for index in range(0, len(addresses), _libnuma.MOVE_PAGES_CHUNK):
        batch = addresses[index : index + _libnuma.MOVE_PAGES_CHUNK]
        _, status = _libnuma.move_pages_status(batch)
        located = _where(batch, status).status
        found.update((a, where) for a, where in zip(batch, located) if not _pages.not_there(where))
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


def reread(neighbours: Mapping[int, int]) -> Dict[int, int]:
    """``neighbours`` asked again where they are (just before the move); as they were if denied.

    A neighbour found before and not now (caught mid-split) keeps its node.
    """
    if not neighbours:
        return {}
    try:
        now = _present(sorted(neighbours))
    except NumaSyscallError:
        return dict(neighbours)
    return {address: now.get(address, node) for address, node in neighbours.items()}


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


def _moved_outside(before: Mapping[int, int], nodes: frozenset[int]) -> Tuple[int, int]:
    """(neighbour pages ``before`` now on another node, those that may have moved).

    A page whose node before was unread and that is on ``nodes`` now may
    have moved with the range: counted apart, never as moved.
    """
    if not before:
        return 0, 0
    now = _present(sorted(before))
    moved = maybe = 0
    for address, node in before.items():
        where = now.get(address, node)
        if _pages.unknown(node):
            maybe += where in nodes
        elif not _pages.unknown(where) and where != node:
            moved += 1
    return moved, maybe


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
    not_located: int = 0
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
    ``neighbours`` (from :func:`neighbours_before`, :func:`reread`) are
    asked again to count the pages outside the range that moved with it.
    With ``weights``, the split of the present pages (those located by
    ``numa_maps`` included) is judged against them (``run_pages``: one run
    of each node, the tolerance's slack).  A denied read-back leaves the
    counts unknown (``per_node`` None), with a note.
    """
    outside = maybe = 0
    not_moved: Dict[str, int] = {}
    nodes = frozenset().union(*(seg[2] for seg in segments))
    try:
        census = _query(segments)
        if census.stray:
            not_moved = _retry_moves(census) if move else {NOT_ASKED: len(census.stray)}
        outside, maybe = _moved_outside(neighbours, nodes)
    except NumaSyscallError as exc:
        unknown = (
            f"the policy was applied, but where the pages are is unknown: {exc} "
            f"({fix(exc.errno or 0, 'move_pages')})"
        )
        return PageCount(None, 0, not_moved, outside, (unknown,))
    per_node = {n: c for n, c in census.counts.items() if n >= 0 and c > 0}
    start, end = segments[0][0], segments[-1][0] + segments[-1][1]
    unread = (census.counts[UNLOCATED], census.counts[_pages.UNSURE])
    settled = _settle((start, end - start), per_node, unread, nodes, move)
    for reason, count in settled.off.items():
        not_moved[reason] = not_moved.get(reason, 0) + count
    absent = settled.zero + sum(c for s, c in census.counts.items() if _pages.not_there(s))
    unchecked = 0
    if census.unchecked and _pages.balancing() is not False:
        unchecked = min(absent, census.unchecked)  # pages move_pages missed, none checked
        absent -= unchecked
    hidden = sum(unread) - settled.placed - settled.zero
    notes = _notes(nodes, not_moved, absent, outside)
    notes += _hidden_notes(
        hidden=hidden, placed=settled.placed, unchecked=unchecked, why=census.why, maybe=maybe
    )
    split = () if weights is None else split_problems(weights, per_node, run_pages)
    return PageCount(
        per_node,
        absent,
        not_moved,
        outside,
        notes,
        not_located=hidden + unchecked,
        split_problems=split,
    )


def cut_huge_pages(segments: Sequence[Segment]) -> List[int]:
    """The pages just before the boundaries between segments that fall inside a huge page.

    Present ones only (``move_pages``, and the page table for those it
    misses): a transparent huge page there would be migrated whole with
    either segment's pages, so :func:`split_at` splits it first.  Empty
    without transparent huge pages.
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


def _numa_maps_extra(
    start: int, length: int, per_node: Mapping[int, int]
) -> Optional[Dict[int, int]]:
    """The range's pages per node by ``/proc/self/numa_maps``, less ``per_node``; None: unknown.

    None too when the mappings stick out of the range, or hold fewer pages on
    a node than were located there one by one.
    """
    try:
        totals = _proc.mapping_node_pages(start, start + length)
    except PynumabindError:
        return None
    if totals is None or any(n not in totals for n in per_node):
        return None
    extra = {n: c - per_node.get(n, 0) for n, c in totals.items()}
    if any(c < 0 for c in extra.values()):
        return None
    return {n: c for n, c in extra.items() if c}


@dataclass(frozen=True)
class _Settled:
    """What became of the pages ``move_pages`` missed and the page table could not place."""

    placed: int = 0  # counted on their nodes, by numa_maps
    zero: int = 0  # UNSURE pages that are the shared zero page: not present
    off: Mapping[str, int] = field(default_factory=dict)  # placed ones off the nodes


def _settle(
    span: Tuple[int, int],
    per_node: Dict[int, int],
    unknown: Tuple[int, int],
    nodes: frozenset[int],
    move: bool,
) -> _Settled:
    """Settle the ``unknown`` (UNLOCATED, UNSURE) pages by ``/proc/self/numa_maps``.

    ``numa_maps`` counts every present page of the range's mappings on its
    node, and the shared zero page nowhere: the pages it holds beyond those
    located one by one are either all the unknown ones, or the UNLOCATED
    ones alone (the UNSURE ones being the zero page).  Anything else settles
    nothing.  With ``numa_maps`` silent, UNSURE pages are the zero page when
    NUMA balancing is off (nothing hides a page then).  ``numa_maps`` says a
    page's node, not which of a weighted layout's runs it lies in: those
    pages are off target only on a node outside all the runs' ``nodes``.
    """
    hidden, unsure = unknown
    extra = _numa_maps_extra(span[0], span[1], per_node) if hidden or unsure else None
    if extra is None or sum(extra.values()) not in (hidden + unsure, hidden):
        quiet = unsure and _pages.balancing() is False
        return _Settled(zero=unsure if quiet else 0)
    for node, count in extra.items():
        per_node[node] = per_node.get(node, 0) + count
    off = sum(c for n, c in extra.items() if n not in nodes)
    reasons = {NOT_MIGRATED if move else NOT_ASKED: off} if off else {}
    placed = sum(extra.values())
    return _Settled(placed=placed, zero=hidden + unsure - placed, off=reasons)


def _hidden_notes(
    *, hidden: int, placed: int, unchecked: int, why: str, maybe: int
) -> Tuple[str, ...]:
    """What a user should know about pages whose node ``move_pages`` would not say."""
    notes: List[str] = []
    if placed:
        notes.append(
            f"{page_count(placed)} present but hidden from move_pages by automatic NUMA "
            f"balancing: counted by node from {_proc.NUMA_MAPS}"
        )
    if hidden:
        notes.append(
            f"{page_count(hidden)} present but where is unknown: automatic NUMA balancing hid "
            "them from move_pages (Linux 6.1 to 6.4), and reading a page's frame needs "
            f"CAP_SYS_ADMIN, and {_proc.NUMA_MAPS} could not account for them (the range is "
            "not a run of whole mappings) (not_located)"
        )
    if unchecked:
        notes.append(
            f"{page_count(unchecked)} read as not present, and whether they are could not be "
            "checked: automatic NUMA balancing is on (or its switch is unreadable), which "
            f"hides pages from move_pages on Linux 6.1 to 6.4, and {_proc.PAGEMAP} could "
            f"not be read ({why}) (not_located)"
        )
    if maybe:
        notes.append(
            f"{page_count(maybe)} outside the range may have moved with it: where they were "
            "before was hidden by automatic NUMA balancing (reading it needs CAP_SYS_ADMIN)"
        )
    return tuple(notes)


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
