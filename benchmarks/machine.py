"""What machine the numbers came from: CPU, kernel, Python, NUMA nodes, virtualization.

Results embed this so runs from different machines can be compared.  Every
reader takes a ``root`` so tests can point it at a fake tree; nothing here
runs a shell or a subprocess.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import platform
import re
import sys
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from pynumabind._os.caches import llc_bytes
from pynumabind.cpulist import parse_cpulist

__all__ = [
    "NodeInfo",
    "Virtualization",
    "bytecode_state",
    "bytecode_warning",
    "detect_virtualization",
    "machine_info",
    "read_nodes",
    "topology_snapshot",
]

# CPUID leaf 0x40000000 vendor signatures (what systemd-detect-virt also matches).
CPUID_SIGNATURES: Dict[str, str] = {
    "KVMKVMKVM": "kvm",
    "TCGTCGTCGTCG": "qemu-tcg",
    "Microsoft Hv": "microsoft",
    "VMwareVMware": "vmware",
    "XenVMMXenVMM": "xen",
    "bhyve bhyve": "bhyve",
    "QNXQVMBSQG": "qnx",
    "ACRNACRNACRN": "acrn",
    "VBoxVBoxVBox": "oracle",
    "Linux KVM Hv": "kvm",
    "SRESRESRESRE": "sre",
    "Apple VZ": "apple",
}

# DMI vendor / product strings (substring, lower case) -> hypervisor.
DMI_VENDORS: Tuple[Tuple[str, str], ...] = (
    ("qemu", "qemu"),
    ("kvm", "kvm"),
    ("amazon ec2", "amazon"),
    ("vmware", "vmware"),
    ("virtualbox", "oracle"),
    ("innotek", "oracle"),
    ("xen", "xen"),
    ("bochs", "bochs"),
    ("parallels", "parallels"),
    ("google compute engine", "google"),
    ("bhyve", "bhyve"),
    ("microsoft corporation virtual machine", "microsoft"),
)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


# ------------------------------------------------------------------ nodes


@dataclass(frozen=True)
class NodeInfo:
    """One NUMA node as sysfs shows it."""

    id: int
    cpus: frozenset[int]
    memory_kb: Optional[int]

    @property
    def has_memory(self) -> bool:
        return bool(self.memory_kb)


def read_nodes(sys_root: str = "/sys") -> List[NodeInfo]:
    """NUMA nodes from ``/sys/devices/system/node`` (one pseudo node 0 if absent)."""
    base = os.path.join(sys_root, "devices/system/node")
    nodes: List[NodeInfo] = []
    for path in glob.glob(os.path.join(base, "node[0-9]*")):
        match = re.search(r"node(\d+)$", path)
        if match is None:
            continue
        cpus = parse_cpulist((_read(os.path.join(path, "cpulist")) or "").strip())
        meminfo = _read(os.path.join(path, "meminfo")) or ""
        found = re.search(r"MemTotal:\s+(\d+)\s*kB", meminfo)
        nodes.append(NodeInfo(int(match.group(1)), cpus, int(found.group(1)) if found else None))
    if not nodes:
        # A kernel without CONFIG_NUMA: the whole machine is node 0.
        online = (_read(os.path.join(sys_root, "devices/system/cpu/online")) or "0").strip()
        nodes.append(NodeInfo(0, parse_cpulist(online), None))
    return sorted(nodes, key=lambda n: n.id)


# --------------------------------------------------------- virtualization


@dataclass(frozen=True)
class Virtualization:
    """Whether we run under a hypervisor, which one, and what that means for the numbers."""

    virtualized: bool
    hypervisor: Optional[str]
    emulated: bool  # QEMU TCG: the CPU is software-emulated
    container: Optional[str]
    evidence: Tuple[str, ...]

    @property
    def verdict(self) -> str:
        if self.emulated:
            return (
                "QEMU TCG guest (software-emulated CPU): timings and NUMA effects measured "
                "here mean nothing; use them only to check that the suite runs"
            )
        if self.virtualized:
            name = self.hypervisor or "unknown hypervisor"
            return (
                f"virtual machine ({name}): the guest's NUMA nodes and caches may not match "
                "the host's; numbers are indicative only"
            )
        return "bare metal (no hypervisor detected): numbers are representative of this machine"

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["evidence"] = list(self.evidence)
        out["verdict"] = self.verdict
        return out


def _under(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def _dmi_vendor(root: str, evidence: List[str]) -> Optional[str]:
    """The hypervisor the first DMI field names, each naming field added to ``evidence``."""
    found: Optional[str] = None
    for rel in (
        "/sys/class/dmi/id/sys_vendor",
        "/sys/class/dmi/id/product_name",
        "/sys/class/dmi/id/board_vendor",
        "/sys/class/dmi/id/bios_vendor",
    ):
        value = (_read(_under(root, rel)) or "").strip()
        lowered = value.lower()
        for needle, name in DMI_VENDORS:
            if needle in lowered:
                evidence.append(f"{rel} is {value!r}")
                found = found or name
                break
    return found


def _container(root: str) -> Optional[str]:
    """docker, podman, or the ``container=`` of PID 1's environment; None outside one."""
    if os.path.exists(_under(root, "/.dockerenv")):
        return "docker"
    if os.path.exists(_under(root, "/run/.containerenv")):
        return "podman"
    container: Optional[str] = None
    environ1 = _read(_under(root, "/proc/1/environ")) or ""
    for item in environ1.split("\0"):
        if item.startswith("container="):
            container = item.split("=", 1)[1] or "unknown"
    return container


def detect_virtualization(
    root: str = "/", cpuid_signature: Optional[str] = None, environ: Optional[Dict[str, str]] = None
) -> Virtualization:
    """systemd-detect-virt's checks, done by reading files (no shell, no subprocess).

    ``cpuid_signature`` is the vendor string of CPUID leaf 0x40000000, when
    the caller could read it (the compiled benchmark kernel does on x86);
    it is the most specific evidence and the only one that tells a QEMU TCG
    guest from a KVM one.
    """
    env = dict(os.environ if environ is None else environ)
    evidence: List[str] = []
    hypervisor: Optional[str] = None
    emulated = False

    def path(rel: str) -> str:
        return _under(root, rel)

    signature = (cpuid_signature or "").strip("\0 ")
    if signature:
        evidence.append(f"cpuid 0x40000000 signature {signature!r}")
        for known, name in CPUID_SIGNATURES.items():
            if signature.startswith(known.strip()):
                hypervisor = name
                break
        emulated = hypervisor == "qemu-tcg"

    cpuinfo = _read(path("/proc/cpuinfo")) or ""
    flags_line = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, flags=re.MULTILINE)
    if flags_line and "hypervisor" in flags_line.group(1).split():
        evidence.append("/proc/cpuinfo has the 'hypervisor' flag")
        hypervisor = hypervisor or "unknown"
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, flags=re.MULTILINE)
    if model and "TCG" in model.group(1):
        evidence.append(f"CPU model {model.group(1).strip()!r} names QEMU TCG")
        hypervisor, emulated = "qemu-tcg", True

    xen_type = _read(path("/sys/hypervisor/type"))
    if xen_type:
        evidence.append(f"/sys/hypervisor/type is {xen_type.strip()!r}")
        hypervisor = hypervisor if hypervisor not in (None, "unknown") else xen_type.strip()

    dmi = _dmi_vendor(root, evidence)
    if dmi is not None and hypervisor in (None, "unknown"):
        hypervisor = dmi

    compatible = _read(path("/proc/device-tree/hypervisor/compatible"))
    if compatible:
        evidence.append(f"device tree hypervisor node {compatible.strip(chr(0))!r}")
        hypervisor = hypervisor if hypervisor not in (None, "unknown") else "device-tree"

    if env.get("PYNUMABIND_IN_GUEST") == "1":
        evidence.append("PYNUMABIND_IN_GUEST=1 (the project's QEMU TCG test guest)")
        hypervisor, emulated = "qemu-tcg", True

    container = _container(root)
    if container:
        evidence.append(f"container: {container}")

    return Virtualization(
        virtualized=hypervisor is not None,
        hypervisor=hypervisor,
        emulated=emulated,
        container=container,
        evidence=tuple(evidence),
    )


# ------------------------------------------------------------ the machine


def cpu_model(root: str = "/") -> str:
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo")) or ""
    for key in ("model name", "Model", "cpu model", "Processor"):
        match = re.search(rf"^{key}\s*:\s*(.*)$", cpuinfo, flags=re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or "unknown"


def machine_info(root: str = "/") -> Dict[str, Any]:
    """CPU model, kernel, Python, memory: enough to tell machines apart."""
    meminfo = _read(os.path.join(root, "proc/meminfo")) or ""
    total = re.search(r"MemTotal:\s+(\d+)\s*kB", meminfo)
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "cpu_model": cpu_model(root),
        "logical_cpus": os.cpu_count(),
        "allowed_cpus": len(os.sched_getaffinity(0)),
        "memory_total_kb": int(total.group(1)) if total else None,
        "kernel": uname.release,
        "machine": uname.machine,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "llc_bytes": llc_bytes([0], os.path.join(root, "sys")),
        "transparent_hugepages": _selected(
            _read(os.path.join(root, "sys/kernel/mm/transparent_hugepage/enabled"))
        ),
        "numa_balancing": (
            _read(os.path.join(root, "proc/sys/kernel/numa_balancing")) or ""
        ).strip()
        or None,
    }


def _selected(text: Optional[str]) -> Optional[str]:
    """The bracketed choice of a sysfs selector (``always [madvise] never`` -> ``madvise``)."""
    if not text:
        return None
    match = re.search(r"\[(\w+)\]", text)
    return match.group(1) if match else text.strip()


def topology_snapshot(sys_root: str = "/sys") -> Dict[str, Any]:
    """pynumabind's own topology snapshot when discovery is available, else sysfs node lists."""
    try:
        from .common import detect_topology

        data: Dict[str, Any] = detect_topology().to_dict()
        return {"source": "pynumabind discovery (detect)", "topology": data}
    except Exception as exc:  # discovery missing or failing must not stop the suite
        nodes = read_nodes(sys_root)
        from pynumabind.cpulist import format_cpulist

        return {
            "source": "sysfs",
            "why": f"discovery unavailable: {type(exc).__name__}: {exc}",
            "nodes": [
                {"id": n.id, "cpus": format_cpulist(n.cpus), "memory_kb": n.memory_kb}
                for n in nodes
            ],
            "allowed_cpus": format_cpulist(os.sched_getaffinity(0)),
        }


def _bytecode_current(source: str) -> bool:
    """Whether ``source`` has cached bytecode that Python would load as it is.

    The header of the ``.pyc`` that :func:`importlib.util.cache_from_source`
    names (``sys.pycache_prefix`` included): this interpreter's magic number,
    then either the source's mtime and size or, for a hash-based file, the
    source's hash.
    """
    try:
        cached = importlib.util.cache_from_source(source)
        with open(cached, "rb") as handle:
            header = handle.read(16)
        if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags = int.from_bytes(header[4:8], "little")
        if flags & 1:  # hash-based
            with open(source, "rb") as handle:
                return header[8:16] == importlib.util.source_hash(handle.read())
        info = os.stat(source)
        mtime = int.from_bytes(header[8:12], "little")
        size = int.from_bytes(header[12:16], "little")
        return mtime == int(info.st_mtime) & 0xFFFFFFFF and size == info.st_size & 0xFFFFFFFF
    except (OSError, NotImplementedError, ValueError):
        return False


def bytecode_state(package_dir: str) -> Dict[str, Any]:
    """Which modules under ``package_dir`` would be compiled again by a fresh process.

    With ``PYTHONDONTWRITEBYTECODE`` set (``sys.dont_write_bytecode``) a
    module whose ``.pyc`` is missing or older than its source is compiled on
    every import and never saved, and the import and first-bind rows then
    measure the compiler: on the development machine a stale tree took the
    preloaded first bind from 13-16 ms to 28-36 ms.  Returns the number of
    modules, the stale ones (relative paths) and whether this interpreter
    writes bytecode.
    """
    sources = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(package_dir)
        for name in names
        if name.endswith(".py")
    )
    stale = [os.path.relpath(path, package_dir) for path in sources if not _bytecode_current(path)]
    return {"modules": len(sources), "stale": stale, "writes": not sys.dont_write_bytecode}


def bytecode_warning(bytecode: Dict[str, Any]) -> str:
    """One line on pynumabind modules without current bytecode (see ``bytecode_state``)."""
    stale = bytecode["stale"]
    shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    if bytecode["writes"]:
        return (
            f"{len(stale)} of {bytecode['modules']} pynumabind modules had no current bytecode "
            f"({shown}): the first process that imports them writes it, and pays the compile"
        )
    return (
        f"{len(stale)} of {bytecode['modules']} pynumabind modules have no current bytecode "
        f"({shown}) and PYTHONDONTWRITEBYTECODE is set: every fresh process compiles them, "
        "and the import and first-bind rows measure that; run `python -m compileall` on the "
        "package first"
    )
