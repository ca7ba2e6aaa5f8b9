"""The readers ``pynumabind report`` adds to ``_os``: the kernel's settings, this process's
cgroups and mapped files, and NVML's versions.

Read on this machine's own kernel and compared with the files read here
independently, in real cgroup v1 groups (a cpuset, a device controller
that allows two GPU nodes), and on small inputs that break one rule each.
NVML's versions come from the fake ``pynvml`` (no GPU here).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from pynumabind._os import kernel, libnuma, nvml, proc
from pynumabind.cpulist import parse_cpulist
from pynumabind.errors import ProcessStateError

from ..support import cgroups, fake_nvml
from ..support import sysfs_tree as st
from ..support.childproc import child_command
from . import child_cgroups

# ------------------------------------------------------------------ kernel


def _file(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read().strip()


def test_kernel_settings_are_the_files_as_read_here() -> None:
    found = kernel.settings()
    assert found.release == os.uname().release and found.problems == ()
    if os.path.exists(kernel.NUMA_BALANCING):
        value = _file(kernel.NUMA_BALANCING)
        assert found.numa_balancing == f"{kernel.BALANCING_MODES.get(value, 'unknown')} ({value})"
    else:
        assert found.numa_balancing is None
    for path, got in (
        (kernel.THP_ENABLED, found.thp_enabled),
        (kernel.THP_DEFRAG, found.thp_defrag),
    ):
        if os.path.exists(path):
            chosen = [w[1:-1] for w in _file(path).split() if w.startswith("[")]
            assert [got] == chosen
        else:
            assert got is None


@pytest.mark.parametrize(
    ("text", "chosen"),
    [("always [madvise] never", "madvise"), ("[always] madvise never\n", "always"), ("1", "1")],
)
def test_bracketed(text: str, chosen: str) -> None:
    assert kernel.bracketed(text) == chosen


def test_a_setting_that_cannot_be_read_is_a_problem_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # not a regular file: read_ascii refuses it, without blocking
    monkeypatch.setattr(kernel, "THP_ENABLED", str(fifo))
    monkeypatch.setattr(kernel, "NUMA_BALANCING", str(tmp_path / "missing"))
    found = kernel.settings()
    assert found.thp_enabled is None and found.numa_balancing is None
    assert len(found.problems) == 1 and str(fifo) in found.problems[0]


# ------------------------------------------------------------------ cgroups


def test_this_process_cgroups_are_the_files_as_read_here() -> None:
    limits = proc.cgroup_limits()
    with open("/proc/self/cgroup", encoding="ascii") as handle:
        lines = [line.rstrip("\n").split(":", 2) for line in handle]
    assert set(limits.paths.values()) == {path for _, _, path in lines}
    if limits.cpuset_file is not None:
        assert limits.cpuset_cpus == parse_cpulist(_file(limits.cpuset_file))
        assert os.sched_getaffinity(0) <= limits.cpuset_cpus
        assert limits.cpuset_mems is not None
        assert limits.cpuset_mems == proc.status_mems_allowed()


@pytest.fixture
def cpuset0() -> Iterator[str]:
    yield from cgroups.group("cpuset", {"cpuset.cpus": "0", "cpuset.mems": "0"})


def test_cgroup_limits_inside_a_real_cpuset(cpuset0: str) -> None:
    done = cgroups.run_moved(cpuset0, child_command(child_cgroups.cgroup_limits_once_moved))
    found = cgroups.report_of(done)
    name = cpuset0[len(f"{cgroups.CGROUP_V1}/cpuset") :]
    assert found["paths"]["cpuset"] == name
    assert found["version"] in ("v1", "hybrid")
    assert (found["cpuset_cpus"], found["cpuset_mems"]) == ([0], [0])
    assert found["cpuset_file"] == f"{cpuset0}/cpuset.effective_cpus"


@pytest.fixture
def two_gpu_nodes() -> Iterator[str]:
    """A device cgroup that lets its tasks open /dev/nvidia0 and /dev/nvidia3 (and nvidiactl)."""
    yield from cgroups.group(
        "devices",
        {
            "devices.deny": "a",
            "devices.allow": "c 1:* rwm",  # /dev/null, /dev/urandom ...: what Python opens
        },
    )


def test_cgroup_limits_inside_a_real_device_cgroup(two_gpu_nodes: str) -> None:
    for rule in ("c 195:0 rw", "c 195:3 rw", "c 195:255 rw", "b 8:0 r"):
        cgroups.write(f"{two_gpu_nodes}/devices.allow", rule)
    done = cgroups.run_moved(two_gpu_nodes, child_command(child_cgroups.cgroup_limits_once_moved))
    found = cgroups.report_of(done)
    assert found["devices"] == {
        "path": f"{two_gpu_nodes}/devices.list",
        "all": False,
        "gpus": [0, 3],  # 255 is nvidiactl, no GPU; block devices are not NVIDIA's
    }


@pytest.mark.parametrize(
    ("rules", "everything", "gpus"),
    [
        ("a *:* rwm\n", True, set()),
        ("c *:* m\nb *:* m\n", True, set()),
        ("c 195:* rw\n", True, set()),
        ("c 1:3 rwm\nc 195:0 rw\nc 195:7 rw\nc 195:254 rw\nc 195:255 rw\n", False, {0, 7}),
        ("c 195:x rw\nmalformed\n\nc 10:200 rw\n", False, set()),
        ("", False, set()),
    ],
)
def test_device_rules(rules: str, everything: bool, gpus: set) -> None:
    found = proc.parse_device_rules(rules, "devices.list")
    assert (found.everything, set(found.nvidia_gpus)) == (everything, gpus)


def test_a_malformed_cgroup_file_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "cgroup"
    bad.write_text("no colons here\n")
    monkeypatch.setattr(proc, "CGROUPS", str(bad))
    with pytest.raises(ProcessStateError, match="malformed line 'no colons here'"):
        proc.cgroup_limits()


@pytest.mark.parametrize(
    ("text", "version"),
    [("0::/user.slice\n", "v2"), ("4:cpuset:/\n1:name=systemd:/\n", "v1"),
     ("4:cpuset:/\n0::/\n", "hybrid"), ("", "none")],
)  # fmt: skip
def test_cgroup_version(
    text: str, version: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "cgroup"
    path.write_text(text)
    monkeypatch.setattr(proc, "CGROUPS", str(path))
    monkeypatch.setattr(proc, "CGROUP_ROOT", str(tmp_path / "no-such-root"))
    limits = proc.cgroup_limits()
    assert limits.version == version
    assert (limits.cpuset_cpus, limits.devices) == (None, None)  # no files under that root


# ------------------------------------------------------------- mapped files


def test_mapped_file_names_the_libnuma_this_process_loaded() -> None:
    libnuma.load()
    found = proc.mapped_file("libnuma")
    assert found is not None and os.path.basename(found).startswith("libnuma.so")
    assert os.path.samefile(found, os.path.realpath(found))
    assert proc.mapped_file("no-such-library-") is None


# ------------------------------------------------------------- NVML versions


def test_nvml_versions_from_the_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_nvml.install_fake_nvml(
        monkeypatch,
        st.load_machine("dgx_h100"),
        versions={"driver": "550.54.15", "nvml": "12.550.54.15", "cuda": 12040},
    )
    found = nvml.versions()
    assert (found.driver, found.nvml, found.cuda_driver) == ("550.54.15", "12.550.54.15", "12.4")
    assert found.notes == () and fake.init_count == fake.shutdown_count == 1


def test_nvml_versions_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    fake_nvml.install_fake_nvml(
        monkeypatch, st.load_machine("dgx_h100"), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    )
    with pytest.raises(nvml.NvmlUnavailable, match="nvmlInit failed: Driver Not Loaded"):
        nvml.versions()


def test_nvml_versions_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml.hide_pynvml(monkeypatch)
    with pytest.raises(nvml.NvmlUnavailable, match="not importable"):
        nvml.versions()
    assert nvml.binding_release() is not None  # the metadata is read, pynvml is not imported
