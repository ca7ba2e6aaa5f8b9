"""The one options object: every input to planning and binding (public as ``pynumabind.Options``).

An :class:`Options` is built once, where the inputs arrive -- from keyword
arguments (the public functions' thin keyword fronts call
:meth:`Options.from_arguments`; the CLI's flags too), or by the caller
(``plan(topology, options=Options(rank=1, mode="socket"))``) -- merged with
the environment by :func:`pynumabind.discovery._environ.resolve`, and passed down
unchanged: CLI -> binding -> planner.  The planner takes an Options already
merged; it never reads the environment.  Everything that can be checked
without the machine is checked here, once, when the object is made
(``__post_init__``, so ``Options(...)`` and ``dataclasses.replace`` check too):

* ``rank`` a non-negative int; ``nprocs`` an int from 1 to
  :data:`MAX_NPROCS` (:func:`check_nprocs` is the only check of a rank
  count, also used for counts read from launcher variables and for the count
  the planner derives);
* ``mode`` and ``policy`` parsed into their enums, names case-insensitive
  everywhere (API, CLI and environment; :func:`parse_choice` is the one
  parser; ``None``: not given, the planner's default ``node``/``preferred``);
* ``gpu_memory`` and ``require_node`` bools;
* ``gpu`` an int: this rank's GPU (an index into ``topology.gpus``);
  ``rank_gpus`` a sequence of ints: every rank's GPU; ``gpus`` a non-empty
  sequence of ints: the GPUs of one process with no rank (the union plan);
  ``gpus`` goes with none of ``rank``, ``nprocs``, ``gpu`` or ``rank_gpus``;
* ``interleave_nodes`` a node-list string or a set of non-negative ids (that
  it needs a policy that spreads, ``interleave`` or ``weighted-interleave``,
  is checked once the environment is merged);
* ``weights`` a mapping of node id to weight (``{0: 3, 2: 1}``) or its text
  (``"0:3,2:1"``), read by :func:`pynumabind._weights.check_weights` (weights
  1 to 255; a bad text or mapping is a ConfigError naming the setting, the
  text's with the token and its position), kept as a dict ascending by node
  (that module is imported only when weights are given: a bind without them
  never loads it).  Weights name the nodes of ``weighted-interleave``: that they need that
  policy, that their nodes exist, have memory and are allowed, and that
  ``interleave_nodes`` (if given) names the same nodes is checked once the
  environment is merged (``PYNUMABIND_WEIGHTS``, ``--weights``).  Mode
  ``advised`` is the seam for weights from the advice record:
  :func:`pynumabind.records.store.resolve_advised` is where a record's
  weights would fill this field;
* ``local_gpus`` a non-empty sequence of ints, only with ``gpus`` (or with no
  rank at all): the visible GPUs that the job's processes drive on this host,
  one process per GPU (a framework's ranks: vLLM's local TP x PP (x local DP)
  GPUs, SGLang's ``tp_size`` GPUs, a Ray actor's GPUs).  The exclusive modes
  slice each node among them as among launcher ranks; ``gpus`` must be among
  them (``PYNUMABIND_LOCAL_GPUS``, a GPU index list such as ``0-3``);
* ``priority_cores`` a bool: in mode ``node``, a rank gets only its node's
  highest-performance cores (ACPI CPPC ``highest_perf``: Intel priority
  cores, PCT) where the node's cores differ (``PYNUMABIND_PRIORITY_CORES``).
  The exclusive modes always let ranks take the highest-performance cores
  first; this switch is for mode ``node`` only.
* ``fallback`` ``"error"`` or ``"nearest"`` (case-insensitive; ``None``: not
  given, the core's default ``error``): what a rank gets when its GPU's node
  has no CPU in the process's allowed CPUs (a cpuset).  ``error`` is a
  PlanError; ``nearest`` binds it to the nearest node with allowed CPUs
  (``PYNUMABIND_FALLBACK``, ``--fallback``; :mod:`pynumabind.planner._fallback`).
  The framework hooks default to ``nearest``, so a worker always starts.
* ``tiers`` ``"local"`` or ``"all"`` (case-insensitive; ``None``: not given,
  ``local``): ``all`` spreads each rank's memory by weighted interleave over
  its own nodes and the nearest slower memory tier's memory-only nodes
  (``PYNUMABIND_TIERS``, ``--tiers``; :mod:`pynumabind.planner._tiers`), and
  makes ``weighted-interleave`` the default policy.

The keywords the public functions take besides ``rank``, ``nprocs``,
``mode`` and ``policy`` are written once, as :class:`OptionKeywords`.  One
word per concept (the glossary in the docs): ``policy`` is the memory policy,
``mode`` only the CPU mode, ``gpu`` always one GPU index and ``gpus`` a list
of them.

What needs the machine (override ids, GPU indices, interleave nodes that
exist and have memory) is checked by the planner against the topology.  The
per-rank overrides ``nodes`` and ``cpus`` stay as given: ``all``, ``!`` and
``+`` only mean something against a topology.

``sources`` records where each option came from (``"argument"``, a CLI flag,
or the environment variable), so an error can name the variable the user
may not know was set.  ``require_node`` (``PYNUMABIND_REQUIRE_NODE``) turns a
GPU whose NUMA node is unknown into a PlanError.  ``topology_file``
(``PYNUMABIND_TOPOLOGY``) names a snapshot to plan from instead of this
machine's sysfs and NVML (:func:`pynumabind.discovery.resolve_topology`
reads it); it has no keyword argument because the API takes a ``topology=``
object.

One rule for blank variables, for every reader of a ``PYNUMABIND_*``
variable (the environment merge, the advice record's path, the framework
hooks, the advisor): :func:`environ_value`.  A value that is empty or only
ASCII whitespace, as a Kubernetes or Slurm template leaves a variable it has
no value for, counts as unset.
"""

from __future__ import annotations

import collections.abc as _abc

from ._record import FACTORY, field, field_names, record
from ._text import shown
from .errors import ConfigError, ListParseError, PynumabindError
from .model import CpuMode, MemoryPolicy

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import (
        Any,
        Callable,
        Dict,
        Iterable,
        Mapping,
        Optional,
        Sequence,
        Tuple,
        Type,
        TypeVar,
        Union,
    )

    from typing_extensions import Unpack

    from ._keywords import ArgumentKeywords, OptionKeywords

__all__ = [
    "MAX_NPROCS",
    "ArgumentKeywords",
    "OptionKeywords",
    "Options",
]

MAX_NPROCS = 65536  # local ranks; bounds the work when nprocs comes from the environment
ARGUMENT = "argument"
COMMAND_LINE = "command line"
CHOSEN_BY_CHECK = "pynumabind check"  # nprocs of check's workers: the default, chosen in the parent


def __getattr__(name: str) -> Any:
    """:class:`OptionKeywords` and :class:`ArgumentKeywords`, from :mod:`._keywords` on first use.

    A TypedDict needs ``typing`` at run time, and a bind loads none of it.
    Reading one of the two is an import, as ``import pynumabind.x`` is: the
    caller's own (see :mod:`pynumabind._os.forksafe`).
    """
    if name in ("ArgumentKeywords", "OptionKeywords"):
        from . import _keywords

        return getattr(_keywords, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Only ASCII whitespace is trimmed: str.strip() would also eat U+00A0 and its
# kind, so a value made of them would silently count as unset.
ASCII_SPACE = " \t\n\r\f\v"


def environ_value(environ: Mapping[str, str], name: str) -> Optional[str]:
    """``name``'s value in ``environ``, or None when it is unset or blank: the one rule.

    Blank is empty or only ASCII whitespace (:data:`ASCII_SPACE`): what a
    Kubernetes or Slurm template exports for a variable it has no value for
    (``PYNUMABIND_FALLBACK=""``).  Every reader of a ``PYNUMABIND_*``
    variable goes through here, so such a value means unset everywhere.  The
    value comes back as it was set (callers trim it, and quote it in errors);
    a value of other whitespace (U+00A0) is a value, and its parser's error.
    """
    value = environ.get(name)
    if value is None or not value.strip(ASCII_SPACE):
        return None
    return value


if TYPE_CHECKING:  # pragma: no cover
    _E = TypeVar("_E", CpuMode, MemoryPolicy)


def check_int(value: object, what: str) -> int:
    """An int (not a bool), else a ConfigError naming ``what``: the one such check."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer, not {value!r}")
    return value


def check_nprocs(value: object, what: str = "nprocs") -> int:
    """A number of local ranks: an int from 1 to MAX_NPROCS, else a ConfigError naming ``what``."""
    check_int(value, what)
    assert isinstance(value, int)
    if value < 1:
        raise ConfigError(f"{what} must be at least 1, not {value}")
    if value > MAX_NPROCS:
        raise ConfigError(f"{what} {value} exceeds the limit of {MAX_NPROCS} local ranks")
    return value


def _check_rank(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"invalid {what} {value!r}; expected a non-negative integer")
    return value


def parse_choice(
    kind: Type[_E], value: Union[str, _E, None], what: str, *, variable: Optional[str] = None
) -> Optional[_E]:
    """A mode or memory policy, names case-insensitive: the one parser of both.

    ``variable``: the value came from that environment variable (ASCII
    whitespace around it is trimmed, and the error names the variable).
    """
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, str):
        folded = value.strip(ASCII_SPACE) if variable is not None else value
        for member in kind:
            if member.value == folded.lower():
                return member
    if variable is not None and isinstance(value, str):
        choices = ", ".join(m.value for m in kind)
        raise ConfigError(f"invalid {variable}={shown(value)}; choose one of: {choices}")
    return kind.parse(value, what)  # the error naming the choices


def _interleave(value: Union[str, Iterable[int], None]) -> Union[str, frozenset[int], None]:
    """A node-list string (parsed against the machine by the planner) or a set of ids."""
    if value is None or isinstance(value, (str, frozenset)):
        return value
    if not isinstance(value, _abc.Iterable):
        raise ConfigError(
            f"interleave_nodes must be a node list string or an iterable of node ids, not {value!r}"
        )
    ids = []
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise ConfigError(f"interleave_nodes entry {item!r} is not a non-negative id")
        ids.append(item)
    return frozenset(ids)


def _weights(value: object, what: str) -> Optional[Mapping[int, int]]:
    """Weights checked (see :mod:`pynumabind._weights`); a bad text names the setting."""
    if value is None:
        return None
    from ._weights import check_weights  # only where weights are given

    try:
        return check_weights(value, what)  # type: ignore[arg-type]
    except ListParseError as exc:  # the text: say which setting it was
        raise ConfigError(f"{what}: {exc}") from exc


#: Sequences that are not lists of GPU indices (their items are characters or bytes).
NOT_GPU_LISTS = (str, bytes, bytearray, memoryview)


def _gpu_list(value: Optional[Sequence[int]], name: str, what: str) -> Optional[Tuple[int, ...]]:
    if value is None:
        return None
    if isinstance(value, NOT_GPU_LISTS) or not isinstance(value, _abc.Sequence):
        raise ConfigError(f"{name} must be a sequence giving {what}, not {value!r}")
    return tuple(check_int(item, "GPU index") for item in value)


def _variable(source: Optional[str]) -> Optional[str]:
    """``source`` when it names an environment variable."""
    return None if source in (None, ARGUMENT, COMMAND_LINE, CHOSEN_BY_CHECK) else source


def union_front(options: Optional[Options], keywords: Mapping[str, Any]) -> Options:
    """The front of :func:`~pynumabind.plan` and :func:`~pynumabind.bind_current_process`."""
    return Options.from_arguments(options=options, **keywords)


def _alone(options: Options, keywords: Dict[str, Any]) -> Options:
    """``options``, checked to be an Options given without keyword options."""
    if not isinstance(options, Options):
        raise ConfigError(f"options must be a pynumabind.Options, not {options!r}")
    given = [k for k, v in keywords.items() if v is not None and v is not False]
    if given:
        raise ConfigError(
            f"give options= or keyword options, not both (also given: {', '.join(given)})"
        )
    return options


@record(frozen=True)
class Options:
    """Every input to planning and binding, validated once (see the module docstring).

    ``None`` means "not given": the planner decides (``nprocs``: one rank per
    override entry, GPU or CPU node; ``mode``: node; ``policy``: preferred).

    Attributes:
        rank: The local rank (a non-negative int).
        nprocs: The number of local processes (1 to :data:`MAX_NPROCS`).
        mode: The CPU mode: ``node``, ``socket``, ``exclusive``,
            ``core-complex``, ``none`` (a name or a :class:`~pynumabind.CpuMode`).
        policy: The memory policy: ``preferred``, ``bind``, ``interleave``,
            ``local``, ``none`` (a name or a :class:`~pynumabind.MemoryPolicy`).
        nodes: Per-rank NUMA nodes: ``"0,0,1,1"``, ``"0 0 1 1"``, ``"0-1;2-3"``,
            or a sequence with one node (or node set) per rank.
        cpus: Per-rank CPU lists: ``"0-7;8-15"``, ``"0-7 8-15"``, or a
            sequence with one CPU set per rank.
        gpu: This rank's GPU, an index into ``topology.gpus`` (instead of GPU
            ``rank``).
        rank_gpus: Every rank's GPU index, in rank order (:func:`~pynumabind.plan_each`,
            :func:`~pynumabind.plan_all`).
        gpus: The GPU indices of one process that drives several: the union
            plan (with none of ``rank``, ``nprocs``, ``gpu``, ``rank_gpus``).
        gpu_memory: Also bind memory to the GPU's own memory node (Grace
            Hopper/Blackwell's HBM node).
        interleave_nodes: The nodes ``policy="interleave"`` or
            ``"weighted-interleave"`` spreads pages over (a node list or a set
            of ids; default: the plan's nodes, or the weights' nodes).
        weights: The weight of each node for ``policy="weighted-interleave"``
            (``{0: 3, 2: 1}`` or ``"0:3,2:1"``; 1 to 255): the policy's nodes
            are these.  A process's policy follows the kernel's system-wide
            weights, which a bind compares with these and reports when they
            differ (see :func:`~pynumabind.bind_current_process`).
        require_node: Fail (:class:`~pynumabind.PlanError`) instead of leaving a
            rank unbound when its GPU's NUMA node is unknown.
        local_gpus: The GPU indices the job's processes drive on this host,
            one process per GPU: the exclusive modes slice a node among them.
        priority_cores: In mode ``node``, only the node's highest-performance
            cores.
        fallback: ``"error"`` (the default when ``None``) or ``"nearest"``: a
            rank whose GPU's node has no allowed CPU is bound to the nearest
            node with allowed CPUs instead of failing.
        tiers: ``"local"`` (the default when ``None``) or ``"all"``: each
            rank's memory by weighted interleave over its own nodes and the
            memory-only nodes of the nearest slower memory tier.

    The remaining fields are filled in by the environment's reader (where a
    setting came from); a caller leaves them alone.

    Raises:
        ConfigError: when made, for any value out of its range or of the wrong
            type, or settings that cannot go together; the message names it.
    """

    rank: Optional[int] = None
    nprocs: Optional[int] = None
    mode: Optional[CpuMode] = None
    policy: Optional[MemoryPolicy] = None
    nodes: Any = None  # NodesOverride, as given
    cpus: Any = None  # CpusOverride, as given
    gpu: Optional[int] = None  # this rank's GPU (an index into topology.gpus)
    rank_gpus: Optional[Tuple[int, ...]] = None  # every rank's GPU
    gpus: Optional[Tuple[int, ...]] = None  # one process's GPUs: the union plan
    gpu_memory: bool = False
    interleave_nodes: Union[str, frozenset[int], None] = None
    weights: Optional[Mapping[int, int]] = field(default=None, hash=False)  # node -> weight
    require_node: bool = False  # a GPU whose NUMA node is unknown is a PlanError
    local_gpus: Optional[Tuple[int, ...]] = None  # the job's GPUs on this host: the ranks
    priority_cores: bool = False  # mode node: only the node's highest-performance cores
    fallback: Optional[str] = None  # "error" (the default) or "nearest": a cpuset without the node
    tiers: Optional[str] = None  # "local" (the default) or "all": see pynumabind.planner._tiers
    topology_file: Optional[str] = None  # PYNUMABIND_TOPOLOGY: plan from this snapshot
    rank_source: Optional[str] = None
    nprocs_source: Optional[str] = None
    disabled: bool = False
    disabled_by: Optional[str] = None
    sources: Mapping[str, str] = field(default_factory=dict)
    flags: bool = field(default=False, repr=False, compare=False)  # from the CLI: "--nprocs"

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        rank: Optional[int] = None,
        nprocs: Optional[int] = None,
        mode: Optional[CpuMode] = None,
        policy: Optional[MemoryPolicy] = None,
        nodes: Any = None,
        cpus: Any = None,
        gpu: Optional[int] = None,
        rank_gpus: Optional[Tuple[int, ...]] = None,
        gpus: Optional[Tuple[int, ...]] = None,
        gpu_memory: bool = False,
        interleave_nodes: Union[str, frozenset[int], None] = None,
        weights: Optional[Mapping[int, int]] = None,
        require_node: bool = False,
        local_gpus: Optional[Tuple[int, ...]] = None,
        priority_cores: bool = False,
        fallback: Optional[str] = None,
        tiers: Optional[str] = None,
        topology_file: Optional[str] = None,
        rank_source: Optional[str] = None,
        nprocs_source: Optional[str] = None,
        disabled: bool = False,
        disabled_by: Optional[str] = None,
        sources: Mapping[str, str] = FACTORY,
        flags: bool = False,
    ) -> None:
        self.__dict__.update(
            rank=rank,
            nprocs=nprocs,
            mode=mode,
            policy=policy,
            nodes=nodes,
            cpus=cpus,
            gpu=gpu,
            rank_gpus=rank_gpus,
            gpus=gpus,
            gpu_memory=gpu_memory,
            interleave_nodes=interleave_nodes,
            weights=weights,
            require_node=require_node,
            local_gpus=local_gpus,
            priority_cores=priority_cores,
            fallback=fallback,
            tiers=tiers,
            topology_file=topology_file,
            rank_source=rank_source,
            nprocs_source=nprocs_source,
            disabled=disabled,
            disabled_by=disabled_by,
            sources={} if sources is FACTORY else sources,
            flags=flags,
        )
        self.__post_init__()

    def __post_init__(self) -> None:
        prefix, source = ("--", COMMAND_LINE) if self.flags else ("", ARGUMENT)
        values = self.__dict__
        for name in ("gpu_memory", "require_node", "disabled", "priority_cores"):
            if not isinstance(values[name], bool):
                raise ConfigError(f"{name} must be True or False, not {values[name]!r}")
        # Each check maps None to None: only the fields given are checked (the
        # words of their errors made then), and only a changed value is set.
        for name, check in _CHECKS:
            value = values[name]
            if value is not None:
                checked = check(value, prefix, self.flags)
                if checked is not value:
                    object.__setattr__(self, name, checked)
        for name, value in self._sources(source).items():
            object.__setattr__(self, name, value)
        self._check_union()
        self._check_local_gpus()

    def _sources(self, source: str) -> Dict[str, Any]:
        """Where the given options came from, when the caller did not say: ``source``."""
        out: Dict[str, Any] = {}
        if self.rank is not None and self.rank_source is None:
            out["rank_source"] = source
        if self.nprocs is not None and self.nprocs_source is None:
            out["nprocs_source"] = source
        if not self.sources:
            given = ("mode", "policy", "nodes", "cpus")
            out["sources"] = {n: source for n in given if getattr(self, n) is not None}
        return out

    def _check_union(self) -> None:
        if self.gpus is None:
            return
        if not self.gpus:
            raise ConfigError("gpus must name at least one GPU index")
        # A launcher's rank and size may be in the environment; they are not used.
        launcher = {"rank": self.rank_source, "nprocs": self.nprocs_source}
        clash = [
            n
            for n in ("rank", "nprocs", "gpu", "rank_gpus")
            if getattr(self, n) is not None and _variable(launcher.get(n)) is None
        ]
        if clash:
            raise ConfigError(f"give gpus= alone, without {'= or '.join(clash)}=")

    def _check_local_gpus(self) -> None:
        peers = self.local_gpus
        if peers is None:
            return
        what = self.from_environment("local_gpus") or "local_gpus"
        if not peers:
            raise ConfigError(f"{what} must name at least one GPU index")
        negative = [i for i in peers if i < 0]
        if negative:
            raise ConfigError(f"{what} names negative GPU index {negative[0]}")
        if self.gpus is None and self.rank is not None and _variable(self.rank_source) is None:
            raise ConfigError(
                f"{what} goes with gpus= (a process's GPUs among the job's), not with rank="
            )
        missing = sorted(set(self.gpus or ()) - set(peers))
        if missing:
            raise ConfigError(
                f"{what} {list(peers)} must include every GPU of this process; "
                f"GPU {missing[0]} is not among them"
            )

    @classmethod
    def from_arguments(
        cls,
        *,
        options: Optional[Options] = None,
        flags: bool = False,
        **keywords: Unpack[ArgumentKeywords],
    ) -> Options:
        """The one step of every keyword front: ``options`` as given, or built from the keywords.

        ``flags``: from the CLI (errors say ``--nprocs``).  Options and
        keywords together are a ConfigError: which would win is not obvious.
        """
        if options is not None:
            return _alone(options, dict(keywords))
        unknown = set(keywords) - set(field_names(cls))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        given: Dict[str, Any] = {k: v for k, v in keywords.items() if v is not None}
        return cls(flags=flags, **given)

    def spelled(self, name: str) -> str:
        """How option ``name`` is given: ``--nprocs`` on the command line, else ``nprocs=``."""
        return f"--{name.replace('_', '-')}" if self.flags else f"{name}="

    @property
    def cpu_mode(self) -> CpuMode:
        return CpuMode.NODE if self.mode is None else self.mode

    @property
    def effective_policy(self) -> MemoryPolicy:
        """The memory policy a plan gets -- :attr:`policy`, else ``preferred``
        (``weighted-interleave`` with ``tiers="all"``)."""
        if self.policy is not None:
            return self.policy
        if self.tiers == "all":
            return MemoryPolicy.WEIGHTED_INTERLEAVE
        return MemoryPolicy.PREFERRED

    def from_launcher(self, what: str) -> bool:
        """Whether ``rank`` or ``nprocs`` (``what``) came from a launcher's variable."""
        source = self.rank_source if what == "rank" else self.nprocs_source
        return _variable(source) is not None

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
            for option in (
                "mode",
                "policy",
                "nodes",
                "cpus",
                "require_node",
                "local_gpus",
                "priority_cores",
                "fallback",
                "weights",
                "tiers",
            )
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
            for name in ("rank", "nprocs", "mode", "policy", "nodes", "cpus", "gpu", "gpus")
            if getattr(self, name) is not None
        }
        if self.gpu_memory:
            out["gpu_memory"] = True
        if self.interleave_nodes is not None:
            out["interleave_nodes"] = self.interleave_nodes
        if self.weights is not None:
            out["weights"] = dict(self.weights)
        if self.require_node:
            out["require_node"] = True
        if self.local_gpus is not None:
            out["local_gpus"] = self.local_gpus
        if self.priority_cores:
            out["priority_cores"] = True
        if self.fallback is not None:
            out["fallback"] = self.fallback
        if self.tiers is not None:
            out["tiers"] = self.tiers
        return out


#: What :meth:`Options.__post_init__` checks, field by field: ``check(value, prefix, flags)``
#: for a field given (not None), ``prefix`` ``"--"`` for the CLI's flags; each the one check
#: of its kind (the module docstring's list).
_CHECKS: Tuple[Tuple[str, Callable[[Any, str, bool], Any]], ...] = (
    ("rank", lambda value, prefix, flags: _check_rank(value, f"{prefix}rank argument")),
    ("nprocs", lambda value, prefix, flags: check_nprocs(value, f"{prefix}nprocs")),
    ("mode", lambda value, prefix, flags: parse_choice(CpuMode, value, f"{prefix}mode")),
    (
        "policy",
        lambda value, prefix, flags: parse_choice(
            MemoryPolicy, value, "--policy" if flags else "memory policy"
        ),
    ),
    ("gpu", lambda value, prefix, flags: check_int(value, "gpu")),
    (
        "rank_gpus",
        lambda value, prefix, flags: _gpu_list(value, "rank_gpus", "one GPU index per rank"),
    ),
    (
        "gpus",
        lambda value, prefix, flags: _gpu_list(value, "gpus", "the GPU indices of one process"),
    ),
    (
        "local_gpus",
        lambda value, prefix, flags: _gpu_list(
            value, "local_gpus", "the GPU indices of the job's processes here"
        ),
    ),
    ("interleave_nodes", lambda value, prefix, flags: _interleave(value)),
    ("weights", lambda value, prefix, flags: _weights(value, f"{prefix}weights")),
    ("fallback", lambda value, prefix, flags: parse_fallback(value, f"{prefix}fallback")),
    ("tiers", lambda value, prefix, flags: parse_tiers(value, f"{prefix}tiers")),
)


#: ``bind_current_process(on_error=)``'s choices (an argument beside the options), which
#: ``pynumabind exec --on-error`` offers too: warn and bind the CPUs only, or raise.
ON_ERROR_CHOICES = ("warn", "raise")

#: The ``fallback`` choices (see :mod:`pynumabind.planner._fallback`).
FALLBACKS = ("error", "nearest")


def parse_fallback(
    value: object, what: str = "fallback", variable: Optional[str] = None
) -> Optional[str]:
    """``"error"`` or ``"nearest"`` (any case, ASCII spaces trimmed); None stays None."""
    if value is None:
        return None
    text = value.strip(ASCII_SPACE).lower() if isinstance(value, str) else None
    if text not in FALLBACKS:
        where = f"{variable}={shown(str(value))}" if variable else f"{what} {value!r}"
        raise ConfigError(f"invalid {where}; choose one of: {', '.join(FALLBACKS)}")
    return text


#: The ``tiers`` choices (see :mod:`pynumabind.planner._tiers`).
TIERS = ("local", "all")


def parse_tiers(
    value: object, what: str = "tiers", variable: Optional[str] = None
) -> Optional[str]:
    """``"local"`` or ``"all"`` (any case, ASCII spaces trimmed); None stays None."""
    if value is None:
        return None
    text = value.strip(ASCII_SPACE).lower() if isinstance(value, str) else None
    if text not in TIERS:
        where = f"{variable}={shown(str(value))}" if variable else f"{what} {value!r}"
        raise ConfigError(f"invalid {where}; choose one of: {', '.join(TIERS)}")
    return text
