"""``pynumabind.advise`` and ``pynumabind advise`` for real on this machine.

This machine has one NUMA node and no GPU: the matrix is 1 x 1, the
verdict is "no measurable difference (nothing remote to compare)", and the
GPU section is empty with the reason.  CUDA is tested up to its boundary
only: with no GPU here, the CUDA runtime (when installed) loads but reports
no usable device, and torch is not installed; the GPU copy path itself
runs on a GPU machine (benchmarks/gpu_advise.py).  The multi-node matrix,
placements and verdict are tested in the QEMU guest
(tests/vm/guest/test_guest_advise.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, Optional

import pytest

import pynumabind
from pynumabind._os import libnuma as _libnuma
from pynumabind.advisor import copies as _cuda
from pynumabind.advisor import memory as _measure
from pynumabind.advisor.rule import NO_DIFFERENCE
from pynumabind.errors import ConfigError, NumaSyscallError
from pynumabind.model import NumaNode, Topology

SMALL = 4 << 20  # bytes per buffer: enough for real copies, quick on two shared cores


def _state() -> tuple:
    policy = _libnuma.get_mempolicy()
    tasks = {int(t): frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
    return tasks.get(threading.get_native_id()), policy.mode, policy.nodes


@pytest.fixture(scope="module")
def advice() -> pynumabind.Advice:
    lines = []
    before = _state()
    result = pynumabind.advise(quick=True, buffer_bytes=SMALL, repeats=3, progress=lines.append)
    assert _state() == before, "advise changed the caller's affinity or memory policy"
    assert any("CPU node 0" in line for line in lines)
    return result


def test_one_node_json_shape_and_verdict(advice: pynumabind.Advice) -> None:
    data = json.loads(json.dumps(advice.to_dict()))
    assert data["schema"] == 1
    memory = data["memory"]
    assert memory["cpu_nodes"] == [0] and memory["memory_nodes"] == [0]
    (row,) = memory["bandwidth_gbs"]
    (value,) = row
    assert value > 0
    spread = memory["bandwidth_spread"][0][0]
    assert spread["n"] == 3 and spread["min"] <= spread["median"] <= spread["max"]
    assert memory["buffer_bytes"] == SMALL
    assert memory["latency_overhead_ns"]["median"] > 0
    rec = data["recommendation"]
    assert rec["bind"] is False and rec["mode"] == "none" and rec["policy"] == "none"
    assert rec["verdict"].startswith(NO_DIFFERENCE)
    assert rec["basis"] == "nothing to compare"
    assert data["firmware"]["slit"] == {"nodes": [0], "distances": [[10]]}


def test_every_buffer_was_checked_on_its_node(advice: pynumabind.Advice) -> None:
    assert advice.memory is not None
    where = advice.memory.cell(0, 0).placement
    assert where is not None and where.wanted == 0
    assert where.checked == SMALL // _measure.PAGE  # fewer pages than samples: every page
    assert where.fraction == 1.0


def test_no_gpu_here_the_gpu_section_is_empty_and_says_why(advice: pynumabind.Advice) -> None:
    # There is no GPU on this machine: CUDA is tested up to its boundary only.
    assert advice.copies == ()
    data = advice.to_dict()
    assert data["copies"] == []
    assert data["copies_status"]["measured"] is False
    assert data["copies_status"]["reason"].startswith("CUDA is not usable from this process: ")


def test_cuda_backend_boundary() -> None:
    backend, why = _cuda.find_backend(cudart_names=("libpynumabind-no-such-cudart.so",))
    assert backend is None
    assert "torch" in why and "not loadable" in why
    backend, why = _cuda.find_backend()  # the real torch/libcudart lookup on this GPU-less box
    assert backend is None and why


def test_cudart_declarations_bind_to_the_real_runtime_when_installed() -> None:
    import ctypes

    try:
        lib = ctypes.CDLL("libcudart.so")
    except OSError:
        pytest.skip("no CUDA runtime library installed here")
    backend = _cuda.CudartBackend(lib, "libcudart.so")  # every symbol resolves and is typed
    with pytest.raises(pynumabind.PynumabindError, match="cudaGetDeviceCount failed: CUDA error"):
        backend.count()  # no driver, no GPU on this machine


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="smaller than a page"):
        pynumabind.advise(buffer_bytes=1)
    with pytest.raises(ConfigError, match="repeats=0"):
        pynumabind.advise(repeats=0)


def test_run_bound_binds_only_the_new_thread() -> None:
    mine = frozenset(os.sched_getaffinity(0))
    cpu = min(mine)
    seen = _measure.run_bound(frozenset({cpu}), lambda: frozenset(os.sched_getaffinity(0)))
    assert seen == {cpu}
    assert frozenset(os.sched_getaffinity(0)) == mine
    with pytest.raises(NumaSyscallError, match="sched_setaffinity"):
        _measure.run_bound(frozenset({4000}), lambda: None)  # no such CPU: EINVAL, typed


def test_chase_chain_is_one_cycle_through_every_line_changing_page_each_step() -> None:
    pages = 16
    chain = _measure.chase_chain(pages, seed=7)
    lines = pages * _measure.PAGE // _measure.LINE
    index, seen = 0, set()
    page_words = _measure.PAGE // _measure.WORD
    for _ in range(lines):
        following = chain[index]
        assert following // page_words != index // page_words  # another page every step
        seen.add(index)
        index = following
    assert index == 0 and len(seen) == lines


def test_llc_sums_distinct_last_level_caches(tmp_path: Path) -> None:
    def cache(cpu: int, index: int, level: int, kind: str, size: str, *, shared: str) -> None:
        path = tmp_path / f"devices/system/cpu/cpu{cpu}/cache/index{index}"
        path.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (path / name).write_text(f"{text}\n")
        (path / "shared_cpu_list").write_text(f"{shared}\n")

    for cpu in range(4):
        cache(cpu, 0, 1, "Instruction", "64M", shared=str(cpu))  # never counted
        cache(cpu, 1, 2, "Unified", "1M", shared=str(cpu))
        cache(cpu, 2, 3, "Unified", "16384K", shared="0-1" if cpu < 2 else "2-3")
    assert _measure.llc_bytes([0, 1, 2, 3], str(tmp_path)) == 32 << 20
    assert _measure.llc_bytes([0, 1], str(tmp_path)) == 16 << 20
    assert _measure.llc_bytes([7], str(tmp_path)) is None


def test_firmware_reads_slit_and_hmat(tmp_path: Path) -> None:
    base = tmp_path / "devices/system/node/node1/access0/initiators"
    base.mkdir(parents=True)
    (base / "node0").mkdir()
    values: Dict[str, int] = {
        "read_bandwidth": 51200,
        "write_bandwidth": 25600,
        "read_latency": 250,
    }
    for name, value in values.items():
        (base / name).write_text(f"{value}\n")
    topology = Topology(
        nodes={
            0: NumaNode(0, frozenset({0}), distances={0: 10, 1: 20}),
            1: NumaNode(1, frozenset(), distances={0: 20, 1: 10}),
        },
        cpus={},
        gpus=(),
        allowed_cpus=frozenset({0}),
        allowed_mems=frozenset({0, 1}),
    )
    firmware = _measure.firmware(topology, str(tmp_path))
    assert firmware.distances == ((10, 20), (20, 10))
    (entry,) = firmware.hmat
    assert (entry.target, entry.access, entry.initiators) == (1, 0, (0,))
    assert (entry.read_bandwidth_mbs, entry.write_bandwidth_mbs) == (51200, 25600)
    assert (entry.read_latency_ns, entry.write_latency_ns) == (250, None)
    assert firmware.hmat_note is None
    assert "no HMAT" in (_measure.firmware(topology, str(tmp_path / "none")).hmat_note or "")


def test_buffer_size_is_several_llcs_within_free_memory() -> None:
    settings = _measure.Settings()
    assert _measure.buffer_size(settings, 32 << 20, None) == 128 << 20
    assert _measure.buffer_size(settings, None, None) == 64 << 20
    assert _measure.buffer_size(settings, 32 << 20, 100 << 20) == 25 << 20
    assert _measure.buffer_size(settings, 1 << 40, None) == settings.max_buffer
    assert _measure.buffer_size(_measure.Settings(quick=True), 32 << 20, None) == 64 << 20


# ------------------------------------------------------------------- CLI


def cli(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pynumabind", "advise", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def test_cli_json_and_progress_on_stderr() -> None:
    done = cli("--quick", "--json", "--no-latency")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["memory"]["cpu_nodes"] == [0]
    assert data["recommendation"]["bind"] is False
    assert data["memory"]["latency_ns"] == [[None]]
    assert "pynumabind advise: memory: CPU node 0" in done.stderr


def test_cli_table_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "advise.png"
    done = cli("--quick", "--no-latency", "--plot", str(png))
    assert done.returncode == 0, done.stderr
    assert "Memory bandwidth, GB/s" in done.stdout
    assert f"Recommendation: {NO_DIFFERENCE}" in done.stdout
    assert "GPU copies: none measured: CUDA is not usable" in done.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors_are_one_line_with_exit_codes(tmp_path: Path) -> None:
    usage = cli("--bogus")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    unwritable = cli("--quick", "--no-latency", "--plot", str(tmp_path / "no/such/dir/a.png"))
    assert unwritable.returncode == 1, unwritable.stderr
    assert unwritable.stderr.strip().splitlines()[-1].startswith("pynumabind: error: cannot write")
    assert "Traceback" not in unwritable.stderr


def test_cli_plot_without_matplotlib_fails_before_measuring(tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('matplotlib blocked for a test')\n")
    path = os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])
    done = cli("--plot", str(tmp_path / "a.png"), env={"PYTHONPATH": path})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "pynumabind: error: --plot needs matplotlib, which is not installed: "
        "pip install 'pynumabind[plot]' (matplotlib)"
    )
    assert not (tmp_path / "a.png").exists()
