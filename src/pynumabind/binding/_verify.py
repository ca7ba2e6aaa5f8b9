"""Is a binding in force?  The one set of rules, for ``verify()`` and ``check``.

:meth:`Binding.verify() <pynumabind.binding.Binding.verify>` and
``pynumabind check`` (:mod:`pynumabind.cli._check`) both judge with the functions
here, so they cannot disagree: ``check`` adds an independent *read* of the thread masks
(``/proc/self/task/*/status`` instead of ``sched_getaffinity``), judged by the
same :func:`thread_problems`, never a second rule set.  Both reads, and the
allowed memory nodes, are :mod:`pynumabind._os.proc`'s; a failed read arrives here as a
typed error and becomes a problem or a note.

The rules:

* **Threads.**  Every live thread must run on the plan's CPUs, except one
  the binding left pinned elsewhere, or one started later that pinned itself
  to a mask other than the pre-bind one (deliberately pinned, as
  :mod:`pynumabind._os.threads` defines it).  A thread still on the pre-bind mask escaped
  the binding; a bound thread moved elsewhere was re-pinned after it.
* **Memory** (checked only on the binding thread, whose policy it is): the
  policy reads back as requested, and freshly touched pages land where it
  promises.  Which promise is the ``judge`` of the policy's row in the
  policy table (:mod:`pynumabind._mempolicy`; the mode the kernel holds
  names the row): inside the nodes (``INSIDE``: ``bind``); inside them and
  alternating when there are several (``SPREAD``: ``interleave``); inside
  the allowed nodes (``ALLOWED``: ``local``).  Under ``SPILL``
  (``preferred``), pages off the preferred nodes are a problem only while
  those nodes have free memory: below :data:`PREFERRED_SPILL_BYTES` free,
  spilling is the policy working as designed.  Under ``WEIGHTED``
  (``weighted-interleave``): inside the nodes, and each node's share of the
  pages in proportion to the weights, within the tolerance
  :func:`pynumabind._weights.split_problems` states (5 percentage points, or
  one of the kernel's runs of that node).  The weights judged are the plan's
  requested ones when it has some (a process follows the kernel's, so a
  mismatch the bind reported fails here too, saying so), else the kernel's,
  read now.  Enough pages are touched for the split to be judged: at least
  :data:`WEIGHTED_CYCLES` cycles of the kernel's weights, at most
  :data:`WEIGHTED_MAX_PAGES`, in small pages (``MADV_NOHUGEPAGE``: the
  kernel interleaves a huge page whole).
* A page ``move_pages`` cannot find (``-ENOENT``) is looked up in the page
  table (:func:`pynumabind._os.pages.locate`: ``/proc/self/pagemap``, which
  faults nothing in) and asked about again a few times: the kernel reports a
  page it is migrating at that instant (compaction, NUMA balancing) as
  absent, seen in the QEMU guest tests; and under automatic NUMA balancing,
  Linux 6.1 to 6.4 report a written page the balancer marked for a hinting
  fault as absent until it is touched again.  A test page present but whose
  node cannot be read (no ``CAP_SYS_ADMIN`` for its frame) is not judged:
  the check is made once more on fresh pages, and a note says how many were
  left unjudged.  None of them is ever "not present".

:func:`placement_problems` and :func:`thread_problems` are pure (values in,
values out); the readers around them are the imperative shell.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from .._mempolicy import (
    ALLOWED,
    INSIDE,
    MODE_NAMES,
    MODE_NUMBERS,
    SPILL,
    SPREAD,
    VERIFY_PAGES,
    WEIGHTED,
    row_of_mode,
)
from .._os import libnuma as _libnuma
from .._os import pages as _pages
from .._os import proc as _proc
from .._os import threads as _threads
from .._record import record
from .._text import format_ids
from .._weights import format_weights, proportional, split_problems
from ..errors import PynumabindError
from ..model import MemoryPolicy

if TYPE_CHECKING:  # pragma: no cover
    from . import Binding

__all__ = [
    "PREFERRED_SPILL_BYTES",
    "VERIFY_PAGES",
    "WEIGHTED_CYCLES",
    "WEIGHTED_MAX_PAGES",
    "VerifyResult",
    "expected_threads",
    "page_nodes",
    "placement_problems",
    "thread_problems",
    "verify_binding",
]

#: Under weighted interleave, at least this many cycles of the kernel's weights are touched...
WEIGHTED_CYCLES = 20
#: ... but no more than this many pages (16 MiB of 4 KiB pages).
WEIGHTED_MAX_PAGES = 4096
# Below this much free memory on a preferred node, spilling elsewhere is the
# policy working as designed, not a binding problem.
PREFERRED_SPILL_BYTES = 256 << 20
# How often, and how far apart, a page reported missing is asked about again.
_SETTLE_TRIES = 5
_SETTLE_PAUSE = 0.05  # seconds


@record(frozen=True)
class VerifyResult:
    """What :meth:`Binding.verify() <pynumabind.binding.Binding.verify>` found.

    ``ok`` is True when everything the binding claims to be in force is:
    each thread's affinity, the calling thread's policy, and where freshly
    touched pages landed.  ``problems`` explain each mismatch; ``notes`` say
    what could not be checked and why (not failures).  ``page_nodes`` is the
    node of each test page (negative: ``-errno``).
    """

    ok: bool
    problems: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    page_nodes: Tuple[int, ...] = ()
    threads_checked: int = 0
    memory_checked: bool = False

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        ok: bool,
        problems: Tuple[str, ...] = (),
        notes: Tuple[str, ...] = (),
        page_nodes: Tuple[int, ...] = (),
        threads_checked: int = 0,
        memory_checked: bool = False,
    ) -> None:
        self.__dict__.update(
            ok=ok,
            problems=problems,
            notes=notes,
            page_nodes=page_nodes,
            threads_checked=threads_checked,
            memory_checked=memory_checked,
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "page_nodes": list(self.page_nodes),
            "threads_checked": self.threads_checked,
            "memory_checked": self.memory_checked,
        }


# ------------------------------------------------------------------ threads


def expected_threads(binding: Binding) -> Tuple[Dict[int, str], frozenset[int], frozenset[int]]:
    """What the thread rule needs from a binding.

    Returns (names of the threads it bound, threads it left pinned, the
    pre-bind mask that means "not deliberately pinned").
    """
    bound = {r.tid: r.name for r in binding.threads if r.action is _threads.ThreadAction.BOUND}
    left = frozenset(
        r.tid for r in binding.threads if r.action is _threads.ThreadAction.LEFT_PINNED
    )
    reference: frozenset[int] = frozenset()
    for result in binding.threads:
        if result.tid == binding.thread_id and result.before is not None:
            reference = result.before
    return bound, left, reference


def thread_problems(
    cpus: frozenset[int],
    bound: Mapping[int, str],
    left_pinned: frozenset[int],
    reference: frozenset[int],
    masks: Mapping[int, Optional[frozenset[int]]],
) -> Tuple[List[str], int]:
    """Judge every live thread's mask (``masks``; ``None``: exited).

    Returns the problems and how many threads were checked.
    """
    problems: List[str] = []
    checked = 0
    for tid, mask in sorted(masks.items()):
        if mask is None or tid in left_pinned:
            continue
        if tid in bound:
            checked += 1
            if mask != cpus:
                problems.append(
                    f"thread {tid} ({bound[tid]}) runs on CPUs {format_ids(mask)}, "
                    f"expected {format_ids(cpus)}"
                )
        elif mask == cpus:
            checked += 1
        elif mask == reference:
            checked += 1
            problems.append(
                f"thread {tid} escaped the binding: it runs on CPUs {format_ids(mask)}, "
                f"the mask before binding, expected {format_ids(cpus)}"
            )
    return problems, checked


def _live_masks(
    read: Callable[[int], Optional[frozenset[int]]],
) -> Tuple[Dict[int, Optional[frozenset[int]]], List[str]]:
    masks: Dict[int, Optional[frozenset[int]]] = {}
    problems: List[str] = []
    try:
        tids = _proc.list_thread_ids()
    except PynumabindError as exc:
        return masks, [f"cannot list this process's threads: {exc}"]
    for tid in tids:
        try:
            masks[tid] = read(tid)
        except PynumabindError as exc:
            problems.append(f"cannot read thread {tid}'s affinity: {exc}")
    return masks, problems


# ------------------------------------------------------------------- memory


def placement_problems(
    mode: int,
    nodes: frozenset[int],
    found: Tuple[int, ...],
    *,
    free_bytes: Optional[int],
    allowed: Optional[frozenset[int]],
    weights: Optional[Mapping[int, int]] = None,
    run_pages: Optional[Mapping[int, int]] = None,
) -> Tuple[List[str], List[str]]:
    """Judge where test pages landed under policy ``mode`` on ``nodes``.

    ``free_bytes`` is the preferred nodes' free memory (``None``: unknown),
    ``allowed`` the memory nodes this process may use (``None``: unknown);
    under weighted interleave, ``weights`` are judged (``None``: unknown, the
    split is not judged) with ``run_pages`` the pages of one of the kernel's
    runs per node.  Returns (problems, notes).
    """
    problems, notes = _presence(found)
    placed = [node for node in found if node >= 0]
    outside = frozenset(node for node in placed if node not in nodes)
    judge = _judge_of(mode)
    if judge == INSIDE and outside:
        problems.append(
            f"pages landed on nodes {format_ids(outside)} outside the bound nodes "
            f"{format_ids(nodes)}"
        )
    elif judge == SPILL and outside:
        _judge_spill(nodes, outside, free_bytes, problems, notes)
    elif judge == SPREAD:
        problems.extend(_interleave_problems(nodes, placed, outside))
    elif judge == ALLOWED:
        problems.extend(_local_problems(placed, allowed))
    elif judge == WEIGHTED:
        problems.extend(
            _weighted_problems(
                nodes, placed, outside, weights=weights, run_pages=run_pages, notes=notes
            )
        )
    return problems, notes


def _presence(found: Tuple[int, ...]) -> Tuple[List[str], List[str]]:
    """(problems, notes) about test pages not there, or there with their node unknown."""
    problems: List[str] = []
    notes: List[str] = []
    missing = [i for i, node in enumerate(found) if _pages.not_there(node)]
    if missing:
        problems.append(f"test pages {missing} not present after touching them")
    unlocated = [i for i, node in enumerate(found) if _pages.unknown(node)]
    if unlocated:
        notes.append(
            f"test pages {unlocated} not judged: present, but automatic NUMA balancing hid "
            "their node from move_pages and reading their frame needs CAP_SYS_ADMIN"
        )
    return problems, notes


def _judge_of(mode: int) -> Optional[str]:
    """How pages are judged under kernel mode ``mode``: its policy's row says."""
    row = row_of_mode(mode)
    return None if row is None else row.judge


def _local_problems(placed: List[int], allowed: Optional[frozenset[int]]) -> List[str]:
    """Local: pages anywhere inside the allowed nodes (unknown: anywhere)."""
    stray = sorted(set(placed) - (frozenset(placed) if allowed is None else allowed))
    if stray:
        return [f"pages landed on nodes {stray} outside the allowed memory nodes"]
    return []


def _judge_spill(
    nodes: frozenset[int],
    outside: frozenset[int],
    free_bytes: Optional[int],
    problems: List[str],
    notes: List[str],
) -> None:
    """Preferred: pages elsewhere are fine only when the preferred nodes are nearly full."""
    if free_bytes is None or free_bytes >= PREFERRED_SPILL_BYTES:
        problems.append(
            f"pages landed on nodes {format_ids(outside)} although the preferred "
            f"nodes {format_ids(nodes)} have free memory"
        )
    else:
        notes.append("pages spilled off the preferred nodes, which are nearly full")


def _interleave_problems(
    nodes: frozenset[int], placed: List[int], outside: frozenset[int]
) -> List[str]:
    if outside:
        return [
            f"interleaved pages landed on nodes {format_ids(outside)} outside {format_ids(nodes)}"
        ]
    if len(nodes) > 1 and len(placed) > 1 and len(set(placed)) < 2:
        return [f"interleaved pages did not alternate: all on node {placed[0]}"]
    return []


def _weighted_problems(
    nodes: frozenset[int],
    placed: List[int],
    outside: frozenset[int],
    *,
    weights: Optional[Mapping[int, int]],
    run_pages: Optional[Mapping[int, int]],
    notes: List[str],
) -> List[str]:
    """Weighted interleave: inside the nodes, and split in proportion to ``weights``."""
    if outside:
        return [
            f"weighted-interleaved pages landed on nodes {format_ids(outside)} outside "
            f"{format_ids(nodes)}"
        ]
    if weights is None:
        notes.append("the split of the pages was not judged: no weights known for it")
        return []
    counts: Dict[int, int] = {}
    for node in placed:
        counts[node] = counts.get(node, 0) + 1
    return list(split_problems(weights, counts, run_pages))


def _touched_page_nodes(pages: int, small: bool = False) -> Tuple[int, ...]:
    """Fault in ``pages`` fresh pages under the current policy; where are they?

    ``small``: in small pages only (``MADV_NOHUGEPAGE``), each placed on its
    own.  Made once more on fresh pages when some are present but unlocated
    (the balancer marked them between the touch and the look: rare).
    """
    found: Tuple[int, ...] = ()
    for _ in range(2):
        size = mmap.PAGESIZE
        scratch = mmap.mmap(-1, max(pages, 1) * size)
        try:
            if small:
                try:
                    _libnuma.madvise_buffer(scratch, _libnuma.MADV_NOHUGEPAGE)
                except _libnuma.ERRORS:
                    pass  # no THP in this kernel (EINVAL): the pages are small anyway
            for index in range(max(pages, 1)):
                scratch[index * size] = 1
            found = page_nodes(scratch)
        finally:
            scratch.close()
        if not any(_pages.unknown(node) for node in found):
            break
    return found


def page_nodes(region: mmap.mmap) -> Tuple[int, ...]:
    """Where each page of ``region`` is: ``move_pages``, and the page table for those it misses.

    A page not found is asked about again a few times (:data:`_SETTLE_TRIES`,
    :data:`_SETTLE_PAUSE` apart): one caught mid-migration is found then.
    """
    size = mmap.PAGESIZE
    start = _address_of(region)
    addresses = list(range(start - start % size, start + len(region), size))
    found = _pages.locate(addresses, _libnuma.page_nodes(region)).status
    for _ in range(_SETTLE_TRIES - 1):
        if not any(_pages.not_there(node) for node in found):
            break
        time.sleep(_SETTLE_PAUSE)
        found = _pages.locate(addresses, _libnuma.page_nodes(region)).status
    return found


def _address_of(region: mmap.mmap) -> int:
    """The address of ``region``'s first byte."""
    anchor = ctypes.c_char.from_buffer(region)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def _free_bytes(nodes: frozenset[int]) -> Optional[int]:
    total = 0
    for node in nodes:
        try:
            total += _libnuma.node_memory(node)[1]
        except _libnuma.ERRORS:
            return None
    return total


def _mems_allowed() -> Optional[frozenset[int]]:
    try:
        return _proc.mems_allowed()
    except _libnuma.ERRORS:
        return None


class _Weighing:
    """What the weighted judge needs: the weights judged, the kernel's runs, the pages to touch."""

    def __init__(
        self, nodes: frozenset[int], requested: Optional[Mapping[int, int]], pages: int
    ) -> None:
        from .._os import weights as _system

        self.weights: Optional[Mapping[int, int]] = requested
        self.runs: Optional[Dict[int, int]] = None
        self.pages = pages
        self.note: Optional[str] = None
        try:
            found = _system.read_weights()
        except PynumabindError as exc:
            self.note = f"the kernel's interleave weights unreadable: {exc}"
            return
        kernel = {n: 1 for n in nodes} if found is None else found.for_nodes(nodes)
        self.runs = kernel  # the kernel puts w consecutive pages on a node of weight w
        self.pages = min(max(pages, WEIGHTED_CYCLES * sum(kernel.values())), WEIGHTED_MAX_PAGES)
        if requested is None:
            self.weights = kernel
        elif not proportional(requested, {n: kernel.get(n, 1) for n in requested}):
            self.note = (
                f"the split is judged against the requested weights {format_weights(requested)}; "
                f"the kernel's, which the policy follows, are {format_weights(kernel)}"
            )


def _verify_memory(
    mode: int,
    nodes: frozenset[int],
    pages: int,
    problems: List[str],
    notes: List[str],
    *,
    requested: Optional[Mapping[int, int]] = None,
) -> Tuple[Tuple[int, ...], bool]:
    """Check the calling thread's policy and where new pages land."""
    try:
        now = _libnuma.get_mempolicy()
    except _libnuma.ERRORS as exc:
        notes.append(f"memory policy not readable: {exc}")
        return (), False
    if now.mode != mode or (nodes and now.nodes != nodes):
        problems.append(
            f"memory policy is {now.kernel_policy} on nodes {format_ids(now.nodes)}, "
            f"expected {MODE_NAMES.get(mode, str(mode))} on {format_ids(nodes)}"
        )
    judge = _judge_of(mode)
    weighing = _Weighing(nodes, requested, pages) if judge == WEIGHTED else None
    if weighing is not None and weighing.note is not None:
        notes.append(weighing.note)
    try:
        if weighing is not None:
            found = _touched_page_nodes(weighing.pages, small=True)
        else:
            found = _touched_page_nodes(pages)
    except _libnuma.ERRORS as exc:
        notes.append(f"page placement not checked: {exc}")
        return (), False
    free = _free_bytes(nodes) if judge == SPILL else None
    placed_problems, placed_notes = placement_problems(
        mode,
        nodes,
        found,
        free_bytes=free,
        allowed=_mems_allowed(),
        weights=None if weighing is None else weighing.weights,
        run_pages=None if weighing is None else weighing.runs,
    )
    problems.extend(placed_problems)
    notes.extend(placed_notes)
    return found, True


# -------------------------------------------------------------------- entry


def verify_binding(binding: Binding, pages: int = VERIFY_PAGES) -> VerifyResult:
    """Check that ``binding`` is in force; never raises on a mismatch."""
    plan = binding.plan
    if plan is None or not binding.applied:
        return VerifyResult(True, (), ("nothing was applied; nothing to verify",))
    problems: List[str] = []
    notes: List[str] = []
    if binding.restored:
        notes.append("binding was restored; checked against the plan anyway")
    threads_checked = 0
    if plan.cpus is not None:
        masks, problems = _live_masks(_proc.thread_affinity)
        bound, left, reference = expected_threads(binding)
        found, threads_checked = thread_problems(plan.cpus, bound, left, reference, masks)
        problems.extend(found)
    page_nodes: Tuple[int, ...] = ()
    memory_checked = False
    if binding.memory_applied and binding.kernel_policy is not None:
        if threading.get_native_id() != binding.thread_id:
            notes.append(
                f"memory not checked: the policy belongs to thread {binding.thread_id}, "
                "verify() was called from another thread"
            )
        else:
            page_nodes, memory_checked = _verify_memory(
                MODE_NUMBERS[binding.kernel_policy],
                binding.policy_nodes,
                pages,
                problems,
                notes,
                requested=plan.weights,
            )
    elif plan.policy is not MemoryPolicy.NONE:
        notes.append("memory policy was not applied (see Binding.skipped); not checked")
    return VerifyResult(
        ok=not problems,
        problems=tuple(problems),
        notes=tuple(notes),
        page_nodes=page_nodes,
        threads_checked=threads_checked,
        memory_checked=memory_checked,
    )
