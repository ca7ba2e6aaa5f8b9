"""pynumabind: bind each GPU worker's CPUs and memory to the right NUMA node.

Typical use, first thing in a worker process::

    import pynumabind
    binding = pynumabind.bind_current_process(rank)

Importing this package is cheap: submodules (and pynvml) load on first use,
under the fork-safety lock (:mod:`._os.forksafe`), so a child forked
meanwhile never inherits a half-done import.

The public surface is :data:`_EXPORTS`, one table: ``__all__`` is made from
it, and a test keeps the ``TYPE_CHECKING`` imports below (what type checkers
and IDEs see) equal to it.  Helpers a user does not need to bind or plan
(cpumask parsing, for instance) stay importable from their modules but are
not exported here.  Every name here comes from a public module: what a
private module defines (``_os.threads.ThreadResult``,
``binding._apply.Skipped``, ``discovery._visible.apply_visibility``) is
re-exported by the public module whose results hold it (:mod:`.binding`,
:mod:`.discovery`), which says so.  :class:`Options` is
:mod:`.options`'s, at the bottom floor with the model (the planner,
discovery and the binding all take it).
"""

from __future__ import annotations

from ._os import forksafe as _forksafe
from ._version import __version__

# Not ``from typing import TYPE_CHECKING``: importing typing costs a bare
# ``import pynumabind`` several milliseconds; type checkers treat
# any name TYPE_CHECKING as true, and the annotations here are strings.
TYPE_CHECKING = False

# public name -> (submodule, attribute)
_EXPORTS: Dict[str, Tuple[str, str]] = {
    # errors
    "PynumabindError": ("errors", "PynumabindError"),
    "ListParseError": ("errors", "ListParseError"),
    "ConfigError": ("errors", "ConfigError"),
    "TopologyError": ("errors", "TopologyError"),
    "SnapshotFileError": ("errors", "SnapshotFileError"),  # load_topology's
    "PlanError": ("errors", "PlanError"),
    "LibnumaUnavailableError": ("errors", "LibnumaUnavailableError"),
    "NumaSyscallError": ("errors", "NumaSyscallError"),
    "BindError": ("errors", "BindError"),
    "UnknownIdError": ("errors", "UnknownIdError"),
    "ProcessStateError": ("errors", "ProcessStateError"),
    "NotABufferError": ("errors", "NotABufferError"),
    "ReadOnlyBufferError": ("errors", "ReadOnlyBufferError"),
    "PlacementSyscallError": ("errors", "PlacementSyscallError"),
    "AdviceRecordError": ("errors", "AdviceRecordError"),
    "PinError": ("errors", "PinError"),
    # id lists (the override syntax)
    "parse_cpulist": ("cpulist", "parse_cpulist"),
    "parse_nodelist": ("cpulist", "parse_nodelist"),
    "format_cpulist": ("cpulist", "format_cpulist"),
    # the machine
    "Topology": ("model", "Topology"),
    "NumaNode": ("model", "NumaNode"),
    "MemoryAccess": ("model", "MemoryAccess"),
    "Cpu": ("model", "Cpu"),
    "Gpu": ("model", "Gpu"),
    "Detail": ("model", "Detail"),
    # planning
    "Plan": ("model", "Plan"),
    "CpuMode": ("model", "CpuMode"),
    "MemoryPolicy": ("model", "MemoryPolicy"),
    "Options": ("options", "Options"),
    "plan": ("planner", "plan"),
    "plan_all": ("planner", "plan_all"),
    "plan_each": ("planner", "plan_each"),
    # discovery
    "detect_topology": ("discovery", "detect_topology"),
    "topology_from_sysfs": ("discovery", "topology_from_sysfs"),
    "load_topology": ("discovery", "load_topology"),
    "resolve_topology": ("discovery", "resolve_topology"),
    "apply_visibility": ("discovery", "apply_visibility"),
    # binding (Binding.threads holds ThreadResults, whose action is a ThreadAction)
    "Binding": ("binding", "Binding"),
    "KernelPolicy": ("binding", "KernelPolicy"),
    "Skipped": ("binding", "Skipped"),
    "ThreadAction": ("binding", "ThreadAction"),
    "ThreadResult": ("binding", "ThreadResult"),
    "VerifyResult": ("binding", "VerifyResult"),
    "apply_plan": ("binding", "apply_plan"),
    "bind_current_process": ("binding", "bind_current_process"),
    # placing buffers
    "MemoryPlacement": ("binding.placement", "MemoryPlacement"),
    "bind_memory": ("binding.placement", "bind_memory"),
    "memory_on": ("binding.placement", "memory_on"),
    "MemoryOn": ("binding.placement", "MemoryOn"),
    "host_buffer": ("binding.host", "host_buffer"),
    "HostBuffer": ("binding.host", "HostBuffer"),
    # measuring before binding
    "advise": ("advisor", "advise"),
    "Advice": ("records.advice", "Advice"),
    "Recommendation": ("records.values", "Recommendation"),
    "load_advice": ("records.store", "load_advice"),
}

# Made from the table; type checkers read the "X as X" re-exports below instead.
__all__ = ["__version__", *_EXPORTS]  # noqa: PLE0604

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List, Tuple

    # "X as X": an explicit re-export, for type checkers and linters.
    from .advisor import advise as advise
    from .binding import Binding as Binding
    from .binding import KernelPolicy as KernelPolicy
    from .binding import Skipped as Skipped
    from .binding import ThreadAction as ThreadAction
    from .binding import ThreadResult as ThreadResult
    from .binding import VerifyResult as VerifyResult
    from .binding import apply_plan as apply_plan
    from .binding import bind_current_process as bind_current_process
    from .binding.host import HostBuffer as HostBuffer
    from .binding.host import host_buffer as host_buffer
    from .binding.placement import MemoryOn as MemoryOn
    from .binding.placement import MemoryPlacement as MemoryPlacement
    from .binding.placement import bind_memory as bind_memory
    from .binding.placement import memory_on as memory_on
    from .cpulist import format_cpulist as format_cpulist
    from .cpulist import parse_cpulist as parse_cpulist
    from .cpulist import parse_nodelist as parse_nodelist
    from .discovery import apply_visibility as apply_visibility
    from .discovery import detect_topology as detect_topology
    from .discovery import load_topology as load_topology
    from .discovery import resolve_topology as resolve_topology
    from .discovery import topology_from_sysfs as topology_from_sysfs
    from .errors import AdviceRecordError as AdviceRecordError
    from .errors import BindError as BindError
    from .errors import ConfigError as ConfigError
    from .errors import LibnumaUnavailableError as LibnumaUnavailableError
    from .errors import ListParseError as ListParseError
    from .errors import NotABufferError as NotABufferError
    from .errors import NumaSyscallError as NumaSyscallError
    from .errors import PinError as PinError
    from .errors import PlacementSyscallError as PlacementSyscallError
    from .errors import PlanError as PlanError
    from .errors import ProcessStateError as ProcessStateError
    from .errors import PynumabindError as PynumabindError
    from .errors import ReadOnlyBufferError as ReadOnlyBufferError
    from .errors import SnapshotFileError as SnapshotFileError
    from .errors import TopologyError as TopologyError
    from .errors import UnknownIdError as UnknownIdError
    from .model import Cpu as Cpu
    from .model import CpuMode as CpuMode
    from .model import Detail as Detail
    from .model import Gpu as Gpu
    from .model import MemoryAccess as MemoryAccess
    from .model import MemoryPolicy as MemoryPolicy
    from .model import NumaNode as NumaNode
    from .model import Plan as Plan
    from .model import Topology as Topology
    from .options import Options as Options
    from .planner import plan as plan
    from .planner import plan_all as plan_all
    from .planner import plan_each as plan_each
    from .records.advice import Advice as Advice
    from .records.store import load_advice as load_advice
    from .records.values import Recommendation as Recommendation


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'pynumabind' has no attribute {name!r}") from None
    with _forksafe.lock():  # a fork waits for these imports (see _os.forksafe)
        # importlib too: a fresh interpreter may not have loaded it yet, and a
        # child forked while this thread imported it outside the lock would
        # inherit its module lock held and hang on its own first export.
        import importlib

        value = getattr(importlib.import_module(f".{module_name}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    """The public names only (``__all__``): no helpers, no subpackages, no imports."""
    return sorted(__all__)


# What the module needed only while it was being written: not part of its namespace.
del TYPE_CHECKING, annotations
