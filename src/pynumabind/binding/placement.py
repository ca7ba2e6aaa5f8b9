"""Place the buffers that carry GPU traffic: :func:`bind_memory` and :func:`memory_on`.

A process's memory policy decides where its *ordinary* allocations land.
The memory that carries host<->GPU copies is often something else: pinned
staging buffers, CPU KV-cache and weight-offload pools, the blocks of a
caching host allocator.  Whichever thread first touches those places them.
Two tools put them on the node that suits the GPU:

* :func:`bind_memory` (an existing buffer): applies ``mbind`` to the pages
  the buffer covers and, with ``move=True``, moves the pages that already
  exist; it returns a :class:`MemoryPlacement`, what the kernel reports
  afterwards.
* :func:`memory_on` (memory about to be allocated): a context manager that
  sets the calling thread's policy for the block and puts the previous one
  back afterwards, after an exception too.  This is how page-locked
  (pinned) memory is placed: it cannot be moved once pinned, and CUDA's
  pinned allocator touches its pages in the calling thread.

Rules
-----
**Which node.**  Exactly one of ``node=`` and ``gpu=``.  ``node`` is a node
id (or a node list, ``"0-1"`` or a set, for ``interleave``); it must exist,
have memory, and be among the process's allowed memory nodes (its
``cpuset.mems``), else :class:`~pynumabind.errors.PlanError` says which rule
it broke (:class:`~pynumabind.errors.UnknownIdError`, a PlanError, for a wrong
id: no such node, or a node without memory; the planner's ``interleave_nodes``
follows the same rule, written once in ``planner._request.check_memory_nodes``).
``gpu=i`` (the process's GPU ordinal: ``torch.cuda.current_device()``,
``CUDA_VISIBLE_DEVICES`` applied) means *the memory a plan for a rank on GPU
i binds to*, decided by the planner's one owner of GPU locality
(:mod:`pynumabind.planner._place`) and its memory rules
(:mod:`pynumabind.planner._memory`), not re-derived here: the GPU's CPU
node, and that node's memory (a memory-less CPU node is replaced by the
nearest allowed node with memory).  On Grace (GH200/GB200) NVML names the
GPU's own HBM as a CPU-less NUMA node; host buffers still go to the Grace
CPU node's LPDDR next to it, as a plan's memory does, not into the HBM node
(pass ``node=`` to place a buffer there deliberately).  A GPU whose node is
unknown is a PlanError: there is nothing to place by.  The reasons are in
the result (``reasons``).

**Which policy.**  ``"bind"`` (``MPOL_BIND``: only these nodes, the kernel
reclaims or fails rather than spill), ``"preferred"`` (``MPOL_PREFERRED``,
``MPOL_PREFERRED_MANY`` for several nodes where the kernel has it: these
nodes first, spill over instead of failing) or ``"interleave"``
(``MPOL_INTERLEAVE``, page by page over the nodes).  ``local`` and ``none``
place nothing and are a ConfigError here.

**Which pages.**  ``mbind`` works on whole pages, so the range is aligned
*outward*: from the start of the page holding the buffer's first byte to the
end of the page holding its last.  Every byte of the buffer then lies on the
node (inward alignment would leave a buffer smaller than a page unplaced and
the partial first and last pages of, say, a ``malloc``-ed numpy array on
whatever node they were); the cost is that the at most two edge pages are
shared with whatever lies next to the buffer, and those neighbours' bytes
move and get the policy too.  ``mbind`` also splits the mapping at the range
ends (each call may add up to two entries to ``/proc/self/maps``; the limit
is ``vm.max_map_count``), and the policy stays on those addresses until they
are unmapped (a ``malloc`` heap reuses them).

**Huge pages.**  A transparent huge page is counted as its 4 KiB pages.
The kernel migrates a huge page whole: left alone, binding an 8 KiB range
inside a 2 MiB huge page would move the other 510 pages with it, and
binding its two halves to two nodes one after the other would leave both on
the second.  So, when moving, where pages outside the range share the
huge-page-aligned block of one of its edges (the size the kernel names in
``/sys/kernel/mm/transparent_hugepage/hpage_pmd_size``) and are present,
the policy is set first without moving (``mbind`` splits the mapping at the
range's ends, so ``khugepaged`` cannot make a huge page across them again:
seen on Linux 6.18 when the split came first), then each such edge's huge
page is split with ``madvise(MADV_COLD)`` on the edge page (it splits a
huge page it covers in part; the one page is also marked cold, a reclaim
hint), then the pages are moved.  Neighbours stay where they are.  Where the
split cannot be done (an ``mlock``-ed huge page: ``MADV_COLD`` refuses
locked memory; one shared with another process; Linux before 5.4) the
kernel moves the huge page whole, and the result says how many pages
outside the range moved (``moved_outside``, from the neighbours' nodes
before and after, by ``move_pages``; a note says why).  ``complete`` is
about the range only.  Tested on a real kernel in the QEMU guest (Linux
6.1): the 8 KiB range, the two halves, and an ``mlock``-ed huge page that
moves whole and is counted.  ``hugetlbfs`` mappings need huge-page-aligned
ranges and are not supported.

**Moving.**  ``move=True`` passes ``MPOL_MF_MOVE``: pages mapped only by this
process and not already on one of the policy's nodes move (so interleaving
pages over nodes they already lie on does not re-spread them).
``MPOL_MF_MOVE_ALL`` (pages shared with other processes too) needs
``CAP_SYS_NICE`` and is not used; such pages stay and are reported with
``EACCES``.  Pages not yet touched (``-ENOENT``) are no failure: they
will be allocated under the policy when first touched, and are counted as
``not_present``.  Afterwards each page is asked where it is
(``move_pages`` with no target).  A page still off the nodes gets one more
explicit ``move_pages`` to the node (one-node targets), which either moves
it or says why not: a per-page errno (``EBUSY``: busy or locked in place;
``EACCES``: shared; ``ENOMEM``: the node is full; ...; when the kernel
refuses the whole call, as Linux does with ``ENOMEM`` once the node is full
after moving what fitted, each page still off the nodes gets that errno,
the counts are kept and a note says "node N is full"), or
:data:`NOT_MIGRATED` for pages the kernel tried and failed to migrate,
which it reports only as a count (an extra reference holds them: memory
pinned by ``cudaHostAlloc``/``cudaHostRegister``, RDMA or io_uring).  A page
that was present but is not found after that move (caught mid-migration) is
asked for again, up to three times; one still not found is reported as
:data:`VANISHED`, never as "not present" (it was written).  Likewise, where
some pages of a range are found and some not, the missing ones are asked for
twice more (1 ms, then 2 ms later) before they count as not present: a page
whose transparent huge page is being split, or that the kernel's NUMA
balancing is migrating, reads as not present for that moment.
**Page-locked (pinned) memory cannot be moved**; the result says so and
points to :func:`memory_on`.  ``mlock`` alone does not prevent migration
(Linux migrates locked pages); pinning for DMA does.  Both are tested on a
real kernel in the QEMU guest (Linux 6.1): ``mlock``-ed pages move, pages
pinned by io_uring's buffer registration (the same long-term pin
``cudaHostRegister`` takes) stay and are reported as :data:`NOT_MIGRATED`.  ``move=False`` only
sets the policy for pages not yet allocated; pages elsewhere are reported
under :data:`NOT_ASKED`.

**Buffers.**  Anything that exports a writable buffer whose bytes are one
range (``bytearray``, ``mmap``, ``memoryview``, a numpy array,
``array.array``), in any layout: C or Fortran order, negative strides (a
reversed view starts its memory at its last element); the span is worked
out from the shape and strides, and its address read through CPython's
buffer API when the layout is not C order.  A strided view with gaps
between its elements is refused.  A CPU tensor, duck-typed by
``data_ptr()``, ``numel()`` and ``element_size()``: its span from
``size()``/``stride()`` when it has them, negative strides included (every
byte from its lowest to its highest element, gaps and all); torch is never
imported here.  Or an explicit ``(address, length)`` tuple, which the caller
must keep mapped.  A span must end, page-aligned, below ``2**64`` (``mbind``'s
end would wrap).  A buffer object is held exported for the whole call, so a
``bytearray`` cannot be resized under it.

**Errors.**  Not a buffer, one with gaps, a GPU tensor, or a tensor-like
object whose ``numel()``/``size()``/``stride()``/``element_size()`` are not
integers or do not agree: :class:`NotABufferError`.  A read-only buffer
(``bytes``, a read-only ``mmap``): :class:`ReadOnlyBufferError` (its pages
are often shared, a file's page cache, and are no staging buffer).  Both
``node`` and ``gpu``, neither, a bad policy name, a zero length, a span that
is no memory range (a negative address; a huge ``numel`` or an address that
reaches ``2**64``): :class:`~pynumabind.errors.ConfigError` naming the span.
A node that does not exist, has no memory or is outside the allowed memory
nodes, or an unknown GPU: :class:`~pynumabind.errors.PlanError` (the wrong
ids among them: its subclass :class:`~pynumabind.errors.UnknownIdError`).  The kernel
refusing (``EPERM`` under a container's seccomp profile, ``EFAULT`` for an
address range with an unmapped hole, ``EINVAL``): :class:`PlacementSyscallError`
(a :class:`~pynumabind.errors.NumaSyscallError`) naming the call, the range,
the errno and what to do.  When only the read-back (``move_pages``) is
denied, the policy was applied and the result says the page counts are
unknown instead of raising.

**What memory_on guarantees.**  A memory policy belongs to a thread, not
to a block of code; :func:`memory_on` keeps each thread's blocks in force
(innermost last) and puts back, when the last of them ends, the policy from
before the first.  Its undo is recorded before ``set_mempolicy`` is called,
as a bind's journal is.

* *Nesting, exceptions*: the policy from before each block comes back when
  it ends, after an exception too.
* *Coroutines and generators*: while a block is suspended at an ``await``
  or ``yield``, its policy is still the thread's, so whatever the thread
  runs meanwhile (other asyncio tasks, the generator's caller) allocates
  under it.  Keep the block synchronous: allocate inside it, and leave it
  before awaiting.  Blocks may still end out of order (two tasks each in a
  block, the first leaving first; a suspended generator closed inside its
  caller's block): the one leaving hands what it would have put back to the
  block entered after it, the thread keeps the innermost block's policy
  until that ends, and then the policy from before both comes back; one
  :class:`RuntimeWarning` says so.  A generator closed, finished or freed
  on its own thread ends its block.
* *KeyboardInterrupt* (or any exception) landing anywhere in ``__enter__``
  or ``__exit__``, after ``set_mempolicy`` or before the restore, rolls the
  block back.  One landing on the very first instruction of ``__exit__``,
  before any of it runs, cannot be caught there; the block then ends when
  its object is freed, which for ``with memory_on(...):`` is when the
  interrupt's traceback is (a finalizer, armed only while a block is in
  force).  Tested at every interpreter check point of a block, and with
  real SIGINTs at random moments (``tests/binding/test_placement.py``).
* *fork*: a child forked inside a block has one thread, the forking
  thread's copy, with its policy and its blocks; leaving the block there
  puts the previous policy back, in the child as in the parent.
* *A cpuset change*: when the cpuset's ``mems`` change during a block so
  that none of the saved policy's nodes is allowed any more, the kernel
  refuses it (``EINVAL``).  The nearest policy it accepts is put back: the
  same mode and flags over the allowed part of the saved nodes, else over
  the nodes the kernel's own remapping gives them (what the saved policy
  would have become had it been in force: the i-th allowed node before
  becomes the i-th, modulo their count, after), else the default policy;
  one :class:`RuntimeWarning` names the policy refused, the allowed nodes
  before and now, and what was put back.  The block's policy is never left
  in place (unless the kernel refuses even the default: a seccomp filter
  installed inside the block, a :class:`PlacementSyscallError`).  Where only
  some saved nodes are gone, the kernel itself keeps the allowed part.
* *Another thread*: a block left on a thread other than the one that
  entered it is a ConfigError naming both; a policy can only be put back by
  its own thread.

Nothing here changes another thread, and :func:`bind_memory` changes no
thread state at all; :func:`memory_on` changes only the calling thread's
policy, for the block.  Threads started inside the block inherit the policy
and keep it.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import mmap
import operator
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    Union,
)

from .._mempolicy import NODELESS_MODES, POLICIES, placing_policies
from .._os import libnuma as _libnuma
from .._os import proc as _proc
from ..errors import (
    ConfigError,
    NotABufferError,
    NumaSyscallError,
    PlacementSyscallError,
    PlanError,
    ReadOnlyBufferError,
    UnknownIdError,
    format_ids,
)
from ..model import MemoryPolicy
from ..planner._memory import choose_mems
from ..planner._place import RankState, place_gpu
from ..planner._request import check_memory_nodes

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = [
    "NOT_ASKED",
    "NOT_MIGRATED",
    "NOT_PRESENT",
    "VANISHED",
    "MemoryOn",
    "MemoryPlacement",
    "NotABufferError",
    "PlacementSyscallError",
    "ReadOnlyBufferError",
    "bind_memory",
    "memory_on",
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
_PINNED_REASONS = frozenset({NOT_MIGRATED, "EBUSY"})

_PINNED_HINT = (
    "page-locked (pinned) memory (cudaHostAlloc, cudaHostRegister, RDMA or io_uring "
    "registration) cannot be moved once pinned: allocate it inside "
    "'with pynumabind.memory_on(...)', or bind_memory the buffer before pinning it "
    "(cudaHostRegister after)"
)


# ------------------------------------------------------------------ errors


def _fix(err: int, what: str) -> str:
    if err == errno.EPERM:
        return (
            f"EPERM from {what} usually means a container seccomp profile: Docker's default "
            "profile allows mbind, set_mempolicy and get_mempolicy only with CAP_SYS_NICE; run "
            "the container with '--cap-add SYS_NICE' (Kubernetes: securityContext.capabilities."
            "add: [SYS_NICE]) or with a seccomp profile that allows them"
        )
    if err == errno.EFAULT:
        return "part of the address range is not mapped in this process (freed, or a bad address)"
    if err == errno.EINVAL:
        return (
            "the kernel rejected the request: a node outside this process's allowed memory "
            "nodes, or a range it cannot take (hugetlbfs needs huge-page alignment)"
        )
    if err == errno.ENOMEM:
        return "the kernel ran out of memory for the request (vm.max_map_count reached?)"
    return "see the error"


def _refused(exc: NumaSyscallError, operation: str, nodes: Optional[AbstractSet[int]]) -> Exception:
    err = exc.errno if exc.errno is not None else 0
    call = operation.partition("(")[0].strip()
    return PlacementSyscallError(err, operation, nodes, _fix(err, call))


@dataclass(frozen=True)
class _Target:
    """Where memory goes: the ``MPOL_*`` mode and nodes, and why."""

    policy: MemoryPolicy
    mode: int
    nodes: frozenset[int]
    reasons: Tuple[str, ...]


def _parse_policy(policy: Union[str, MemoryPolicy]) -> MemoryPolicy:
    """A policy that places a buffer (its row in the policy table says so)."""
    choices = ", ".join(placing_policies())
    try:
        parsed = MemoryPolicy(policy)
    except ValueError:
        raise ConfigError(
            f"invalid placement policy {policy!r}; choose one of: {choices}"
        ) from None
    if not POLICIES[parsed].places:
        raise ConfigError(
            f"placement policy {parsed.value!r} places nothing on a node; choose one of: {choices}"
        )
    return parsed


def _node_id(value: object, what: str) -> int:
    """An integer id (an int, or a numpy integer); bool and anything else are ConfigErrors."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ConfigError(f"{what} must be an integer id, not {value!r:.40}")
    return operator.index(value)


def _parse_nodes(node: Union[int, str, Iterable[int]]) -> frozenset[int]:
    if isinstance(node, str):
        from ..cpulist import parse_nodelist

        nodes = parse_nodelist(node)
    elif isinstance(node, bool) or hasattr(node, "__index__"):
        nodes = frozenset({_node_id(node, "node")})
    else:
        try:
            items = list(node)
        except TypeError:
            raise ConfigError(
                f"node must be a node id or a node list, not {type(node).__name__}"
            ) from None
        nodes = frozenset(_node_id(n, "each node of a node list") for n in items)
    if not nodes:
        raise ConfigError("node list is empty")
    negative = [n for n in nodes if n < 0]
    if negative:
        raise UnknownIdError(f"node {min(negative)} does not exist (node ids are >= 0)")
    return nodes


def _gpu_nodes(
    topology: Topology, gpu: int, policy: MemoryPolicy
) -> Tuple[frozenset[int], Tuple[str, ...]]:
    """GPU ``gpu``'s memory nodes by the planner's rules, and its reasons."""
    gpu = _node_id(gpu, "gpu (a GPU index)")
    count = len(topology.gpus)
    if not 0 <= gpu < count:
        seen = f"GPUs 0-{count - 1}" if count > 1 else ("GPU 0" if count else "no GPU")
        raise UnknownIdError(f"no GPU {gpu}: this process sees {seen}")
    chosen = topology.gpus[gpu]
    state = RankState(0, chosen)  # positional: rank, then the rank's GPU
    place_gpu(topology, state, chosen)
    mems, planned = choose_mems(
        topology, state, policy=policy, interleave_nodes=None, gpu_memory=False, nodes_given=False
    )
    if not mems or planned is MemoryPolicy.NONE:
        raise PlanError(
            f"GPU {gpu}'s memory node is unknown ({'; '.join(state.reasons)}); give node= instead"
        )
    return mems, tuple(state.reasons)


def _machine(topology: Optional[Topology], gpus: bool) -> Topology:
    """The machine ``node``/``gpu`` are checked against: given, or as plans get it."""
    if topology is not None:
        return topology
    from ..discovery import resolve_topology
    from ..model import Detail

    # NVML only when a GPU is named: a node needs the nodes and allowed sets alone.
    return resolve_topology(detail=Detail.NODES, reuse=True, use_nvml=gpus)


def _target(
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    policy: Union[str, MemoryPolicy],
    topology: Optional[Topology],
) -> _Target:
    """Check the arguments and resolve them to a mode and nodes (see the module docstring)."""
    if node is not None and gpu is not None:
        raise ConfigError(f"give node= or gpu=, not both (node={node!r}, gpu={gpu!r})")
    if node is None and gpu is None:
        raise ConfigError("give node= (a NUMA node) or gpu= (place by that GPU's node)")
    parsed = _parse_policy(policy)
    if node is not None:
        nodes = _parse_nodes(node)
        check_memory_nodes(_machine(topology, gpus=False), nodes, "node=")
        reasons: Tuple[str, ...] = (f"node {format_ids(nodes)} (given)",)
    else:
        assert gpu is not None
        nodes, reasons = _gpu_nodes(_machine(topology, gpus=True), gpu, parsed)
    # The mode is the policy table's, as for a bind (preferred on several nodes
    # needs MPOL_PREFERRED_MANY, probed; its fallback where the kernel lacks it).
    mode, kept, note = POLICIES[parsed].kernel_request(nodes, _libnuma.supports_mode)
    assert mode is not None
    if note:
        reasons = (*reasons, note)
    return _Target(parsed, mode, kept, reasons)


# ----------------------------------------------------------------- buffers


@dataclass(frozen=True)
class _Span:
    address: int
    length: int
    kind: str


def _is_tensor(obj: object) -> bool:
    return all(callable(getattr(obj, name, None)) for name in ("data_ptr", "numel", "element_size"))


#: One past the last byte address: a range must end at or below it (mbind's end wraps past it).
_ADDRESS_END = 1 << 64


def _checked(address: int, length: int, kind: str, what: str) -> _Span:
    """A span that is a possible memory range, else a ConfigError naming why not."""
    if length <= 0:
        raise ConfigError(f"zero-length buffer ({what}): nothing to place")
    if address < 0:
        raise ConfigError(f"{what} starts at a negative address ({address}): not a memory range")
    page = mmap.PAGESIZE
    end = -(-(address + length) // page) * page
    if end >= _ADDRESS_END:
        raise ConfigError(
            f"{what} is not a memory range: {length} bytes from {address:#x}, page-aligned, "
            f"reach {end:#x}, beyond the 64-bit address space (the kernel takes ranges that "
            f"end below {_ADDRESS_END:#x})"
        )
    return _Span(address, length, kind)


def _extent(shape: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> Tuple[int, int]:
    """(first, end) byte offsets of every element from the element at index 0.

    Negative strides reach below the first element: a reversed view starts
    its memory at its last element.
    """
    first = sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    last = sum(max(0, (d - 1) * s) for d, s in zip(shape, strides))
    return first, last + itemsize


def _ask(tensor: Any, name: str, kind: str) -> Any:
    try:
        return getattr(tensor, name)()
    except Exception as exc:  # a duck-typed object's own failure, named
        raise NotABufferError(f"{kind}.{name}() failed: {type(exc).__name__}: {exc}") from None


def _ints(values: Any, name: str, kind: str) -> Tuple[int, ...]:
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise NotABufferError(
            f"{kind}.{name}() returned {values!r:.60}, not integers: not a tensor bind_memory "
            "can address"
        ) from None


def _int(tensor: Any, name: str, kind: str) -> int:
    value = _ask(tensor, name, kind)
    try:
        return operator.index(value)
    except TypeError:
        raise NotABufferError(
            f"{kind}.{name}() returned {value!r:.60}, not an integer: not a tensor bind_memory "
            "can address"
        ) from None


def _tensor_span(tensor: Any) -> _Span:
    kind = type(tensor).__name__
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device != "cpu" or getattr(tensor, "is_cuda", False) is True:
        raise NotABufferError(
            f"a {kind} on device {device!r}: its memory is the device's; bind_memory places "
            "host memory (a CPU tensor, pinned or not)"
        )
    count = _int(tensor, "numel", kind)
    if count <= 0:
        raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
    itemsize = _int(tensor, "element_size", kind)
    address = _int(tensor, "data_ptr", kind)
    if itemsize <= 0:
        raise NotABufferError(f"{kind}.element_size() is {itemsize}: not a tensor")
    first, end = 0, count * itemsize
    if callable(getattr(tensor, "size", None)) and callable(getattr(tensor, "stride", None)):
        dims = _ints(_ask(tensor, "size", kind), "size", kind)
        steps = _ints(_ask(tensor, "stride", kind), "stride", kind)
        if len(dims) != len(steps):
            raise NotABufferError(
                f"{kind}.size() has {len(dims)} dimensions and stride() {len(steps)}: "
                "its memory cannot be worked out"
            )
        if any(d <= 0 for d in dims):
            raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
        first, end = _extent(dims, tuple(s * itemsize for s in steps), itemsize)
    what = f"a {kind} of {count} elements of {itemsize} bytes at {address:#x}"
    return _checked(address + first, end - first, kind, what)


def _explicit_span(pair: Tuple[Any, ...]) -> _Span:
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise NotABufferError(f"a tuple must be (address, length) of two ints, not {pair!r:.80}")
    address, length = pair
    what = f"(address, length) = ({address:#x}, {length})"
    if length < 0:
        raise ConfigError(f"{what} is not a memory range: a negative length")
    return _checked(address, length, "(address, length)", what)


def _strided_address(view: memoryview) -> int:
    """The address of element 0 of a buffer that is not C-contiguous (CPython's buffer API).

    cffi and ctypes read a buffer's address only through a C-contiguous
    request; a Fortran-ordered or reversed one is asked for with its strides.
    The view passed is held open by the caller, so the address stays valid.
    """
    import ctypes

    class PyBuffer(ctypes.Structure):
        _fields_ = [
            ("buf", ctypes.c_void_p),
            ("obj", ctypes.c_void_p),
            ("len", ctypes.c_ssize_t),
            ("itemsize", ctypes.c_ssize_t),
            ("readonly", ctypes.c_int),
            ("ndim", ctypes.c_int),
            ("format", ctypes.c_char_p),
            ("shape", ctypes.c_void_p),
            ("strides", ctypes.c_void_p),
            ("suboffsets", ctypes.c_void_p),
            ("internal", ctypes.c_void_p),
        ]

    api = ctypes.pythonapi
    get, release = api.PyObject_GetBuffer, api.PyBuffer_Release
    get.argtypes = [ctypes.py_object, ctypes.POINTER(PyBuffer), ctypes.c_int]
    get.restype = ctypes.c_int
    release.argtypes = [ctypes.POINTER(PyBuffer)]
    release.restype = None
    info = PyBuffer()
    pybuf_strides_writable = 0x0018 | 0x0001  # PyBUF_STRIDES | PyBUF_WRITABLE
    if get(view, ctypes.byref(info), pybuf_strides_writable) != 0:  # pragma: no cover
        raise BufferError("PyObject_GetBuffer failed")  # ctypes raises the set error first
    try:
        return int(info.buf or 0)
    finally:
        release(ctypes.byref(info))


class _Exported:
    """A buffer object held exported (a memoryview open) while its pages are bound."""

    def __init__(self, buffer: object) -> None:
        self.view: Optional[memoryview] = None
        self.pointer: Any = None
        try:
            self.span = self._open(buffer)
        except BaseException:
            self.close()
            raise

    def _open(self, buffer: object) -> _Span:
        kind = type(buffer).__name__
        try:
            view = memoryview(buffer)  # type: ignore[arg-type]
        except TypeError:
            raise NotABufferError(
                f"{kind} is not a buffer: give an object with a writable buffer (bytearray, "
                "mmap, numpy array, array.array, memoryview), a CPU tensor or (address, length)"
            ) from None
        except ValueError as exc:  # a closed mmap
            raise NotABufferError(f"{kind} cannot be read as a buffer: {exc}") from None
        self.view = view
        if view.readonly:
            raise ReadOnlyBufferError(
                f"{kind} is read-only: bind_memory places writable buffers (staging buffers, "
                "pools); a read-only buffer's pages are often shared (a file's page cache)"
            )
        if view.nbytes == 0:
            raise ConfigError(f"zero-length buffer (an empty {kind}): nothing to place")
        if view.c_contiguous:
            ffi = _libnuma._ffi()
            self.pointer = ffi.from_buffer(view, require_writable=True)
            return _Span(int(ffi.cast("uintptr_t", self.pointer)), view.nbytes, kind)
        shape, strides = tuple(view.shape or ()), tuple(view.strides or ())
        first, end = _extent(shape, strides, view.itemsize)
        if end - first != view.nbytes:
            raise NotABufferError(
                f"{kind} is not contiguous (shape {shape}, strides {strides}: its "
                f"{view.nbytes} bytes are spread over {end - first}): give the array it is a "
                "view of, or (address, length)"
            )
        # Any dense layout (Fortran order, negative strides): its bytes are one range.
        try:
            address = _strided_address(view)
        except (AttributeError, BufferError, TypeError, ValueError) as exc:
            raise NotABufferError(
                f"{kind} is contiguous but not in C order, and its address cannot be read "
                f"here ({type(exc).__name__}: {exc}): give (address, length)"
            ) from None
        return _checked(address + first, view.nbytes, kind, f"a {kind}")

    def close(self) -> None:
        if self.pointer is not None:
            _libnuma._ffi().release(self.pointer)
            self.pointer = None
        if self.view is not None:
            self.view.release()
            self.view = None


def _open(buffer: object) -> Tuple[_Span, Optional[_Exported]]:
    if isinstance(buffer, tuple):
        return _explicit_span(buffer), None
    if _is_tensor(buffer) and not isinstance(buffer, (memoryview, bytearray, mmap.mmap)):
        return _tensor_span(buffer), None
    exported = _Exported(buffer)
    return exported.span, exported


def _outward(span: _Span) -> Tuple[int, int]:
    """The page-aligned range covering every byte of ``span`` (see "Which pages")."""
    page = mmap.PAGESIZE
    start = span.address - span.address % page
    end = -(-(span.address + span.length) // page) * page
    return start, end - start


# ------------------------------------------------------------------ result


@dataclass(frozen=True)
class MemoryPlacement:
    """Where a buffer's pages are after :func:`bind_memory`, as the kernel reports it.

    ``address``/``size`` are the buffer as given; ``start``/``length`` the
    page-aligned range that was bound (aligned outward), ``pages`` its page
    count.  ``pages_per_node`` counts the pages present on each node
    (``move_pages`` queried after the bind); ``not_present`` the pages not
    yet allocated (or backed by the shared zero page), which will follow the
    policy when first written.  ``not_moved`` maps a reason (an errno name,
    :data:`NOT_MIGRATED`, :data:`NOT_ASKED` or :data:`VANISHED`; :data:`REASONS`
    explains each) to the number of present pages left off ``nodes`` for it.
    ``pages_per_node`` is ``None`` when the kernel would not say (a seccomp
    profile denying ``move_pages``); ``notes`` then say so.  ``moved_outside``
    counts the pages outside the range that moved with it because they shared
    a transparent huge page the kernel could not split (see "Huge pages").
    """

    address: int
    size: int
    start: int
    length: int
    pages: int
    nodes: frozenset[int]
    policy: str
    kernel_policy: str
    move: bool
    pages_per_node: Optional[Mapping[int, int]] = field(hash=False)
    not_present: int = 0
    not_moved: Mapping[str, int] = field(default_factory=dict, hash=False)
    reasons: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    moved_outside: int = 0

    @property
    def on_nodes(self) -> Optional[int]:
        """Present pages on the target nodes (None when unknown)."""
        if self.pages_per_node is None:
            return None
        return sum(c for n, c in self.pages_per_node.items() if n in self.nodes)

    @property
    def complete(self) -> bool:
        """Every present page is on the target nodes, as the kernel reports it."""
        return self.pages_per_node is not None and not self.not_moved

    @property
    def pinned(self) -> bool:
        """Some pages stayed for a reason that means page-locked (pinned) memory."""
        return any(reason in _PINNED_REASONS for reason in self.not_moved)

    def summary(self) -> str:
        where = f"{self.kernel_policy} on node {format_ids(self.nodes)}"
        head = f"{self.size} bytes at {self.address:#x} ({_pages(self.pages)}): {where}"
        if self.pages_per_node is None:
            return f"{head}; page locations unknown"
        counts = ", ".join(f"{c} on node {n}" for n, c in sorted(self.pages_per_node.items()))
        parts = [head, f"pages present: {counts or 'none'}"]
        if self.not_present:
            parts.append(f"{self.not_present} not present yet")
        for reason, count in sorted(self.not_moved.items()):
            parts.append(f"{count} not moved ({reason}: {REASONS.get(reason, reason)})")
        if self.moved_outside:
            parts.append(f"{_pages(self.moved_outside)} outside the range moved with it")
        return "; ".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "address": self.address,
            "size": self.size,
            "start": self.start,
            "length": self.length,
            "pages": self.pages,
            "nodes": sorted(self.nodes),
            "policy": self.policy,
            "kernel_policy": self.kernel_policy,
            "move": self.move,
            "pages_per_node": None
            if self.pages_per_node is None
            else {str(n): c for n, c in sorted(self.pages_per_node.items())},
            "not_present": self.not_present,
            "not_moved": dict(sorted(self.not_moved.items())),
            "complete": self.complete,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "moved_outside": self.moved_outside,
        }


# --------------------------------------------------------------- counting


def _chunks(start: int, length: int) -> Iterator[List[int]]:
    page = mmap.PAGESIZE
    step = _libnuma.MOVE_PAGES_CHUNK * page
    for base in range(start, start + length, step):
        yield list(range(base, min(base + step, start + length), page))


def _errno_name(status: int) -> str:
    return errno.errorcode.get(-status, str(-status))


@dataclass
class _Census:
    """Page statuses as ``move_pages`` reports them, and the present pages off target."""

    counts: collections.Counter[int] = field(default_factory=collections.Counter)
    stray: Dict[int, int] = field(default_factory=dict)  # address -> node

    def add(self, addresses: List[int], status: List[int], nodes: frozenset[int]) -> None:
        tally = collections.Counter(status)
        self.counts.update(tally)
        if any(s >= 0 and s not in nodes for s in tally):
            for address, s in zip(addresses, status):
                if s >= 0 and s not in nodes:
                    self.stray[address] = s


def _census(start: int, length: int, nodes: frozenset[int]) -> _Census:
    census = _Census()
    for addresses in _chunks(start, length):
        _, status = _libnuma.move_pages_status(addresses)
        if any(where >= 0 for where in status) and any(where < 0 for where in status):
            # Some pages present, some not: the missing ones may be mid-migration
            # (a chunk with none present is taken as never written, asked once).
            status = _ask_again(addresses, status)
        census.add(addresses, status, nodes)
    return census


def _retry_moves(census: _Census, target: _Target) -> Dict[str, int]:
    """Move each stray page once more, explicitly; the reason per page still off target."""
    reasons: collections.Counter[str] = collections.Counter()
    strays = sorted(census.stray)
    one = next(iter(target.nodes)) if len(target.nodes) == 1 else None
    for index in range(0, len(strays), _libnuma.MOVE_PAGES_CHUNK):
        batch = strays[index : index + _libnuma.MOVE_PAGES_CHUNK]
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
            old = census.stray.pop(address)
            census.counts[old] -= 1
            if where < 0:  # was present: not "never written", so not counted as not present
                reasons[VANISHED] += 1
                continue
            census.counts[where] += 1
            if where in target.nodes:
                continue
            census.stray[address] = where
            if answer < 0 and answer != _libnuma.STATUS_UNWRITTEN:
                reasons[_errno_name(answer)] += 1
            else:
                reasons[NOT_MIGRATED] += 1
    return dict(reasons)


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


def _pages(count: int) -> str:
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


def _neighbours_before(start: int, length: int) -> Dict[int, int]:
    """Where the present pages sharing a possible huge page with the range's edges are."""
    neighbours = _edge_neighbours(start, length)
    if not neighbours:
        return {}
    try:
        return _present(neighbours)
    except NumaSyscallError:
        return {}  # the query is denied: so is the census, which says so


def _split_edges(start: int, length: int, neighbours: Mapping[int, int]) -> None:
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


def _report(
    span: _Span,
    start: int,
    length: int,
    target: _Target,
    move: bool,
    *,
    neighbours: Mapping[int, int],
) -> MemoryPlacement:
    per_node: Optional[Dict[int, int]] = None
    absent = outside = 0
    not_moved: Dict[str, int] = {}
    notes: List[str] = []
    try:
        census = _census(start, length, target.nodes)
        if census.stray:
            not_moved = _retry_moves(census, target) if move else {NOT_ASKED: len(census.stray)}
        outside = _moved_outside(neighbours)
    except NumaSyscallError as exc:
        notes.append(
            f"the policy was applied, but where the pages are is unknown: {exc} "
            f"({_fix(exc.errno or 0, 'move_pages')})"
        )
    else:
        per_node = {n: c for n, c in census.counts.items() if n >= 0 and c > 0}
        absent = sum(c for s, c in census.counts.items() if s < 0)
        if any(reason in _PINNED_REASONS for reason in not_moved):
            notes.append(_PINNED_HINT)
        if "ENOMEM" in not_moved:
            notes.append(
                f"node {format_ids(target.nodes)} is full: {_pages(not_moved['ENOMEM'])} could "
                "not be moved there (ENOMEM); free memory on it, or place the buffer elsewhere"
            )
        if absent:
            notes.append(
                f"{_pages(absent)} not present yet (never written): allocated on "
                f"node {format_ids(target.nodes)} when first written"
            )
        if outside:
            notes.append(
                f"{_pages(outside)} outside the range moved with it: they shared a transparent "
                "huge page with its edges, which the kernel could not split (it moves a huge "
                "page whole)"
            )
    return MemoryPlacement(
        address=span.address,
        size=span.length,
        start=start,
        length=length,
        pages=length // mmap.PAGESIZE,
        nodes=target.nodes,
        policy=target.policy.value,
        kernel_policy=_libnuma.MODE_NAMES.get(target.mode, str(target.mode)),
        move=move,
        pages_per_node=per_node,
        not_present=absent,
        not_moved=not_moved,
        reasons=target.reasons,
        notes=tuple(notes),
        moved_outside=outside,
    )


# --------------------------------------------------------------- bind_memory


def bind_memory(
    buffer: object,
    *,
    node: Union[int, str, Iterable[int], None] = None,
    gpu: Optional[int] = None,
    policy: Union[str, MemoryPolicy] = "bind",
    move: bool = True,
    topology: Optional[Topology] = None,
) -> MemoryPlacement:
    """Put ``buffer``'s pages on ``node`` (or GPU ``gpu``'s memory node); report where they are.

    ``buffer``: an object with a writable buffer (bytearray, mmap, numpy
    array, array.array, memoryview), a CPU tensor (duck-typed by
    ``data_ptr()``/``numel()``/``element_size()``) or ``(address, length)``.
    The pages it covers, aligned outward, get ``policy`` (``"bind"``,
    ``"preferred"``, ``"interleave"``) with ``mbind``; with ``move=True``
    the pages that exist already are moved (``MPOL_MF_MOVE``).  Returns a
    :class:`MemoryPlacement`: pages per node as ``move_pages`` reports them
    afterwards, and each page not moved with its reason.  Page-locked
    (pinned) memory cannot be moved: allocate it inside :func:`memory_on`.
    ``topology`` is what ``node``/``gpu`` are checked and resolved against;
    by default the machine a plan would use
    (:func:`~pynumabind.discovery.resolve_topology`: this process on
    ``PYNUMABIND_TOPOLOGY``'s snapshot when set, else this machine).  See
    the module docstring for every rule and error.

    Args:
        buffer: The memory to place: a writable buffer, a CPU tensor or
            ``(address, length)``.
        node: The node (or, for ``interleave``, the nodes) to place it on.
        gpu: Instead of ``node``: the GPU index whose memory node it goes to.
        policy: ``"bind"``, ``"preferred"`` or ``"interleave"``.
        move: Also move the pages that exist already.
        topology: The machine ``node`` and ``gpu`` are checked against.

    Returns:
        A :class:`MemoryPlacement`: the nodes and policy applied, the pages
        per node, and each page not moved with its reason.

    Raises:
        NotABufferError: ``buffer`` has no memory to address (not a buffer,
            not contiguous, a GPU tensor).
        ReadOnlyBufferError: ``buffer`` is read-only.
        ConfigError: both or neither of ``node`` and ``gpu``, a bad policy,
            a zero length, ``move`` not a bool.
        PlanError: a node that does not exist, has no memory or is not
            allowed, or a GPU that is unknown or on an unknown node
            (:class:`~pynumabind.errors.UnknownIdError` for a wrong id).
        PlacementSyscallError: the kernel refused (``EPERM`` under seccomp,
            ``EFAULT``, ``EINVAL``); the message names the call and the fix.
    """
    if not isinstance(move, bool):
        raise ConfigError(f"move must be True or False, not {move!r}")
    span, exported = _open(buffer)
    try:
        target = _target(node, gpu, policy, topology)
        start, length = _outward(span)
        flags = _libnuma.MPOL_MF_MOVE if move else 0
        mode = _libnuma.MODE_NAMES.get(target.mode, str(target.mode))
        operation = f"mbind({mode}) of {length} bytes at {start:#x}"
        neighbours = _neighbours_before(start, length) if move else {}
        try:
            if neighbours:
                # Huge pages: see "Which pages".  The policy first, without moving: the
                # mapping is split at the range's ends, so no huge page can form across
                # them again; then the edges' huge pages are split; then the move.
                _libnuma.mbind_range(start, length, target.mode, target.nodes, 0)
                _split_edges(start, length, neighbours)
            _libnuma.mbind_range(start, length, target.mode, target.nodes, flags)
        except NumaSyscallError as exc:
            raise _refused(exc, operation, target.nodes) from None
        return _report(span, start, length, target, move, neighbours=neighbours)
    finally:
        if exported is not None:
            exported.close()


# ---------------------------------------------------------------- memory_on


class _Block:
    """One ``memory_on`` block in force on a thread: what to put back when it ends.

    ``previous`` is the policy before the block (as ``get_mempolicy`` read
    it), ``allowed`` the thread's allowed memory nodes then (the kernel's
    remapping of ``previous`` after a cpuset change starts from them).  A
    block left out of order hands both to the block entered after it.
    """

    __slots__ = ("allowed", "previous", "thread")

    def __init__(self, previous: _libnuma.KernelPolicy, allowed: frozenset[int]) -> None:
        self.previous = previous
        self.allowed = allowed
        self.thread = threading.get_native_id()


class _Blocks(threading.local):
    """Each thread's blocks in force, innermost last.

    A ``threading.local``: a forked child's one thread keeps the forking
    thread's list (its copy of that thread's policy and blocks), and the
    other threads' lists are gone with them.
    """

    def __init__(self) -> None:
        self.stack: List[_Block] = []


_BLOCKS = _Blocks()


def _index(stack: List[_Block], block: _Block) -> Optional[int]:
    for index, entry in enumerate(stack):
        if entry is block:
            return index
    return None


def _drop(stack: List[_Block], block: _Block) -> None:
    """Remove ``block`` from ``stack`` by identity, found afresh.

    Not by an index found earlier: a finalizer (:func:`_abandoned`) may end
    another block of this thread in between, when the garbage collector
    runs inside a call.
    """
    index = _index(stack, block)
    if index is not None:
        del stack[index]


def _describe(policy: _libnuma.KernelPolicy) -> str:
    if policy.mode in NODELESS_MODES:
        return policy.kernel_policy
    return f"{policy.kernel_policy} on node {format_ids(policy.nodes)}"


def _remap(nodes: AbstractSet[int], old: AbstractSet[int], new: AbstractSet[int]) -> frozenset[int]:
    """``nodes`` moved from the allowed set ``old`` to ``new`` as the kernel does it.

    The kernel's ``nodes_remap``: the i-th node of ``old`` becomes the
    (i mod len(new))-th of ``new``; a node outside ``old`` stays itself.
    This is what a policy in force (without ``MPOL_F_STATIC_NODES``) becomes
    when its cpuset's ``mems`` change.
    """
    before, after = sorted(old), sorted(new)
    if not before or not after:
        return frozenset(nodes)
    return frozenset(after[before.index(n) % len(after)] if n in old else n for n in nodes)


def _nearest(block: _Block) -> Iterator[Tuple[_libnuma.KernelPolicy, str]]:
    """What to put back, nearest first, when the kernel refuses ``block.previous``."""
    previous = block.previous
    try:
        allowed = _proc.mems_allowed()
    except NumaSyscallError:
        allowed = frozenset()
    part = previous.nodes & allowed
    if part:
        yield (
            _libnuma.KernelPolicy(previous.mode, frozenset(part), previous.flags),
            "the same policy over the allowed part of its nodes",
        )
    moved = _remap(previous.nodes, block.allowed, allowed) & allowed
    if moved and moved != part:
        yield (
            _libnuma.KernelPolicy(previous.mode, moved, previous.flags),
            "the same policy on the nodes the kernel remaps its nodes to",
        )
    yield _libnuma.KernelPolicy(_libnuma.MPOL_DEFAULT, frozenset(), 0), "the default policy"


def _set(policy: _libnuma.KernelPolicy) -> None:
    nodes = policy.nodes if policy.mode not in NODELESS_MODES else frozenset()
    _libnuma.set_mempolicy(policy.mode, nodes, policy.flags)


def _put_back(block: _Block) -> None:
    """Set ``block.previous`` again, or the nearest policy the kernel accepts (one warning).

    The kernel refuses the saved policy (``EINVAL``) when none of its nodes
    is allowed any more: the cpuset's ``mems`` changed during the block.
    Then the same mode over the allowed part of its nodes, else over the
    nodes the kernel's own remapping gives, else the default policy is set,
    and a :class:`RuntimeWarning` says which.  The block's policy is never
    left in place unless the kernel refuses even the default (``EPERM``
    under a seccomp filter installed during the block): that raises.
    """
    previous = block.previous
    try:
        _set(previous)
        return
    except NumaSyscallError as exc:
        if exc.errno != errno.EINVAL or previous.mode in NODELESS_MODES:
            raise
        refused = exc
    for policy, how in _nearest(block):
        try:
            _set(policy)
        except NumaSyscallError:
            continue
        try:
            allowed = format_ids(_proc.mems_allowed())
        except NumaSyscallError:
            allowed = "unknown"
        warnings.warn(
            f"memory_on: the kernel refused the policy from before the block, "
            f"{_describe(previous)} (EINVAL: this thread's allowed memory nodes are now "
            f"{allowed}, were {format_ids(block.allowed)}: its cpuset changed during the "
            f"block); put back {how}, {_describe(policy)}",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    raise refused


def _leave(stack: List[_Block], block: _Block) -> None:
    """Take ``block`` off its thread's stack, putting the policy back if it is innermost.

    Idempotent, so that an interrupt anywhere in it can be finished by
    calling it again: the policy is put back before the block leaves the
    stack.  A block that is not innermost (a coroutine or generator
    suspended inside a block, another one entered meanwhile and still in
    force) hands what it would have put back to the block entered after it,
    which puts it back when it ends; the thread keeps that block's policy
    meanwhile.  One :class:`RuntimeWarning` says so.
    """
    index = _index(stack, block)
    if index is None:
        return
    if index + 1 < len(stack):
        above = stack[index + 1]
        above.previous, above.allowed = block.previous, block.allowed
        _drop(stack, block)
        warnings.warn(
            "memory_on blocks left out of order on one thread (a coroutine or generator "
            "suspended inside a block while another entered one): a memory policy is per "
            "thread, so code the thread ran meanwhile allocated under the innermost block's "
            "policy; the policy from before both is put back when the last one ends",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    try:
        _put_back(block)
    except NumaSyscallError:
        _drop(stack, block)  # refused even the default: nothing more can be put back for it
        raise
    _drop(stack, block)


class MemoryOn:
    """The context manager :func:`memory_on` returns; use it once, in one thread.

    ``policy`` (the policy asked for), ``kernel_policy`` (its ``MPOL_*``
    name), ``nodes`` and ``reasons`` say where the block allocates and why;
    ``previous`` is the :class:`~pynumabind.KernelPolicy` that is set again on
    exit (as ``get_mempolicy`` read it when the block, or an enclosing block
    left before it, was entered), ``None`` outside the block.
    """

    def __init__(self, target: _Target) -> None:
        self._target = target
        self.nodes = target.nodes
        self.kernel_policy = _libnuma.MODE_NAMES.get(target.mode, str(target.mode))
        self.policy = target.policy.value
        self.reasons = target.reasons
        self._block: Optional[_Block] = None
        self._finalizer: Optional[weakref.finalize[[_Block], MemoryOn]] = None
        self._used = False

    @property
    def previous(self) -> Optional[_libnuma.KernelPolicy]:
        block = self._block
        return None if block is None else block.previous

    def __repr__(self) -> str:
        return f"memory_on({self.kernel_policy} on node {format_ids(self.nodes)})"

    def __enter__(self) -> MemoryOn:
        if self._used:
            raise ConfigError("a memory_on(...) object is used once; call memory_on again")
        self._used = True
        try:
            previous = _libnuma.get_mempolicy()
            allowed = _proc.mems_allowed()
        except NumaSyscallError as exc:
            raise _refused(exc, "get_mempolicy (reading the policy to restore)", None) from None
        block = _Block(previous, allowed)
        stack = _BLOCKS.stack
        try:
            # The undo is recorded before the change (as a bind's journal is).
            self._block = block
            stack.append(block)
            self._finalizer = weakref.finalize(self, _abandoned, block)
            self._finalizer.atexit = False
            _libnuma.set_mempolicy(self._target.mode, self.nodes)
        except NumaSyscallError as exc:  # refused: nothing changed
            _drop(stack, block)
            self._ended()
            raise _refused(exc, f"set_mempolicy({self.kernel_policy})", self.nodes) from None
        except BaseException:  # KeyboardInterrupt, maybe after the change: undo it
            _leave(stack, block)
            self._ended()
            raise
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        block = self._block
        if block is None:
            return
        try:
            stack = _BLOCKS.stack
            mine = _index(stack, block) is not None
        except BaseException:  # an interrupt: this thread's block ends all the same
            _leave(_BLOCKS.stack, block)
            self._ended()
            raise
        if not mine:
            raise ConfigError(
                f"memory_on block entered on thread {block.thread} and left on thread "
                f"{threading.get_native_id()}: a memory policy is per thread, so thread "
                f"{block.thread} still allocates on node {format_ids(self.nodes)}"
            )
        try:
            _leave(stack, block)
        except NumaSyscallError as refused:
            self._ended()
            previous = block.previous
            raise _refused(
                refused,
                f"set_mempolicy({previous.kernel_policy}) restoring the policy",
                previous.nodes,
            ) from None
        except BaseException:  # an interrupt inside: finish putting the policy back
            _leave(stack, block)
            self._ended()
            raise
        self._ended()

    def _ended(self) -> None:
        self._block = None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()


def _abandoned(block: _Block) -> None:
    """A block whose object was freed while still in force ends now, if on this thread.

    Where an interrupt lands at the very start of ``__exit__``, before any
    of it runs, nothing in it can put the policy back; nor is ``__exit__``
    called for a suspended generator that is never closed.  The object then
    dies (when the interrupt's traceback or the generator is freed) and this
    ends its block.  Only while a block is in force is this callback armed,
    so a Ctrl-C is never swallowed by a finaliser of a block that ended.
    On another thread it can do nothing: a memory policy is per thread.
    """
    with contextlib.suppress(Exception):  # nothing may escape a finaliser
        _leave(_BLOCKS.stack, block)


def memory_on(
    *,
    node: Union[int, str, Iterable[int], None] = None,
    gpu: Optional[int] = None,
    policy: Union[str, MemoryPolicy] = "bind",
    topology: Optional[Topology] = None,
) -> MemoryOn:
    """Allocate on ``node`` (or GPU ``gpu``'s memory node) inside a ``with`` block.

    The calling thread's memory policy is ``policy`` on those nodes inside
    the block; the previous one (mode, nodes and flags, as
    ``get_mempolicy`` reads them) is put back when the block ends, after an
    exception too.  Only pages first touched inside the block by this thread
    (or by threads it starts there, which keep the policy) follow it; memory
    an allocator already holds does not move.  The arguments are checked
    now; the policy changes on entry.

    The policy is the thread's, not the block's: do not ``await`` or
    ``yield`` inside the block (whatever the thread runs while it is
    suspended allocates under it).  Blocks that end out of order, an
    interrupt at any point, a ``fork`` inside the block and a cpuset change
    during it all end with the policy from before the block, or the nearest
    one the kernel accepts (see "What memory_on guarantees" in the module
    docstring).

    Pinned memory cannot be moved after the fact, so this is how it is
    placed: CUDA's pinned allocator touches its pages in the calling thread::

        with pynumabind.memory_on(gpu=torch.cuda.current_device()):
            staging = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)

    A vLLM/LMCache-style offload pool: allocate it once, inside the block,
    from the process that drives the GPU, and keep it (a caching host
    allocator reuses freed blocks wherever they were allocated)::

        with pynumabind.memory_on(gpu=local_gpu):
            pool = torch.empty((num_blocks, block_bytes), dtype=torch.uint8,
                               pin_memory=True)

    For memory pinned by registration (``cudaHostRegister``) the order is
    the same idea: :func:`bind_memory` the buffer first, register it after.

    Args:
        node: The node (or, for ``interleave``, the nodes) to allocate on.
        gpu: Instead of ``node``: the GPU index whose memory node to allocate
            on.
        policy: ``"bind"``, ``"preferred"`` or ``"interleave"``.
        topology: The machine ``node`` and ``gpu`` are checked against.

    Returns:
        The context manager; entering it sets the policy, leaving it puts
        the previous one back.

    Raises:
        ConfigError: both or neither of ``node`` and ``gpu``, or a bad
            policy (checked here, before the block); the same object
            entered twice.
        PlanError: as for :func:`bind_memory`: a node or GPU that cannot be
            placed on.
        PlacementSyscallError: on entering or leaving the block, the kernel
            refused ``set_mempolicy`` or ``get_mempolicy``.
    """
    return MemoryOn(_target(node, gpu, policy, topology))
