"""The libnuma shim against the real libnuma and kernel of this machine."""

from __future__ import annotations

import errno
import glob
import mmap
import os
import sys
import threading
import time
from typing import Any, Callable, List, Optional

import pytest

from pynumabind._mempolicy import MODE_NAMES, MODE_SINCE
from pynumabind._os import libnuma as _libnuma
from pynumabind.cpulist import parse_cpulist
from pynumabind.errors import LibnumaUnavailableError, NumaSyscallError

from ..support import child_cold
from ..support import libnuma_oracle as oracle
from ..support.childproc import run_in_child

SYS_NODE = "/sys/devices/system/node"


def _sys_nodes() -> dict[int, frozenset[int]]:
    out = {}
    for path in glob.glob(f"{SYS_NODE}/node[0-9]*"):
        with open(f"{path}/cpulist") as handle:
            out[int(path.rsplit("node", 1)[1])] = parse_cpulist(handle.read())
    return out


def test_library_loads_and_numa_is_available() -> None:
    assert _libnuma.available()


def test_node_and_cpu_queries_agree_with_sysfs() -> None:
    nodes = _sys_nodes()
    assert nodes, "this machine exposes no NUMA nodes in sysfs"
    assert oracle.max_node() == max(nodes)
    for node, cpus in nodes.items():
        assert oracle.node_to_cpus(node) == cpus
        for cpu in cpus:
            assert oracle.node_of_cpu(cpu) == node
        total, free = _libnuma.node_memory(node)
        with open(f"{SYS_NODE}/node{node}/meminfo") as handle:
            memtotal_kb = next(int(line.split()[3]) for line in handle if "MemTotal" in line)
        assert total == memtotal_kb * 1024
        assert 0 <= free <= total
        with open(f"{SYS_NODE}/node{node}/distance") as handle:
            row = [int(x) for x in handle.read().split()]
        assert [oracle.distance(node, other) for other in sorted(nodes)] == row


def test_node_to_cpus_of_missing_node_raises_without_printing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    missing = max(_sys_nodes()) + 7
    with pytest.raises(NumaSyscallError) as info:
        oracle.node_to_cpus(missing)
    assert info.value.errno == errno.EINVAL
    assert str(missing) in str(info.value)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("nbits_source", ["cpus", "nodes"])
def test_bitmask_round_trip_up_to_possible_ids(nbits_source: str) -> None:
    nbits = oracle.possible_cpu_bits() if nbits_source == "cpus" else _libnuma.possible_node_bits()
    samples = [
        frozenset(),
        frozenset({0}),
        frozenset({nbits - 1}),
        frozenset(range(0, nbits, 3)),
        frozenset(range(nbits)),
        frozenset({63, 64, 127, 128}) & frozenset(range(nbits)),
    ]
    lib = oracle.lib()
    for ids in samples:
        with oracle.allocated_bitmask(nbits, ids) as bmp:
            assert int(bmp.size) >= nbits
            assert oracle.bitmask_to_set(bmp) == ids
            assert int(lib.numa_bitmask_weight(bmp)) == len(ids)
            for i in (0, nbits - 1):
                assert bool(lib.numa_bitmask_isbitset(bmp, i)) == (i in ids)
        assert _libnuma.words_to_set(_libnuma.set_to_words(ids, nbits)) == ids
        # what get_mempolicy reads its masks with: a cffi array of the words
        array = _libnuma._ffi().new("unsigned long[]", _libnuma.set_to_words(ids, nbits))
        assert _libnuma._mask_to_set(array) == ids == _libnuma.words_to_set(array)


def test_bitmask_rejects_ids_outside_width() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        with oracle.allocated_bitmask(64, {64}):
            pass


def test_allowed_cpus_and_mems_match_proc_status() -> None:
    with open("/proc/self/status") as handle:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in handle if ":\t" in line)
    assert frozenset(os.sched_getaffinity(0)) == parse_cpulist(status["Cpus_allowed_list"])
    assert _libnuma.get_mems_allowed() == parse_cpulist(status["Mems_allowed_list"])


def test_empty_bind_mask_maps_to_einval_with_context() -> None:
    with pytest.raises(NumaSyscallError) as info:
        _libnuma.set_mempolicy(_libnuma.MPOL_BIND, frozenset())
    assert info.value.errno == errno.EINVAL
    assert "set_mempolicy(MPOL_BIND)" in str(info.value)
    assert info.value.nodes == frozenset()
    assert isinstance(info.value, OSError)


def test_node_beyond_mask_width_is_a_clear_error() -> None:
    with pytest.raises(NumaSyscallError, match="does not fit"):
        _libnuma.set_mempolicy(_libnuma.MPOL_BIND, {_libnuma.possible_node_bits() + 5})


def test_set_and_get_mempolicy_round_trip() -> None:
    node = min(_libnuma.get_mems_allowed())
    before = _libnuma.get_mempolicy()
    try:
        for mode in (_libnuma.MPOL_BIND, _libnuma.MPOL_PREFERRED, _libnuma.MPOL_INTERLEAVE):
            _libnuma.set_mempolicy(mode, {node})
            policy = _libnuma.get_mempolicy()
            assert (policy.mode, policy.nodes) == (mode, frozenset({node}))
        _libnuma.set_mempolicy(_libnuma.MPOL_LOCAL)
        assert _libnuma.get_mempolicy().mode == _libnuma.MPOL_LOCAL
    finally:
        _libnuma.set_mempolicy(before.mode, before.nodes, before.flags)
    assert _libnuma.get_mempolicy() == before


def test_mbind_and_page_queries_see_touched_pages() -> None:
    node = min(_libnuma.get_mems_allowed())
    buffer = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    try:
        assert set(_libnuma.page_nodes(buffer)) == {-errno.ENOENT}  # not yet touched
        _libnuma.mbind(buffer, _libnuma.MPOL_BIND, {node})
        buffer[:] = b"\x01" * len(buffer)
        assert _libnuma.page_nodes(buffer) == [node] * 4
        assert oracle.move_buffer_pages(buffer, node) == [node] * 4
    finally:
        buffer.close()


def test_migrate_pages_on_self_returns_count() -> None:
    nodes = _libnuma.get_mems_allowed()
    assert _libnuma.migrate_pages(0, nodes, nodes) == 0


def test_feature_probe_reports_kernel_support() -> None:
    release = tuple(int(x) for x in os.uname().release.split(".")[:2])
    # MPOL_PREFERRED_MANY arrived in 5.15, weighted interleave in 6.9.
    assert _libnuma.supports_mode(_libnuma.MPOL_PREFERRED_MANY) is (release >= (5, 15))
    assert _libnuma.supports_mode(_libnuma.MPOL_WEIGHTED_INTERLEAVE) is (release >= (6, 9))
    # The policy table's versions, which its fallback notes name, agree with the kernel.
    for mode, since in MODE_SINCE.items():
        assert _libnuma.supports_mode(mode) is (release >= since), MODE_NAMES[mode]
    # The probe must leave the thread's policy alone.
    assert _libnuma.get_mempolicy().mode == _libnuma.MPOL_DEFAULT


def test_features_are_probed_once_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_libnuma._state, "modes", {})
    probed = []
    real = _libnuma._probe_mode
    monkeypatch.setattr(_libnuma, "_probe_mode", lambda mode: probed.append(mode) or real(mode))
    for _ in range(3):
        _libnuma.supports_mode(_libnuma.MPOL_PREFERRED_MANY)
    assert probed == [_libnuma.MPOL_PREFERRED_MANY]  # weighted interleave: never asked


def test_a_library_lacking_a_required_symbol_is_named() -> None:
    """A shared object that loads but is not libnuma: the error names what it lacks."""
    with pytest.raises(LibnumaUnavailableError, match=r"does not export numa_available"):
        _libnuma.load("libm.so.6")


def test_missing_library_names_the_package_to_install() -> None:
    with pytest.raises(LibnumaUnavailableError) as info:
        _libnuma.load("libnuma-does-not-exist.so.1")
    message = str(info.value)
    assert "libnuma1" in message and "numactl-libs" in message
    assert "libnuma-does-not-exist.so.1" in message


def test_import_does_not_load_libnuma_or_pynvml() -> None:
    loaded, stderr = run_in_child(child_cold.loaded_after_import, "pynvml", "numpy", "_cffi")
    assert loaded == []
    assert stderr == ""


# ------------------------------------------------- loading once, under a lock


def _race(call: Callable[[], Any], threads: int = 8) -> List[Any]:
    """``call`` from ``threads`` threads released at once; what each got."""
    barrier = threading.Barrier(threads)
    got: List[Any] = [None] * threads

    def run(index: int) -> None:
        barrier.wait()
        got[index] = call()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return got


class _SlowFfi:
    """The real FFI, with a ``dlopen`` that counts its calls and takes its time."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.opened: List[str] = []

    def dlopen(self, name: str) -> Any:
        self.opened.append(name)
        time.sleep(0.05)  # a slow disk: every racing thread reaches load() meanwhile
        return self.real.dlopen(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_racing_loads_dlopen_the_library_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = _SlowFfi(_libnuma._ffi())
    monkeypatch.setattr(_libnuma, "_state", {"ffi": ffi})  # nothing loaded yet
    libs = _race(_libnuma.load)
    assert ffi.opened == [_libnuma.LIBRARY_NAME]
    assert all(lib is libs[0] for lib in libs)
    assert int(libs[0].numa_available()) >= 0


def test_racing_first_uses_build_the_ffi_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pynumabind import _libnuma_build

    built: List[Any] = []
    real_build = _libnuma_build.build_ffi

    def slow_build() -> Any:
        time.sleep(0.05)
        built.append(real_build())
        return built[-1]

    monkeypatch.setitem(sys.modules, "pynumabind._libnuma_ffi", None)  # not generated
    monkeypatch.setattr(_libnuma_build, "build_ffi", slow_build)
    monkeypatch.setattr(_libnuma, "_state", {})
    ffis = _race(_libnuma._ffi)
    assert len(built) == 1 and all(f is built[0] for f in ffis)


def test_racing_questions_about_a_mode_probe_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_libnuma._state, "modes", {})
    probed: List[int] = []

    def slow_probe(mode: int) -> Optional[bool]:
        probed.append(mode)
        time.sleep(0.05)
        return True

    monkeypatch.setattr(_libnuma, "_probe_mode", slow_probe)
    answers = _race(lambda: _libnuma.supports_mode(_libnuma.MPOL_PREFERRED_MANY))
    assert probed == [_libnuma.MPOL_PREFERRED_MANY] and answers == [True] * 8
