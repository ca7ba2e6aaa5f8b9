"""Host-side tests of the QEMU multi-NUMA guest harness.

The ``vm``-marked tests boot real guests (about 10-20 s each under TCG); one boot runs a probe
that checks several things at once and reports JSON.  The unmarked tests check the pure-Python
parts (argument rendering, payload quoting, initramfs format) without QEMU.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import harness
from .harness import (
    DEFAULT_KERNEL,
    GUEST_TMPDIR,
    HMAT_TOPOLOGY,
    KERNEL_6_1,
    KERNEL_6_12,
    KERNELS,
    PCI_DEVICE_IDS,
    STANDARD_TOPOLOGY,
    GuestBoot,
    GuestNode,
    GuestResult,
    GuestTimeout,
    GuestTopology,
    HmatLink,
    VmError,
    VmTools,
    _cached_kernel,
    _Cpio,
    _payload_script,
    check_visible_in_guest,
    format_cpulist,
    guest_env,
    guest_kernel,
    kernel_command_line,
    numa_balancing_arg,
    resolve_modules,
    run_in_guest,
)

# 2 sockets x 2 CPUs plus a memory-only node, distances all different from the defaults, and
# PCI devices on node 1 and on the memory-only node 2.
PROBE_TOPOLOGY = GuestTopology(
    nodes=(
        GuestNode(cpus=(0, 1), mem_mb=384),
        GuestNode(cpus=(2, 3), mem_mb=384),
        GuestNode(cpus=None, mem_mb=256),
    ),
    distances={(0, 1): 25, (0, 2): 50, (1, 2): 35},
    pci_expander_nodes=(1, 2),
)

PROBE_EXIT = 7
TRICKY_ARG = 'it\'s "quoted" $HOME `id` \\ back\nslash; * ?'

PROBE = r"""
import json, os, sys
from pathlib import Path

def read(p):
    return Path(p).read_text().strip()

nodes = {}
for d in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
    meminfo = read(d / "meminfo")
    total_kb = next(int(l.split()[-2]) for l in meminfo.splitlines() if "MemTotal:" in l)
    nodes[d.name] = {"cpulist": read(d / "cpulist"),
                     "distance": [int(x) for x in read(d / "distance").split()],
                     "mem_kb": total_kb}
pci = {}
for d in sorted(Path("/sys/bus/pci/devices").iterdir()):
    pci[d.name] = {k: read(d / k)
                   for k in ("vendor", "device", "class", "numa_node", "local_cpulist")}
try:
    Path("/usr/.pynumabind-vm-write-test").write_text("x")
    root_writable = True
except OSError:
    root_writable = False
Path("/tmp/probe").write_text("ok")
# The host's /tmp stays visible (cwd is a host directory under it, and so is this interpreter's
# path); writing there must work and must not reach the host.
host_file = read("host-file")
Path("host-file").write_text("changed by the guest")
Path("guest-file").write_text("written by the guest")
import tempfile
with tempfile.NamedTemporaryFile(dir=None) as scratch:
    scratch_path = scratch.name
report = {
    "nodes": nodes,
    "states": {k: read(f"/sys/devices/system/node/{k}")
               for k in ("online", "possible", "has_cpu", "has_memory")},
    "pci": pci,
    "argv": sys.argv[1:],
    "executable": sys.executable,
    "cwd": os.getcwd(),
    "env": {k: os.environ.get(k)
            for k in ("PYNUMABIND_IN_GUEST", "PYTHONDONTWRITEBYTECODE", "HOME", "TMPDIR")},
    "root_writable": root_writable,
    "tmp_written": read("/tmp/probe") == "ok",
    "host_file": host_file,
    "cwd_written": read("host-file") == "changed by the guest" and read("guest-file") != "",
    "tempdir": os.path.dirname(scratch_path),
    "affinity": sorted(os.sched_getaffinity(0)),
    "cgroup2_controllers": read("/sys/fs/cgroup/cgroup.controllers").split(),
}
print("PROBE-JSON " + json.dumps(report))
sys.exit(@EXIT@)
""".replace("@EXIT@", str(PROBE_EXIT))


# --------------------------------------------------------------------------------------------
# Booting tests


HOST_FILE_TEXT = "written by the host"


@pytest.fixture(scope="module")
def host_tmp_dir() -> Iterator[Path]:
    """A directory under the host's /tmp (where many people clone and make venvs) holding a file
    and a link to this interpreter, named ``python3`` as in a venv: the probe runs from there."""
    path = Path(tempfile.mkdtemp(prefix="pynumabind-probe-", dir="/tmp"))
    try:
        (path / "host-file").write_text(HOST_FILE_TEXT)
        (path / "python3").symlink_to(sys.executable)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def probe(vm_tools: VmTools, host_tmp_dir: Path) -> tuple[GuestResult, dict[str, Any]]:
    result = run_in_guest(
        PROBE_TOPOLOGY,
        [str(host_tmp_dir / "python3"), "-c", PROBE, TRICKY_ARG, ""],
        timeout=150,
        cwd=host_tmp_dir,
    )
    boot = "?" if result.boot_seconds is None else f"{result.boot_seconds:.1f}"
    sys.stdout.write(
        f"probe guest: {result.seconds:.1f} s in all, {boot} s booting, "
        f"{result.cpu_seconds or 0:.1f} s of CPU\n"
    )
    if "PROBE-JSON" not in result.output:
        pytest.fail(f"probe printed no report (exit {result.returncode}):\n{result.console}")
    report: dict[str, Any] = result.tagged_json("PROBE-JSON")
    return result, report


@pytest.mark.vm
def test_failing_exit_status_comes_back(
    probe: tuple[GuestResult, dict[str, Any]],
) -> None:
    result, _ = probe
    assert result.returncode == PROBE_EXIT, result.output


@pytest.mark.vm
def test_node_cpulists(probe: tuple[GuestResult, dict[str, Any]]) -> None:
    nodes = probe[1]["nodes"]
    assert sorted(nodes) == ["node0", "node1", "node2"]
    assert nodes["node0"]["cpulist"] == "0-1"
    assert nodes["node1"]["cpulist"] == "2-3"
    assert nodes["node2"]["cpulist"] == ""


@pytest.mark.vm
def test_node_distances(probe: tuple[GuestResult, dict[str, Any]]) -> None:
    nodes = probe[1]["nodes"]
    got = [nodes[f"node{i}"]["distance"] for i in range(3)]
    assert got == [[10, 25, 50], [25, 10, 35], [50, 35, 10]]
    assert got == PROBE_TOPOLOGY.distance_matrix()


@pytest.mark.vm
def test_node_states_and_memory(probe: tuple[GuestResult, dict[str, Any]]) -> None:
    states = probe[1]["states"]
    assert states["online"] == "0-2"
    assert states["possible"] == "0-2"
    assert states["has_cpu"] == "0-1"
    assert states["has_memory"] == "0-2"
    for i, node in enumerate(PROBE_TOPOLOGY.nodes):
        mem_kb = probe[1]["nodes"][f"node{i}"]["mem_kb"]
        assert 0.75 * node.mem_mb * 1024 < mem_kb <= node.mem_mb * 1024, (i, mem_kb)


@pytest.mark.vm
def test_pci_devices_report_requested_node(
    probe: tuple[GuestResult, dict[str, Any]],
) -> None:
    pci = probe[1]["pci"]
    vendor, device, pci_class = PCI_DEVICE_IDS[PROBE_TOPOLOGY.pci_device]
    expected = dict(zip(PROBE_TOPOLOGY.pci_device_addresses(), PROBE_TOPOLOGY.pci_expander_nodes))
    assert expected == {"0000:21:00.0": 1, "0000:41:00.0": 2}
    for address, node in expected.items():
        assert address in pci, sorted(pci)
        dev = pci[address]
        assert (
            int(dev["vendor"], 16),
            int(dev["device"], 16),
            int(dev["class"], 16),
        ) == (vendor, device, pci_class)
        assert int(dev["numa_node"]) == node
        # A device on a CPU-less node has no local CPUs at all (empty local_cpulist).
        assert dev["local_cpulist"] == format_cpulist(PROBE_TOPOLOGY.nodes[node].cpu_ids)
    # Devices on the main bus have no node, and all CPUs are local to them.
    main_bus = [d for a, d in pci.items() if a.startswith("0000:00:")]
    assert main_bus
    assert all(int(d["numa_node"]) == -1 for d in main_bus)
    assert all(d["local_cpulist"] == "0-3" for d in main_bus)


@pytest.mark.vm
def test_guest_environment(probe: tuple[GuestResult, dict[str, Any]], host_tmp_dir: Path) -> None:
    report = probe[1]
    assert report["argv"] == [
        TRICKY_ARG,
        "",
    ]  # argv crosses into the guest byte for byte
    assert report["env"] == {
        "PYNUMABIND_IN_GUEST": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": "/tmp",
        "TMPDIR": GUEST_TMPDIR,
    }
    assert report["tempdir"] == GUEST_TMPDIR
    assert report["root_writable"] is False
    assert report["tmp_written"] is True
    assert report["affinity"] == [0, 1, 2, 3]
    assert "cpuset" in report["cgroup2_controllers"]  # for tests of cpuset-restricted binding


@pytest.mark.vm
def test_host_tmp_visible_and_unchanged(
    probe: tuple[GuestResult, dict[str, Any]], host_tmp_dir: Path
) -> None:
    """A checkout or venv under the host's /tmp works in the guest: the probe ran with an
    interpreter path and a working directory there and read the host's file; its writes stayed
    in the guest."""
    report = probe[1]
    assert report["executable"] == str(host_tmp_dir / "python3")
    assert report["cwd"] == str(host_tmp_dir)
    assert report["host_file"] == HOST_FILE_TEXT
    assert report["cwd_written"] is True
    assert (host_tmp_dir / "host-file").read_text() == HOST_FILE_TEXT
    assert not (host_tmp_dir / "guest-file").exists()


@pytest.mark.vm
def test_timeout_kills_qemu(vm_tools: VmTools) -> None:
    start = time.monotonic()
    with pytest.raises(GuestTimeout) as info:
        run_in_guest(PROBE_TOPOLOGY, ["sleep", "600"], timeout=4)
    elapsed = time.monotonic() - start
    assert elapsed < 4 + 10
    with pytest.raises(ProcessLookupError):
        os.kill(info.value.pid, 0)  # killed and reaped


# --------------------------------------------------------------------------------------------
# Pure-Python tests (no QEMU)


def test_qemu_args_render_topology() -> None:
    args = PROBE_TOPOLOGY.qemu_args()
    joined = " ".join(args)
    assert args[:4] == ["-m", "1024M", "-smp", "4,sockets=2,cores=2,threads=1"]
    assert "-numa node,nodeid=0,memdev=m0,cpus=0-1" in joined
    assert "-numa node,nodeid=1,memdev=m1,cpus=2-3" in joined
    assert "-numa node,nodeid=2,memdev=m2 " in joined
    assert "memory-backend-ram,id=m2,size=256M" in joined
    for spec in ("src=0,dst=1,val=25", "src=0,dst=2,val=50", "src=1,dst=2,val=35"):
        assert f"-numa dist,{spec}" in joined
    assert (
        "-device pxb,id=pxb0,bus_nr=32,numa_node=1,bus=pci.0 -device bochs-display,bus=pxb0,addr=0"
        in joined
    )
    assert (
        "-device pxb,id=pxb1,bus_nr=64,numa_node=2,bus=pci.0 -device bochs-display,bus=pxb1,addr=0"
        in joined
    )


def test_asymmetric_distance_and_uneven_nodes() -> None:
    topo = GuestTopology(
        nodes=(GuestNode((0,), 128), GuestNode((1, 2), 128)),
        distances={(0, 1): 20, (1, 0): 30},
    )
    args = " ".join(topo.qemu_args())
    assert "-smp 3,sockets=1,cores=3,threads=1" in args
    assert "dist,src=0,dst=1,val=20" in args and "dist,src=1,dst=0,val=30" in args
    assert topo.distance_matrix() == [[10, 20], [30, 10]]


@pytest.mark.parametrize(
    ("nodes", "distances", "pci"),
    [
        ((), {}, ()),
        ((GuestNode(None, 128),), {}, ()),
        ((GuestNode((0, 2), 128),), {}, ()),
        ((GuestNode((0,), 128), GuestNode((0,), 128)), {}, ()),
        ((GuestNode((0,), 0),), {}, ()),
        ((GuestNode((0,), 128), GuestNode((1,), 128)), {(0, 0): 20}, ()),
        ((GuestNode((0,), 128), GuestNode((1,), 128)), {(0, 1): 10}, ()),
        ((GuestNode((0,), 128),), {}, (1,)),
    ],
)
def test_invalid_topologies_rejected(
    nodes: tuple[GuestNode, ...],
    distances: dict[tuple[int, int], int],
    pci: tuple[int, ...],
) -> None:
    with pytest.raises(ValueError):
        GuestTopology(nodes=nodes, distances=distances, pci_expander_nodes=pci)


def test_topology_json_round_trip() -> None:
    again = GuestTopology.from_json(PROBE_TOPOLOGY.to_json())
    assert again == PROBE_TOPOLOGY
    assert again.distance_matrix() == PROBE_TOPOLOGY.distance_matrix()


def test_format_cpulist() -> None:
    assert format_cpulist((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert format_cpulist(()) == ""


def test_payload_script_quotes_argv() -> None:
    script = _payload_script(["echo", TRICKY_ARG], {"A": "x y'z"}, "/some dir")
    assert "export A='x y'\"'\"'z'" in script
    assert "cd '/some dir' || exit 125" in script
    assert script.rstrip().endswith(
        "exec echo " + "'it'\"'\"'s \"quoted\" $HOME `id` \\ back\nslash; * ?'"
    )
    with pytest.raises(ValueError):
        _payload_script(["true"], {"BAD-NAME": "1"}, "/")


def test_paths_hidden_in_guest_are_refused() -> None:
    check_visible_in_guest(["/usr/bin", "/work", "/tmp/checkout", "/run/x", "/tmp"])
    for path in ("/proc/1", "/sys", "/dev/shm/venv"):
        with pytest.raises(VmError, match="guest replaces"):
            check_visible_in_guest([path])


def test_cpio_newc_layout() -> None:
    archive = _Cpio()
    archive.file("a", b"12345")
    data = archive.finish()
    assert data.startswith(b"070701")
    assert data[110:112] == b"a\0"  # 110-byte header, then the name
    assert data[112:117] == b"12345"  # name padded to a 4-byte boundary: 110+2 = 112
    assert b"TRAILER!!!\0" in data
    assert len(data) % 4 == 0


@pytest.mark.vm
def test_module_dependencies_ordered(vm_tools: VmTools) -> None:
    names = [name for name, _ in resolve_modules(vm_tools.modules_dir)]
    for first, then in [
        ("virtio", "virtio_pci"),
        ("virtio_ring", "virtio"),
        ("netfs", "9p"),
        ("9pnet", "9pnet_virtio"),
    ]:
        if first in names:
            assert names.index(first) < names.index(then), names
    assert names[-2:] == ["9p", "overlay"]


def test_hmat_renders_links_initiators_and_the_machine_option() -> None:
    args = " ".join(HMAT_TOPOLOGY.qemu_args())
    assert HMAT_TOPOLOGY.machine_options() == "pc,hmat=on"
    assert STANDARD_TOPOLOGY.machine_options() == "pc"
    # The memory-only node is declared with its nearest initiator; CPU nodes are their own.
    assert "-numa node,nodeid=2,memdev=m2,initiator=1 " in args
    assert "-numa node,nodeid=0,memdev=m0,cpus=0-1 " in args
    lb = "-numa hmat-lb,initiator=1,target=2,hierarchy=memory"
    assert f"{lb},data-type=access-latency,latency=300 " in args
    assert f"{lb},data-type=access-bandwidth,bandwidth=5120M " in args
    assert args.count("hmat-lb") == 2 * 2 * 3  # latency and bandwidth, 2 initiators x 3 targets
    assert "hmat" not in " ".join(STANDARD_TOPOLOGY.qemu_args())
    assert GuestTopology.from_json(HMAT_TOPOLOGY.to_json()) == HMAT_TOPOLOGY
    assert HMAT_TOPOLOGY.nodes == STANDARD_TOPOLOGY.nodes


def test_incomplete_hmat_rejected() -> None:
    links = dict(HMAT_TOPOLOGY.hmat)
    del links[(0, 2)]
    with pytest.raises(ValueError, match=r"missing \[\(0, 2\)\]"):
        GuestTopology(nodes=STANDARD_TOPOLOGY.nodes, hmat=links)
    with pytest.raises(ValueError, match=r"not an initiator/target pair \[\(2, 2\)\]"):
        GuestTopology(
            nodes=STANDARD_TOPOLOGY.nodes,
            hmat={**HMAT_TOPOLOGY.hmat, (2, 2): HmatLink(10, 10)},
        )
    with pytest.raises(ValueError, match="positive"):
        HmatLink(0, 1024)


def test_kernels_by_name_and_their_packages() -> None:
    assert guest_kernel("6.12") is KERNEL_6_12 and guest_kernel(KERNEL_6_1) is KERNEL_6_1
    assert DEFAULT_KERNEL is KERNEL_6_1 and sorted(KERNELS) == ["6.1", "6.12"]
    with pytest.raises(ValueError, match=r"unknown guest kernel '5\.10'"):
        guest_kernel("5.10")
    # 6.1's prefix must not take a 6.12 image (nor the other way round).
    assert "linux-image-6.12.118+deb12-amd64".startswith(KERNEL_6_12.image_prefix)
    assert not "linux-image-6.12.118+deb12-amd64".startswith(KERNEL_6_1.image_prefix)
    assert "linux-image-6.1.0-57-amd64".startswith(KERNEL_6_1.image_prefix)


def test_cached_kernels_are_told_apart(tmp_path: Path) -> None:
    for package, release in [
        ("linux-image-6.1.0-9-amd64", "6.1.0-9-amd64"),
        ("linux-image-6.1.0-50-amd64", "6.1.0-50-amd64"),
        ("linux-image-6.12.118+deb12-amd64", "6.12.118+deb12-amd64"),
    ]:
        (tmp_path / package / "boot").mkdir(parents=True)
        (tmp_path / package / "boot" / f"vmlinuz-{release}").write_bytes(b"")
        (tmp_path / package / "lib" / "modules" / release).mkdir(parents=True)
    old = _cached_kernel(tmp_path, KERNEL_6_1)
    new = _cached_kernel(tmp_path, KERNEL_6_12)
    assert old is not None and old[1].name == "6.1.0-50-amd64"  # the newest 6.1
    assert new is not None and new[1].name == "6.12.118+deb12-amd64"
    assert _cached_kernel(tmp_path / "none", KERNEL_6_12) is None


def test_boot_facts_reach_the_guest_environment() -> None:
    boot = GuestBoot("6.12", "6.12.118+deb12-amd64", numa_balancing=True)
    env = guest_env(HMAT_TOPOLOGY, {"X": "1"}, boot)
    assert GuestBoot.from_env(env) == boot
    assert GuestTopology.from_json(env["PYNUMABIND_VM_TOPOLOGY"]) == HMAT_TOPOLOGY
    assert GuestBoot.from_env({}) is None
    assert numa_balancing_arg(True) == "numa_balancing=enable"
    assert "numa_balancing=disable" in kernel_command_line(False)
    assert "numa_balancing=enable" in kernel_command_line(True)


def test_no_root_setup_refuses_every_root_apt_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the no-root-setup switch no apt-get install, nor update as root, runs."""
    ran: list[list[str]] = []
    monkeypatch.setattr(harness, "_run_tool", lambda argv, **kw: ran.append(list(argv)) or "")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PYNUMABIND_TESTS_NO_ROOT_SETUP", "1")
    with pytest.raises(harness.VmUnavailable, match="not installing qemu-system-x86 and busybox"):
        harness._apt_install(harness.APT_PACKAGES)
    with pytest.raises(harness.VmUnavailable, match=r"not refreshing the package lists"):
        harness._apt_update()
    assert ran == []
    monkeypatch.delenv("PYNUMABIND_TESTS_NO_ROOT_SETUP")
    harness._apt_update()
    assert ran == [["apt-get", "update"]]
