"""Host buffers for GPU traffic: :func:`host_buffer`, placed before its first touch.

The memory that carries host<->GPU copies (a staging buffer, a CPU
KV-cache or offload pool) lands wherever it is first touched.
:func:`~pynumabind.bind_memory` places a buffer that exists; :func:`host_buffer` makes
one that is right from its first page: a fresh anonymous mapping, given its
memory policy while no page of it exists yet, then prefaulted by threads
bound to its nodes, optionally on transparent huge pages and registered
with CUDA (pinned).  The result, a :class:`HostBuffer`, is the memory
itself: ``memoryview(buf)``, ``numpy.frombuffer(buf, dtype=...)`` and
``torch.frombuffer(buf, dtype=...)`` read and write its bytes in place.

Rules of host buffers
---------------------
**Which node, which policy, which weights.**  Exactly those of
:func:`~pynumabind.bind_memory` (see ``pynumabind.binding.placement``),
through the same code: ``node=`` or ``gpu=`` (``gpu=i`` is the memory node a
plan for a rank on GPU ``i`` binds to), ``policy`` one of ``"bind"``,
``"preferred"``, ``"interleave"`` and ``"weighted-interleave"``, and
``weights={0: 3, 2: 1}`` honoured exactly in runs of pages, each run bound
to one node (:mod:`pynumabind.binding._target` resolves the arguments, the
runs are :func:`pynumabind._weights.weighted_runs`'s, and the ``mbind`` and
the census are ``bind_memory``'s own).  The policy is set on the whole
mapping before any page of it exists, so no page has to move.

**Prefault.**  Every page is then faulted in, in parallel, by threads each
bound to the CPUs of the nodes its pages belong on, each taking one
contiguous share of them (a weighted layout's runs are touched by their own
node's threads; a memory-only node's from the nearest CPU node); the
first-touch cost is paid here, not in the first copy, and the pages land
where they belong even under ``"preferred"``.  The touch is
``MADV_POPULATE_WRITE`` (Linux 5.14; one write per page before).  (How:
:mod:`pynumabind.binding._prefault`.)  Under ``"bind"`` a node too small
for the buffer fails here, a :class:`~pynumabind.errors.PlacementSyscallError`
with ``ENOMEM``, not in the middle of a run.

**The result.**  ``placement`` is the census of its pages after the touch,
a :class:`~pynumabind.MemoryPlacement` as ``bind_memory`` returns (with
``move`` False: nothing had to move); ``notes`` say how it was prefaulted,
whether huge pages were asked for and how it was pinned.

**The buffer and its views.**  A :class:`HostBuffer` *is* an anonymous
private :class:`mmap.mmap` (a subclass), so the buffer protocol is the
mapping's own, writable, with no C extension.  A ``memoryview``, numpy
array or tensor made from it holds a reference to it, so the memory stays
mapped while any of them lives.  :meth:`HostBuffer.close` (also on leaving
a ``with`` block) unregisters a pin, then unmaps; while views exist the
mapping cannot be unmapped (``mmap`` refuses with :class:`BufferError`), so
``close`` raises :class:`BufferError` saying so and leaves the buffer open,
and pinned again if it was: release the views (``del`` the arrays,
``memoryview.release()``) and close again.  A ``with`` block ended by an
exception lets that exception through instead, and the buffer is unmapped
when its views go.  A buffer never closed is unmapped when the last
reference goes (a pin unregistered first).  After a
``fork`` the child sees an unpinned buffer copy-on-write; a pinned one it
does not see at all (see "Pinning").  ``len(buf)`` is ``nbytes`` (rounded
up to a whole number of huge pages with ``huge=True``).

**Huge pages.**  ``huge=True`` asks for transparent huge pages
(``madvise(MADV_HUGEPAGE)`` before the touch) on the huge-page-aligned part
of the mapping.  Its length is rounded up to a whole number of huge pages
(``hpage_pmd_size``, 2 MiB on x86-64), which is what makes Linux 6.7 and
later start an anonymous mapping on a huge-page boundary (since 6.12 only
for such lengths); on an older kernel a mapping that starts off a boundary
gets huge pages only between its first and last boundary, and a note says
so.  It depends on ``/sys/kernel/mm/transparent_hugepage/enabled``:
``always`` or ``madvise`` give huge pages where the kernel can find them
(``defrag`` decides whether it compacts memory to find them at the touch);
``never``, or a kernel without THP, gives small pages, with a note saying
so, not an error.

**Pinning.**  ``pin=True`` registers the buffer with CUDA after it is placed
and touched (``cudaHostRegister`` with ``cudaHostRegisterPortable``: pinned
for every CUDA context of the process, so the pool may feed any GPU),
through torch's runtime when the process has imported torch and it sees a
GPU, else the CUDA runtime library loaded with ctypes (``libcudart.so*``)
when it sees one; torch is never imported here.  Neither usable: a
:class:`~pynumabind.errors.PinError` saying why each is not; a failed
registration, the same error with CUDA's.  Registration pins the pages for
DMA (they can no longer be migrated: they stay where they were placed); it
does not ``mlock`` them and, with NVIDIA's driver, is not charged against
``RLIMIT_MEMLOCK`` (``ulimit -l``), which limits ``mlock`` and RDMA
registrations; :func:`host_buffer` never calls ``mlock``.  A pinned buffer is
marked ``MADV_DONTFORK`` before it is registered, as RDMA libraries mark
theirs: a ``fork`` must not make its pages copy-on-write, or the parent's
next write would move it off the pages the GPU reads; a forked child
therefore has no such mapping (CUDA cannot be used after a fork anyway).  (How:
:mod:`pynumabind.binding._pin`.)

**Errors.**  ``nbytes`` not a positive integer, or a bad ``node``/``gpu``/
``policy``/``weights`` combination: :class:`~pynumabind.errors.ConfigError`;
a node or GPU that cannot be placed on:
:class:`~pynumabind.errors.PlanError`; the kernel refusing ``mbind`` or the
touch: :class:`~pynumabind.errors.PlacementSyscallError`; no mapping
(``mmap`` failed): :class:`MemoryError`.  On any error the mapping made so far
is unmapped (and unregistered) before the error reaches the caller.
"""

from __future__ import annotations

import mmap
import operator
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Tuple, Union

from .._os import kernel as _kernel
from .._os import libnuma as _libnuma
from ..errors import ConfigError, NumaSyscallError, PinError
from ..model import MemoryPolicy
from ._buffers import Span, open_buffer, outward
from ._pin import CUDA_HOST_REGISTER_PORTABLE, Registration, find_registrar
from ._prefault import page_writer, prefault
from ._target import _machine, refused, resolve
from .placement import MemoryPlacement, _mbind, _report, _segments

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = ["HostBuffer", "PinError", "host_buffer"]

#: ``madvise`` advice (linux/mman.h): transparent huge pages wanted in the range.
MADV_HUGEPAGE = 14


class HostBuffer(mmap.mmap):
    """A placed, prefaulted host buffer: an anonymous ``mmap`` that knows where its pages are.

    Made by :func:`host_buffer`, not constructed directly.  ``placement`` is
    the census of its pages after the touch (a
    :class:`~pynumabind.MemoryPlacement`); ``notes`` say how it was
    prefaulted, whether it got huge pages, and how it was pinned;
    ``pinned`` whether it is registered with CUDA now.  The mapping is the
    buffer: ``memoryview(buf)``, ``numpy.frombuffer(buf, dtype=...)`` and
    ``torch.frombuffer(buf, dtype=...)`` use its memory in place.
    """

    placement: MemoryPlacement
    notes: Tuple[str, ...]
    _registration: Optional[Registration]

    @property
    def address(self) -> int:
        """The address of its first byte (while it is open)."""
        return self.placement.address

    @property
    def pinned(self) -> bool:
        """Registered with CUDA now (``pin=True``, until :meth:`close`)."""
        registration = getattr(self, "_registration", None)
        return registration is not None and registration.active

    def close(self) -> None:
        """Unregister a pin, then unmap; a :class:`BufferError` while views still use it.

        Closing a closed buffer does nothing.  While a ``memoryview``, numpy
        array or tensor made from it exists, the mapping cannot be unmapped:
        the buffer is left open (pinned again, if it was) and the error says
        so.
        """
        if self.closed:
            return
        registration = getattr(self, "_registration", None)
        if registration is not None:
            registration.release()
        try:
            super().close()
        except BufferError:
            again = ""
            if registration is not None:
                registration.renew()
                again = " (registered with CUDA again)"
            raise BufferError(
                f"HostBuffer of {len(self)} bytes at {self.address:#x} is still used by a view "
                "(a memoryview, numpy array or tensor made from it): release them (del the "
                f"arrays, memoryview.release()) and close again; it stays open{again}"
            ) from None
        self._registration = None

    def __enter__(self) -> HostBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.close()
            return
        try:
            self.close()
        except BufferError:
            pass  # the block's own error goes on; the views it left keep the buffer mapped

    def __del__(self) -> None:
        # Runs before mmap's own deallocation unmaps: a pin never outlives its memory.
        registration = getattr(self, "_registration", None)
        if registration is not None:
            try:
                registration.release()
            except Exception:  # noqa: S110 - nothing to report to from a finalizer
                pass

    def __repr__(self) -> str:
        if self.closed:
            return "<HostBuffer closed>"
        if getattr(self, "placement", None) is None:  # constructed directly: never placed
            return f"<HostBuffer {len(self)} bytes, not placed (make it with host_buffer())>"
        state = ", pinned" if self.pinned else ""
        where = self.placement.summary()
        return f"<HostBuffer {len(self)} bytes at {self.address:#x}: {where}{state}>"


def _size(nbytes: object, huge: int) -> int:
    """``nbytes`` checked; rounded up to whole huge pages when ``huge`` (their size) is given."""
    if isinstance(nbytes, bool) or not hasattr(nbytes, "__index__"):
        raise ConfigError(f"nbytes must be a positive integer, not {nbytes!r:.40}")
    size = operator.index(nbytes)
    if size <= 0:
        raise ConfigError(f"nbytes must be a positive integer, not {size}: nothing to allocate")
    if huge:
        size = -(-size // huge) * huge
    return size


def _thp_mode() -> Optional[str]:
    """``always``/``madvise``/``never`` from ``transparent_hugepage/enabled``; None without THP."""
    return _kernel.settings().thp_enabled


def _advise_huge(span: Span, huge: int) -> Tuple[str, ...]:
    """``MADV_HUGEPAGE`` on the huge-page-aligned part of ``span``; notes on what it gets."""
    mode = _thp_mode()
    if not huge or mode is None:
        return ("huge=True: this kernel has no transparent huge pages; small pages",)
    if mode == "never":
        return (
            f"huge=True: transparent huge pages are off ({_kernel.THP_ENABLED} is 'never'); "
            "small pages",
        )
    first = -(-span.address // huge) * huge
    last = (span.address + span.length) // huge * huge
    notes = []
    if first != span.address:
        notes.append(
            f"huge=True: the mapping starts at {span.address:#x}, off a {huge >> 20} MiB "
            "boundary (a kernel before 6.7): huge pages only between its first and last boundary"
        )
    if last > first:
        _libnuma.madvise(first, last - first, MADV_HUGEPAGE)
        notes.insert(0, f"huge=True: MADV_HUGEPAGE on {last - first} bytes (THP enabled: {mode})")
    return tuple(notes)


def _open(size: int) -> HostBuffer:
    try:
        return HostBuffer(
            -1,
            size,
            flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
        )
    except OSError as exc:
        raise MemoryError(f"host_buffer: mmap of {size} bytes failed: {exc}") from None


def _fill(
    span: Span,
    view: memoryview,
    *,
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    policy: Union[str, MemoryPolicy],
    weights: Union[str, Mapping[int, int], None],
    topology: Optional[Topology],
    huge: Optional[int],
) -> Tuple[MemoryPlacement, Tuple[str, ...]]:
    """Place, (advise,) prefault and count the pages of the fresh mapping ``buf``."""
    target = resolve(node, gpu, policy, topology, weights, exact=True)
    notes: Tuple[str, ...] = ()
    if huge is not None:
        notes += _advise_huge(span, huge)
    start, length = outward(span)  # the mapping's whole pages
    segments = _segments(start, length, target)
    _mbind(segments, target.mode, 0)
    machine = _machine(topology, gpus=False)
    try:
        notes += prefault(segments, machine, page_writer(view, start, span.length))
    except NumaSyscallError as exc:
        raise refused(exc, f"prefault of {length} bytes at {start:#x}", target.nodes) from None
    placement = _report(span, segments, target, False, neighbours={})
    return placement, notes


def host_buffer(
    nbytes: int,
    *,
    node: Union[int, str, Iterable[int], None] = None,
    gpu: Optional[int] = None,
    policy: Union[str, MemoryPolicy] = "bind",
    weights: Union[str, Mapping[int, int], None] = None,
    huge: bool = False,
    pin: bool = False,
    topology: Optional[Topology] = None,
) -> HostBuffer:
    """A new host buffer of ``nbytes`` on ``node`` (or GPU ``gpu``'s memory node), prefaulted.

    An anonymous mapping gets ``policy`` on those nodes before its first
    touch (as :func:`~pynumabind.bind_memory` sets it), is prefaulted by
    threads bound to the nodes, optionally on transparent huge pages
    (``huge``) and registered with CUDA (``pin``)::

        with pynumabind.host_buffer(1 << 30, gpu=torch.cuda.current_device(), pin=True) as buf:
            staging = torch.frombuffer(buf, dtype=torch.uint8)
            ...
            del staging  # views first; then the block's end unpins and unmaps

    Every rule is in the ``pynumabind.binding.host`` module docstring
    ("Placing buffers" in the documentation).

    Args:
        nbytes: The size in bytes (a positive integer).
        node: The node (or, for the interleave policies, the nodes).
        gpu: Instead of ``node``: the GPU index whose memory node it goes on.
        policy: ``"bind"``, ``"preferred"``, ``"interleave"`` or
            ``"weighted-interleave"``.
        weights: For ``"weighted-interleave"``: node -> weight (1 to 255),
            honoured exactly in runs of pages; the nodes are theirs.
        huge: Ask for transparent huge pages (``MADV_HUGEPAGE``); the size is
            rounded up to whole huge pages.
        pin: Register it with CUDA (``cudaHostRegister``, portable).
        topology: The machine ``node`` and ``gpu`` are checked against (by
            default the one plans use).

    Returns:
        The :class:`HostBuffer` -- the mapping itself (the buffer protocol),
        with its ``placement`` census and ``notes``; :meth:`HostBuffer.close`
        (or a ``with`` block) unpins and unmaps it.

    Raises:
        ConfigError: ``nbytes`` not a positive integer; ``huge``/``pin`` not
            bools; the ``node``/``gpu``/``policy``/``weights`` rules of
            :func:`~pynumabind.bind_memory`.
        PlanError: a node or GPU that cannot be placed on.
        PlacementSyscallError: the kernel refused ``mbind`` or the touch
            (``ENOMEM``: the node is too small for the buffer).
        PinError: ``pin=True`` and CUDA is not usable here, or
            ``cudaHostRegister`` failed.
        MemoryError: the mapping could not be made.
    """
    for name, flag in (("huge", huge), ("pin", pin)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name} must be True or False, not {flag!r:.40}")
    page = _libnuma.huge_page_size() if huge else 0
    size = _size(nbytes, page)
    registrar = find_registrar() if pin else None  # before anything is mapped
    buf = _open(size)
    try:
        span, exported = open_buffer(buf)
        assert exported is not None and exported.view is not None
        try:
            placement, notes = _fill(
                span,
                exported.view,
                node=node,
                gpu=gpu,
                policy=policy,
                weights=weights,
                topology=topology,
                huge=page if huge else None,
            )
        finally:
            exported.close()
        buf.placement = placement
        buf._registration = None
        if registrar is not None:
            buf.madvise(mmap.MADV_DONTFORK)  # see "Pinning": no copy-on-write under a pin
            flags = CUDA_HOST_REGISTER_PORTABLE
            buf._registration = Registration(registrar, span.address, size, flags)
            notes += (f"pinned: cudaHostRegister(Portable) through {registrar.name}",)
        buf.notes = notes
        return buf
    except BaseException:
        buf.close()
        raise
