"""Boot a throw-away multi-NUMA QEMU guest that runs commands on the host's own files.

The development and CI machines have a single NUMA node, so binding "to another node" cannot be
tested on them directly.  This module boots a Debian generic kernel (6.1 by default, or 6.12)
under QEMU (TCG) with a chosen NUMA topology (optionally with a firmware HMAT, and with automatic
NUMA balancing on or off), shares the host's root file system read-only over 9p, chroots into it
and runs one command there.  The host's interpreter, libnuma and checkout are therefore used
unchanged, at the same paths, inside a kernel that really has several nodes.  Only /proc, /sys
and /dev are the guest's own; /tmp and /run show the host's files under a writable layer that
stays in the guest (``GUEST_OVERLAID_DIRS``), so a checkout or venv under the host's /tmp works
too.

Main entry points:

* :func:`ensure_tools` -- find (or install with apt) ``qemu-system-x86_64``, a static busybox and
  a generic kernel (``KERNELS``: ``"6.1"``, ``"6.12"``); raises :class:`VmUnavailable` when that
  is impossible.
* :class:`GuestTopology` / :class:`GuestNode` / :class:`HmatLink` -- the guest's NUMA layout and
  firmware HMAT, rendered to QEMU args (``STANDARD_TOPOLOGY``, ``HMAT_TOPOLOGY``).
* :func:`run_in_guest` -- boot (``kernel=``, ``numa_balancing=``), run one command, return a
  :class:`GuestResult`; the command sees how it was booted in ``PYNUMABIND_VM_BOOT``
  (:class:`GuestBoot`).
* :func:`run_pytest_in_guest` -- run the host's pytest on the working tree inside the guest.

Everything binary lives in ``tests/vm/.cache/`` (git-ignored; override with
``PYNUMABIND_VM_CACHE``).  Nothing here needs network access once that cache is filled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import logging
import lzma
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..support import root_setup

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The working tree this harness belongs to (``tests/vm/harness.py`` -> repository root)."""

DEFAULT_CACHE_DIR = Path(__file__).resolve().parent / ".cache"

IN_GUEST_ENV = "PYNUMABIND_IN_GUEST"
"""Set to ``"1"`` in every command the harness runs inside a guest."""

TOPOLOGY_ENV = "PYNUMABIND_VM_TOPOLOGY"
"""JSON form of the :class:`GuestTopology` the guest was booted with (see ``to_json``)."""

BOOT_ENV = "PYNUMABIND_VM_BOOT"
"""JSON form of the :class:`GuestBoot` (kernel, NUMA balancing) the guest was booted with."""

HOST_RECORD_ENV = "PYNUMABIND_VM_HOST_ADVICE"
"""The host's advice record (saved by ``test_guest_suite``), read in the guest: stale there."""

APT_PACKAGES = root_setup.QEMU_PACKAGES
"""Debian packages providing ``qemu-system-x86_64`` and a static ``/bin/busybox``.

The initramfs is written by this module itself (``newc`` cpio format), so ``cpio`` is not needed.
Installed only as root, and never under ``PYNUMABIND_TESTS_NO_ROOT_SETUP=1``
(``tests/support/root_setup.py``).
"""


@dataclass(frozen=True)
class GuestKernel:
    """A Debian kernel series the guest can boot.

    ``meta_package`` is the package whose ``Depends:`` names the current image package
    (``apt-cache depends``); the image's name must start with ``linux-image-<series>.`` (so a
    cached ``linux-image-6.12.*`` is never taken for 6.1).  The image is fetched with
    ``apt-get download`` and unpacked into the cache once; after that no registry is asked.
    """

    name: str
    meta_package: str
    series: str

    @property
    def image_prefix(self) -> str:
        """Start of the versioned image package's name, e.g. ``linux-image-6.1.``."""
        return f"linux-image-{self.series}."


KERNEL_6_1 = GuestKernel("6.1", "linux-image-amd64", "6.1")
"""Debian 12's default kernel (``linux-image-amd64``): 9p, virtio and netfs/fscache as modules."""

KERNEL_6_12 = GuestKernel("6.12", "linux-image-6.12-amd64", "6.12")
"""Debian 12's newer kernel (bookworm-security): virtio built in; 9p, 9pnet, 9pnet_virtio and
netfs as modules.  Has weighted interleave (6.9+), and memory tiers for CPU-less nodes from HMAT
(6.10+)."""

KERNELS: Mapping[str, GuestKernel] = {k.name: k for k in (KERNEL_6_1, KERNEL_6_12)}
DEFAULT_KERNEL = KERNEL_6_1


def guest_kernel(kernel: GuestKernel | str) -> GuestKernel:
    """``kernel`` itself, or the kernel of that name in ``KERNELS`` (``ValueError`` if none)."""
    if isinstance(kernel, GuestKernel):
        return kernel
    try:
        return KERNELS[kernel]
    except KeyError:
        raise ValueError(
            f"unknown guest kernel {kernel!r}; known: {', '.join(sorted(KERNELS))}"
        ) from None


# 9p and its transport, and overlayfs (the guest's writable /tmp and /run over the host's), as
# modules of Debian's generic kernel.  Dependencies (virtio_ring, netfs, fscache, ...) are read
# from each module's .modinfo and loaded first.
ROOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")

# Known-good order, used only to sort modules that have no dependency relation among themselves.
_PREFERRED_ORDER = (
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "netfs",
    "fscache",
    "9pnet",
    "9pnet_virtio",
    "9p",
    "overlay",
)

# QEMU device placed behind each pxb expander bridge.  bochs-display is a plain PCI display
# controller (its option ROM comes with seabios, a dependency of qemu-system-x86; it needs no
# guest driver to appear in sysfs), the closest simple stand-in for a GPU.  The guest kernel
# reports it with these ids (checked by test_harness.py):
DEFAULT_PCI_DEVICE = "bochs-display"
PCI_DEVICE_IDS: Mapping[str, tuple[int, int, int]] = {
    # qemu device -> (vendor, device, class) as in /sys/bus/pci/devices/*/{vendor,device,class}
    "bochs-display": (0x1234, 0x1111, 0x038000),
}

GUEST_OVERLAID_DIRS = ("/tmp", "/run")
"""Host directories the guest shows read-only under a writable layer of its own (overlayfs on a
tmpfs): a checkout or venv there stays visible at its path, and what the guest writes there stays
in the guest."""

GUEST_PRIVATE_DIRS = ("/proc", "/sys", "/dev")
"""Guest mount points that hide the host's directory of the same path (the kernel's own file
systems; see ``_INIT_TEMPLATE``)."""

GUEST_TMPDIR = "/tmp/.pynumabind-vm/tmp"
"""``TMPDIR`` in the guest: an empty directory that exists only in the guest's writable layer, so
``tempfile`` and pytest's ``tmp_path`` never start from (or clean up) the host's temporary files,
which the guest sees under /tmp."""

_PXB_FIRST_BUS = 0x20
_PXB_BUS_STRIDE = 0x20
_MAX_EXPANDERS = (0xFF - _PXB_FIRST_BUS) // _PXB_BUS_STRIDE + 1  # bus_nr is 8 bits


# --------------------------------------------------------------------------------------------
# Errors


class VmError(RuntimeError):
    """Base class for everything this harness raises."""


class VmUnavailable(VmError):
    """QEMU, busybox or the guest kernel cannot be obtained here; tests should skip."""


class GuestError(VmError):
    """The guest did not run the command to completion (QEMU failed, init failed, panic...)."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(f"{message}\n--- guest console (last 4000 chars) ---\n{output[-4000:]}")
        self.output = output


class GuestTimeout(GuestError):
    """The guest did not power off within the time bound; QEMU was killed."""

    def __init__(self, timeout: float, output: str, pid: int) -> None:
        super().__init__(
            f"guest did not finish within {timeout:.0f} s (qemu pid {pid} killed)",
            output,
        )
        self.timeout = timeout
        self.pid = pid


# --------------------------------------------------------------------------------------------
# Topology


@dataclass(frozen=True)
class GuestNode:
    """One guest NUMA node: its CPUs (``None`` or empty for a memory-only node) and memory."""

    cpus: tuple[int, ...] | None
    mem_mb: int

    @property
    def cpu_ids(self) -> tuple[int, ...]:
        return tuple(self.cpus or ())


@dataclass(frozen=True)
class HmatLink:
    """What the firmware's HMAT says about one initiator (CPU node) reaching one memory node.

    QEMU writes it as two ``-numa hmat-lb`` entries (``hierarchy=memory``): ``access-latency``
    in nanoseconds and ``access-bandwidth`` in MiB/s (``bandwidth=<n>M``).  The guest kernel
    shows them as ``read_/write_latency`` (ns) and ``read_/write_bandwidth`` (MiB/s) under
    ``/sys/devices/system/node/nodeT/access0/initiators/``.  Under TCG nothing is really faster
    or slower: these are the firmware's figures, not what a copy measures.
    """

    latency_ns: int
    bandwidth_mib_s: int

    def __post_init__(self) -> None:
        if self.latency_ns <= 0 or self.bandwidth_mib_s <= 0:
            raise ValueError(f"HMAT latency and bandwidth must be positive: {self}")


@dataclass(frozen=True)
class GuestTopology:
    """The guest's NUMA layout.

    ``distances`` maps ``(a, b)`` to the SLIT distance between two different nodes; a pair given in
    one direction only is taken as symmetric, and unlisted pairs get 20 (after construction the
    mapping holds every ordered pair).  ``pci_expander_nodes``
    puts one ``pxb`` expander bridge per entry, with its ``numa_node`` set to that node, and one
    ``pci_device`` (a QEMU ``-device`` name) behind each.

    ``hmat`` (empty: no HMAT) maps ``(initiator, target)`` to an :class:`HmatLink` for every CPU
    node (initiator) and every node (target); the machine then gets ``hmat=on``, and each
    memory-only node is declared with the initiator nearest to it (lowest latency, then highest
    bandwidth, then lowest id), as QEMU requires.
    """

    nodes: tuple[GuestNode, ...]
    distances: Mapping[tuple[int, int], int] = field(default_factory=dict, hash=False)
    pci_expander_nodes: tuple[int, ...] = ()
    pci_device: str = DEFAULT_PCI_DEVICE
    hmat: Mapping[tuple[int, int], HmatLink] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a guest needs at least one NUMA node")
        cpus = [c for node in self.nodes for c in node.cpu_ids]
        if not cpus:
            raise ValueError("at least one node must have CPUs")
        if sorted(cpus) != list(range(len(cpus))):
            raise ValueError(
                f"guest CPUs must be 0..N-1, each on exactly one node; got {sorted(cpus)}"
            )
        for i, node in enumerate(self.nodes):
            if node.mem_mb <= 0:
                raise ValueError(
                    f"node {i}: mem_mb must be positive (QEMU needs memory on every node)"
                )
        n = len(self.nodes)
        for (a, b), d in self.distances.items():
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(
                    f"distance key {(a, b)} must name two different nodes in 0..{n - 1}"
                )
            if not 10 < d <= 254:
                raise ValueError(f"distance {(a, b)}={d} must be in 11..254")
        # Normalise to every ordered pair, so equal layouts compare equal however they were given.
        given = dict(self.distances)
        full = {
            (a, b): given.get((a, b), given.get((b, a), 20))
            for a in range(n)
            for b in range(n)
            if a != b
        }
        object.__setattr__(self, "distances", full)
        if len(self.pci_expander_nodes) > _MAX_EXPANDERS:
            raise ValueError(f"at most {_MAX_EXPANDERS} pci expander bridges")
        for node_id in self.pci_expander_nodes:
            if not 0 <= node_id < n:
                raise ValueError(f"pci expander node {node_id} not in 0..{n - 1}")
        if self.hmat:
            initiators = [i for i, node in enumerate(self.nodes) if node.cpu_ids]
            wanted = {(i, t) for i in initiators for t in range(n)}
            if set(self.hmat) != wanted:
                missing = sorted(wanted - set(self.hmat))
                extra = sorted(set(self.hmat) - wanted)
                raise ValueError(
                    "hmat needs exactly one link per (CPU node, node) pair; "
                    f"missing {missing}, not an initiator/target pair {extra}"
                )
        object.__setattr__(self, "hmat", dict(sorted(self.hmat.items())))

    # -- derived -------------------------------------------------------------------------

    @property
    def cpu_count(self) -> int:
        return sum(len(node.cpu_ids) for node in self.nodes)

    @property
    def mem_mb(self) -> int:
        return sum(node.mem_mb for node in self.nodes)

    def distance(self, a: int, b: int) -> int:
        """The distance the guest kernel should report from node ``a`` to node ``b``."""
        return 10 if a == b else self.distances[(a, b)]

    def distance_matrix(self) -> list[list[int]]:
        n = len(self.nodes)
        return [[self.distance(a, b) for b in range(n)] for a in range(n)]

    def initiator(self, node_id: int) -> int | None:
        """The HMAT initiator QEMU is told for ``node_id`` (None: no HMAT, or a CPU node)."""
        if not self.hmat or self.nodes[node_id].cpu_ids:
            return None
        links = [(link, i) for (i, t), link in self.hmat.items() if t == node_id]
        return min(links, key=lambda li: (li[0].latency_ns, -li[0].bandwidth_mib_s, li[1]))[1]

    def machine_options(self) -> str:
        """The ``-machine`` value: QEMU's ``pc``, with ``hmat=on`` when there is an HMAT."""
        return "pc,hmat=on" if self.hmat else "pc"

    def pci_bus_numbers(self) -> tuple[int, ...]:
        """Root bus number of each expander bridge, in ``pci_expander_nodes`` order."""
        return tuple(
            _PXB_FIRST_BUS + i * _PXB_BUS_STRIDE for i in range(len(self.pci_expander_nodes))
        )

    def pci_device_addresses(self) -> tuple[str, ...]:
        """Guest PCI address of the device behind each expander, in ``pci_expander_nodes`` order.

        QEMU's ``pxb`` puts an internal PCI bridge (1b36:0001) at ``<bus_nr>:00.0``; the device
        sits behind it on bus ``bus_nr + 1``.  Both report the expander's ``numa_node``.
        """
        return tuple(f"0000:{bus + 1:02x}:00.0" for bus in self.pci_bus_numbers())

    # -- rendering -----------------------------------------------------------------------

    def qemu_args(self) -> list[str]:
        """``-m``/``-smp``/``-object``/``-numa``/``-device`` arguments for this topology."""
        args = ["-m", f"{self.mem_mb}M"]
        cpu_nodes = [node for node in self.nodes if node.cpu_ids]
        sizes = {len(node.cpu_ids) for node in cpu_nodes}
        contiguous = all(
            list(node.cpu_ids) == list(range(min(node.cpu_ids), max(node.cpu_ids) + 1))
            for node in cpu_nodes
        )
        if len(sizes) == 1 and contiguous:
            # One socket per CPU-bearing node, so the guest's package ids match its nodes.
            args += [
                "-smp",
                f"{self.cpu_count},sockets={len(cpu_nodes)},cores={sizes.pop()},threads=1",
            ]
        else:
            args += [
                "-smp",
                f"{self.cpu_count},sockets=1,cores={self.cpu_count},threads=1",
            ]
        for i, node in enumerate(self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{i},size={node.mem_mb}M"]
            spec = f"node,nodeid={i},memdev=m{i}"
            for lo, hi in _ranges(node.cpu_ids):
                spec += f",cpus={lo}" if lo == hi else f",cpus={lo}-{hi}"
            initiator = self.initiator(i)
            if initiator is not None:
                spec += f",initiator={initiator}"
            args += ["-numa", spec]
        n = len(self.nodes)
        if n > 1:
            for a in range(n):
                for b in range(a + 1, n):
                    args += ["-numa", f"dist,src={a},dst={b},val={self.distance(a, b)}"]
                    if self.distance(b, a) != self.distance(a, b):
                        args += [
                            "-numa",
                            f"dist,src={b},dst={a},val={self.distance(b, a)}",
                        ]
        for (initiator, target), link in self.hmat.items():
            lb = f"hmat-lb,initiator={initiator},target={target},hierarchy=memory"
            args += ["-numa", f"{lb},data-type=access-latency,latency={link.latency_ns}"]
            args += ["-numa", f"{lb},data-type=access-bandwidth,bandwidth={link.bandwidth_mib_s}M"]
        for i, (node_id, bus_nr) in enumerate(zip(self.pci_expander_nodes, self.pci_bus_numbers())):
            args += [
                "-device",
                f"pxb,id=pxb{i},bus_nr={bus_nr},numa_node={node_id},bus=pci.0",
            ]
            args += ["-device", f"{self.pci_device},bus=pxb{i},addr=0"]
        return args

    def to_json(self) -> str:
        return json.dumps(
            {
                "nodes": [
                    {"cpus": list(node.cpu_ids), "mem_mb": node.mem_mb} for node in self.nodes
                ],
                "distances": self.distance_matrix(),
                "pci_expander_nodes": list(self.pci_expander_nodes),
                "pci_device": self.pci_device,
                "pci_bus_numbers": list(self.pci_bus_numbers()),
                "pci_device_addresses": list(self.pci_device_addresses()),
                "hmat": [
                    [i, t, link.latency_ns, link.bandwidth_mib_s]
                    for (i, t), link in self.hmat.items()
                ],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> GuestTopology:
        data = json.loads(text)
        nodes = tuple(GuestNode(tuple(n["cpus"]) or None, int(n["mem_mb"])) for n in data["nodes"])
        matrix: list[list[int]] = data["distances"]
        distances = {
            (a, b): int(matrix[a][b])
            for a in range(len(nodes))
            for b in range(len(nodes))
            if a != b
        }
        return cls(
            nodes=nodes,
            distances=distances,
            pci_expander_nodes=tuple(int(x) for x in data["pci_expander_nodes"]),
            pci_device=str(data["pci_device"]),
            hmat={
                (int(i), int(t)): HmatLink(int(lat), int(bw))
                for i, t, lat, bw in data.get("hmat", ())
            },
        )


STANDARD_TOPOLOGY = GuestTopology(
    nodes=(
        GuestNode(cpus=(0, 1), mem_mb=512),
        GuestNode(cpus=(2, 3), mem_mb=512),
        GuestNode(cpus=None, mem_mb=256),
    ),
    # Two sockets at the usual remote distance; node 2 stands for device memory attached close to
    # socket 1 (30) and farther from socket 0 (40).
    distances={(0, 1): 21, (1, 2): 30, (0, 2): 40},
    # A device on a CPU node and one on the memory-only node (as a Grace GPU on its HBM node).
    pci_expander_nodes=(1, 2),
)
"""Topology used by ``test_guest_suite.py`` for the guest-side tests in ``tests/vm/guest``.

node0: CPUs 0-1, 512 MiB; node1: CPUs 2-3, 512 MiB; node2: memory only, 256 MiB.
Distances 0-1 = 21, 1-2 = 30, 0-2 = 40.  Two bochs-display PCI devices (vendor 0x1234, device
0x1111, class 0x038000), each behind a pxb expander: on node 1 at guest address 0000:21:00.0
(local_cpulist 2-3) and on the memory-only node 2 at 0000:41:00.0 (empty local_cpulist).
"""


HMAT_TOPOLOGY = GuestTopology(
    nodes=STANDARD_TOPOLOGY.nodes,
    distances=STANDARD_TOPOLOGY.distances,
    pci_expander_nodes=STANDARD_TOPOLOGY.pci_expander_nodes,
    hmat={
        # Each socket's own memory, and the other socket's.
        (0, 0): HmatLink(latency_ns=100, bandwidth_mib_s=20480),
        (1, 1): HmatLink(latency_ns=100, bandwidth_mib_s=20480),
        (0, 1): HmatLink(latency_ns=150, bandwidth_mib_s=10240),
        (1, 0): HmatLink(latency_ns=150, bandwidth_mib_s=10240),
        # The memory-only node: a quarter of the local bandwidth at three times the latency
        # from socket 1 (its nearest, as in the SLIT), less still from socket 0.
        (1, 2): HmatLink(latency_ns=300, bandwidth_mib_s=5120),
        (0, 2): HmatLink(latency_ns=400, bandwidth_mib_s=4096),
    },
)
"""``STANDARD_TOPOLOGY`` (same nodes, distances and PCI devices) with a firmware HMAT that makes
node 2 a slower memory tier, as a CXL expander is: from its nearest initiator (node 1) it has
a quarter of the local bandwidth (5120 of 20480 MiB/s) at three times the latency (300 ns).
On 6.12 the kernel puts nodes 0-1 in one memory tier and node 2 alone in a slower one."""


def format_cpulist(cpus: Sequence[int]) -> str:
    """Kernel cpulist/nodelist syntax: ``(0, 1, 2, 5)`` -> ``"0-2,5"``; empty -> ``""``."""
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in _ranges(cpus))


def _ranges(values: Sequence[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in sorted(values):
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


# --------------------------------------------------------------------------------------------
# Tools and kernel


@dataclass(frozen=True)
class VmTools:
    qemu: Path
    busybox: Path
    kernel: Path
    modules_dir: Path
    """``lib/modules/<version>`` of the unpacked kernel package."""
    guest_kernel: GuestKernel = DEFAULT_KERNEL
    """Which kernel series ``kernel`` is."""

    @property
    def kernel_release(self) -> str:
        """The kernel's release string (``uname -r`` in the guest), e.g. ``6.1.0-50-amd64``."""
        return self.modules_dir.name


def _cache_dir() -> Path:
    env = os.environ.get("PYNUMABIND_VM_CACHE")
    return Path(env) if env else DEFAULT_CACHE_DIR


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_tool(argv: Sequence[str], cwd: Path | None = None, timeout: float = 900) -> str:
    """Run a setup command; raise VmUnavailable with its output if it fails."""
    log.info("running %s", shlex.join(argv))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VmUnavailable(f"{shlex.join(argv)} failed: {exc}") from exc
    if proc.returncode != 0:
        raise VmUnavailable(f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    return proc.stdout


def _require_apt(what: str, *, root: bool) -> None:
    if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
        raise VmUnavailable(f"{what} is missing and there is no apt-get to get it")
    if root and os.geteuid() != 0:
        raise VmUnavailable(f"{what} is missing and installing it needs root (apt-get)")


def _apt_install(packages: Sequence[str]) -> None:
    if root_setup.off():
        raise VmUnavailable(
            root_setup.skip_reason(
                f"installing {' and '.join(packages)} with apt-get",
                f"install them yourself ({', '.join(root_setup.QEMU_PROGRAMS)} on PATH)",
            )
        )
    _require_apt(" and ".join(packages), root=True)
    # Wait for another apt/dpkg run (e.g. a parallel test session) instead of failing at once.
    argv = [
        "apt-get",
        "-o",
        "DPkg::Lock::Timeout=600",
        "install",
        "-y",
        "--no-install-recommends",
        *packages,
    ]
    try:
        _run_tool(argv)
    except VmUnavailable:
        log.info("apt-get install failed; refreshing package lists and retrying")
        _apt_update()
        _run_tool(argv)


def _apt_update() -> None:
    """``apt-get update``: as root it rewrites the host's package lists, so not under the switch."""
    if root_setup.off() and os.geteuid() == 0:
        raise VmUnavailable(root_setup.skip_reason("refreshing the package lists (apt-get update)"))
    _run_tool(["apt-get", "update"])


def _is_static_elf(path: Path) -> bool:
    """True if ``path`` is an ELF64 executable without a PT_INTERP (dynamic loader) header."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:5] != b"\x7fELF\x02":
        return False
    (e_phoff,) = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(e_phnum):
        (p_type,) = struct.unpack_from("<I", data, e_phoff + i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def _find_host_tools() -> tuple[Path | None, Path | None]:
    qemu = shutil.which("qemu-system-x86_64")
    busybox = next(
        (
            p
            for p in (Path("/bin/busybox"), Path("/usr/bin/busybox"))
            if p.is_file() and _is_static_elf(p)
        ),
        None,
    )
    return (Path(qemu) if qemu else None), busybox


def _kernel_package_name(kernel: GuestKernel) -> str:
    _require_apt(f"the {kernel.name} guest kernel", root=False)  # apt-get download needs no root
    pattern = rf"Depends:\s*({re.escape(kernel.image_prefix)}[\w.+-]*-amd64)\b"
    out = _run_tool(["apt-cache", "depends", kernel.meta_package])
    names = re.findall(pattern, out)
    if not names:
        # Stale or missing package lists; as non-root this fails and the lists stay as they are.
        with contextlib.suppress(VmUnavailable):
            _apt_update()
        out = _run_tool(["apt-cache", "depends", kernel.meta_package])
        names = re.findall(pattern, out)
    if not names:
        raise VmUnavailable(
            f"cannot tell the {kernel.name} kernel package from "
            f"`apt-cache depends {kernel.meta_package}` (want {kernel.image_prefix}*-amd64):\n{out}"
        )
    return str(names[0])


def _cached_kernel(cache: Path, kernel: GuestKernel = DEFAULT_KERNEL) -> tuple[Path, Path] | None:
    """The newest unpacked ``kernel`` in the cache as (vmlinuz, lib/modules/<ver>), if any."""
    found: list[tuple[Path, Path]] = []
    for root in sorted(cache.glob(f"{kernel.image_prefix}*"), key=_natural_key):
        for vmlinuz in sorted(root.glob("boot/vmlinuz-*")):
            version = vmlinuz.name[len("vmlinuz-") :]
            for base in ("lib", "usr/lib"):
                mods = root / base / "modules" / version
                if mods.is_dir():
                    found.append((vmlinuz, mods))
    return found[-1] if found else None


def _natural_key(path: Path) -> list[tuple[int, str]]:
    """Sort key putting linux-image-6.1.0-50 after linux-image-6.1.0-9."""
    return [(int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", path.name)]


def _fetch_kernel(cache: Path, kernel: GuestKernel = DEFAULT_KERNEL) -> tuple[Path, Path]:
    package = _kernel_package_name(kernel)
    workdir = Path(tempfile.mkdtemp(prefix="download-", dir=cache))
    try:
        try:
            _run_tool(["apt-get", "download", package], cwd=workdir)
        except VmUnavailable:
            _apt_update()
            _run_tool(["apt-get", "download", package], cwd=workdir)
        debs = sorted(workdir.glob("*.deb"))
        if not debs:
            raise VmUnavailable(f"apt-get download {package} produced no .deb")
        unpacked = workdir / "root"
        _run_tool(["dpkg-deb", "-x", str(debs[0]), str(unpacked)])
        target = cache / package
        if target.exists():
            shutil.rmtree(target)
        unpacked.rename(target)  # atomic within the cache directory
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    found = _cached_kernel(cache, kernel)
    if found is None:
        raise VmUnavailable(f"{package} did not contain boot/vmlinuz-* and lib/modules/<version>")
    return found


_TOOLS: dict[str, VmTools] = {}


def ensure_tools(kernel: GuestKernel | str = DEFAULT_KERNEL) -> VmTools:
    """Return the tools, installing QEMU/busybox and fetching ``kernel`` into the cache if needed.

    ``kernel`` is a :class:`GuestKernel` or its name in ``KERNELS`` (``"6.1"``, ``"6.12"``).
    Raises :class:`VmUnavailable` (tests turn it into a skip, or a failure under
    ``PYNUMABIND_VM_REQUIRED=1``) when they cannot be had: not root, no apt, no registry, no
    such package.  Safe to call concurrently from several processes (file lock).
    """
    wanted = guest_kernel(kernel)
    if wanted.name in _TOOLS:
        return _TOOLS[wanted.name]
    cache = _cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VmUnavailable(f"cannot create the VM cache directory {cache}: {exc}") from exc
    with _locked(cache / ".lock"):
        qemu, busybox = _find_host_tools()
        if qemu is None or busybox is None:
            _apt_install(APT_PACKAGES)
            qemu, busybox = _find_host_tools()
            if qemu is None or busybox is None:
                raise VmUnavailable(
                    "qemu-system-x86_64 or a static /bin/busybox still missing after "
                    "apt-get install"
                )
        found = _cached_kernel(cache, wanted) or _fetch_kernel(cache, wanted)
    tools = VmTools(
        qemu=qemu, busybox=busybox, kernel=found[0], modules_dir=found[1], guest_kernel=wanted
    )
    _TOOLS[wanted.name] = tools
    log.info("VM tools: qemu=%s busybox=%s kernel=%s", qemu, busybox, found[0])
    return tools


# --------------------------------------------------------------------------------------------
# Kernel modules


def _module_index(modules_dir: Path) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for path in modules_dir.rglob("*.ko*"):
        name = path.name.split(".ko", 1)[0].replace("-", "_")
        index.setdefault(name, path)
    return index


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".ko"):
        return data
    if path.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    raise VmError(f"unsupported module compression: {path}")


def _modinfo_depends(module: bytes) -> list[str]:
    """Dependencies named in the ``depends=`` field of an ELF64 module's ``.modinfo`` section."""
    if module[:5] != b"\x7fELF\x02":
        raise VmError("kernel module is not ELF64")
    (e_shoff,) = struct.unpack_from("<Q", module, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", module, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        base = e_shoff + i * e_shentsize
        (name,) = struct.unpack_from("<I", module, base)
        offset, size = struct.unpack_from("<QQ", module, base + 0x18)
        return name, offset, size

    _, str_off, _ = section(e_shstrndx)
    for i in range(e_shnum):
        name_off, offset, size = section(i)
        end = module.index(b"\0", str_off + name_off)
        if module[str_off + name_off : end] == b".modinfo":
            for entry in module[offset : offset + size].split(b"\0"):
                if entry.startswith(b"depends="):
                    value = entry[len(b"depends=") :].decode()
                    return [d.replace("-", "_") for d in value.split(",") if d]
            return []
    return []


def resolve_modules(
    modules_dir: Path, roots: Sequence[str] = ROOT_MODULES
) -> list[tuple[str, bytes]]:
    """``roots`` plus their dependencies, as (name, uncompressed .ko), dependencies first."""
    index = _module_index(modules_dir)
    loaded: dict[str, bytes] = {}
    deps: dict[str, list[str]] = {}
    todo = [r.replace("-", "_") for r in roots]
    while todo:
        name = todo.pop()
        if name in loaded:
            continue
        if name not in index:
            builtin = modules_dir / "modules.builtin"
            if builtin.is_file() and re.search(rf"/{re.escape(name)}\.ko\b", builtin.read_text()):
                deps[name] = []
                continue  # built into the kernel, nothing to load
            raise VmError(f"kernel module {name} not found under {modules_dir}")
        loaded[name] = _read_module(index[name])
        deps[name] = _modinfo_depends(loaded[name])
        todo.extend(deps[name])
    rank = {name: i for i, name in enumerate(_PREFERRED_ORDER)}
    ordered: list[str] = []
    pending = sorted(loaded, key=lambda m: (rank.get(m, len(rank)), m))
    while pending:
        ready = [m for m in pending if all(d in ordered or d not in loaded for d in deps[m])]
        if not ready:
            raise VmError(f"circular module dependencies among {pending}")
        ordered.append(ready[0])
        pending.remove(ready[0])
    return [(name, loaded[name]) for name in ordered]


# --------------------------------------------------------------------------------------------
# Initramfs


class _Cpio:
    """Minimal writer for the ``newc`` cpio format the kernel unpacks as initramfs."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._ino = 1

    def _entry(
        self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)
    ) -> None:
        encoded = name.encode() + b"\0"
        fields = (
            self._ino,
            mode,
            0,
            0,
            1,
            0,
            len(data),
            0,
            0,
            rdev[0],
            rdev[1],
            len(encoded),
            0,
        )
        self._ino += 1
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._buf.write(header + encoded)
        self._pad()
        self._buf.write(data)
        self._pad()

    def _pad(self) -> None:
        self._buf.write(b"\0" * (-self._buf.tell() % 4))

    def directory(self, name: str) -> None:
        self._entry(name, 0o040755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, 0o100000 | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self._entry(name, 0o020000 | mode, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self._buf.getvalue()


_INIT_TEMPLATE = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin /proc /sys /dev /mnt
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
fail() {{ echo "@@PYNUMABIND-VM:{nonce}:INIT-FAILED:$*@@"; poweroff -f; sleep 5; }}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in {modules}; do
    insmod /modules/$m.ko || fail "insmod $m"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize={msize},cache=loose hostroot /mnt \
    || fail "mount 9p"
mount -t proc proc /mnt/proc || fail "mount proc"
mount -t sysfs sysfs /mnt/sys || fail "mount sysfs"
mount -t cgroup2 cgroup2 /mnt/sys/fs/cgroup || fail "mount cgroup2"
mount -t devtmpfs devtmpfs /mnt/dev || fail "mount devtmpfs"
mkdir -p /mnt/dev/shm /mnt/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /mnt/dev/shm || fail "mount /dev/shm"
mount -t devpts devpts /mnt/dev/pts || fail "mount devpts"
# /tmp and /run: the host's own directories (a checkout or venv there stays visible, read-only)
# under a writable layer in the guest's memory (overlayfs), so nothing the guest writes reaches
# the host.
mkdir -p /scratch
mount -t tmpfs -o mode=755 tmpfs /scratch || fail "mount /scratch"
for d in {overlaid}; do
    mkdir -p /scratch/$d/upper /scratch/$d/work
    chmod "$(stat -c %a /mnt/$d)" /scratch/$d/upper || fail "chmod /$d"
    mount -t overlay -o lowerdir=/mnt/$d,upperdir=/scratch/$d/upper,workdir=/scratch/$d/work \
        overlay /mnt/$d || fail "mount overlay on /$d"
done
mkdir -p /mnt/tmp/.pynumabind-vm /mnt{guest_tmpdir} || fail "mkdir {guest_tmpdir}"
chmod 1777 /mnt{guest_tmpdir}
cp /payload.sh /mnt/tmp/.pynumabind-vm/payload.sh || fail "copy payload"
echo "@@PYNUMABIND-VM:{nonce}:BEGIN@@"
# Through a pipe, so the command sees a non-tty stdout as in CI (no colours, no progress rewrites).
{{ env -i chroot /mnt /bin/sh /tmp/.pynumabind-vm/payload.sh </dev/null
   echo $? >/payload.rc; }} 2>&1 | cat
rc=$(cat /payload.rc)
echo "@@PYNUMABIND-VM:{nonce}:EXIT:$rc@@"
poweroff -f
sleep 5
"""


def _payload_script(command: Sequence[str] | str, env: Mapping[str, str], cwd: str) -> str:
    lines = ["# generated by tests/vm/harness.py; runs inside the chroot under /bin/sh"]
    for key, value in sorted(env.items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"invalid environment variable name {key!r}")
        lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(f"cd {shlex.quote(cwd)} || exit 125")
    if isinstance(command, str):
        lines.append(command)
    else:
        if not command:
            raise ValueError("empty argv")
        lines.append("exec " + shlex.join(command))
    return "\n".join(lines) + "\n"


def build_initramfs(tools: VmTools, payload: str, nonce: str, msize: int = 512 * 1024) -> bytes:
    """An uncompressed initramfs with busybox, the 9p modules, ``/init`` and ``/payload.sh``."""
    modules = resolve_modules(tools.modules_dir)
    archive = _Cpio()
    for d in ("bin", "dev", "proc", "sys", "mnt", "modules"):
        archive.directory(d)
    archive.chardev("dev/console", 5, 1)
    archive.chardev("dev/null", 1, 3, mode=0o666)
    archive.file("bin/busybox", tools.busybox.read_bytes(), mode=0o755)
    archive.symlink("bin/sh", "busybox")
    for name, data in modules:
        archive.file(f"modules/{name}.ko", data)
    init = _INIT_TEMPLATE.format(
        nonce=nonce,
        modules=" ".join(name for name, _ in modules),
        msize=msize,
        overlaid=" ".join(d.lstrip("/") for d in GUEST_OVERLAID_DIRS),
        guest_tmpdir=GUEST_TMPDIR,
    )
    archive.file("init", init.encode(), mode=0o755)
    archive.file("payload.sh", payload.encode(), mode=0o644)
    return archive.finish()


# --------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True)
class GuestResult:
    """Outcome of one guest run.

    ``output`` is what the command wrote to stdout/stderr (the console between the harness's
    begin and exit markers; kernel messages can interleave but are mostly silenced by ``quiet``).
    ``console`` is the whole serial log, ``seconds`` the wall time from QEMU start to exit and
    ``boot_seconds`` the part of it before the command started (kernel boot, modules, mounts).
    ``cpu_seconds`` is the host CPU time (user + system) QEMU used, all its vCPU threads
    together (what the run cost the machine, next to ``seconds`` of wall time).
    """

    returncode: int
    output: str
    console: str
    seconds: float
    boot_seconds: float | None = None
    cpu_seconds: float | None = None

    def tagged_lines(self, tag: str) -> list[str]:
        """Rest of every output line starting with ``tag`` (e.g. a JSON payload after a marker)."""
        return [
            line[len(tag) :].strip() for line in self.output.splitlines() if line.startswith(tag)
        ]

    def tagged_json(self, tag: str) -> Any:
        """Parse the one ``tag``-prefixed line as JSON (``VmError`` unless exactly one)."""
        lines = self.tagged_lines(tag)
        if len(lines) != 1:
            raise VmError(
                f"expected one line starting with {tag!r}, found {len(lines)}:\n{self.output}"
            )
        return json.loads(lines[0])


@dataclass(frozen=True)
class GuestBoot:
    """How a guest was booted, as its commands see it in ``PYNUMABIND_VM_BOOT`` (JSON).

    ``kernel`` is the :class:`GuestKernel` name (``"6.1"``, ``"6.12"``), ``kernel_release`` its
    ``uname -r``, ``numa_balancing`` whether automatic NUMA balancing was asked for on the
    kernel command line (``numa_balancing=enable`` / ``disable``).
    """

    kernel: str = DEFAULT_KERNEL.name
    kernel_release: str = ""
    numa_balancing: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "kernel": self.kernel,
                "kernel_release": self.kernel_release,
                "numa_balancing": self.numa_balancing,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> GuestBoot:
        data = json.loads(text)
        return cls(
            kernel=str(data["kernel"]),
            kernel_release=str(data["kernel_release"]),
            numa_balancing=bool(data["numa_balancing"]),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GuestBoot | None:
        """The boot this process runs in (None outside a guest started by this harness)."""
        text = (os.environ if environ is None else environ).get(BOOT_ENV)
        return cls.from_json(text) if text else None


def numa_balancing_arg(enabled: bool) -> str:
    """The kernel command-line switch for automatic NUMA balancing."""
    return "numa_balancing=enable" if enabled else "numa_balancing=disable"


def guest_env(
    topology: GuestTopology,
    extra: Mapping[str, str] | None = None,
    boot: GuestBoot | None = None,
) -> dict[str, str]:
    """The environment every guest command starts with (the chroot starts from an empty one)."""
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/tmp",
        "TMPDIR": GUEST_TMPDIR,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        IN_GUEST_ENV: "1",
        TOPOLOGY_ENV: topology.to_json(),
        BOOT_ENV: (boot or GuestBoot()).to_json(),
    }
    if extra:
        env.update(extra)
    return env


def kernel_command_line(numa_balancing: bool = False) -> list[str]:
    """The guest kernel's command line (``-append``), before any ``extra_kernel_args``."""
    return [
        "console=ttyS0",
        "panic=-1",
        "oops=panic",
        "quiet",
        "loglevel=3",
        "mitigations=off",
        # Automatic NUMA balancing is on by default on a multi-node machine, as users have it.
        # It moves pages of mappings without a policy of their own towards the threads touching
        # them, and while it samples a page, 6.1's move_pages reports it as absent (-ENOENT).
        # Most guest tests check pynumabind's placements, not the balancer's, so they boot with
        # it off; the ones that must hold under it too run in a boot with it on.
        numa_balancing_arg(numa_balancing),
        "rdinit=/init",
    ]


#: The guest's CPU model (see :func:`qemu_argv`).
GUEST_CPU = "max,-erms,-fsrm"


def qemu_argv(
    tools: VmTools,
    topology: GuestTopology,
    initrd: str | os.PathLike[str],
    kernel_args: Sequence[str],
) -> list[str]:
    """QEMU's whole command line for one guest run.

    The CPU is TCG's ``max`` without ERMS and FSRM ("fast string" ``rep
    movsb``/``rep stosb``): with them the guest kernel zeroes and copies pages
    with byte-wise string instructions, which TCG runs one byte per iteration.
    Without them it uses its quadword loops: the 6.1 standard session took
    75-78 s and 90-93 s of QEMU's CPU instead of 96-99 s and 110-113 s
    (measured twice each on the 2-core development machine, nothing else
    running), and moving 64 MiB of pages 3-4 s instead of up to 11 s.
    Everything else about the CPU (its caches in sysfs included) is ``max``'s.

    One host thread runs the four vCPUs in turn (``thread=single``): the same
    session then took 80 s and 80 s of CPU (twice), against 75-78 s and 90-93 s
    with a thread per vCPU.  QEMU runs in a session of its own, which the
    kernel's autogroup scheduling gives one share however many threads it has,
    so on a busy host (CI) the CPU it needs is what sets its time, and the
    other tests get the CPU it no longer uses.  The guest still has four CPUs
    and preempts between them: the tests' threads still interleave.
    """
    return [
        str(tools.qemu),
        "-machine", topology.machine_options(),
        "-accel", "tcg,thread=single",
        "-cpu", GUEST_CPU,
        *topology.qemu_args(),
        "-kernel", str(tools.kernel),
        "-initrd", os.fspath(initrd),
        "-append", " ".join(kernel_args),
        # The host root, read-only over 9p.  Same as -virtfs, but pinned to the main bus:
        # left to QEMU, the device would land behind a pxb bridge, which refuses it.
        "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pci.0",
        "-nographic",
        "-no-reboot",
        "-nodefaults",
        "-serial", "stdio",
        "-monitor", "none",
    ]  # fmt: skip


def qemu_version(tools: VmTools) -> str:
    """The first line of ``qemu-system-x86_64 --version``."""
    out = _run_tool([str(tools.qemu), "--version"], timeout=60)
    return out.splitlines()[0].strip() if out.strip() else "unknown"


def run_in_guest(
    topology: GuestTopology,
    command: Sequence[str] | str,
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] = "/tmp",
    extra_kernel_args: Sequence[str] = (),
    kernel: GuestKernel | str = DEFAULT_KERNEL,
    numa_balancing: bool = False,
) -> GuestResult:
    """Boot a guest with ``topology``, run ``command`` in the chroot of the host root, power off.

    ``command`` is an argv list (executed with ``exec``, no shell interpretation) or a ``/bin/sh``
    script text.  It runs as root, with ``guest_env()`` plus ``env``, in ``cwd``, stdin from
    /dev/null.  The whole boot-run-poweroff is bounded by ``timeout`` seconds: past it QEMU's
    process group is killed and :class:`GuestTimeout` raised.  :class:`GuestError` is raised if the
    guest ends without reporting the command's exit status.  Nothing on the host is written
    except a temporary initramfs.

    ``kernel`` picks the guest kernel (``KERNELS``: ``"6.1"``, the default, or ``"6.12"``);
    :class:`VmUnavailable` if it cannot be had.  ``numa_balancing`` turns automatic NUMA
    balancing on or off on the kernel command line (off by default: see below); the command
    sees both in ``PYNUMABIND_VM_BOOT`` (:class:`GuestBoot`).
    """
    tools = ensure_tools(kernel)
    boot = GuestBoot(tools.guest_kernel.name, tools.kernel_release, numa_balancing)
    nonce = secrets.token_hex(8)
    payload = _payload_script(command, guest_env(topology, env, boot), os.fspath(cwd))
    initrd_bytes = build_initramfs(tools, payload, nonce)
    kernel_args = [*kernel_command_line(numa_balancing), *extra_kernel_args]
    with tempfile.TemporaryDirectory(prefix="pynumabind-vm-") as tmp:
        initrd = Path(tmp) / "initrd.cpio"
        initrd.write_bytes(initrd_bytes)
        argv = qemu_argv(tools, topology, initrd, kernel_args)
        log.debug("qemu argv: %s", shlex.join(argv))
        start = time.monotonic()
        cpu_before = _children_cpu()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        reader = _ConsoleReader(proc.stdout.fileno(), _begin_marker(nonce).encode())
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            reader.join(timeout=10)
            raise GuestTimeout(timeout, _decode(reader.data()), proc.pid) from None
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            reader.join(timeout=10)  # EOF once QEMU is gone
            proc.stdout.close()
        elapsed = time.monotonic() - start
        cpu = _children_cpu() - cpu_before  # QEMU, reaped by proc.wait(); nothing else ran
    boot = None if reader.marker_at is None else reader.marker_at - start
    result = _parse_console(_decode(reader.data()), nonce, elapsed, boot, proc.returncode)
    return dataclasses.replace(result, cpu_seconds=cpu)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _ConsoleReader(threading.Thread):
    """Drains QEMU's serial output and notes when the command started (boot time)."""

    def __init__(self, fd: int, marker: bytes) -> None:
        super().__init__(name="qemu-console", daemon=True)
        self._fd = fd
        self._marker = marker
        self._chunks: list[bytes] = []
        self._tail = b""
        self.marker_at: float | None = None

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._chunks.append(chunk)
            if self.marker_at is None:
                window = self._tail + chunk
                if self._marker in window:
                    self.marker_at = time.monotonic()
                self._tail = window[-len(self._marker) :]

    def data(self) -> bytes:
        return b"".join(self._chunks)


def _begin_marker(nonce: str) -> str:
    return f"@@PYNUMABIND-VM:{nonce}:BEGIN@@"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "")


def _parse_console(
    console: str, nonce: str, elapsed: float, boot: float | None, qemu_rc: int | None
) -> GuestResult:
    prefix = f"@@PYNUMABIND-VM:{nonce}:"
    failed = re.search(re.escape(prefix) + r"INIT-FAILED:(.*?)@@", console)
    if failed:
        raise GuestError(f"guest init failed: {failed.group(1)}", console)
    begin = console.find(_begin_marker(nonce))
    end = re.search(re.escape(prefix) + r"EXIT:(\d+)@@", console)
    if begin < 0 or end is None or end.start() < begin:
        raise GuestError(
            f"guest ended without reporting an exit status (qemu exit {qemu_rc})",
            console,
        )
    output = console[begin + len(_begin_marker(nonce)) : end.start()].lstrip("\n")
    log.info(
        "guest run took %.1f s (command started after %s s), exit %s",
        elapsed,
        "?" if boot is None else f"{boot:.1f}",
        end.group(1),
    )
    return GuestResult(
        returncode=int(end.group(1)),
        output=output,
        console=console,
        seconds=elapsed,
        boot_seconds=boot,
    )


def host_pythonpath() -> list[str]:
    """This process's ``sys.path`` directories, made absolute, for the guest's ``PYTHONPATH``.

    Exactly what the host test imports from (an editable install's path or pytest's
    ``pythonpath`` setting included); nothing is added, so the guest cannot import something
    the host test could not.
    """
    paths: list[str] = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.curdir)
        if os.path.isdir(path) and path not in paths:
            paths.append(path)
    return paths


def check_visible_in_guest(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Raise ``VmError`` if a path the guest must read is hidden by one of the guest's own mounts.

    Only the kernel's file systems (``GUEST_PRIVATE_DIRS``: /proc, /sys, /dev) are the guest's
    own; /tmp and /run show the host's files (``GUEST_OVERLAID_DIRS``), so a checkout or venv
    there works.  Fail clearly instead of with an ImportError or "not found" inside.
    """
    for path in paths:
        real = os.path.realpath(os.fspath(path))
        for private in GUEST_PRIVATE_DIRS:
            if real == private or real.startswith(private + "/"):
                raise VmError(
                    f"{path} (-> {real}) is under {private}, which the guest replaces with its "
                    "own mount; move it (or the checkout/venv) elsewhere"
                )


def run_pytest_in_guest(
    topology: GuestTopology,
    pytest_args: Sequence[str],
    *,
    timeout: float = 180.0,
    env: Mapping[str, str] | None = None,
    disable_plugins: Sequence[str] = (),
    kernel: GuestKernel | str = DEFAULT_KERNEL,
    numa_balancing: bool = False,
) -> GuestResult:
    """Run ``python -m pytest -p no:cacheprovider <pytest_args>`` in the guest, in the repo root.

    The interpreter is this process's ``sys.executable`` (same path inside, the root is shared;
    kept unresolved so a virtualenv's ``pyvenv.cfg`` and ``.pth`` files still apply), and
    ``PYTHONPATH`` repeats this process's ``sys.path``, so the guest imports exactly what the host
    test does.  Bytecode and pytest's cache are not written (the share is read-only); anything else
    should go to ``TMPDIR`` (``GUEST_TMPDIR``, in the guest's writable layer over /tmp).
    ``disable_plugins`` adds ``-p no:<name>`` for each: under TCG every import is ~20x slower, and
    e.g. hypothesis' pytest plugin alone costs ~9 s of boot-to-first-test on a 2-core host.
    ``kernel`` and ``numa_balancing`` are :func:`run_in_guest`'s.
    """
    executable = sys.executable
    if not executable or not os.path.exists(os.path.realpath(executable)):
        raise VmError(f"cannot tell this interpreter's path (sys.executable={executable!r})")
    pythonpath = host_pythonpath()
    check_visible_in_guest([executable, REPO_ROOT, *pythonpath])
    merged = {"PYTHONPATH": os.pathsep.join(pythonpath)}
    if env:
        merged.update(env)
    argv = [executable, "-m", "pytest", "-p", "no:cacheprovider"]
    for plugin in disable_plugins:
        argv += ["-p", f"no:{plugin}"]
    argv += pytest_args
    return run_in_guest(
        topology,
        argv,
        timeout=timeout,
        env=merged,
        cwd=REPO_ROOT,
        kernel=kernel,
        numa_balancing=numa_balancing,
    )
