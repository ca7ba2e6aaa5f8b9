"""Discovery's front door: this machine (sysfs + NVML + KFD + visibility), another
machine's sysfs tree, or a snapshot file, each as a :class:`~pynumabind.model.Topology`.

Three public functions, each with its real keywords: :func:`detect_topology`
(this machine and this process), :func:`topology_from_sysfs` (any sysfs tree:
``/sys`` or a copy of another machine's), :func:`load_topology` (a JSON
snapshot written by ``pynumabind snapshot``).  Which of them a caller gets
is decided in one place, :func:`resolve_topology`: the binder, the CLI and
the framework integrations all ask it.  The model module is a leaf:
it imports none of this, so there is no import cycle, lazy or not.

Discovery records facts about each GPU; it does not decide where a rank
goes.  The planner (``planner._place.place_gpu``) is the one owner of "which CPUs
and memory suit this GPU", including for a GPU on a CPU-less node, which
discovery leaves as it found it.  What each :class:`~pynumabind.model.Gpu`
field means when it leaves here:

``numa_node``
    The node the most trusted source names for the GPU, preferring a node
    with CPUs whenever any source names one.  In order of trust:

    1. NVML's ``nvmlDeviceGetNumaNodeId`` when it names a node *with CPUs*;
    2. NVML's memory affinity, restricted to CPU nodes, when it is one node
       (GB200 prints ``0,3-9,11-17``: node 0 plus empty placeholders);
    3. the CPU node holding all of NVML's CPU affinity (one spanning nodes
       names none: see :func:`_sole_node_of`);
    4. the PCI function's sysfs ``numa_node`` when that node has CPUs;
    5. otherwise the CPU-less node a source named (NVML's NUMA id, then
       sysfs ``numa_node``), as named: no SLIT "nearest" is chosen here;
    6. ``None`` when no source names a node.

    So ``numa_node`` is a CPU-less node only when that is all the sources
    say, and then the planner picks the CPU node (by ``local_cpus``, else
    by SLIT distance).
``memory_node``
    A CPU-less node with memory that a source names as the GPU's node: the
    GPU's own HBM on Grace (GH200/GB200), or a CXL/firmware node.  NVML's
    NUMA id wins; when NVML has no answer (NOT_SUPPORTED, an older driver)
    the sysfs ``numa_node`` fact is kept, and the notes say so.  ``None``
    when no source names such a node.
``local_cpus``
    NVML's CPU affinity (node scope) within the online CPUs; without it the
    CPUs of ``numa_node``, else the function's sysfs ``local_cpulist``
    (noted).  Sysfs alone: ``local_cpulist``, or the CPUs of ``numa_node``
    when the kernel lists none.
``source``
    Which source named ``numa_node``: ``"nvml"`` (steps 1-3, 5 and 6) or
    ``"sysfs"`` (steps 4 and 5); ``"snapshot"`` for an old snapshot without
    the field.  Every other disagreement or fallback is a line in
    ``Topology.notes``.

NVML's list is the driver's truth about which GPUs exist: a GPU that sysfs
shows but NVML does not (a container given some of the host's GPUs) is
dropped with a note.  A GPU NVML lists but refuses to open (NO_PERMISSION:
a device cgroup, as Slurm's ``ConstrainDevices`` sets up) is dropped too,
and its NVML index kept in ``Topology.denied_gpus``: CUDA numbers only the
GPUs the process can open, and visibility must count the same way.

What a bind reads, and what it keeps
------------------------------------
:func:`detect_topology` reads the CPU layout only as far as ``detail``
asks (:class:`~pynumabind.model.Detail`; :func:`detail_for` maps each CPU
mode to the level it needs): modes ``node`` and ``none`` read a few files
per node and per GPU, ``socket`` adds one package list per package,
``exclusive`` one sibling list per core, ``core-complex`` one L3 entry per
group.  ``show``, ``plan`` and ``snapshot`` read everything (``FULL``, the
default); a topology with less says so and refuses to be snapshotted.

With ``reuse=True`` (what ``bind_current_process`` passes) the layout --
nodes, CPUs, the GPUs sysfs lists -- is kept for the process and reused by
the next call: none of it can change under a running process (CPU and
memory hot-plug aside).  What can change is read again on every call: the
allowed CPUs and memory nodes, NVML's merge (whose answers :mod:`pynumabind._os.nvml`
keeps), and the visibility variables.  The kept layout is keyed on the
sysfs root and serves any ``detail`` up to the one it was read with; it is
never used for ``FULL`` (whose node memory sizes are live figures) nor with
``gpu_vendors``/``pci_classes`` given, holds one root at a time, and is
dropped in a fork child and by :func:`forget_layout`.

:func:`apply_visibility` (defined in the private :mod:`._visible`) is
re-exported here, its public home: the GPUs a process sees, applied to any
topology (``pynumabind.apply_visibility`` is this one).  A machine without
GPUs has none to hide or renumber, so discovery there does not load
:mod:`._visible` (its first lookup here does, holding the fork lock).
What discovery tried is logged by :mod:`._trace` (``pynumabind show -v``),
which is loaded only once the ``pynumabind.discovery`` logger is enabled for
INFO: below it, no call logs anything.

:func:`ray_gpus` answers which GPUs a process *was given* when that is not
what it sees: inside a Ray task or actor (``ray`` already imported and
initialised; never imported here) it is ``ray.get_gpu_ids()``, mapped to
visible indices; an empty answer is a ConfigError, since a ``num_gpus=0``
actor sees every GPU under Ray 2.60, and binding it to all of them would be wrong.
"""

from __future__ import annotations

import os
import stat

from .._os import SYSFS_ROOT
from .._os import forksafe as _forksafe
from .._record import replace as _replace
from .._text import format_ids
from ..errors import SnapshotFileError, TopologyError
from ..model import CpuMode, Detail, Gpu, Topology

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

    from .._os.nvml import NvmlDevice, NvmlReport
    from . import _trace
    from ._visible import apply_visibility

log = _forksafe.Logger("pynumabind.discovery")  # logging only when needed

__all__ = [
    "EXAMPLE_PREFIX",
    "Detail",
    "apply_visibility",
    "detail_for",
    "detect_topology",
    "example_topologies",
    "load_topology",
    "process_topology",
    "resolve_topology",
    "topology_from_sysfs",
]

#: The CPU layout each mode's planning reads (see :class:`~pynumabind.model.Detail`).
_MODE_DETAIL: Mapping[CpuMode, Detail] = {
    CpuMode.NODE: Detail.NODES,
    CpuMode.NONE: Detail.NODES,
    CpuMode.SOCKET: Detail.PACKAGES,
    CpuMode.EXCLUSIVE: Detail.CORES,
    CpuMode.CORE_COMPLEX: Detail.CACHES,
    CpuMode.ADVISED: Detail.NODES,  # the record says node or none
}


class _LazyTrace:
    """:mod:`._trace`'s functions, its module loaded only once discovery logs at INFO.

    Each of them logs nothing below INFO, so below it a call here does
    nothing, and a bind (which logs at WARNING by default) never loads the
    module.  The first call at INFO imports it holding the fork lock; the
    import makes the package's ``_trace`` the module itself (the import system
    sets it on its parent), whose functions check the level again.
    """

    __slots__ = ()

    #: What it stands in for; any other name is an AttributeError, as on a
    #: module: code that inspects objects (``vars()``, ``__dict__``, ``__wrapped__``
    #: lookups, as vLLM 0.33's Triton dispatcher does over every module) must not
    #: get a function back.
    NAMES = frozenset({"machine", "nvml", "pci", "visibility"})

    def __getattr__(self, name: str) -> Any:
        if name not in _LazyTrace.NAMES:
            raise AttributeError(f"pynumabind.discovery._trace has no attribute {name!r}")
        if not log.isEnabledFor(_forksafe.INFO):
            return _no_trace
        with _forksafe.lock():  # not "from . import _trace": that finds this object
            from ._trace import machine, nvml, pci, visibility

        return {"machine": machine, "nvml": nvml, "pci": pci, "visibility": visibility}[name]


def _no_trace(*args: object, **kwargs: object) -> None:
    """A :mod:`._trace` function below INFO: nothing to log."""


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all
    _trace = _LazyTrace()

    def __getattr__(name: str) -> Any:
        """:func:`apply_visibility`, imported on first lookup (holding the fork lock)."""
        if name != "apply_visibility":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        with _forksafe.lock():
            from ._visible import apply_visibility

        globals()[name] = apply_visibility
        return apply_visibility


def detail_for(
    mode: Union[str, CpuMode, None], priority_cores: bool = False, tiers: Optional[str] = None
) -> Detail:
    """The least :class:`~pynumabind.model.Detail` that plans in ``mode`` exactly as a full read.

    ``None`` is the planner's default mode, ``node``.  ``priority_cores``
    (mode ``node``) needs each core's highest performance: ``CORES``.
    ``tiers="all"`` needs each node's memory tier, read only at ``FULL``
    (with the node sizes and dies: the tier files are few); without it a
    bind reads no tier file.
    """
    detail = _MODE_DETAIL[CpuMode.NODE if mode is None else CpuMode.parse(mode)]
    if tiers == "all":
        return Detail.FULL
    return max(detail, Detail.CORES) if priority_cores else detail


class _Kept:
    """The layout one ``reuse=True`` call read: (root, detail, layout), or nothing."""

    def __init__(self) -> None:
        self.root: Optional[str] = None
        self.layout: Optional[Topology] = None

    def get(self, root: str, detail: Detail) -> Optional[Topology]:
        layout = self.layout
        if layout is not None and self.root == root and layout.detail >= detail:
            return layout
        return None

    def keep(self, root: str, layout: Topology) -> None:
        self.root, self.layout = root, layout


_KEPT = _Kept()


def forget_layout() -> None:
    """Drop the kept layout (runs in every fork child); the next call reads sysfs again."""
    _KEPT.root = _KEPT.layout = None


os.register_at_fork(after_in_child=forget_layout)


def _sole_node_of(topology: Topology, cpus: frozenset[int]) -> Optional[int]:
    """The one CPU node holding every CPU of ``cpus``; None when they span nodes.

    An affinity spanning nodes names none of them: it is the socket-wide mask
    of the legacy affinity call (several SNC/NPS nodes), or every CPU for a
    GPU without proximity; taking the largest or lowest node would invent one.
    """
    spanned = [n for n in topology.cpu_nodes if topology.nodes[n].cpus & cpus]
    return spanned[0] if len(spanned) == 1 else None


def _nvml_nodes(
    topology: Topology, device: NvmlDevice, label: str, notes: List[str]
) -> Tuple[Optional[int], Optional[int]]:
    """(the CPU node NVML names, the CPU-less node NVML names) for one GPU."""
    cpu_nodes = frozenset(topology.cpu_nodes)
    nid = device.numa_node_id
    memory_node: Optional[int] = None
    if nid is not None and nid not in topology.nodes:
        notes.append(f"{label}: NVML names NUMA node {nid}, which is not online; ignored")
    elif nid in cpu_nodes:
        return nid, None
    elif nid is not None:
        memory_node = nid
    if device.memory_affinity:
        candidates = device.memory_affinity & cpu_nodes
        if len(candidates) == 1:
            return next(iter(candidates)), memory_node
    if device.cpu_affinity:
        return _sole_node_of(topology, device.cpu_affinity), memory_node
    return None, memory_node


def _gpu_nodes(
    topology: Topology,
    device: NvmlDevice,
    pci: Optional[Gpu],
    label: str,
    notes: List[str],
) -> Tuple[Optional[int], Optional[int], str]:
    """(``numa_node``, ``memory_node``, ``source``) as NVML and sysfs report them.

    Facts only, in the order of trust the module docstring gives; which CPU
    node a GPU on a CPU-less node gets is left to the planner.
    """
    numa, memory_node = _nvml_nodes(topology, device, label, notes)
    sysfs_node = pci.numa_node if pci is not None else None
    if memory_node is None and device.numa_node_id is None and pci is not None:
        # NOT_SUPPORTED (old drivers, GPUs without the query) says nothing
        # against what sysfs knows.
        memory_node = pci.memory_node
        if memory_node is not None:
            notes.append(
                f"{label}: NVML gives no NUMA node id; memory node {memory_node} "
                "is from sysfs numa_node"
            )
    if numa is not None:
        if sysfs_node is not None and sysfs_node not in (numa, memory_node):
            notes.append(
                f"{label}: NVML places it on node {numa}, sysfs numa_node says "
                f"{sysfs_node}; using NVML"
            )
        return numa, memory_node, "nvml"
    if sysfs_node is not None and topology.nodes[sysfs_node].cpus:
        return sysfs_node, memory_node, "sysfs"
    if memory_node is not None:
        notes.append(
            f"{label}: the only node NVML and sysfs name is its CPU-less memory node "
            f"{memory_node}; the planner picks its CPU node"
        )
        source = "nvml" if device.numa_node_id == memory_node else "sysfs"
        return memory_node, memory_node, source
    if sysfs_node is not None:
        return sysfs_node, None, "sysfs"
    notes.append(f"{label}: neither NVML nor sysfs tells its NUMA node")
    return None, None, "nvml"


def _merged_gpu(
    topology: Topology, device: NvmlDevice, pci: Optional[Gpu], index: int, notes: List[str]
) -> Gpu:
    """One NVML device as a :class:`Gpu`, with what sysfs knows about its function."""
    label = f"GPU {device.index} ({device.pci_bus_id})"
    numa, memory_node, source = _gpu_nodes(topology, device, pci, label, notes)
    local = device.cpu_affinity & topology.online_cpus
    if not local:
        node_cpus = topology.nodes[numa].cpus if numa is not None else frozenset()
        local = node_cpus or (pci.local_cpus if pci is not None else frozenset())
        notes.append(
            f"{label}: NVML reports no CPU affinity (a cpuset hiding its node?); "
            f"using CPUs {format_ids(local)}"
        )
    return Gpu(
        index=index,
        pci_bus_id=device.pci_bus_id,
        vendor="nvidia",
        numa_node=numa,
        local_cpus=local,
        uuid=device.uuid,
        model=device.name or (pci.model if pci is not None else None),
        memory_node=memory_node,
        physical_index=device.index,
        source=source,
    )


def merge_nvml(topology: Topology, report: NvmlReport) -> Tuple[List[Gpu], List[str]]:
    """GPUs from NVML's ``report``, in NVML order, merged with what sysfs knows."""
    notes: List[str] = list(report.notes)
    from_sysfs: Dict[str, Gpu] = {g.pci_bus_id: g for g in topology.gpus if g.vendor == "nvidia"}
    merged: List[Gpu] = []
    for device in report.devices:
        notes.extend(device.notes)
        pci = from_sysfs.pop(device.pci_bus_id, None)
        merged.append(_merged_gpu(topology, device, pci, len(merged), notes))
    why = "not enumerated or not opened by NVML" if report.denied else "not enumerated by NVML"
    for bus_id in sorted(from_sysfs):
        notes.append(f"NVIDIA GPU {bus_id} is in sysfs but {why}; left out")
    out: List[Gpu] = list(merged)
    cuda_physical = len(merged)
    for gpu in (g for g in topology.gpus if g.vendor != "nvidia"):
        if gpu.vendor in ("amd", "intel"):  # numbered by their own runtimes (KFD, Level Zero)
            out.append(_with(gpu, index=len(out)))
        else:
            out.append(_with(gpu, index=len(out), physical_index=cuda_physical))
            cuda_physical += 1
    return out, notes


def _with(gpu: Gpu, **changes: Any) -> Gpu:
    return _replace(gpu, **changes)


@_forksafe.guarded  # it imports and loads on first use (see _os.forksafe)
def detect_topology(
    *,
    environ: Optional[Mapping[str, str]] = None,
    use_nvml: bool = True,
    sysfs_root: str = SYSFS_ROOT,
    allowed_cpus: Optional[Iterable[int]] = None,
    allowed_mems: Optional[Iterable[int]] = None,
    gpu_vendors: Optional[Union[Mapping[int, str], Iterable[int]]] = None,
    pci_classes: Optional[Iterable[Union[str, int]]] = None,
    detail: Detail = Detail.FULL,
    reuse: bool = False,
    visible_only: bool = True,
) -> Topology:
    """Discover the machine and this process's view of it.

    ``environ`` (default ``os.environ``) supplies ``CUDA_VISIBLE_DEVICES`` and
    friends; ``visible_only=False`` lists every GPU of the machine instead
    (what a snapshot records); ``use_nvml=False`` skips NVML.  NVML is only loaded when sysfs
    shows an NVIDIA GPU, or shows no PCI bus at all (some containers).
    ``detail`` and ``reuse``: see the module docstring, "What a bind reads".
    ``sysfs_root``, ``allowed_cpus``, ``allowed_mems``, ``gpu_vendors`` and
    ``pci_classes`` mean what they mean for :func:`topology_from_sysfs`.

    Args:
        environ: Where ``CUDA_VISIBLE_DEVICES`` and friends come from (default
            ``os.environ``).
        use_nvml: Ask NVML (when an NVIDIA GPU is present).
        sysfs_root: The sysfs to read (default ``/sys``).
        allowed_cpus: The CPUs the process may use (default: read fresh).
        allowed_mems: The memory nodes it may use (default: read fresh).
        gpu_vendors: Which PCI vendors count as GPUs (default: NVIDIA, AMD).
        pci_classes: Which PCI classes count as GPUs (default: every display
            controller, 0x03, and processing accelerators, 0x1200).
        detail: How much of the CPU layout to read (default: all of it).
        reuse: Keep the layout for the process and reuse it next time.
        visible_only: List only the GPUs this process sees (``False``: every
            GPU of the machine, as a snapshot records).

    Returns:
        The :class:`~pynumabind.Topology` -- nodes, CPUs, the GPUs this process
        sees (in its numbering), distances and its allowed sets, with notes
        on anything discovery could not tell.

    Raises:
        TopologyError: sysfs is missing or malformed, or the visible-device
            variables cannot be applied to the GPUs found.
        ConfigError: ``CUDA_VISIBLE_DEVICES`` (or a friend) or
            ``CUDA_DEVICE_ORDER`` has a bad value.
    """
    from .._os import sysfs as _sysfs

    env = os.environ if environ is None else environ
    keep = reuse and detail is not Detail.FULL and gpu_vendors is None and pci_classes is None
    layout = _KEPT.get(sysfs_root, detail) if keep else None
    kept = layout is not None
    if layout is None:
        layout = _sysfs.read_layout(
            sysfs_root, detail=detail, gpu_vendors=gpu_vendors, pci_classes=pci_classes
        )
        if keep:
            _KEPT.keep(sysfs_root, layout)
    _trace.pci(layout, sysfs_root, kept=kept)
    base = _sysfs.with_allowed(
        layout, sysfs_root, allowed_cpus=allowed_cpus, allowed_mems=allowed_mems
    )
    topology, mig_parents = _with_nvml(base, env, use_nvml=use_nvml, sysfs_root=sysfs_root)
    if not visible_only:
        _trace.visibility(env, topology.gpus, topology, applied=False)
        return topology
    if not topology.gpus:  # no GPU: none to hide or renumber
        _trace.visibility(env, topology.gpus, topology)
        return topology
    from . import _visible

    seen = _visible.apply_visibility(topology, env, mig_parents=mig_parents)
    _trace.visibility(env, topology.gpus, seen)
    return seen


def nvml_asked(topology: Topology, *, use_nvml: bool, sysfs_root: str) -> Tuple[bool, str]:
    """Whether :func:`detect_topology` asks NVML about ``topology`` (sysfs's), and why.

    NVML is asked when ``use_nvml`` and sysfs shows an NVIDIA GPU, or shows
    no PCI function at all (a container that masks ``bus/pci``: sysfs cannot
    tell).  The one rule, for discovery and for ``pynumabind report``, which
    says why NVML was asked or not.
    """
    if not use_nvml:
        return False, "not asked: use_nvml=False (--no-nvml)"
    nvidia = sum(g.vendor == "nvidia" for g in topology.gpus)
    if nvidia:
        return True, f"asked: sysfs shows {nvidia} NVIDIA GPU(s)"
    from .._os import pci as _pci

    if _pci.lists_functions(sysfs_root):
        return False, "not asked: sysfs lists PCI functions and no NVIDIA GPU among them"
    return True, "asked: sysfs lists no PCI function at all (masked?), so it cannot tell"


def ask_nvml(topology: Topology, environ: Mapping[str, str]) -> NvmlReport:
    """NVML's report for sysfs's ``topology``: its masks sized for it, the MIG UUIDs resolved.

    What :func:`detect_topology` merges, and ``pynumabind report`` compares
    with sysfs (the same question, so NVML answers it once per process).

    Raises:
        NvmlUnavailable: NVML cannot be used (the reason says why).
    """
    from .._os import nvml as _nvml
    from . import _visible

    max_cpu = max(topology.cpus) if topology.cpus else 0
    max_node = max(topology.nodes) if topology.nodes else 0
    return _nvml.query(
        cpu_words=max_cpu // 64 + 1,
        node_words=max_node // 64 + 1,
        mig_uuids=_visible.mig_uuids(environ.get("CUDA_VISIBLE_DEVICES")),
    )


def _with_nvml(
    base: Topology, env: Mapping[str, str], *, use_nvml: bool, sysfs_root: str
) -> Tuple[Topology, Optional[Dict[str, str]]]:
    """``base`` with NVML's GPUs merged in, and NVML's MIG parents (None without NVML)."""
    notes = list(base.notes)
    has_nvidia = any(g.vendor == "nvidia" for g in base.gpus)
    asked, _ = nvml_asked(base, use_nvml=use_nvml, sysfs_root=sysfs_root)  # the one rule
    if not asked:
        if not use_nvml:
            _trace.nvml(asked=False, why="use_nvml=False (the CLI's --no-nvml)")
        else:
            _trace.nvml(asked=False, why="sysfs lists no NVIDIA GPU, so NVML has none to add")
        if not has_nvidia:  # without NVIDIA GPUs, not asking NVML changes nothing worth a note
            return base, None  # frozen: the same topology, not a copy of it
        notes.append("NVML not used (use_nvml=False); GPU NUMA nodes from sysfs PCI")
        return base.replace(notes=tuple(notes)), None
    why = f"sysfs lists {sum(g.vendor == 'nvidia' for g in base.gpus)} NVIDIA GPU(s)"
    if not has_nvidia:
        why = "sysfs lists no PCI bus, so only NVML can tell"
    from .._os import nvml as _nvml

    try:
        report = ask_nvml(base, env)
    except _nvml.NvmlUnavailable as exc:
        _trace.nvml(asked=True, why=why, unavailable=exc.reason)
        if has_nvidia:
            notes.append(f"NVML unavailable ({exc.reason}); GPU NUMA nodes from sysfs PCI")
        return base.replace(notes=tuple(notes)), None
    _trace.nvml(asked=True, why=why, report=report)
    gpus, merge_notes = merge_nvml(base, report)
    merged = base.replace(
        gpus=tuple(gpus), notes=(*notes, *merge_notes), denied_gpus=frozenset(report.denied)
    )
    return merged, dict(report.mig_parents)


@_forksafe.guarded  # it imports and loads on first use (see _os.forksafe)
def topology_from_sysfs(
    root: str = SYSFS_ROOT,
    *,
    allowed_cpus: Optional[Iterable[int]] = None,
    allowed_mems: Optional[Iterable[int]] = None,
    gpu_vendors: Optional[Union[Mapping[int, str], Iterable[int]]] = None,
    pci_classes: Optional[Iterable[Union[str, int]]] = None,
    environ: Optional[Mapping[str, str]] = None,
    detail: Detail = Detail.FULL,
) -> Topology:
    """The machine under sysfs ``root`` (``/sys``, or another machine's copy), without NVML.

    :func:`pynumabind._os.sysfs.read_layout`, then :func:`~pynumabind._os.sysfs.with_allowed`.

    ``gpu_vendors`` (PCI vendor id -> name, or just ids) and ``pci_classes``
    (``"0x03"`` base class, ``"0x0302"`` base+subclass, ``"0x030200"`` full)
    choose which PCI functions count as accelerators; pass extra ones to
    accept other devices; ``None`` means
    :data:`~pynumabind._os.pci.DEFAULT_GPU_VENDORS` /
    :data:`~pynumabind._os.pci.DEFAULT_PCI_CLASSES`.  GPUs come in driver
    order: KFD order for AMD when the KFD topology is present, PCI address
    order otherwise (NVML's default order).  With ``environ``,
    ``CUDA_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES`` from it are applied;
    without, every GPU is listed.

    Allowed sets: for the live ``/sys`` they are read fresh from
    ``sched_getaffinity`` and ``get_mempolicy(MPOL_F_MEMS_ALLOWED)``; for any
    other root they default to every online CPU and every node with memory.
    ``allowed_cpus``/``allowed_mems`` override both.  ``detail`` (see
    :class:`~pynumabind.model.Detail`) says how much of the CPU layout to read.

    Args:
        root: The sysfs tree (default ``/sys``).
        allowed_cpus: The CPUs the process may use.
        allowed_mems: The memory nodes it may use.
        gpu_vendors: Which PCI vendors count as GPUs.
        pci_classes: Which PCI classes count as GPUs.
        environ: Apply this mapping's visible-device variables (default:
            list every GPU).
        detail: How much of the CPU layout to read.

    Returns:
        The :class:`~pynumabind.Topology` of the tree.

    Raises:
        TopologyError: a file the layout needs is missing, unreadable or
            malformed (the message names it).
        ConfigError: with ``environ``, a visible-device variable has a bad
            value.
    """
    from .._os import sysfs as _sysfs

    layout = _sysfs.read_layout(
        root, detail=detail, gpu_vendors=gpu_vendors, pci_classes=pci_classes
    )
    _trace.pci(layout, root)
    _trace.nvml(asked=False, why="a sysfs tree is read without NVML")
    topology = _sysfs.with_allowed(
        layout, root, allowed_cpus=allowed_cpus, allowed_mems=allowed_mems
    )
    if environ is not None:
        from ._visible import apply_visibility

        topology = apply_visibility(topology, environ)
    return topology


@_forksafe.guarded  # it imports and loads on first use (see _os.forksafe)
def load_topology(path: str) -> Topology:
    """Read a snapshot file written by ``pynumabind snapshot``, or a shipped example.

    ``path`` starting with ``example:`` names one of the snapshots shipped
    inside the package, by name, from any directory: ``example:dgx-h100``
    (an 8-GPU DGX H100), ``example:gb200-nvl-tray`` (a GB200 NVL72 tray:
    GPUs whose memory is a node without CPUs).  Any other ``path`` is a
    file; a file whose name starts with ``example:`` is read as
    ``./example:...``.  An unknown example name is an error listing the
    names there are.

    The file is untrusted input: only a regular file is read (a FIFO would
    hang, ``/dev/zero`` never ends), at most
    :data:`~pynumabind.model.MAX_SNAPSHOT_CHARS` bytes of it, and the
    contents are checked as :meth:`Topology.from_dict` says.  Every error
    names the file.

    Args:
        path: The snapshot file, or ``example:NAME``.

    Returns:
        The :class:`~pynumabind.Topology` as recorded -- the snapshot's GPUs
        and allowed sets, not this process's.

    Raises:
        SnapshotFileError: (a TopologyError, and a ConfigError: the CLI's
            usage error) the file is missing, not a regular file, too
            large, not UTF-8, not JSON, or not a valid snapshot; or no
            example has that name.
    """
    text = _example_text(path) if path.startswith(EXAMPLE_PREFIX) else _read_snapshot(path)
    try:
        return Topology.from_json(text)
    except TopologyError as exc:
        raise SnapshotFileError(f"topology file {path!r}: {exc}") from exc


@_forksafe.guarded  # it imports and loads on first use (see _os.forksafe)
def process_topology(
    path: str,
    environ: Optional[Mapping[str, str]] = None,
    *,
    visible_only: bool = True,
    given_by: Optional[str] = None,
) -> Topology:
    """This process on the machine of snapshot ``path`` (``PYNUMABIND_TOPOLOGY``).

    The snapshot replaces sysfs and NVML; everything about the *process*
    still comes from the process: the GPUs it sees (``CUDA_VISIBLE_DEVICES``
    and friends applied to the snapshot's GPUs by physical index, unless
    ``visible_only`` is false), its allowed CPUs (``sched_getaffinity``) and
    memory nodes (``get_mempolicy``).  A missing or bad file, or one without
    every CPU this process may run on (another machine's), is a
    :class:`TopologyError` naming ``given_by`` (default the variable) and the
    file: never a fallback to sysfs.
    """
    from .._os import proc as _proc
    from . import _visible
    from ._environ import TOPOLOGY_VARIABLE

    env = os.environ if environ is None else environ
    source = given_by or TOPOLOGY_VARIABLE
    try:
        snapshot = load_topology(path)
    except SnapshotFileError as exc:
        raise SnapshotFileError(f"{source}: {exc}") from exc
    cpus = _proc.process_affinity()
    missing = cpus - snapshot.online_cpus
    if missing:
        raise TopologyError(
            f"{source}: topology file {path!r} lacks CPUs this process may run on "
            f"({format_ids(missing)}): it describes another machine"
        )
    live = snapshot.replace(
        allowed_cpus=cpus,
        allowed_mems=_proc.mems_allowed() & frozenset(snapshot.nodes),
        notes=(*snapshot.notes, f"machine from {source}={path}"),
    )
    return _visible.apply_visibility(live, env) if visible_only else live


@_forksafe.guarded  # it imports and loads on first use (see _os.forksafe)
def resolve_topology(
    *,
    environ: Optional[Mapping[str, str]] = None,
    snapshot: Optional[str] = None,
    sysfs_root: Optional[str] = None,
    use_nvml: bool = True,
    detail: Detail = Detail.FULL,
    reuse: bool = False,
    bind_here: bool = False,
    visible_only: bool = True,
) -> Topology:
    """The machine to plan on: the one place that decides where it comes from.

    In order:

    1. ``snapshot`` (the CLI's ``--topology``; ``""`` too, so an unset shell
       variable never means "this machine"): that file as recorded --
       another machine, its own allowed sets and GPUs (:func:`load_topology`);
       with ``bind_here``, this process on that machine instead, as for
       ``PYNUMABIND_TOPOLOGY`` (step 3);
    2. ``sysfs_root`` (``--sysfs-root``): that tree as recorded, every GPU
       listed, without NVML (:func:`topology_from_sysfs`);
    3. ``PYNUMABIND_TOPOLOGY`` in ``environ``: this process on the snapshot's
       machine -- its visible GPUs and allowed sets (:func:`process_topology`);
    4. this machine and this process (:func:`detect_topology` with
       ``use_nvml``, ``detail`` and ``reuse``).

    The rule for snapshots: **planning for another machine** takes the file
    as recorded; **binding here** (``bind_here``: the library's binds, and
    the CLI's ``exec`` and ``check``, whose workers bind) takes this
    process's allowed CPUs, memory nodes and visible GPUs on the file's
    machine, whichever form names the file -- the kernel refuses any other
    sets.  ``PYNUMABIND_TOPOLOGY`` is always "binding here": it tells the
    library where it binds, so ``show`` and ``plan`` print what a worker
    would get.  ``visible_only=False`` (``pynumabind snapshot``) keeps every
    GPU of the machine instead of those this process sees.

    ``environ`` (default ``os.environ``) is the one mapping every variable
    comes from, ``CUDA_VISIBLE_DEVICES`` and friends included, whichever
    source is chosen.  ``PYNUMABIND_TOPOLOGY`` empty or of only ASCII
    whitespace is unset; any other character (U+00A0 included) is part of
    the file name, as for every ``PYNUMABIND_`` variable (:mod:`._environ`).
    When the visible-device variables hide every GPU of a machine that has
    some, a warning naming them is logged.

    Args:
        environ: Where every variable comes from (default ``os.environ``).
        snapshot: A snapshot file to plan on (the CLI's ``--topology``).
        sysfs_root: A sysfs tree to plan on (the CLI's ``--sysfs-root``).
        use_nvml: Ask NVML when reading this machine.
        detail: How much of this machine's CPU layout to read.
        reuse: Keep this machine's layout for the process.
        bind_here: The plan is for binding here: take this process's allowed
            sets and visible GPUs on the snapshot's machine.
        visible_only: List only the GPUs this process sees.

    Returns:
        The :class:`~pynumabind.Topology` to plan on.

    Raises:
        TopologyError: the snapshot or sysfs tree chosen is missing or bad
            (the message names the file; for a snapshot this process binds
            on, also ``--topology`` or ``PYNUMABIND_TOPOLOGY``), or that
            snapshot lacks CPUs this process may run on.
        ConfigError: a visible-device variable has a bad value.
    """
    env = os.environ if environ is None else environ
    if snapshot is not None and not bind_here:
        _trace.machine(f"the snapshot {snapshot!r} (--topology), as recorded: no source is read")
        return load_topology(snapshot)
    if snapshot is not None:
        _trace.machine(f"the snapshot {snapshot!r} (--topology), with this process's view of it")
        topology = process_topology(snapshot, env, visible_only=visible_only, given_by="--topology")
    elif sysfs_root is not None:
        _trace.machine(f"the sysfs tree {sysfs_root!r} (--sysfs-root), as recorded, without NVML")
        return topology_from_sysfs(sysfs_root)
    else:
        from ._environ import TOPOLOGY_VARIABLE, topology_file

        path = topology_file(env)
        if path is not None:
            _trace.machine(
                f"{TOPOLOGY_VARIABLE}={path!r}: that snapshot, with this process's view of it"
            )
            topology = process_topology(path, env, visible_only=visible_only)
        else:
            _trace.machine("this machine: sysfs, then NVML, KFD and the visibility variables")
            topology = detect_topology(
                environ=env,
                use_nvml=use_nvml,
                detail=detail,
                reuse=reuse,
                visible_only=visible_only,
            )
    warning = topology.hidden_gpus_warning()
    if warning is not None:
        log.warning("pynumabind: %s", warning)
    return topology


#: The prefix of a shipped example's name (:func:`load_topology`).
EXAMPLE_PREFIX = "example:"


def example_topologies() -> List[str]:
    """The names of the snapshots shipped with the package (``example:NAME``), sorted."""
    from importlib.resources import files

    folder = files(__name__).joinpath("examples")
    return sorted(
        entry.name[: -len(".json")] for entry in folder.iterdir() if entry.name.endswith(".json")
    )


def _example_text(path: str) -> str:
    """The text of shipped example ``path`` (``example:NAME``): package data, read whole."""
    from importlib.resources import files

    name = path[len(EXAMPLE_PREFIX) :]
    names = example_topologies()
    if name not in names:
        raise SnapshotFileError(
            f"topology {path!r}: no example of that name is shipped; the examples are "
            + ", ".join(EXAMPLE_PREFIX + known for known in names)
            + " (a file whose name starts with 'example:' is read as ./example:...)"
        )
    return files(__name__).joinpath("examples", f"{name}.json").read_text(encoding="utf-8")


def _read_snapshot(path: str) -> str:
    from ..model import MAX_SNAPSHOT_CHARS

    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SnapshotFileError(f"topology file {path!r} is not a regular file")
            data = handle.read(MAX_SNAPSHOT_CHARS + 1)
    except OSError as exc:
        raise SnapshotFileError(f"cannot read topology file {path!r}: {exc.strerror}") from exc
    if len(data) > MAX_SNAPSHOT_CHARS:
        raise SnapshotFileError(
            f"topology file {path!r} is larger than {MAX_SNAPSHOT_CHARS} bytes: not a snapshot"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotFileError(
            f"topology file {path!r} is not UTF-8 text (byte {exc.start}): "
            "expected JSON written by 'pynumabind snapshot'"
        ) from exc


# ------------------------------------------------------------ Ray


def _ray_gpu_ids() -> Optional[List[str]]:
    """``ray.get_gpu_ids()`` in a Ray task or actor whose Ray is imported and initialised."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized() or ray.get_runtime_context().get_task_id() is None:
            return None
        return [str(i) for i in ray.get_gpu_ids()]
    except AttributeError:  # a partial or unknown ray module: not Ray's answer
        return None


def ray_gpus(
    topology: Topology, environ: Optional[Mapping[str, str]] = None
) -> Optional[List[int]]:
    """Inside a Ray task or actor, the visible GPU indices Ray gave it; else None.

    Ray's own answer (``ray.get_gpu_ids()``), asked only when ``ray`` is
    already imported in this process and initialised, and this process runs
    a Ray task or actor (not the driver): pynumabind never imports Ray.  An
    actor with ``num_gpus=0`` gets no GPU from Ray (and no
    ``CUDA_VISIBLE_DEVICES`` under Ray 2.60, so it would "see" every GPU):
    that is the ConfigError of a process with no GPU to bind to.
    """
    from ..errors import ConfigError

    ids = _ray_gpu_ids()
    if ids is None:
        return None
    if not ids:
        raise ConfigError(
            "this Ray task or actor was given no GPU (ray.get_gpu_ids() is empty: "
            "num_gpus=0?), so there is nothing to bind to; give it num_gpus, or pass "
            "rank= and nprocs= to bind by rank"
        )
    env = os.environ if environ is None else environ
    visible = [e.strip() for e in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    by_physical = {str(g.physical_index): g.index for g in topology.gpus}
    indices = []
    for gpu_id in ids:
        if visible and gpu_id in visible:
            indices.append(visible.index(gpu_id))
        elif not visible and gpu_id in by_physical:
            indices.append(by_physical[gpu_id])
        else:
            raise ConfigError(
                f"Ray gave this process GPU {gpu_id} (ray.get_gpu_ids() = {ids}), which is not "
                f"among the GPUs it sees (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})"
            )
    return sorted(set(indices))
