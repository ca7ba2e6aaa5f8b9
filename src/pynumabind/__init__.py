"""pynumabind: bind each GPU worker's CPUs and memory to the right NUMA node.

Typical use, first thing in a worker process::

    import pynumabind
    binding = pynumabind.bind_current_process(rank)

Importing this package is cheap: submodules (and pynvml) load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, Tuple

__version__ = "0.1.0"

# public name -> (submodule, attribute)
_EXPORTS: Dict[str, Tuple[str, str]] = {
    # errors
    "PynumabindError": ("errors", "PynumabindError"),
    "ListParseError": ("errors", "ListParseError"),
    "ConfigError": ("errors", "ConfigError"),
    "TopologyError": ("errors", "TopologyError"),
    "PlanError": ("errors", "PlanError"),
    "LibnumaUnavailableError": ("errors", "LibnumaUnavailableError"),
    "NumaSyscallError": ("errors", "NumaSyscallError"),
    "BindError": ("errors", "BindError"),
    # parsers
    "parse_cpulist": ("cpulist", "parse_cpulist"),
    "format_cpulist": ("cpulist", "format_cpulist"),
    "parse_nodelist": ("cpulist", "parse_nodelist"),
    "format_nodelist": ("cpulist", "format_nodelist"),
    "parse_cpumask": ("cpulist", "parse_cpumask"),
    "format_cpumask": ("cpulist", "format_cpumask"),
    # topology
    "Topology": ("model", "Topology"),
    "NumaNode": ("model", "NumaNode"),
    "Cpu": ("model", "Cpu"),
    "Gpu": ("model", "Gpu"),
    # planning
    "Plan": ("model", "Plan"),
    "CpuMode": ("model", "CpuMode"),
    "MemoryPolicy": ("model", "MemoryPolicy"),
    "plan": ("planner", "plan"),
    "plan_all": ("planner", "plan_all"),
    # discovery
    "detect_topology": ("discovery", "detect_topology"),
    "topology_from_sysfs": ("discovery", "topology_from_sysfs"),
    "load_topology": ("discovery", "load_topology"),
    "apply_visibility": ("_visible", "apply_visibility"),
    # binding
    "Binding": ("binder", "Binding"),
    "Skipped": ("binder", "Skipped"),
    "ThreadAction": ("_threads", "ThreadAction"),
    "ThreadResult": ("_threads", "ThreadResult"),
    "VerifyResult": ("binder", "VerifyResult"),
    "apply_plan": ("binder", "apply_plan"),
    "bind_current_process": ("binder", "bind_current_process"),
}

__all__ = [
    "BindError",
    "Binding",
    "ConfigError",
    "Cpu",
    "CpuMode",
    "Gpu",
    "LibnumaUnavailableError",
    "ListParseError",
    "MemoryPolicy",
    "NumaNode",
    "NumaSyscallError",
    "Plan",
    "PlanError",
    "PynumabindError",
    "Skipped",
    "ThreadAction",
    "ThreadResult",
    "Topology",
    "TopologyError",
    "VerifyResult",
    "__version__",
    "apply_plan",
    "apply_visibility",
    "bind_current_process",
    "detect_topology",
    "format_cpulist",
    "format_cpumask",
    "format_nodelist",
    "load_topology",
    "parse_cpulist",
    "parse_cpumask",
    "parse_nodelist",
    "plan",
    "plan_all",
    "topology_from_sysfs",
]

if TYPE_CHECKING:  # pragma: no cover
    from ._threads import ThreadAction, ThreadResult
    from ._visible import apply_visibility
    from .binder import Binding, Skipped, VerifyResult, apply_plan, bind_current_process
    from .cpulist import (
        format_cpulist,
        format_cpumask,
        format_nodelist,
        parse_cpulist,
        parse_cpumask,
        parse_nodelist,
    )
    from .discovery import detect_topology, load_topology, topology_from_sysfs
    from .errors import (
        BindError,
        ConfigError,
        LibnumaUnavailableError,
        ListParseError,
        NumaSyscallError,
        PlanError,
        PynumabindError,
        TopologyError,
    )
    from .model import Cpu, CpuMode, Gpu, MemoryPolicy, NumaNode, Plan, Topology
    from .planner import plan, plan_all


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'pynumabind' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module_name}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
