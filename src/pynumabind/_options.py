"""The one normalised options object: every input to planning and binding.

An :class:`Options` is built once, where the inputs arrive -- from keyword
arguments (:meth:`Options.from_arguments`: the API, and the CLI's flags),
merged with the environment by :func:`pynumabind._environ.resolve` -- and
passed down unchanged: CLI -> binding -> planner.  Everything that can be
checked without the machine is checked here, once:

* ``rank`` a non-negative int; ``nprocs`` an int from 1 to
  :data:`MAX_NPROCS` (:func:`check_nprocs` is the only check of a rank
  count, also used for counts read from launcher variables and for the count
  the planner derives);
* ``mode`` and ``memory`` parsed into their enums, names case-insensitive
  everywhere (API, CLI and environment; ``None``: not given, the planner's
  default ``node``/``preferred``);
* ``gpu_memory`` a bool; ``device`` an int; ``devices`` a sequence of ints;
* ``interleave_nodes`` a node-list string or a set of non-negative ids (that
  it needs ``memory="interleave"`` is checked once the environment is merged).

What needs the machine (override ids, device indices, interleave nodes that
exist and have memory) is checked by the planner against the topology.  The
per-rank overrides ``nodes`` and ``cpus`` stay as given: ``all``, ``!`` and
``+`` only mean something against a topology.

``sources`` records where each option came from (``"argument"``, a CLI flag,
or the environment variable), so an error can name the variable the user
may not know was set.  ``require_node`` (``PYNUMABIND_REQUIRE_NODE``) turns a
GPU whose NUMA node is unknown into a PlanError.  ``topology_file``
(``PYNUMABIND_TOPOLOGY``) names a snapshot to plan from instead of this
machine's sysfs and NVML (:func:`pynumabind.discovery.process_topology`);
it has no keyword argument because the API takes a ``topology=`` object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

from .errors import ConfigError, PynumabindError
from .model import CpuMode, MemoryPolicy

__all__ = ["ARGUMENT", "MAX_NPROCS", "Options", "check_nprocs"]

MAX_NPROCS = 65536  # local ranks; bounds the work when nprocs comes from the environment
ARGUMENT = "argument"
COMMAND_LINE = "command line"

_E = TypeVar("_E", CpuMode, MemoryPolicy)


def check_nprocs(value: object, what: str = "nprocs") -> int:
    """A number of local ranks: an int from 1 to MAX_NPROCS, else a ConfigError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer, not {value!r}")
    if value < 1:
        raise ConfigError(f"{what} must be at least 1, not {value}")
    if value > MAX_NPROCS:
        raise ConfigError(f"{what} {value} exceeds the limit of {MAX_NPROCS} local ranks")
    return value


def _check_rank(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"invalid {what} {value!r}; expected a non-negative integer")
    return value


def _check_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer, not {value!r}")
    return value


def _enum(kind: Type[_E], value: Union[str, _E, None], what: str) -> Optional[_E]:
    """A mode or memory policy; names are case-insensitive, as in the environment."""
    if value is None:
        return None
    if isinstance(value, str) and not isinstance(value, kind):
        for member in kind:
            if member.value == value.lower():
                return member
    return kind.parse(value, what)  # the member itself, or the error naming the choices


def _interleave(value: Union[str, Iterable[int], None]) -> Union[str, frozenset[int], None]:
    """A node-list string (parsed against the machine by the planner) or a set of ids."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, Iterable):
        raise ConfigError(
            f"interleave_nodes must be a node list string or an iterable of node ids, not {value!r}"
        )
    ids = []
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise ConfigError(f"interleave_nodes entry {item!r} is not a non-negative id")
        ids.append(item)
    return frozenset(ids)


def _devices(value: Optional[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"devices must be a sequence giving one device index per rank, not {value!r}"
        )
    return tuple(_check_int(item, "device") for item in value)


def _variable(source: Optional[str]) -> Optional[str]:
    """``source`` when it names an environment variable."""
    return None if source in (None, ARGUMENT, COMMAND_LINE) else source


@dataclass(frozen=True)
class Options:
    """Every input to planning and binding, validated (see the module docstring).

    ``None`` means "not given": the planner decides (``nprocs``: one rank per
    override entry, GPU or CPU node; ``mode``: node; ``memory``: preferred).
    """

    rank: Optional[int] = None
    nprocs: Optional[int] = None
    mode: Optional[CpuMode] = None
    memory: Optional[MemoryPolicy] = None
    nodes: Any = None  # NodesOverride, as given
    cpus: Any = None  # CpusOverride, as given
    device: Optional[int] = None  # this rank's GPU (an index into topology.gpus)
    devices: Optional[Tuple[int, ...]] = None  # every rank's GPU
    gpu_memory: bool = False
    interleave_nodes: Union[str, frozenset[int], None] = None
    require_node: bool = False  # a GPU whose NUMA node is unknown is a PlanError
    topology_file: Optional[str] = None  # PYNUMABIND_TOPOLOGY: plan from this snapshot
    rank_source: Optional[str] = None
    nprocs_source: Optional[str] = None
    disabled: bool = False
    disabled_by: Optional[str] = None
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_arguments(
        cls,
        *,
        rank: Optional[int] = None,
        nprocs: Optional[int] = None,
        mode: Union[str, CpuMode, None] = None,
        memory: Union[str, MemoryPolicy, None] = None,
        nodes: Any = None,
        cpus: Any = None,
        device: Optional[int] = None,
        devices: Optional[Sequence[int]] = None,
        gpu_memory: bool = False,
        interleave_nodes: Union[str, Iterable[int], None] = None,
        require_node: bool = False,
        flags: bool = False,
    ) -> Options:
        """Options from keyword arguments; ``flags``: from the CLI (errors say ``--nprocs``)."""
        prefix, source = ("--", COMMAND_LINE) if flags else ("", ARGUMENT)
        for name, flag in (("gpu_memory", gpu_memory), ("require_node", require_node)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name} must be True or False, not {flag!r}")
        choices = {"mode": mode, "memory": memory, "nodes": nodes, "cpus": cpus}
        given = [name for name, value in choices.items() if value is not None]
        return cls(
            rank=None if rank is None else _check_rank(rank, f"{prefix}rank argument"),
            nprocs=None if nprocs is None else check_nprocs(nprocs, f"{prefix}nprocs"),
            mode=_enum(CpuMode, mode, f"{prefix}mode"),
            memory=_enum(MemoryPolicy, memory, "--memory" if flags else "memory policy"),
            nodes=nodes,
            cpus=cpus,
            device=None if device is None else _check_int(device, "device"),
            devices=_devices(devices),
            gpu_memory=gpu_memory,
            interleave_nodes=_interleave(interleave_nodes),
            require_node=require_node,
            rank_source=None if rank is None else source,
            nprocs_source=None if nprocs is None else source,
            sources={name: source for name in given},
        )

    @property
    def cpu_mode(self) -> CpuMode:
        return CpuMode.NODE if self.mode is None else self.mode

    @property
    def policy(self) -> MemoryPolicy:
        return MemoryPolicy.PREFERRED if self.memory is None else self.memory

    def from_environment(self, option: str) -> Optional[str]:
        """The variable ``option`` (``"nodes"``...) came from; ``None`` if not from one."""
        return _variable(self.sources.get(option))

    def environment_settings(self) -> Tuple[str, ...]:
        """``"mode from PYNUMABIND_MODE"``... for every setting the environment gave."""
        out = [
            f"{what} from {source}"
            for what, source in (("rank", self.rank_source), ("nprocs", self.nprocs_source))
            if _variable(source) is not None
        ]
        out += [
            f"{option} from {variable}"
            for option in ("mode", "memory", "nodes", "cpus", "require_node")
            for variable in [self.from_environment(option)]
            if variable is not None
        ]
        return tuple(out)

    def blame(self, exc: PynumabindError) -> PynumabindError:
        """``exc`` with the settings the environment gave appended (the user may not know)."""
        settings = self.environment_settings()
        if not settings:
            return exc
        return type(exc)(f"{exc} (settings from the environment: {', '.join(settings)})")

    def keywords(self) -> Dict[str, Any]:
        """The options that were given, as :func:`~pynumabind.bind_current_process` keywords."""
        out: Dict[str, Any] = {
            name: getattr(self, name)
            for name in ("rank", "nprocs", "mode", "memory", "nodes", "cpus", "device")
            if getattr(self, name) is not None
        }
        if self.gpu_memory:
            out["gpu_memory"] = True
        if self.interleave_nodes is not None:
            out["interleave_nodes"] = self.interleave_nodes
        if self.require_node:
            out["require_node"] = True
        return out
