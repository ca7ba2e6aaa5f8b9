"""host_buffer against the real kernel of this machine; pinning up to the GPU boundary.

This machine has one NUMA node, so every buffer lands on node 0; what is checked is
what the kernel says: the range's policy at the moment of the first touch
(``get_mempolicy(MPOL_F_ADDR)``), where each page is afterwards (the census, from
``move_pages``), which CPUs each touching thread ran on (``sched_getaffinity`` inside
the thread).  A buffer on another node (a memory-only one) is checked in the QEMU guest
(``tests/vm/guest/test_guest_tiers.py``).

No GPU and no CUDA runtime exist here.  Pinning is tested with a fake CUDA runtime
injected at the ctypes boundary (``ctypes.CDLL`` returns it for ``libcudart.so``, as
the NVML fake stands in at pynvml's functions) and with a fake ``torch`` module at
``torch.cuda.cudart()``: what is checked is that host_buffer registers the placed,
prefaulted range once with the portable flag, unregisters it before unmapping, and
says why when CUDA is unusable.  Whether the driver then pins the pages needs a GPU.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import mmap
import os
import sys
import threading
import types
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import pynumabind
from pynumabind._os import cudart as _cudart
from pynumabind._os import libnuma as _libnuma
from pynumabind._os import proc as _proc
from pynumabind.binding import _pin, _prefault, host
from pynumabind.errors import ConfigError, NumaSyscallError, PinError, PlanError, UnknownIdError

from ..support.topology_builders import make_topology

PAGE = mmap.PAGESIZE
MIB = 1 << 20


def _nodes_of(buf: host.HostBuffer) -> Dict[int, int]:
    """Each page's node as move_pages reports it now (independent of the census)."""
    addresses = list(range(buf.address, buf.address + len(buf), PAGE))
    _, status = _libnuma.move_pages_status(addresses)
    counts: Dict[int, int] = {}
    for s in status:
        counts[s] = counts.get(s, 0) + 1
    return counts


# ------------------------------------------------------------ placement


def test_a_buffer_on_node_0_is_placed_prefaulted_and_counted() -> None:
    with pynumabind.host_buffer(8 * MIB, node=0) as buf:
        assert isinstance(buf, mmap.mmap) and len(buf) == 8 * MIB
        placement = buf.placement
        assert isinstance(placement, pynumabind.MemoryPlacement)
        assert placement.kernel_policy == "MPOL_BIND" and placement.nodes == {0}
        assert placement.pages_per_node == {0: 8 * MIB // PAGE}
        assert placement.not_present == 0 and placement.complete and not placement.move
        assert _nodes_of(buf) == {0: 8 * MIB // PAGE}  # every page exists, on node 0
        assert _libnuma.address_policy(buf.address).mode == _libnuma.MPOL_BIND
        assert any(note.startswith("prefaulted in parallel: node 0") for note in buf.notes)
    assert buf.closed


def test_the_policy_is_set_before_the_first_touch(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: List[Tuple[int, int]] = []
    real = _libnuma.madvise

    def spy(start: int, length: int, advice: int) -> None:
        if advice == _prefault.MADV_POPULATE_WRITE:
            _, status = _libnuma.move_pages_status([start])
            seen.append((_libnuma.address_policy(start).mode, status[0]))
        real(start, length, advice)

    monkeypatch.setattr(_libnuma, "madvise", spy)
    with pynumabind.host_buffer(2 * MIB, node=0, policy="preferred") as buf:
        assert buf.placement.kernel_policy == "MPOL_PREFERRED"
    assert seen, "the touch did not run"
    # At every touch: the range already has its policy, and its first page does not exist yet.
    assert all(mode == _libnuma.MPOL_PREFERRED for mode, _ in seen)
    assert all(status == -errno.ENOENT for _, status in seen)


def test_each_touching_thread_runs_on_its_nodes_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _proc.set_thread_affinity
    ran: List[Tuple[str, frozenset[int]]] = []

    def spy(tid: int, cpus: frozenset[int]) -> bool:
        done = real(tid, cpus)
        ran.append((threading.current_thread().name, frozenset(os.sched_getaffinity(0))))
        return done

    monkeypatch.setattr(_proc, "set_thread_affinity", spy)
    before = os.sched_getaffinity(0)
    with pynumabind.host_buffer(16 * MIB, node=0):
        pass
    node0 = pynumabind.detect_topology().nodes[0].cpus & frozenset(before)
    assert ran and all(name == "pynumabind-prefault" and cpus == node0 for name, cpus in ran)
    assert len(ran) == min(len(node0), 16 * MIB // _prefault.MIN_SHARE)
    assert os.sched_getaffinity(0) == before  # the caller's own mask is untouched


def test_weighted_interleave_goes_through_bind_memorys_runs() -> None:
    with pynumabind.host_buffer(3 * MIB, policy="weighted-interleave", weights={0: 3}) as buf:
        placement = buf.placement
        assert placement.policy == "weighted-interleave" and placement.weights == {0: 3}
        assert placement.kernel_policy == "MPOL_BIND" and placement.in_proportion
        assert placement.pages_per_node == {0: 3 * MIB // PAGE}


def test_weighted_interleave_without_weights_is_the_kernels_own() -> None:
    """No weights: the kernel's own MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+), as bind_memory."""
    if not _libnuma.supports_mode(_libnuma.MPOL_WEIGHTED_INTERLEAVE):
        pytest.skip("this kernel has no weighted interleave (before 6.9)")
    with pynumabind.host_buffer(MIB, node=0, policy="weighted-interleave") as buf:
        assert buf.placement.kernel_policy == "MPOL_WEIGHTED_INTERLEAVE"
        assert _libnuma.address_policy(buf.address).mode == _libnuma.MPOL_WEIGHTED_INTERLEAVE
        assert buf.placement.pages_per_node == {0: MIB // PAGE} and buf.placement.runs == 1


def test_a_buffer_made_directly_is_said_to_be_unplaced() -> None:
    raw = host.HostBuffer(-1, PAGE)
    try:
        assert "not placed" in repr(raw) and not raw.pinned
    finally:
        raw.close()


def test_without_populate_write_every_page_is_written_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel before 5.14 refuses MADV_POPULATE_WRITE with EINVAL: one write per page."""
    real = _libnuma.madvise

    def old_kernel(start: int, length: int, advice: int) -> None:
        if advice == _prefault.MADV_POPULATE_WRITE:
            raise NumaSyscallError(errno.EINVAL, "madvise")
        real(start, length, advice)

    monkeypatch.setattr(_libnuma, "madvise", old_kernel)
    with pynumabind.host_buffer(3 * PAGE + 100, node=0) as buf:
        assert len(buf) == 3 * PAGE + 100
        assert buf.placement.pages_per_node == {0: 4} and buf.placement.not_present == 0
        assert bytes(buf) == bytes(len(buf))  # the writes were zeros


def test_a_touch_the_kernel_refuses_is_a_placement_error(monkeypatch: pytest.MonkeyPatch) -> None:
    made: List[host.HostBuffer] = []
    real_open = host._open

    def keep(size: int) -> host.HostBuffer:
        made.append(real_open(size))
        return made[-1]

    def full(start: int, length: int, advice: int) -> None:
        raise NumaSyscallError(errno.ENOMEM, f"madvise({advice})")

    monkeypatch.setattr(host, "_open", keep)
    monkeypatch.setattr(_libnuma, "madvise", full)
    with pytest.raises(pynumabind.PlacementSyscallError, match="prefault") as caught:
        pynumabind.host_buffer(MIB, node=0)
    assert caught.value.errno == errno.ENOMEM
    assert made and made[0].closed  # unmapped before the error reached us


# ------------------------------------------------------------ the buffer protocol


def test_memoryview_and_numpy_views_share_the_memory() -> None:
    with pynumabind.host_buffer(MIB, node=0) as buf:
        view = memoryview(buf)
        assert not view.readonly and view.nbytes == MIB
        view[:5] = b"hello"
        array = np.frombuffer(buf, dtype=np.float32)
        # (plain values in the asserts: pytest keeps an assert's operands alive)
        owns, writeable = bool(array.flags.owndata), bool(array.flags.writeable)
        assert not owns and writeable
        array[2:4] = [1.5, -2.0]  # bytes 8 to 15, after the text
        assert buf[:5] == b"hello"
        through_view = np.frombuffer(view, dtype=np.float32)
        values = through_view[2:4].tolist()
        assert values == [1.5, -2.0]
        assert ctypes.string_at(buf.address, 5) == b"hello"  # the census's address is the memory
        del array, through_view
        view.release()


def test_torch_frombuffer_shares_the_memory() -> None:
    torch = pytest.importorskip("torch")
    with pynumabind.host_buffer(MIB, node=0) as buf:
        tensor = torch.frombuffer(buf, dtype=torch.uint8)
        tensor[:3] = 7
        assert buf[:3] == b"\x07\x07\x07" and tensor.data_ptr() == buf.address
        del tensor


def test_close_refuses_while_views_exist_and_keeps_the_buffer() -> None:
    buf = pynumabind.host_buffer(MIB, node=0)
    array = np.frombuffer(buf, dtype=np.uint8)
    with pytest.raises(BufferError, match="still used by a view"):
        buf.close()
    assert not buf.closed
    array[0] = 9  # still mapped and writable
    assert buf[0] == 9
    del array
    buf.close()
    assert buf.closed
    buf.close()  # a second close does nothing
    with pytest.raises(ValueError):
        memoryview(buf)


def test_an_error_in_the_block_is_not_hidden_by_the_views_it_left() -> None:
    with pytest.raises(KeyError, match="raised inside"):
        with pynumabind.host_buffer(MIB, node=0) as buf:
            array = np.frombuffer(buf, dtype=np.uint8)
            raise KeyError("raised inside")
    assert not buf.closed  # the array still uses it; unmapped when both go
    del array
    buf.close()


def test_a_view_keeps_the_buffer_alive() -> None:
    array = np.frombuffer(pynumabind.host_buffer(MIB, node=0), dtype=np.uint8)
    gc.collect()
    array[:] = 3
    assert int(array.sum()) == 3 * MIB


# ------------------------------------------------------------ huge pages


@pytest.fixture
def hugepage_advice(monkeypatch: pytest.MonkeyPatch) -> Tuple[int, List[Tuple[int, int]]]:
    """The huge-page size, and the ranges ``MADV_HUGEPAGE`` is asked for (the real call runs).

    THP reads as ``madvise`` for host_buffer; a kernel without THP skips the test.
    """
    huge = _libnuma.huge_page_size()
    if not huge:
        pytest.skip("this kernel has no transparent huge pages")
    monkeypatch.setattr(host, "_thp_mode", lambda: "madvise")
    advised: List[Tuple[int, int]] = []
    real = _libnuma.madvise

    def spy(start: int, length: int, advice: int) -> None:
        if advice == host.MADV_HUGEPAGE:
            advised.append((start, length))
        real(start, length, advice)

    monkeypatch.setattr(_libnuma, "madvise", spy)
    return huge, advised


def test_huge_pages_round_the_size_and_are_asked_for(
    hugepage_advice: Tuple[int, List[Tuple[int, int]]],
) -> None:
    huge, advised = hugepage_advice
    with pynumabind.host_buffer(huge + 1, node=0, huge=True) as buf:
        assert len(buf) == 2 * huge
        assert buf.placement.pages_per_node == {0: 2 * huge // PAGE}
        assert advised and all(s % huge == 0 and n % huge == 0 for s, n in advised)
        assert any("MADV_HUGEPAGE" in note for note in buf.notes)


def test_huge_pages_off_a_boundary_are_asked_for_between_the_first_and_last_one(
    hugepage_advice: Tuple[int, List[Tuple[int, int]]],
) -> None:
    """A mapping that does not start on a huge-page boundary (kernels before 6.7 place them so).

    This kernel aligns a large anonymous mapping, so the span is made inside a real one, a page
    past a boundary: ``MADV_HUGEPAGE`` (the real call) covers only the whole huge pages between
    the span's first and last boundary, and a note says why the rest has small pages.
    """
    huge, advised = hugepage_advice
    area = mmap.mmap(-1, 5 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        boundary = -(-base // huge) * huge
        start = boundary + PAGE  # a page past a boundary, as an older kernel may place it
        span = host.Span(start, 3 * huge, "mmap")
        notes = host._advise_huge(span, huge)
        assert advised == [(boundary + huge, 2 * huge)]  # the whole huge pages inside the span
        assert notes[0] == f"huge=True: MADV_HUGEPAGE on {2 * huge} bytes (THP enabled: madvise)"
        assert f"starts at {start:#x}, off a {huge >> 20} MiB boundary" in notes[1]
        assert len(notes) == 2
    finally:
        area.close()


def test_huge_pages_are_what_the_kernel_gives_the_touch() -> None:
    """With THP at ``madvise`` (or ``always``) the prefault gets huge pages: smaps counts them."""
    mode = host._thp_mode()
    if mode not in ("madvise", "always") or not _libnuma.huge_page_size():
        pytest.skip(f"transparent huge pages are {mode} here")
    huge = _libnuma.huge_page_size()
    with pynumabind.host_buffer(4 * huge, node=0, huge=True) as buf:
        fields = _smaps(buf.address)
        assert "hg" in fields["VmFlags"]  # MADV_HUGEPAGE on the mapping
        assert int(fields["AnonHugePages"][0]) * 1024 >= huge  # at least one huge page
        assert buf.placement.pages_per_node == {0: 4 * huge // PAGE}
    if mode == "madvise":
        with pynumabind.host_buffer(4 * huge, node=0) as plain:
            assert int(_smaps(plain.address)["AnonHugePages"][0]) == 0


def test_huge_pages_off_is_a_note_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "_thp_mode", lambda: "never")
    with pynumabind.host_buffer(MIB, node=0, huge=True) as buf:
        assert any("'never'" in note and "small pages" in note for note in buf.notes)
        assert buf.placement.not_present == 0


def test_the_thp_setting_is_read_from_the_kernel() -> None:
    mode = host._thp_mode()
    assert mode in (None, "always", "madvise", "never")


# ------------------------------------------------------------ errors


@pytest.mark.parametrize("nbytes", [0, -1, True, "1M", 1.5, None])
def test_a_bad_size_is_a_config_error(nbytes: Any) -> None:
    with pytest.raises(ConfigError, match="nbytes"):
        pynumabind.host_buffer(nbytes, node=0)


@pytest.mark.parametrize(
    ("keywords", "error", "words"),
    [
        ({}, ConfigError, "give node="),
        ({"node": 0, "gpu": 0}, ConfigError, "not both"),
        ({"node": 0, "policy": "local"}, ConfigError, "places nothing"),
        ({"node": 0, "policy": "spread"}, ConfigError, "invalid placement policy"),
        ({"node": 0, "weights": {0: 1}}, ConfigError, "weighted-interleave"),
        ({"node": 0, "huge": "yes"}, ConfigError, "huge must be"),
        ({"node": 0, "pin": 1}, ConfigError, "pin must be"),
        ({"node": 7}, UnknownIdError, r"node\(s\) 7"),
        ({"gpu": 0}, PlanError, "GPU"),
    ],
)
def test_bad_arguments_are_typed_errors(keywords: Dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        pynumabind.host_buffer(MIB, **keywords)


# ------------------------------------------------------------ who touches what (values)


def test_a_memory_only_node_is_touched_from_the_nearest_cpu_node() -> None:
    topology = make_topology(
        {0: "0-3", 1: "4-7", 2: ""},
        distance=lambda a, b: 10 if a == b else (15 if {a, b} == {1, 2} else 30),
    )
    segments = [(0x10000000, 64 * MIB, frozenset({0})), (0x20000000, 32 * MIB, frozenset({2}))]
    shares = _prefault.shares(segments, topology, frozenset(range(8)), max_threads=6)
    by_nodes: Dict[frozenset[int], List[_prefault.Share]] = {}
    for share in shares:
        by_nodes.setdefault(share.nodes, []).append(share)
    assert {s.cpus for s in by_nodes[frozenset({0})]} == {frozenset(range(4))}
    assert {s.cpus for s in by_nodes[frozenset({2})]} == {
        frozenset(range(4, 8))
    }  # node 1 is nearer
    assert len(by_nodes[frozenset({0})]) == 4 and len(by_nodes[frozenset({2})]) == 2
    # The shares are contiguous, cover each group exactly once, in whole pages.
    for nodes, group in by_nodes.items():
        pieces = sorted(p for share in group for p in share.pieces)
        wanted = [(s, n) for s, n, ns in segments if ns == nodes]
        assert pieces[0][0] == wanted[0][0]
        assert sum(n for _, n in pieces) == sum(n for _, n in wanted)
        assert all(n % PAGE == 0 for _, n in pieces)
        assert all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:]))


def test_runs_of_one_node_are_shared_among_that_nodes_threads_only() -> None:
    topology = make_topology({0: "0-1", 1: "2-3"})
    runs = [(i * 4 * MIB, 4 * MIB, frozenset({i % 2})) for i in range(6)]
    shares = _prefault.shares(runs, topology, frozenset(range(4)))
    for share in shares:
        node = next(iter(share.nodes))
        assert share.cpus == topology.nodes[node].cpus
        for start, length in share.pieces:
            run = next(r for r in runs if r[0] <= start < r[0] + r[1])
            assert run[2] == share.nodes and start + length <= run[0] + run[1]


def test_no_allowed_cpu_near_the_node_falls_back_to_the_allowed_ones() -> None:
    topology = make_topology({0: "0-1", 1: "2-3"})
    shares = _prefault.shares([(0, 8 * MIB, frozenset({1}))], topology, frozenset({0}))
    assert [s.cpus for s in shares] == [frozenset({0})]


# ------------------------------------------------------------ pinning (up to the GPU boundary)


class _Function:
    """A stand-in for one ctypes function: callable, and takes argtypes/restype."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def __call__(self, *args: Any) -> Any:
        return self.body(*args)


class FakeCudart:
    """A CUDA runtime with one GPU: the ctypes functions host_buffer calls, recorded.

    It stands in for ``libcudart.so`` at ``ctypes.CDLL``; no GPU is here.  At
    registration it checks, through the kernel, that every page of the range
    exists already (placed and prefaulted before the pin).
    """

    def __init__(self, status: int = 0) -> None:
        self.calls: List[Tuple[str, Tuple[Any, ...]]] = []
        self.status = status
        self.present_at_register: List[bool] = []
        self.devices = 1
        self.error = b"invalid argument"
        self.cudaGetDeviceCount = _Function(self._count)
        self.cudaHostRegister = _Function(self._register)
        self.cudaHostUnregister = _Function(self._unregister)
        self.cudaGetErrorString = _Function(lambda status: self.error)

    def _count(self, pointer: Any) -> int:
        if not self.devices:
            return 100  # cudaErrorNoDevice
        pointer._obj.value = self.devices
        return 0

    def _register(self, address: int, length: int, flags: int) -> int:
        self.calls.append(("register", (address, length, flags)))
        _, status = _libnuma.move_pages_status(list(range(address, address + length, PAGE)))
        self.present_at_register.append(all(s >= 0 for s in status))
        return self.status

    def _unregister(self, address: int) -> int:
        _, status = _libnuma.move_pages_status([address])
        mapped = status[0] != -errno.EFAULT
        self.calls.append(("unregister", (address, mapped)))
        return 0


@pytest.fixture
def fake_cudart(monkeypatch: pytest.MonkeyPatch) -> FakeCudart:
    fake = FakeCudart()
    real = ctypes.CDLL

    def cdll(name: Any, *args: Any, **kwargs: Any) -> Any:
        if name == "libcudart.so":
            return fake
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(_cudart.ctypes, "CDLL", cdll)
    return fake


def test_pin_registers_the_placed_buffer_and_unregisters_before_unmapping(
    fake_cudart: FakeCudart,
) -> None:
    with pynumabind.host_buffer(2 * MIB, node=0, pin=True) as buf:
        address = buf.address
        assert buf.pinned
        assert fake_cudart.calls == [("register", (address, 2 * MIB, 1))]  # Portable
        assert fake_cudart.present_at_register == [True]
        assert any("cudaHostRegister(Portable)" in n and "libcudart.so" in n for n in buf.notes)
    assert not buf.pinned and buf.closed
    assert fake_cudart.calls[1:] == [("unregister", (address, True))]  # still mapped then


def _smaps(address: int) -> Dict[str, List[str]]:
    """The ``/proc/self/smaps`` fields of the mapping holding ``address`` (name -> words)."""
    fields: Dict[str, List[str]] = {}
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                if inside:
                    return fields
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside:
                fields[head.rstrip(":")] = line.split()[1:]
    if not fields:
        raise AssertionError(f"no mapping at {address:#x}")
    return fields


def _vm_flags(address: int) -> List[str]:
    return _smaps(address)["VmFlags"]


def test_a_pinned_buffer_is_not_copied_on_fork(fake_cudart: FakeCudart) -> None:
    with pynumabind.host_buffer(MIB, node=0, pin=True) as pinned:
        assert "dc" in _vm_flags(pinned.address)  # MADV_DONTFORK (VM_DONTCOPY): not in a child
    with pynumabind.host_buffer(MIB, node=0) as plain:
        assert "dc" not in _vm_flags(plain.address)


def test_close_with_views_keeps_the_pin(fake_cudart: FakeCudart) -> None:
    buf = pynumabind.host_buffer(MIB, node=0, pin=True)
    view = memoryview(buf)
    with pytest.raises(BufferError, match="registered with CUDA again"):
        buf.close()
    assert buf.pinned and not buf.closed
    assert [c for c, _ in fake_cudart.calls] == ["register", "unregister", "register"]
    view.release()
    buf.close()
    assert [c for c, _ in fake_cudart.calls][-1] == "unregister" and not buf.pinned


def test_a_pinned_buffer_dropped_unclosed_is_unregistered_first(fake_cudart: FakeCudart) -> None:
    buf = pynumabind.host_buffer(MIB, node=0, pin=True)
    address = buf.address
    del buf
    gc.collect()
    assert fake_cudart.calls[-1] == ("unregister", (address, True))


def test_a_failed_registration_is_a_pin_error_and_unmaps(
    fake_cudart: FakeCudart, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cudart.status = 1
    made: List[host.HostBuffer] = []
    real_open = host._open
    monkeypatch.setattr(host, "_open", lambda size: made.append(real_open(size)) or made[-1])
    with pytest.raises(PinError, match=r"cudaHostRegister.*CUDA error 1 \(invalid argument\)"):
        pynumabind.host_buffer(MIB, node=0, pin=True)
    assert made[0].closed


def test_pin_goes_through_torch_when_the_process_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake torch at ``torch.cuda.cudart()`` (no GPU here): its runtime is used, checked."""
    calls: List[Tuple[str, Tuple[int, ...]]] = []
    checked: List[int] = []
    cudart = types.SimpleNamespace(
        cudaHostRegister=lambda a, n, f: calls.append(("register", (a, n, f))) or 0,
        cudaHostUnregister=lambda a: calls.append(("unregister", (a,))) or 0,
    )
    cuda = types.SimpleNamespace(
        is_available=lambda: True, cudart=lambda: cudart, check_error=checked.append
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="9.9", cuda=cuda))
    with pynumabind.host_buffer(MIB, node=0, pin=True) as buf:
        address = buf.address
        assert any("through torch 9.9" in n for n in buf.notes)
    assert calls == [("register", (address, MIB, 1)), ("unregister", (address,))]
    assert checked == [0, 0]


def test_without_cuda_pin_is_a_pin_error_naming_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    mapped: List[int] = []
    monkeypatch.setattr(host, "_open", mapped.append)
    with pytest.raises(PinError) as caught:
        pynumabind.host_buffer(MIB, node=0, pin=True)
    message = str(caught.value)
    assert "torch is not imported" in message
    assert "libcudart" in message or "reports no CUDA device" in message  # this machine's answer
    assert mapped == []  # refused before anything was mapped


def test_the_cuda_runtime_without_a_device_is_a_pin_error(
    fake_cudart: FakeCudart,
) -> None:
    fake_cudart.devices = 0
    fake_cudart.error = b"no CUDA-capable device is detected"
    with pytest.raises(PinError, match="no CUDA-capable device"):
        _pin.find_registrar()
