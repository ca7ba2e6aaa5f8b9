"""``pynumabind.advise()``: measure this machine, then recommend whether and how to bind.

Binding is not free of risk: the same placement that speeds up copies on one
machine slows them down on another.  ``advise`` measures instead of
assuming, in this process and without changing its binding:

1. memory bandwidth (and latency) for every CPU node this process may run
   on x every memory node it may use (:mod:`pynumabind.advisor._memory`),
   and, where interleaving a CPU node's own memory with the memory-only
   nodes could beat it, weighted interleave over them, measured, with
   weights from those bandwidths (rule 3 of :mod:`pynumabind.advisor.rule`);
2. pinned host<->GPU copy bandwidth, per GPU x CPU node, when CUDA is
   usable from this process (:mod:`pynumabind.advisor._copies`); otherwise the GPU
   section is empty and says why;
3. what the firmware claims (SLIT distances, HMAT attributes), for
   comparison only (:mod:`pynumabind.advisor._firmware`), with a note
   wherever HMAT's bandwidth figures and the measurement disagree;

and applies the documented rule of :func:`pynumabind.advisor.rule.decide`.
``quick=True`` takes about 15 s on a two-node server, the default about a
minute.  Progress goes to ``progress`` (a callable taking one line), which
the CLI points at stderr.

This folder measures and decides; what it hands back is the advice record's,
one floor below the binding (:mod:`pynumabind.records`), so a worker that
follows a record never imports the measurement: the
:class:`~pynumabind.Advice` (:mod:`pynumabind.records.advice`) and the values
it holds (:mod:`pynumabind.records.values`), its report, its JSON and the
store.  Those values are public here, the home of ``advise()``'s results
(the reference documents them as ``pynumabind.advisor.NAME``);
``pynumabind`` itself exports only :class:`~pynumabind.Advice` and
:class:`~pynumabind.Recommendation`.  :meth:`Advice.save
<pynumabind.Advice.save>` keeps the result as the machine's advice record,
which mode ``advised`` follows (:mod:`pynumabind.advisor.record`, the
store's public home).

Both measurements stand on :mod:`pynumabind.advisor._harness` (threads bound
to a node, buffers placed on one, stopping on Ctrl-C); every fact about the
machine (caches, memory, HMAT, the CPU's hypervisor flag) is asked of
:mod:`pynumabind._os`.  The modules with an underscore are this package's
own; what a caller uses is ``advise()`` and the values exported here.

The module is ``advisor``, not ``advise``: a submodule named like the
function would replace ``pynumabind.advise`` with itself once imported.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

from .._os import SYSFS_ROOT
from .._text import format_ids
from ..errors import ConfigError
from ..model import Topology
from ..records.advice import Advice
from ..records.values import (
    DEFAULT_MIN_EFFECT,
    Comparison,
    CopyCell,
    Firmware,
    GpuAdvice,
    GpuCopies,
    HmatEntry,
    InterleaveCell,
    MemoryCell,
    MemoryMatrix,
    Placement,
    Recommendation,
    Spread,
)

if TYPE_CHECKING:  # pragma: no cover
    from ._memory import Settings as _memory_settings

# The values an Advice holds, defined in records (below the binding), are
# public here, the home of advise()'s results (see the module docstring).
__all__ = [
    "Advice",
    "Comparison",
    "CopyCell",
    "Firmware",
    "GpuAdvice",
    "GpuCopies",
    "HmatEntry",
    "InterleaveCell",
    "MemoryCell",
    "MemoryMatrix",
    "Placement",
    "Recommendation",
    "Spread",
    "advise",
]


def _quiet(_line: str) -> None:
    pass


def advise(
    *,
    quick: bool = False,
    copies: bool = True,
    latency: bool = True,
    topology: Optional[Topology] = None,
    buffer_bytes: Optional[int] = None,
    repeats: Optional[int] = None,
    min_effect: float = DEFAULT_MIN_EFFECT,
    progress: Optional[Callable[[str], None]] = None,
    sysfs_root: str = SYSFS_ROOT,
) -> Advice:
    """Measure this machine and recommend a binding; returns an :class:`Advice`.

    ``copies=False`` skips the pinned host<->GPU copies, ``latency=False`` the
    pointer chase.  ``topology`` defaults to this machine as this process
    sees it (allowed CPUs and memory nodes included); it must describe *this*
    machine, since the measurements run here.  ``buffer_bytes`` and
    ``repeats`` override the sizes (tests use small ones); ``min_effect`` is
    the smallest relative difference the rule counts (0.10: 10%).
    ``progress`` receives a line per step (the CLI prints them on stderr).

    Args:
        quick: Smaller buffers and fewer samples (about 15 s on two nodes).
        copies: Measure pinned host<->GPU copies (needs CUDA).
        latency: Measure latency (a pointer chase) besides bandwidth.
        topology: The machine; it must be this one.
        buffer_bytes: The buffer size of each measurement, as given (by
            default several times the last-level cache, within what each
            node can give; a node that cannot hold that is skipped).
        repeats: How many samples each figure takes.
        min_effect: The smallest relative difference the rule counts.
        progress: Called with a line per step.
        sysfs_root: The sysfs to read (the firmware's SLIT and HMAT, the
            nodes' memory).

    Returns:
        An :class:`Advice` -- the measurements, the firmware's SLIT and HMAT,
        and the :class:`~pynumabind.Recommendation` with its
        reasons.  No CUDA to measure copies with, or a single node, is
        reported in it, not raised.

    Raises:
        ConfigError: ``buffer_bytes`` smaller than a page, ``repeats`` below
            1, or ``min_effect`` outside [0, 10).
        TopologyError: this machine's topology cannot be read.
        KeyboardInterrupt: Ctrl-C, within milliseconds wherever it lands;
            the measuring threads stop and no buffer is freed under a
            running copy (see :mod:`pynumabind.advisor._harness`).
    """
    from . import _copies, _firmware, _harness, _memory
    from .rule import decide, hmat_disagreements

    if buffer_bytes is not None and buffer_bytes < _harness.PAGE:
        raise ConfigError(f"buffer_bytes={buffer_bytes} is smaller than a page")
    if repeats is not None and repeats < 1:
        raise ConfigError(f"repeats={repeats} must be at least 1")
    if not 0 <= min_effect < 10:
        raise ConfigError(f"min_effect={min_effect} must be between 0 and 10")
    say = progress or _quiet
    began = time.monotonic()
    if topology is None:
        # Always this machine, read live: a PYNUMABIND_TOPOLOGY snapshot says
        # where to plan, but the measurements run here.
        from .. import discovery

        topology = discovery.detect_topology(use_nvml=copies)
    settings = _memory.Settings(
        quick=quick, buffer_bytes=buffer_bytes, repeats=repeats, latency=latency
    )
    notes: List[str] = list(_virtualization_note(sysfs_root))
    memory = _memory.measure_memory(topology, settings, say, sysfs_root)
    memory, interleave_note = _interleave(memory, topology, settings, say, min_effect)
    notes += interleave_note
    measured: List[GpuCopies] = []
    backend_name: Optional[str] = None
    if not copies:
        status = "not measured (copies=False)"
    else:
        backend, status = _copies.find_backend()
        if backend is not None:
            backend_name = backend.name
            cpu_nodes = [n for n in memory.cpu_nodes if n in memory.memory_nodes]
            measured = _copies.measure_gpus(
                backend,
                topology,
                cpu_nodes,
                size=settings.copy_bytes,
                repeats=settings.samples,
                progress=say,
            )
            status = f"measured with {backend.name}"
        else:
            say(status)
    firmware = _firmware.firmware(topology, sysfs_root)
    notes += hmat_disagreements(memory, firmware, min_effect)
    recommendation = decide(memory, measured, min_effect=min_effect)
    return Advice(
        memory=memory,
        copies=tuple(measured),
        copies_status=status,
        copies_backend=backend_name,
        firmware=firmware,
        recommendation=recommendation,
        quick=quick,
        seconds=time.monotonic() - began,
        notes=tuple(notes),
    )


def _memory_only_nodes(topology: Topology) -> frozenset[int]:
    """The nodes that may join a CPU node's own memory in weighted interleave (rule 3).

    Memory and no CPUs, and not a GPU's memory (HBM shown as a node): a CXL
    expander or another memory-only tier.
    """
    gpu_memory = {g.memory_node for g in topology.gpus if g.memory_node is not None}
    gpu_memory |= {g.numa_node for g in topology.gpus if g.numa_node is not None}
    return frozenset(
        n.id
        for n in topology.nodes.values()
        if n.has_memory and not n.cpus and n.id not in gpu_memory
    )


def _interleave(
    memory: MemoryMatrix,
    topology: Topology,
    settings: _memory_settings,
    say: Callable[[str], None],
    min_effect: float,
) -> Tuple[MemoryMatrix, List[str]]:
    """The matrix with its weighted interleave measured where the rule says; or a note why not."""
    from . import _memory
    from .rule import interleave_cells

    cells = interleave_cells(memory, _memory_only_nodes(topology), min_effect)
    if not cells:
        return memory, [
            "weighted interleave: no CPU node has its own memory and a memory-only node "
            f"measured beside it (memory nodes {format_ids(memory.memory_nodes)}, CPU nodes "
            f"{format_ids(memory.cpu_nodes)}), so there is no set to interleave over and no "
            "weights are recommended"
        ]
    return _memory.measure_interleave(topology, memory, cells, settings, say), []


def _virtualization_note(sysfs_root: str) -> List[str]:
    """A line when this looks like a VM: its NUMA layout may not be the host's.

    The CPU's ``hypervisor`` flag (:func:`pynumabind._os.cpuinfo.hypervisor`),
    or ``PYNUMABIND_IN_GUEST=1`` (the QEMU guest the tests boot).
    """
    import os

    from .._os import cpuinfo as _cpuinfo
    from ..options import ASCII_SPACE, environ_value

    guest = environ_value(os.environ, "PYNUMABIND_IN_GUEST")  # blank is unset (the one rule)
    if _cpuinfo.hypervisor() or (guest is not None and guest.strip(ASCII_SPACE) == "1"):
        return [
            "this is a virtual machine: its NUMA nodes need not be the host's, "
            "so a measured difference (or its absence) is the VM's"
        ]
    del sysfs_root
    return []
