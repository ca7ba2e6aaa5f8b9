"""Thin, typed binding over libnuma (the shim built by ``_libnuma_build``).

Responsibilities, and nothing more:

* load ``libnuma.so.1`` once, lazily, on first use -- one ``dlopen``, under
  a lock, however many threads ask at once -- with an error that names
  the package to install when it is missing, and the symbol when a library
  loads but lacks one that ``_libnuma_build.DECLARATIONS`` requires;
* convert between kernel node masks and ``frozenset[int]``;
* call the raw memory-policy syscall wrappers libnuma exports and turn
  ``-1``/errno into :class:`~pynumabind.errors.NumaSyscallError`;
* probe an optional kernel feature (a memory-policy mode) only when a caller
  asks about it, once per feature: nothing is probed whose answer is unused.

Test oracles (libnuma's own parsers, ``numa_node_to_cpus``, ``numa_distance``
...) are not here: ``tests/support/libnuma_oracle.py`` declares and calls them.

Deliberately *not* used: libnuma's void setters (``numa_set_membind`` and
friends report errors only by printing to stderr) and the load-time
snapshots ``numa_all_cpus_ptr``/``numa_all_nodes_ptr`` (stale after any
affinity change).  Allowed CPUs come from ``sched_getaffinity`` and allowed
memory nodes from ``get_mempolicy(MPOL_F_MEMS_ALLOWED)``, read fresh.
"""

from __future__ import annotations

import errno
import os
import sys
import threading

# The memory-policy modes (linux/mempolicy.h) are written once, in the policy
# table; the syscalls here take them, so __all__ re-exports them for callers.
from .._mempolicy import (
    MODE_NAMES,
    MPOL_BIND,
    MPOL_DEFAULT,
    MPOL_INTERLEAVE,
    MPOL_LOCAL,
    MPOL_PREFERRED,
    MPOL_PREFERRED_MANY,
    MPOL_WEIGHTED_INTERLEAVE,
    NODELESS_MODES,
)
from .._record import record
from ..cpulist import set_bits
from ..errors import LibnumaUnavailableError, NumaSyscallError
from . import forksafe as _forksafe

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Set as AbstractSet
    from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "ERRORS",
    "HUGE_PAGE_SIZE_FILE",
    "LIBRARY_NAME",
    "MADV_COLD",
    "MADV_NOHUGEPAGE",
    "MODE_NAMES",
    "MOVE_PAGES_CHUNK",
    "MPOL_BIND",
    "MPOL_DEFAULT",
    "MPOL_F_ADDR",
    "MPOL_F_MEMS_ALLOWED",
    "MPOL_F_NODE",
    "MPOL_F_NUMA_BALANCING",
    "MPOL_F_RELATIVE_NODES",
    "MPOL_F_STATIC_NODES",
    "MPOL_INTERLEAVE",
    "MPOL_LOCAL",
    "MPOL_MF_MOVE",
    "MPOL_MF_MOVE_ALL",
    "MPOL_MF_STRICT",
    "MPOL_MODE_FLAGS",
    "MPOL_PREFERRED",
    "MPOL_PREFERRED_MANY",
    "MPOL_WEIGHTED_INTERLEAVE",
    "STATUS_UNWRITTEN",
    "KernelPolicy",
    "address_policy",
    "available",
    "get_mempolicy",
    "get_mems_allowed",
    "huge_page_size",
    "load",
    "madvise",
    "madvise_buffer",
    "mbind",
    "mbind_range",
    "migrate_pages",
    "move_pages_status",
    "node_memory",
    "page_addresses",
    "page_nodes",
    "possible_node_bits",
    "set_mempolicy",
    "set_to_words",
    "supports_mode",
    "words_to_set",
]

log = _forksafe.Logger(__name__)  # logging only when needed

#: What a call into libnuma raises: catch these, never a bare ``OSError``.
ERRORS = (NumaSyscallError, LibnumaUnavailableError)

LIBRARY_NAME = "libnuma.so.1"

# Mode flags, or-ed into the mode.
MPOL_F_NUMA_BALANCING = 1 << 13
MPOL_F_RELATIVE_NODES = 1 << 14
MPOL_F_STATIC_NODES = 1 << 15
MPOL_MODE_FLAGS = MPOL_F_NUMA_BALANCING | MPOL_F_RELATIVE_NODES | MPOL_F_STATIC_NODES

# get_mempolicy flags.
MPOL_F_NODE = 1 << 0
MPOL_F_ADDR = 1 << 1
MPOL_F_MEMS_ALLOWED = 1 << 2

# mbind / move_pages flags.
MPOL_MF_STRICT = 1 << 0
MPOL_MF_MOVE = 1 << 1
MPOL_MF_MOVE_ALL = 1 << 2

_INSTALL_HINT = (
    "install the libnuma runtime: 'apt-get install libnuma1' on Debian/Ubuntu, "
    "'dnf install numactl-libs' on RHEL/Fedora, 'zypper install libnuma1' on SUSE"
)

_BITS_PER_LONG = 8 * 8  # x86-64/aarch64 (LP64); checked against ffi at load

#: Guards every fill of ``_state`` (the FFI, the library, the mode probes):
#: each is made once, by one thread, while the others wait.  Reentrant,
#: because loading the library needs the FFI and a probe loads the library.
_lock = threading.RLock()
_state: Dict[str, Any] = {}


def _reset_after_fork() -> None:
    """A child forked while another thread loaded starts with a free lock."""
    global _lock  # noqa: PLW0603 - reset in a fork child, nowhere else
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _ffi() -> Any:
    """The cffi FFI object: the generated out-of-line module when installed.

    An editable (development) install does not run cffi's generation step;
    then the same declarations are parsed at run time (in-line ABI mode),
    which costs a few milliseconds once but behaves identically.  Made once,
    under the lock.
    """
    cached = _state.get("ffi")
    if cached is not None:
        return cached
    with _lock:
        if "ffi" not in _state:
            try:
                from .._libnuma_ffi import ffi
            except ImportError:
                from .._libnuma_build import build_ffi

                ffi = build_ffi()
                log.debug("pynumabind._libnuma_ffi not generated; parsing declarations at run time")
            _state["ffi"] = ffi
        return _state["ffi"]


def _missing_symbol(lib: Any) -> Optional[str]:
    """The first required declaration ``lib`` does not export, or None."""
    from .._libnuma_build import DECLARATIONS, OPTIONAL

    # The generated module raises ffi.error, the in-line FFI AttributeError.
    missing = (AttributeError, getattr(_ffi(), "error", AttributeError))
    for symbol, _declaration in DECLARATIONS:
        if symbol in OPTIONAL:
            continue
        try:
            getattr(lib, symbol)
        except missing:
            return symbol
    return None


def load(name: Optional[str] = None) -> Any:
    """Return the loaded libnuma, loading it on first call.

    The library is opened once: the first caller opens it under the lock,
    callers racing it wait and get the same handle.  ``name`` overrides the
    shared object name (tests use it to exercise the missing-library
    errors); loads with a different name are not cached.
    """
    if name is not None:
        with _lock:
            return _open(name)
    cached = _state.get("lib")
    if cached is not None:
        return cached
    with _lock:
        if "lib" not in _state:
            _state["lib"] = _open(LIBRARY_NAME)
        return _state["lib"]


def _open(target: str) -> Any:
    """``dlopen`` ``target`` and check it is a usable libnuma (call under the lock)."""
    ffi = _ffi()
    try:
        lib = ffi.dlopen(target)
    except OSError as exc:
        raise LibnumaUnavailableError(f"cannot load {target} ({exc}); {_INSTALL_HINT}") from exc
    if ffi.sizeof("unsigned long") * 8 != _BITS_PER_LONG:  # pragma: no cover
        raise LibnumaUnavailableError("pynumabind supports only LP64 platforms")
    symbol = _missing_symbol(lib)
    if symbol is not None:
        raise LibnumaUnavailableError(
            f"{target} loads but does not export {symbol} (not libnuma 2.0 or later?); "
            f"{_INSTALL_HINT}"
        )
    # libnuma's defaults are already 0; set them anyway so that nothing a
    # caller did earlier can make a libnuma warning call exit().
    lib.numa_exit_on_error = 0
    lib.numa_exit_on_warn = 0
    return lib


def available() -> bool:
    """True when libnuma loads and the kernel answers get_mempolicy."""
    try:
        return int(load().numa_available()) >= 0
    except LibnumaUnavailableError:
        return False


def possible_node_bits() -> int:
    """Width of a node mask the kernel accepts (>= its nr_node_ids)."""
    return max(int(load().numa_num_possible_nodes()), _BITS_PER_LONG)


# ------------------------------------------------------------------- masks


def words_to_set(words: Any) -> frozenset[int]:
    """Bits set in a little-endian sequence of 64-bit words."""
    out: List[int] = []
    for index, word in enumerate(words):
        set_bits(int(word), index * 64, out)
    return frozenset(out)


def _mask_to_set(mask: Any) -> frozenset[int]:
    """:func:`words_to_set` of a cffi ``unsigned long[]`` the kernel filled.

    On a little-endian machine the array's bytes, read as one little-endian
    number, are the words in order (word ``i`` is bits ``64 i`` and up): one
    conversion in C instead of one per word.  Elsewhere, word by word.
    """
    if sys.byteorder != "little":  # pragma: no cover - big-endian machines
        return words_to_set(mask)
    out: List[int] = []
    set_bits(int.from_bytes(_ffi().buffer(mask), "little"), 0, out)
    return frozenset(out)


def set_to_words(ids: AbstractSet[int], nbits: int) -> List[int]:
    """Little-endian 64-bit words of an ``nbits`` wide mask holding ``ids``."""
    words = [0] * ((nbits + 63) // 64)
    for i in ids:
        if i < 0 or i >= nbits:
            raise ValueError(f"id {i} does not fit in a {nbits}-bit mask")
        words[i // 64] |= 1 << (i % 64)
    return words


# ------------------------------------------------------- topology queries


def node_memory(node: int) -> Tuple[int, int]:
    """(total, free) bytes of ``node``."""
    ffi = _ffi()
    free = ffi.new("long long *")
    total = int(load().numa_node_size64(node, free))
    if total < 0:
        raise NumaSyscallError(ffi.errno or errno.EINVAL, "numa_node_size64", {node})
    return total, int(free[0])


# ------------------------------------------------------------ mem policy


@record(frozen=True)
class KernelPolicy:
    """A memory policy as the kernel reports it (``get_mempolicy(2)``).

    ``Binding.policy_read_back`` is one (public as ``pynumabind.KernelPolicy``,
    re-exported by :mod:`pynumabind.binding`).

    * ``kernel_policy``: its ``MPOL_*`` name (``"MPOL_BIND"``), the name every
      report and ``MemoryPlacement.kernel_policy`` use;
    * ``nodes``: its node mask, as a set of node ids (empty for the default
      and local policies);
    * ``flags``: the mode flags the kernel reports with it
      (``MPOL_F_STATIC_NODES``, ``MPOL_F_RELATIVE_NODES``, ...), ``0`` for none;
    * ``mode``: the kernel's number for the policy, named as the syscall's
      argument: the one *mode* that is not the CPU mode, kept because it is
      the value the kernel passes.
    """

    mode: int
    nodes: frozenset[int]
    flags: int = 0

    def __init__(self, mode: int, nodes: frozenset[int], flags: int = 0) -> None:
        self.__dict__.update(mode=mode, nodes=nodes, flags=flags)

    @property
    def kernel_policy(self) -> str:
        return MODE_NAMES.get(self.mode, f"mode {self.mode}")


def _node_array(nodes: AbstractSet[int]) -> Tuple[Any, int]:
    nbits = possible_node_bits()
    try:
        words = set_to_words(nodes, nbits)
    except ValueError as exc:
        raise NumaSyscallError(errno.EINVAL, f"node mask ({exc})", nodes) from None
    return _ffi().new("unsigned long[]", words), nbits


def get_mempolicy() -> KernelPolicy:
    """The calling thread's memory policy.

    Linux < 5.14 reports local allocation (``MPOL_LOCAL``) as ``MPOL_PREFERRED``
    with no nodes; it is returned as ``MPOL_LOCAL``, as newer kernels do.
    """
    ffi = _ffi()
    nbits = possible_node_bits()
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", (nbits + 63) // 64)
    if load().get_mempolicy(mode, mask, nbits + 1, ffi.NULL, 0) < 0:
        raise NumaSyscallError(ffi.errno, "get_mempolicy")
    raw = int(mode[0])
    nodes = _mask_to_set(mask)
    base = raw & ~MPOL_MODE_FLAGS
    if base == MPOL_PREFERRED and not nodes:
        base = MPOL_LOCAL
    return KernelPolicy(base, nodes, raw & MPOL_MODE_FLAGS)


def get_mems_allowed() -> frozenset[int]:
    """Memory nodes this thread may use (cpuset ``mems``), read fresh."""
    ffi = _ffi()
    nbits = possible_node_bits()
    mask = ffi.new("unsigned long[]", (nbits + 63) // 64)
    if load().get_mempolicy(ffi.NULL, mask, nbits + 1, ffi.NULL, MPOL_F_MEMS_ALLOWED) < 0:
        raise NumaSyscallError(ffi.errno, "get_mempolicy(MPOL_F_MEMS_ALLOWED)")
    return _mask_to_set(mask)


def set_mempolicy(mode: int, nodes: AbstractSet[int] = frozenset(), flags: int = 0) -> None:
    """Set the calling thread's policy; raises with errno on failure."""
    ffi = _ffi()
    operation = f"set_mempolicy({MODE_NAMES.get(mode, mode)})"
    if mode in NODELESS_MODES:
        result = load().set_mempolicy(mode | flags, ffi.NULL, 0)
        node_arg: Optional[AbstractSet[int]] = None
    else:
        array, nbits = _node_array(nodes)
        result = load().set_mempolicy(mode | flags, array, nbits + 1)
        node_arg = nodes
    if result < 0:
        raise NumaSyscallError(ffi.errno, operation, node_arg)


def _buffer_pointer(buffer: Any) -> Any:
    return _ffi().from_buffer(buffer)


def mbind(buffer: Any, mode: int, nodes: AbstractSet[int] = frozenset(), flags: int = 0) -> None:
    """Apply a policy to the pages of ``buffer`` (a writable, page-aligned buffer)."""
    ffi = _ffi()
    pointer = _buffer_pointer(buffer)
    try:
        if mode in NODELESS_MODES:
            result = load().mbind(pointer, len(buffer), mode, ffi.NULL, 0, flags)
        else:
            array, nbits = _node_array(nodes)
            result = load().mbind(pointer, len(buffer), mode, array, nbits + 1, flags)
        if result < 0:
            raise NumaSyscallError(ffi.errno, f"mbind({MODE_NAMES.get(mode, mode)})", nodes)
    finally:
        ffi.release(pointer)


def migrate_pages(pid: int, from_nodes: AbstractSet[int], to_nodes: AbstractSet[int]) -> int:
    """Move ``pid``'s pages from ``from_nodes`` to ``to_nodes``.

    Returns the number of pages that could not be moved (the kernel's count).
    """
    ffi = _ffi()
    old, nbits = _node_array(from_nodes)
    new, _ = _node_array(to_nodes)
    result = int(load().migrate_pages(pid, nbits + 1, old, new))
    if result < 0:
        raise NumaSyscallError(ffi.errno, f"migrate_pages(pid {pid})", to_nodes)
    return result


def page_addresses(buffer: Any) -> Tuple[Any, List[Any]]:
    """Pointer to ``buffer`` and the address of each page in it.

    The caller must ``release`` the returned pointer (see :func:`page_nodes`).
    """
    import mmap  # loaded already: by the placement and verify modules, this one's callers

    ffi = _ffi()
    pointer = _buffer_pointer(buffer)
    size = mmap.PAGESIZE
    start = int(ffi.cast("uintptr_t", pointer))
    first = start - start % size
    pages = [ffi.cast("void *", addr) for addr in range(first, start + len(buffer), size)]
    return pointer, pages


def page_nodes(buffer: Any) -> List[int]:
    """NUMA node of each page of ``buffer`` (move_pages with nodes=NULL).

    A negative entry is ``-errno`` for that page (``-ENOENT``: not present).
    """
    ffi = _ffi()
    pointer, pages = page_addresses(buffer)
    try:
        if not pages:
            return []
        array = ffi.new("void *[]", pages)
        status = ffi.new("int[]", len(pages))
        if load().move_pages(0, len(pages), array, ffi.NULL, status, 0) < 0:
            raise NumaSyscallError(ffi.errno, "move_pages(query)")
        return [int(s) for s in status]
    finally:
        ffi.release(pointer)


# ---------------------------------------------------------------- probes


def _probe_mode(mode: int) -> Optional[bool]:
    """Try ``mode`` with mbind on a scratch page: no thread state changes."""
    try:
        nodes = get_mems_allowed()
    except NumaSyscallError:
        return None
    if not nodes:
        return None
    import mmap  # a bind gets here holding the fork lock; placement has imported mmap

    scratch = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        mbind(scratch, mode, nodes)
        return True
    except NumaSyscallError as exc:
        if exc.errno == errno.EINVAL:  # unknown mode
            return False
        return None
    finally:
        scratch.close()


def supports_mode(mode: int) -> Optional[bool]:
    """Whether the kernel accepts memory-policy ``mode``; probed when first asked.

    ``MPOL_PREFERRED_MANY`` arrived in Linux 5.15, ``MPOL_WEIGHTED_INTERLEAVE``
    in 6.9.  ``None`` means the probe could not tell (a seccomp filter
    denying ``mbind``, no memory node allowed).  Each mode is probed at most
    once per process, and only a mode someone asks about: under the lock, so
    threads asking at once share one probe.
    """
    probed: Optional[Dict[int, Optional[bool]]] = _state.get("modes")
    if probed is not None and mode in probed:
        return probed[mode]
    with _lock:
        probed = _state.setdefault("modes", {})
        if mode not in probed:
            probed[mode] = _probe_mode(mode)
        return probed[mode]


# ------------------------------------------------- address ranges (placement)
#
# The functions above take a Python buffer; these take a raw page-aligned
# address range, for :mod:`pynumabind.binding.placement` (a torch tensor's
# ``data_ptr()`` or an explicit ``(address, length)`` has no buffer object).

#: Pages per ``move_pages`` call: bounds the arrays built for a huge pool.
MOVE_PAGES_CHUNK = 1 << 16

#: What a ``move_pages`` status entry holds when the kernel did not write it.
#: The kernel leaves the entries of a batch it could not migrate untouched
#: and counts those pages in its positive return value instead.
STATUS_UNWRITTEN = -(1 << 30)


def mbind_range(
    start: int, length: int, mode: int, nodes: AbstractSet[int] = frozenset(), flags: int = 0
) -> None:
    """``mbind`` on ``length`` bytes at ``start`` (page-aligned); raises with errno."""
    ffi = _ffi()
    pointer = ffi.cast("void *", start)
    if mode in NODELESS_MODES:
        result = load().mbind(pointer, length, mode, ffi.NULL, 0, flags)
    else:
        array, nbits = _node_array(nodes)
        result = load().mbind(pointer, length, mode, array, nbits + 1, flags)
    if result < 0:
        raise NumaSyscallError(ffi.errno, f"mbind({MODE_NAMES.get(mode, mode)})", nodes)


def move_pages_status(
    addresses: List[int], node: Optional[int] = None, flags: int = 0
) -> Tuple[int, List[int]]:
    """``move_pages`` on this process's pages at ``addresses``: (return value, status).

    ``node`` None queries (``nodes=NULL``): each status is the page's node
    or ``-errno`` (``-ENOENT``: not present).  With ``node``, every page is
    asked to move there (``flags``: ``MPOL_MF_MOVE`` or ``MPOL_MF_MOVE_ALL``);
    a status is the node the page is on afterwards, a ``-errno`` for that
    page, or :data:`STATUS_UNWRITTEN` for a page of a batch the kernel
    failed to migrate (counted in the positive return value).  At most
    :data:`MOVE_PAGES_CHUNK` addresses per call.
    """
    ffi = _ffi()
    count = len(addresses)
    if count > MOVE_PAGES_CHUNK:
        raise ValueError(f"{count} pages in one move_pages call (at most {MOVE_PAGES_CHUNK})")
    if not count:
        return 0, []
    owner = ffi.new("uintptr_t[]", addresses)  # a cast does not keep its source alive
    pages = ffi.cast("void **", owner)
    status = ffi.new("int[]", [STATUS_UNWRITTEN] * count)
    targets = ffi.NULL if node is None else ffi.new("int[]", [node] * count)
    result = int(load().move_pages(0, count, pages, targets, status, flags))
    if result < 0:
        what = "move_pages(query)" if node is None else f"move_pages(to node {node})"
        raise NumaSyscallError(ffi.errno, what)
    return result, list(ffi.unpack(status, count))


def address_policy(address: int) -> KernelPolicy:
    """The policy governing the page at ``address`` (``get_mempolicy(MPOL_F_ADDR)``).

    A range ``mbind`` never touched reports the thread's policy; ``MPOL_DEFAULT``
    for a range means the thread's policy applies.  Raises with errno.
    """
    ffi = _ffi()
    nbits = possible_node_bits()
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", (nbits + 63) // 64)
    pointer = ffi.cast("void *", address)
    if load().get_mempolicy(mode, mask, nbits + 1, pointer, MPOL_F_ADDR) < 0:
        raise NumaSyscallError(ffi.errno, f"get_mempolicy(MPOL_F_ADDR, {address:#x})")
    raw = int(mode[0])
    return KernelPolicy(raw & ~MPOL_MODE_FLAGS, _mask_to_set(mask), raw & MPOL_MODE_FLAGS)


#: ``madvise`` advice (linux/mman.h): deactivate the pages; splits a huge page it covers in part.
MADV_COLD = 20
#: ``madvise`` advice (linux/mman.h): no transparent huge pages in the range.
MADV_NOHUGEPAGE = 15


def madvise(start: int, length: int, advice: int) -> None:
    """``madvise`` on ``length`` bytes at ``start`` (page-aligned); raises with errno.

    libc's, through ctypes (libnuma has no wrapper); loaded on first use.
    """
    libc = _state.get("libc")
    if libc is None:
        import ctypes

        with _lock:
            if "libc" not in _state:
                loaded = ctypes.CDLL(None, use_errno=True)
                loaded.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                loaded.madvise.restype = ctypes.c_int
                _state["libc"] = loaded
            libc = _state["libc"]
    import ctypes

    if libc.madvise(start, length, advice) != 0:
        raise NumaSyscallError(ctypes.get_errno(), f"madvise({advice}) at {start:#x}")


def madvise_buffer(buffer: Any, advice: int) -> None:
    """``madvise`` on the whole of ``buffer`` (a writable, page-aligned buffer: an ``mmap``)."""
    ffi = _ffi()
    pointer = _buffer_pointer(buffer)
    try:
        madvise(int(ffi.cast("uintptr_t", pointer)), len(buffer), advice)
    finally:
        ffi.release(pointer)


#: Where the kernel says how large a transparent huge page is (absent without THP).
HUGE_PAGE_SIZE_FILE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"


def huge_page_size() -> int:
    """The transparent huge page size in bytes, 0 where the kernel has none; read once."""
    cached: Optional[int] = _state.get("huge_page_size")
    if cached is None:
        from ..errors import PynumabindError
        from .textfile import read_ascii

        try:
            cached = int(read_ascii(HUGE_PAGE_SIZE_FILE, "THP size file").strip())
        except (OSError, ValueError, PynumabindError):
            cached = 0
        _state["huge_page_size"] = cached
    return cached
