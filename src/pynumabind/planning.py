"""What a rank should get: the :class:`Plan` value and its vocabulary.

A plan is pure data.  The planner (:mod:`pynumabind.planner`) produces it
from a :class:`~pynumabind.topology.Topology`; the binder applies it; the CLI
prints it.  Keeping the value separate from both sides lets each be tested
alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

from .cpulist import format_cpulist
from .errors import ConfigError
from .topology import Gpu

__all__ = ["CpuMode", "MemoryPolicy", "Plan"]


_Choice = TypeVar("_Choice", bound=enum.Enum)


def _parse_choice(cls: Type[_Choice], value: object, source: str) -> _Choice:
    """One of ``cls``'s values, or a ConfigError listing them all."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"invalid {source} {value!r}; choose one of: {choices}") from None


class CpuMode(str, enum.Enum):
    """How a rank's CPUs are chosen."""

    NODE = "node"  # all allowed CPUs of the device's NUMA node
    SOCKET = "socket"  # all allowed CPUs of the device's package (spans SNC/NPS nodes)
    EXCLUSIVE = "exclusive"  # disjoint whole-core slices among ranks sharing a node
    CORE_COMPLEX = "core-complex"  # like exclusive, split along L3 cache groups
    NONE = "none"  # leave CPU affinity alone

    @classmethod
    def parse(cls, value: str | CpuMode, source: str = "mode") -> CpuMode:
        return _parse_choice(cls, value, source)


class MemoryPolicy(str, enum.Enum):
    """Which memory policy a rank gets."""

    PREFERRED = "preferred"  # local first, spill over instead of OOM
    BIND = "bind"  # strict, like numactl --membind
    INTERLEAVE = "interleave"  # round-robin over the plan's nodes
    LOCAL = "local"  # allocate on the node of the CPU that faults
    NONE = "none"  # leave the memory policy alone

    @classmethod
    def parse(cls, value: str | MemoryPolicy, source: str = "memory policy") -> MemoryPolicy:
        return _parse_choice(cls, value, source)


@dataclass(frozen=True)
class Plan:
    """The binding one rank should get, and why.

    ``cpus`` is ``None`` when CPU affinity is to be left alone (mode
    ``none``, or a device whose node is unknown); otherwise it is a non-empty
    subset of the allowed CPUs.  ``mems`` are the memory-policy nodes (empty
    for ``local`` and ``none``).  ``node`` is the CPU node the rank was placed
    on, ``None`` when unplaced.  ``reasons`` cite each decision's source;
    ``warnings`` are the subset a launcher should surface.
    """

    rank: int
    device: Optional[Gpu]
    cpus: Optional[frozenset[int]]
    mems: frozenset[int]
    policy: MemoryPolicy
    mode: CpuMode = CpuMode.NODE
    node: Optional[int] = None
    reasons: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = field(default=())

    def to_dict(self) -> Dict[str, Any]:
        """The documented JSON form (``pynumabind plan --json``)."""
        device = None
        if self.device is not None:
            gpu = self.device
            device = {
                "index": gpu.index,
                "pci_bus_id": gpu.pci_bus_id,
                "vendor": gpu.vendor,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "numa_node": gpu.numa_node,
                "memory_node": gpu.memory_node,
            }
        return {
            "rank": self.rank,
            "device": device,
            "mode": self.mode.value,
            "node": self.node,
            "cpus": None if self.cpus is None else format_cpulist(self.cpus),
            "mems": format_cpulist(self.mems),
            "policy": self.policy.value,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
        }
