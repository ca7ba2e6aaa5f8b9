"""The report's cross-checks: two sources that should say the same thing, compared (pure).

Values in (what :mod:`._gather` read into :class:`Facts`), verdicts out.
Each check has a name and a subject, and one verdict of
:data:`~._document.VERDICTS`: ``agree``, ``disagree`` (something is wrong
here, or pynumabind is), or ``not applicable`` with the reason (a source is
missing: no NVML, no nvidia-smi, a section that failed or was skipped).

The checks, by name:

``nvml-cpu-affinity`` (each GPU NVML opens)
    NVML's CPU affinity against the PCI function's sysfs ``local_cpulist``.
    They agree when equal, or when NVML's is sysfs's within this process's
    CPUs (NVML leaves out the CPUs a cpuset hides, and gives none when it
    hides them all), or when NVML answered with the legacy socket-wide mask
    (an old driver) and that mask holds sysfs's CPUs.
``nvml-numa-node`` (each GPU NVML opens)
    The node NVML names (its memory affinity among the CPU nodes, else its
    NUMA id) against the function's sysfs ``numa_node``; for a GPU whose
    sysfs node has no CPUs (Grace: its own memory), NVML's NUMA id.
``gpu-count``
    How many GPUs NVML counts (opened and denied) against the NVIDIA
    functions sysfs lists.  Fewer in NVML agrees (a container or a device
    cgroup gives this process some of the machine's GPUs; discovery leaves
    the others out); a GPU NVML lists that sysfs does not disagrees.
``device-cgroup``
    The GPUs a cgroup v1 device controller lets this process open against
    the GPUs NVML opens.
``cuda-order`` (each CUDA ordinal)
    The PCI bus id the CUDA runtime gives ordinal N against pynumabind's
    visible GPU N: the GPU a rank binds next to is the GPU it will drive.
``nvidia-smi-numa`` (each rank with an NVIDIA GPU)
    The plan's node against the GPU's ``NUMA Affinity`` in ``nvidia-smi topo
    -m`` (a list on GB200: the plan's node is among it).  Matched by NVML's
    index (nvidia-smi's numbering); not applicable under a device cgroup that
    hides GPUs, or when the nodes were given by the user
    (``PYNUMABIND_NODES``).
``nvidia-smi-gpu-numa-id`` (each rank whose row has a ``GPU NUMA ID``)
    The GPU's memory node (Grace: its own CPU-less node) against that column.
``plan-within-limits`` (each rank)
    Each plan's CPUs and memory nodes within this process's allowed sets; a
    rank that cannot be planned disagrees.
``cpuset``
    This process's CPU affinity within its cgroup cpuset's CPUs, and the
    memory nodes ``get_mempolicy`` allows equal to the cpuset's and to
    ``Mems_allowed_list``.
``check-run``
    Every worker ``pynumabind check`` started bound as planned.
``advice-record``
    The advice record (when there is one) matches this machine; a stale one
    makes mode ``advised`` fall back to the default plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..._text import format_ids
from ...model import Gpu, Plan, Topology
from ._document import AGREE, DISAGREE, NOT_APPLICABLE, Check

if TYPE_CHECKING:  # pragma: no cover
    from ..._os.nvidia_smi import SmiTopology
    from ..._os.nvml import NvmlDevice, NvmlReport
    from ..._os.proc import CgroupLimits
    from ...advisor._copies import CudaRuntime
    from .._check import CheckReport

__all__ = [
    "CROSS_CHECKS",
    "Facts",
    "Limits",
    "NvmlFacts",
    "Record",
    "SmiFacts",
    "cross_checks",
    "gpu_label",
]


@dataclass(frozen=True)
class NvmlFacts:
    """Whether NVML was asked and why; its report, or why it gave none."""

    asked: bool
    why: str
    report: Optional[NvmlReport] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class SmiFacts:
    """nvidia-smi's table, or why there is none (not on PATH, failed, not a table)."""

    table: Optional[SmiTopology] = None
    reason: Optional[str] = None


@dataclass(frozen=True)
class Limits:
    """This process's allowed sets as the kernel gives them, and its cgroups."""

    cpus: frozenset[int]
    mems: Optional[frozenset[int]]  # get_mempolicy(MPOL_F_MEMS_ALLOWED); None: no libnuma
    status_mems: Optional[frozenset[int]]  # Mems_allowed_list
    cgroups: Optional[CgroupLimits] = None


@dataclass(frozen=True)
class Record:
    """The advice record: where, and what differs from this machine (empty: fresh)."""

    path: Optional[str]
    looked: Tuple[str, ...] = ()
    differences: Tuple[str, ...] = ()
    problem: Optional[str] = None  # it exists but cannot be read


@dataclass
class Facts:
    """What the cross-checks compare; a fact left ``None`` is explained in ``missing``."""

    topology: Optional[Topology] = None  # what the workers plan on
    sysfs: Optional[Topology] = None  # sysfs alone: every GPU, no NVML
    nvml: Optional[NvmlFacts] = None
    smi: Optional[SmiFacts] = None
    cuda: Optional[CudaRuntime] = None
    limits: Optional[Limits] = None
    plans: Optional[Sequence[Union[Plan, Exception]]] = None
    nodes_given: Optional[str] = None  # the variable or option that gave each rank's node
    check: Optional[CheckReport] = None
    record: Optional[Record] = None
    missing: Dict[str, str] = field(default_factory=dict)

    def why_missing(self, *what: str) -> str:
        reasons = [f"{w}: {self.missing[w]}" for w in what if w in self.missing]
        return "; ".join(reasons) or "not read"


def gpu_label(index: Optional[int], bus_id: str) -> str:
    return f"GPU {'?' if index is None else index} ({bus_id})"


def _ids(ids: Optional[frozenset[int]]) -> str:
    return "none" if ids is None else format_ids(ids)


# ------------------------------------------------------------- NVML x sysfs


def _cpu_affinity(device: NvmlDevice, gpu: Gpu, allowed: frozenset[int]) -> Check:
    label = gpu_label(device.index, device.pci_bus_id)
    nvml, sysfs = device.cpu_affinity, gpu.local_cpus
    said = f"NVML gives CPUs {format_ids(nvml)}, sysfs local_cpulist {format_ids(sysfs)}"
    if nvml == sysfs:
        return Check(
            "nvml-cpu-affinity", label, AGREE, f"NVML and sysfs both give CPUs {format_ids(nvml)}"
        )
    if nvml == sysfs & allowed:
        return Check(
            "nvml-cpu-affinity",
            label,
            AGREE,
            f"{said}: the same within this process's CPUs {format_ids(allowed)} "
            "(NVML leaves out the CPUs a cpuset hides)",
        )
    if device.affinity_scope != "node" and sysfs <= nvml:
        return Check(
            "nvml-cpu-affinity",
            label,
            AGREE,
            f"{said}: NVML's is the legacy {device.affinity_scope}-wide mask (an old driver), "
            "which holds sysfs's",
        )
    return Check("nvml-cpu-affinity", label, DISAGREE, said)


def _numa_node(device: NvmlDevice, gpu: Gpu, topology: Topology) -> Check:
    label = gpu_label(device.index, device.pci_bus_id)
    node = gpu.numa_node
    if node is None:
        return Check(
            "nvml-numa-node",
            label,
            NOT_APPLICABLE,
            "the kernel gives the PCI function no NUMA node (numa_node -1)",
        )
    cpu_nodes = frozenset(topology.cpu_nodes)
    if node not in cpu_nodes:  # Grace: the GPU's own memory node
        nid = device.numa_node_id
        if nid is None:
            return Check(
                "nvml-numa-node",
                label,
                NOT_APPLICABLE,
                f"sysfs numa_node {node} has no CPUs and NVML gives no NUMA id",
            )
        verdict = AGREE if nid == node else DISAGREE
        return Check(
            "nvml-numa-node",
            label,
            verdict,
            f"NVML's NUMA id {nid}, sysfs numa_node {node} (a CPU-less node)",
        )
    named = _nvml_cpu_nodes(device, cpu_nodes)
    if not named:
        return Check(
            "nvml-numa-node",
            label,
            NOT_APPLICABLE,
            f"NVML names no CPU node (sysfs numa_node {node})",
        )
    verdict = AGREE if node in named else DISAGREE
    return Check(
        "nvml-numa-node",
        label,
        verdict,
        f"NVML names node(s) {format_ids(named)}, sysfs numa_node {node}",
    )


def _nvml_cpu_nodes(device: NvmlDevice, cpu_nodes: frozenset[int]) -> frozenset[int]:
    """The CPU nodes NVML names: its memory affinity among them, else its NUMA id."""
    if device.memory_affinity:
        named = device.memory_affinity & cpu_nodes
        if named:
            return named
    if device.numa_node_id in cpu_nodes:
        return frozenset({device.numa_node_id})
    return frozenset()


def _nvml_checks(facts: Facts) -> List[Check]:
    nvml, sysfs = facts.nvml, facts.sysfs
    why = _no_nvml_answer(facts)
    if why is not None:
        return [Check("nvml-cpu-affinity", "machine", NOT_APPLICABLE, why)]
    assert nvml is not None and nvml.report is not None and sysfs is not None
    by_bus = {g.pci_bus_id: g for g in sysfs.gpus if g.vendor == "nvidia"}
    allowed = sysfs.allowed_cpus  # this process's, on this machine (a recorded one's, else)
    checks: List[Check] = []
    for device in nvml.report.devices:
        gpu = by_bus.get(device.pci_bus_id)
        if gpu is None:
            label = gpu_label(device.index, device.pci_bus_id)
            why = "sysfs lists no such PCI function, so there is nothing to compare"
            checks.append(Check("nvml-cpu-affinity", label, NOT_APPLICABLE, why))
            continue
        checks.append(_cpu_affinity(device, gpu, allowed))
        checks.append(_numa_node(device, gpu, sysfs))
    return checks


def _no_nvml_answer(facts: Facts) -> Optional[str]:
    """Why the NVML checks have nothing to compare; ``None`` when NVML answered."""
    nvml = facts.nvml
    if nvml is None or facts.sysfs is None:
        return facts.why_missing("nvml", "sysfs")
    if nvml.report is None:
        return f"no NVML answer: {nvml.reason or nvml.why}"
    return None


def _gpu_count(facts: Facts) -> Check:
    why = _no_nvml_answer(facts)
    if why is not None:
        return Check("gpu-count", "machine", NOT_APPLICABLE, why)
    assert facts.nvml is not None and facts.nvml.report is not None and facts.sysfs is not None
    report = facts.nvml.report
    listed = {g.pci_bus_id for g in facts.sysfs.gpus if g.vendor == "nvidia"}
    unknown = sorted({d.pci_bus_id for d in report.devices} - listed)
    counted = len(report.devices) + len(report.denied)
    said = f"NVML counts {counted} GPU(s) ({len(report.denied)} denied), sysfs lists {len(listed)}"
    if unknown and not listed:
        return Check(
            "gpu-count",
            "machine",
            NOT_APPLICABLE,
            f"{said}: sysfs shows no NVIDIA PCI function (hidden from this container?)",
        )
    if unknown:
        return Check(
            "gpu-count",
            "machine",
            DISAGREE,
            f"{said}: NVML lists GPU(s) {', '.join(unknown)} that sysfs does not",
        )
    if counted < len(listed):
        said += " (this process is given some of the machine's GPUs; the others are left out)"
    return Check("gpu-count", "machine", AGREE if counted <= len(listed) else DISAGREE, said)


def _device_cgroup(facts: Facts) -> Check:
    limits, nvml = facts.limits, facts.nvml
    if limits is None or limits.cgroups is None:
        return Check("device-cgroup", "machine", NOT_APPLICABLE, facts.why_missing("limits"))
    devices = limits.cgroups.devices
    if devices is None:
        why = (
            "cgroup v2 filters devices with eBPF programs, which cannot be read back"
            if limits.cgroups.version == "v2"
            else "no cgroup v1 device controller"
        )
        return Check("device-cgroup", "machine", NOT_APPLICABLE, why)
    if devices.everything:
        return Check(
            "device-cgroup", "machine", NOT_APPLICABLE, f"{devices.path} allows every device"
        )
    if nvml is None or nvml.report is None:
        return Check(
            "device-cgroup",
            "machine",
            NOT_APPLICABLE,
            f"{devices.path} allows /dev/nvidia{_ids(devices.nvidia_gpus)}; no NVML "
            "answer to compare with",
        )
    opened = len(nvml.report.devices)
    allowed = len(devices.nvidia_gpus)
    verdict = AGREE if opened == allowed else DISAGREE
    return Check(
        "device-cgroup",
        "machine",
        verdict,
        f"{devices.path} allows {allowed} GPU device(s) (/dev/nvidia"
        f"{_ids(devices.nvidia_gpus)}), NVML opens {opened}",
    )


# ----------------------------------------------------------------- CUDA


def _cuda_order(facts: Facts) -> List[Check]:
    cuda, topology = facts.cuda, facts.topology
    if cuda is None or topology is None:
        return [
            Check("cuda-order", "machine", NOT_APPLICABLE, facts.why_missing("cuda", "topology"))
        ]
    if cuda.reason is not None and not cuda.devices:
        return [Check("cuda-order", "machine", NOT_APPLICABLE, cuda.reason)]
    visible = [g for g in topology.gpus if g.vendor == "nvidia"]
    checks: List[Check] = []
    if len(cuda.devices) != len(visible):
        checks.append(
            Check(
                "cuda-order",
                "machine",
                DISAGREE,
                f"CUDA sees {len(cuda.devices)} device(s), pynumabind {len(visible)} "
                "visible NVIDIA GPU(s)",
            )
        )
    for (ordinal, bus), gpu in zip(cuda.devices, visible):
        label = f"CUDA device {ordinal}"
        said = f"CUDA: {bus or 'no bus id'}, pynumabind's GPU {gpu.index}: {gpu.pci_bus_id}"
        same = bus is not None and _same_bus(bus, gpu.pci_bus_id)
        checks.append(Check("cuda-order", label, AGREE if same else DISAGREE, said))
    return checks


def _bus_key(bus: str) -> str:
    """A PCI bus id compared case-blind, its domain as a number (CUDA writes 8 digits)."""
    domain, _, rest = bus.strip().lower().rpartition(":")
    head, _, slot = domain.rpartition(":")
    try:
        return f"{int(head or '0', 16):x}:{slot}:{rest}" if slot else f"0:{domain}:{rest}"
    except ValueError:
        return bus.strip().lower()


def _same_bus(cuda_bus: str, ours: str) -> bool:
    """CUDA writes ``00000000:18:00.0`` or ``0000:18:00.0``, upper case."""
    return _bus_key(cuda_bus) == _bus_key(ours)


# ----------------------------------------------------------- nvidia-smi


def _smi_checks(facts: Facts) -> List[Check]:
    smi, plans, topology = facts.smi, facts.plans, facts.topology
    if smi is None or plans is None or topology is None:
        return [
            Check(
                "nvidia-smi-numa",
                "machine",
                NOT_APPLICABLE,
                facts.why_missing("nvidia_smi", "plans", "topology"),
            )
        ]
    if smi.table is None:
        return [Check("nvidia-smi-numa", "machine", NOT_APPLICABLE, smi.reason or "no table")]
    if topology.denied_gpus:
        return [
            Check(
                "nvidia-smi-numa",
                "machine",
                NOT_APPLICABLE,
                "a device cgroup denies GPU(s) "
                f"{format_ids(topology.denied_gpus)}: nvidia-smi's numbering cannot be "
                "matched with NVML's",
            )
        ]
    if facts.nodes_given is not None:
        return [
            Check(
                "nvidia-smi-numa",
                "machine",
                NOT_APPLICABLE,
                f"each rank's node is given ({facts.nodes_given}), not found",
            )
        ]
    checks: List[Check] = []
    for plan in plans:
        if isinstance(plan, Plan) and plan.gpu_info is not None:
            if plan.gpu_info.vendor == "nvidia":
                checks.extend(_smi_rank(plan, smi.table))
    return checks or [
        Check("nvidia-smi-numa", "machine", NOT_APPLICABLE, "no rank drives an NVIDIA GPU")
    ]


def _smi_rank(plan: Plan, table: SmiTopology) -> List[Check]:
    gpu = plan.gpu_info
    assert gpu is not None
    subject = f"rank {plan.rank}, {gpu_label(gpu.index, gpu.pci_bus_id)}"
    number = gpu.physical_index
    row = table.gpu(number) if number is not None else None
    if row is None:
        return [
            Check(
                "nvidia-smi-numa",
                subject,
                NOT_APPLICABLE,
                f"nvidia-smi printed no row for GPU{number}",
            )
        ]
    if row.problem is not None:
        return [Check("nvidia-smi-numa", subject, NOT_APPLICABLE, f"GPU{number}: {row.problem}")]
    checks = [_smi_node(plan, row.numa_affinity, subject, number)]
    if row.gpu_numa_id is not None:
        verdict = AGREE if row.gpu_numa_id == gpu.memory_node else DISAGREE
        checks.append(
            Check(
                "nvidia-smi-gpu-numa-id",
                subject,
                verdict,
                f"nvidia-smi GPU{number}'s GPU NUMA ID {row.gpu_numa_id}, pynumabind's memory "
                f"node {'none' if gpu.memory_node is None else gpu.memory_node}",
            )
        )
    return checks


def _smi_node(plan: Plan, affinity: Optional[frozenset[int]], subject: str, number: Any) -> Check:
    if affinity is None:
        return Check(
            "nvidia-smi-numa",
            subject,
            NOT_APPLICABLE,
            f"nvidia-smi prints no NUMA Affinity for GPU{number} (N/A)",
        )
    if plan.node is None:
        return Check(
            "nvidia-smi-numa", subject, NOT_APPLICABLE, "the plan places the rank on no node"
        )
    verdict = AGREE if plan.node in affinity else DISAGREE
    return Check(
        "nvidia-smi-numa",
        subject,
        verdict,
        f"plan's node {plan.node}, nvidia-smi GPU{number}'s NUMA Affinity {format_ids(affinity)}",
    )


# ------------------------------------------------------- the process itself


def _plans_within(facts: Facts) -> List[Check]:
    plans, topology = facts.plans, facts.topology
    if plans is None or topology is None:
        return [
            Check(
                "plan-within-limits",
                "machine",
                NOT_APPLICABLE,
                facts.why_missing("plans", "topology"),
            )
        ]
    checks: List[Check] = []
    for rank, plan in enumerate(plans):
        if not isinstance(plan, Plan):
            checks.append(
                Check("plan-within-limits", f"rank {rank}", DISAGREE, f"cannot be planned: {plan}")
            )
            continue
        checks.append(_within(plan, topology))
    return checks


def _within(plan: Plan, topology: Topology) -> Check:
    subject = f"rank {plan.rank}"
    if plan.cpus is None:
        return Check(
            "plan-within-limits",
            subject,
            NOT_APPLICABLE,
            "the plan leaves the CPUs alone (unbound)",
        )
    outside_cpus = plan.cpus - topology.allowed_cpus
    outside_mems = plan.mems - topology.allowed_mems
    said = (
        f"CPUs {format_ids(plan.cpus)} of allowed {format_ids(topology.allowed_cpus)}, "
        f"memory nodes {format_ids(plan.mems)} of allowed {format_ids(topology.allowed_mems)}"
    )
    if outside_cpus or outside_mems or not plan.cpus:
        return Check("plan-within-limits", subject, DISAGREE, f"{said}: outside the limits")
    return Check("plan-within-limits", subject, AGREE, said)


def _cpuset(facts: Facts) -> List[Check]:
    limits = facts.limits
    if limits is None:
        return [Check("cpuset", "machine", NOT_APPLICABLE, facts.why_missing("limits"))]
    cgroups = limits.cgroups
    if cgroups is None or cgroups.cpuset_cpus is None or cgroups.cpuset_mems is None:
        return [Check("cpuset", "machine", NOT_APPLICABLE, "no cgroup cpuset file to compare with")]
    cpus_ok = limits.cpus <= cgroups.cpuset_cpus
    checks = [
        Check(
            "cpuset",
            "CPUs",
            AGREE if cpus_ok else DISAGREE,
            f"this process's affinity {format_ids(limits.cpus)}, the cpuset's CPUs "
            f"{format_ids(cgroups.cpuset_cpus)} ({cgroups.cpuset_file})",
        )
    ]
    mems = {"get_mempolicy": limits.mems, "Mems_allowed_list": limits.status_mems}
    known = {name: value for name, value in mems.items() if value is not None}
    same = all(value == cgroups.cpuset_mems for value in known.values())
    said = ", ".join(f"{name} {format_ids(value)}" for name, value in known.items())
    checks.append(
        Check(
            "cpuset",
            "memory nodes",
            AGREE if same else DISAGREE,
            f"{said}, the cpuset's {format_ids(cgroups.cpuset_mems)}",
        )
    )
    return checks


def _check_run(facts: Facts) -> Check:
    report = facts.check
    if report is None:
        return Check("check-run", "machine", NOT_APPLICABLE, facts.why_missing("check"))
    bound = sum(w.ok for w in report.workers)
    said = f"{bound} of {len(report.workers)} workers bound as planned"
    failed = [w for w in report.workers if not w.ok]
    if failed:
        first = failed[0]
        problem = first.problems[0] if first.problems else "failed"
        said += f"; rank {first.rank}: {problem}"
    return Check("check-run", "machine", AGREE if report.ok else DISAGREE, said)


def _advice_record(facts: Facts) -> Check:
    record = facts.record
    if record is None:
        return Check("advice-record", "machine", NOT_APPLICABLE, facts.why_missing("record"))
    if record.path is None:
        looked = " or ".join(record.looked) or "nowhere"
        return Check("advice-record", "machine", NOT_APPLICABLE, f"no advice record ({looked})")
    if record.problem is not None:
        return Check("advice-record", record.path, DISAGREE, record.problem)
    if record.differences:
        return Check(
            "advice-record",
            record.path,
            DISAGREE,
            "stale: " + "; ".join(record.differences) + " (mode advised falls back to the "
            "default plan; run `pynumabind advise --save` again)",
        )
    return Check("advice-record", record.path, AGREE, "the record matches this machine")


def _listed(check: Callable[[Facts], Check]) -> Callable[[Facts], List[Check]]:
    return lambda facts: [check(facts)]


#: Every cross-check of the module docstring, in its order: (name, what gives its verdicts).
CROSS_CHECKS: Tuple[Tuple[str, Callable[[Facts], List[Check]]], ...] = (
    ("nvml-cpu-affinity", _nvml_checks),
    ("gpu-count", _listed(_gpu_count)),
    ("device-cgroup", _listed(_device_cgroup)),
    ("cuda-order", _cuda_order),
    ("nvidia-smi-numa", _smi_checks),
    ("plan-within-limits", _plans_within),
    ("cpuset", _cpuset),
    ("check-run", _listed(_check_run)),
    ("advice-record", _listed(_advice_record)),
)


def cross_checks(facts: Facts) -> List[Check]:
    """Every cross-check of the module docstring, in its order."""
    return [check for _, verdicts in CROSS_CHECKS for check in verdicts(facts)]
