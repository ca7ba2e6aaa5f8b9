"""The request shared by all ranks: options resolved against one machine.

Everything that needs the topology to be checked is checked here, once, for
all ranks: override ids must exist (nodes on the machine, CPUs online), a
rank's GPU must be a visible one, ``interleave_nodes`` must name allowed
nodes with memory, and so must ``weights``.

Weights (``weighted-interleave`` only, the policy table's ``weighted``) name
the policy's nodes, for every rank as ``interleave_nodes`` does: their nodes
must exist, have memory and be allowed (the one rule,
:func:`check_memory_nodes`), and ``interleave_nodes``, when given too, must
name exactly the same nodes (a weight for a node the policy leaves out, or a
node without a weight, has no one meaning).  Without weights,
``weighted-interleave`` takes the plan's nodes (or ``interleave_nodes``) and
a process follows the kernel's system-wide weights for them.

``tiers="all"`` (:mod:`._tiers`) makes ``weighted-interleave`` the policy and
picks each rank's nodes itself: another policy given explicitly, or
``interleave_nodes``, is a ConfigError naming both settings, and weights give
each node's weight (every rank takes its own nodes') instead of naming the
nodes.

The number of local ranks, when not given, has one owner,
:func:`default_nprocs`: one per entry of a per-rank override, else one per
visible GPU, else one per NUMA node with allowed CPUs.
"""

from __future__ import annotations

from .._mempolicy import POLICIES
from .._record import field, record
from .._text import counted, format_ids, shown
from ..cpulist import parse_nodelist
from ..errors import ConfigError, ListParseError, PlanError, UnknownIdError
from ..model import CpuMode, MemoryPolicy, Topology
from ..options import (
    ARGUMENT,
    CHOSEN_BY_CHECK,
    COMMAND_LINE,
    MAX_NPROCS,
    Options,
    check_int,
    check_nprocs,
)
from ._place import cpu_bearing_nodes

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Callable, Dict, Mapping, Optional, Tuple, Union

__all__ = [
    "CHOSEN_BY_CHECK",
    "MAX_NPROCS",
    "Request",
    "build_request",
    "default_nprocs",
    "gpu_index",
]


@record(frozen=True)
class Request:
    """Validated inputs shared by all ranks."""

    nprocs: int
    mode: CpuMode
    policy: MemoryPolicy
    rank_gpus: Tuple[Optional[int], ...]  # per-rank index into topology.gpus
    explicit_gpu: Tuple[bool, ...]
    node_sets: Optional[Tuple[frozenset[int], ...]]
    cpu_sets: Optional[Tuple[frozenset[int], ...]]
    gpu_memory: bool
    interleave_nodes: Optional[frozenset[int]]
    nprocs_reason: str
    require_node: bool = False
    nprocs_option: str = "nprocs="  # how the user gives the count: "--nprocs" on the command line
    #: The ranks that run (the job's GPUs on this host, for a framework's
    #: process); None: every rank.  Only running ranks take a slice of a node.
    running: Optional[frozenset[int]] = None
    priority_cores: bool = False
    fallback: str = "error"  # "nearest": see ._fallback
    weights: Optional[Mapping[int, int]] = field(default=None, hash=False)
    #: ``tiers="all"`` (:mod:`._tiers`); ``plain_policy``: the policy a rank
    #: gets instead when its tiers give nothing to add.
    tiers: bool = False
    plain_policy: MemoryPolicy = MemoryPolicy.PREFERRED

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        nprocs: int,
        mode: CpuMode,
        policy: MemoryPolicy,
        rank_gpus: Tuple[Optional[int], ...],
        explicit_gpu: Tuple[bool, ...],
        node_sets: Optional[Tuple[frozenset[int], ...]],
        cpu_sets: Optional[Tuple[frozenset[int], ...]],
        gpu_memory: bool,
        interleave_nodes: Optional[frozenset[int]],
        nprocs_reason: str,
        require_node: bool = False,
        nprocs_option: str = "nprocs=",
        running: Optional[frozenset[int]] = None,
        priority_cores: bool = False,
        fallback: str = "error",
        weights: Optional[Mapping[int, int]] = None,
        tiers: bool = False,
        plain_policy: MemoryPolicy = MemoryPolicy.PREFERRED,
    ) -> None:
        self.__dict__.update(
            nprocs=nprocs,
            mode=mode,
            policy=policy,
            rank_gpus=rank_gpus,
            explicit_gpu=explicit_gpu,
            node_sets=node_sets,
            cpu_sets=cpu_sets,
            gpu_memory=gpu_memory,
            interleave_nodes=interleave_nodes,
            nprocs_reason=nprocs_reason,
            require_node=require_node,
            nprocs_option=nprocs_option,
            running=running,
            priority_cores=priority_cores,
            fallback=fallback,
            weights=weights,
            tiers=tiers,
            plain_policy=plain_policy,
        )


def default_nprocs(topology: Topology, lengths: Optional[Dict[str, int]] = None) -> Tuple[int, str]:
    """The number of local ranks when none is given, and why (the one owner of this rule).

    ``lengths`` maps each per-rank override given (``"nodes"``, ``"cpus"``)
    to its number of entries; they must agree.  The count can be 0 (no GPU
    and no node with allowed CPUs): the caller decides what that means.
    """
    lengths = lengths or {}
    if len(set(lengths.values())) > 1:
        raise ConfigError(
            f"the nodes override has {lengths['nodes']} entries but the cpus override "
            f"has {lengths['cpus']}; give one entry per local rank in both"
        )
    if lengths:
        name, count = next(iter(lengths.items()))
        return count, f"{counted(count, 'local rank')}: one per entry of the {name} override"
    if topology.gpus:
        count = len(topology.gpus)
        return count, f"{counted(count, 'local rank')}: one per visible GPU"
    nodes = cpu_bearing_nodes(topology)
    return len(nodes), (
        f"{counted(len(nodes), 'local rank')}: no GPUs, one per NUMA node with allowed CPUs "
        f"({format_ids(frozenset(nodes))})"
    )


def _given_count(topology: Topology, nprocs: int, source: Optional[str]) -> str:
    """Why there are ``nprocs`` ranks, by where the count came from (not just "given")."""
    if source == CHOSEN_BY_CHECK:
        count, why = default_nprocs(topology)
        if count == nprocs:
            return f"{why} (chosen by {CHOSEN_BY_CHECK})"
        return f"{counted(nprocs, 'local rank')} (chosen by {CHOSEN_BY_CHECK})"
    if source == COMMAND_LINE:
        return f"{counted(nprocs, 'local rank')} (--nprocs)"
    if source in (None, ARGUMENT):
        return f"{counted(nprocs, 'local rank')} (given)"
    return f"{counted(nprocs, 'local rank')} (from {source})"


def _nprocs(
    topology: Topology,
    nprocs: Optional[int],
    lengths: Dict[str, int],
    source: Optional[str] = None,
) -> Tuple[int, str]:
    if nprocs is None:
        count, reason = default_nprocs(topology, lengths)
        if count < 1 and not topology.gpus and not lengths:
            raise PlanError(
                f"no NUMA node has an allowed CPU (allowed CPUs "
                f"{format_ids(topology.allowed_cpus)}), so there is no rank to place"
            )
        return check_nprocs(count), reason
    for name, entries in lengths.items():
        if entries != nprocs:
            from ._overrides import RANK_SEPARATOR  # loaded with the overrides given

            separators = f"{RANK_SEPARATOR!r}" + (" or ','" if name == "nodes" else "")
            raise ConfigError(
                f"the {name} override has {entries} entries but there are {nprocs} local "
                f"ranks; give exactly one entry per rank (ranks separated by {separators})"
            )
    return nprocs, _given_count(topology, nprocs, source)


def gpu_index(topology: Topology, value: object) -> int:
    index = check_int(value, "GPU index")
    if not topology.gpus:
        raise ConfigError(f"GPU {index} requested but this machine shows no GPUs")
    if not 0 <= index < len(topology.gpus):
        raise ConfigError(
            f"GPU {index} out of range: {len(topology.gpus)} visible GPUs "
            f"(indices 0-{len(topology.gpus) - 1})"
        )
    return index


def _rank_gpus(
    topology: Topology, rank_gpus: Optional[Tuple[int, ...]], nprocs: int
) -> Tuple[Tuple[Optional[int], ...], Tuple[bool, ...]]:
    """Each rank's GPU index (``rank % gpus`` unless given) and whether it was given."""
    gpu_count = len(topology.gpus)
    if rank_gpus is None:
        wrapped = tuple(r % gpu_count if gpu_count else None for r in range(nprocs))
        return wrapped, (False,) * nprocs
    if len(rank_gpus) != nprocs:
        raise ConfigError(
            f"rank_gpus must be a sequence giving one GPU index per rank ({nprocs}), "
            f"not {list(rank_gpus)!r}"
        )
    return tuple(gpu_index(topology, value) for value in rank_gpus), (True,) * nprocs


def _interleave_nodes(
    topology: Topology, policy: MemoryPolicy, value: Union[str, frozenset[int], None]
) -> Optional[frozenset[int]]:
    if value is None:
        return None
    if not POLICIES[policy].spreads:
        spreading = " or ".join(repr(name) for name, row in POLICIES.items() if row.spreads)
        raise ConfigError(
            f"interleave_nodes is only meaningful with policy {spreading}, not {policy.value!r}"
        )
    if isinstance(value, str):
        try:
            wanted = parse_nodelist(
                value, universe=frozenset(topology.nodes), allowed=topology.allowed_mems
            )
        except ListParseError as exc:
            raise ConfigError(f"interleave_nodes: {exc}") from exc
    else:
        wanted = value
    _check_interleave_nodes(topology, wanted)
    return wanted


def _check_interleave_nodes(topology: Topology, wanted: frozenset[int]) -> None:
    if not wanted:
        raise ConfigError("interleave_nodes names no node")
    check_memory_nodes(topology, wanted, "interleave_nodes")


def _weights(
    topology: Topology, options: Options, interleave: Optional[frozenset[int]]
) -> Optional[Mapping[int, int]]:
    """The weights, checked against the policy and the machine (see the module docstring)."""
    weights = options.weights
    if weights is None:
        return None
    what = options.from_environment("weights") or options.spelled("weights")
    policy = options.effective_policy
    if not POLICIES[policy].weighted:
        weighted = ", ".join(repr(name) for name, row in POLICIES.items() if row.weighted)
        how = "--policy weighted-interleave" if options.flags else "policy='weighted-interleave'"
        raise ConfigError(
            f"{what} go with policy {weighted}, not {policy.value!r}: give that policy too "
            f"({how}) or leave the weights out"
        )
    nodes = frozenset(weights)
    check_memory_nodes(topology, nodes, what)
    if options.tiers == "all":
        return weights  # each node's weight: the ranks' nodes are the tiers' (._tiers)
    if interleave is not None and interleave != nodes:
        raise ConfigError(
            f"{what} name nodes {format_ids(nodes)} but interleave_nodes names "
            f"{format_ids(interleave)}: weights name the policy's nodes, so give the same "
            "nodes or only one of the two"
        )
    return weights


def _setting(options: Options, name: str, value: str) -> str:
    """How the user gave ``name``: ``PYNUMABIND_TIERS=all``, ``--tiers all``, ``tiers='all'``."""
    variable = options.from_environment(name)
    if variable is not None:
        return f"{variable}={value}"
    return f"--{name} {value}" if options.flags else f"{name}={value!r}"


def _tiers(options: Options) -> Tuple[bool, MemoryPolicy]:
    """Whether ``tiers="all"``, and the policy without it; what does not go with it refused."""
    plain = options.policy
    if plain is None:
        weighted = options.weights is not None
        plain = MemoryPolicy.WEIGHTED_INTERLEAVE if weighted else MemoryPolicy.PREFERRED
    if options.tiers != "all":
        return False, plain
    what = _setting(options, "tiers", "all")
    policy = options.policy
    if policy is not None and policy is not MemoryPolicy.WEIGHTED_INTERLEAVE:
        raise ConfigError(
            f"{what} spreads memory by weighted interleave over the tiers, which contradicts "
            f"{_setting(options, 'policy', policy.value)}: leave the policy out, give "
            "'weighted-interleave', or leave tiers out"
        )
    if options.interleave_nodes is not None:
        raise ConfigError(
            f"{what} picks each rank's memory nodes itself, so interleave_nodes cannot name "
            "them too: give one of the two"
        )
    return True, plain


def check_memory_nodes(topology: Topology, nodes: frozenset[int], subject: str) -> None:
    """Nodes a caller named for memory: each exists, has memory and is allowed.

    The one rule for ``interleave_nodes`` and :func:`pynumabind.bind_memory`'s
    ``node=`` (``subject`` names which).  A node this machine lacks or one
    without memory is a wrong id (:class:`UnknownIdError`, a usage error in
    the CLI); one outside the cpuset's mems is a :class:`PlanError` about
    where the process runs.
    """
    unknown = nodes - frozenset(topology.nodes)
    if unknown:
        raise UnknownIdError(
            f"{subject} names NUMA node(s) {format_ids(unknown)}, which this machine "
            f"does not have (nodes {format_ids(frozenset(topology.nodes))})"
        )
    memoryless = frozenset(n for n in nodes if not topology.nodes[n].has_memory)
    if memoryless:
        with_memory = frozenset(n for n, info in topology.nodes.items() if info.has_memory)
        raise UnknownIdError(
            f"{subject} names node(s) {format_ids(memoryless)} without memory "
            f"(memory-less CPU nodes); nodes with memory: {format_ids(with_memory)}"
        )
    outside = nodes - topology.allowed_mems
    if outside:
        raise PlanError(
            f"{subject} names node(s) {format_ids(outside)} outside this process's allowed "
            f"memory nodes {format_ids(topology.allowed_mems)} (its cpuset.mems)"
        )


def _check_node_sets(
    topology: Topology, node_sets: Tuple[frozenset[int], ...], need_cpus: bool
) -> None:
    all_nodes = frozenset(topology.nodes)
    for r, wanted in enumerate(node_sets):
        unknown = wanted - all_nodes
        if unknown:
            raise UnknownIdError(
                f"nodes override for rank {r} names NUMA node(s) {format_ids(unknown)}, "
                f"which this machine does not have (nodes {format_ids(all_nodes)})"
            )
    if not need_cpus:
        return
    for r, wanted in enumerate(node_sets):
        cpuless = frozenset(n for n in wanted if not topology.nodes[n].cpus)
        if cpuless:
            raise UnknownIdError(
                f"nodes override for rank {r} names node(s) {format_ids(cpuless)}, "
                f"which have no CPUs (memory-only); CPU nodes are "
                f"{format_ids(frozenset(topology.cpu_nodes))} (or use mode 'none')"
            )


def _check_cpu_sets(topology: Topology, cpu_sets: Tuple[frozenset[int], ...]) -> None:
    online = topology.online_cpus
    for r, wanted in enumerate(cpu_sets):
        offline = wanted - online
        if offline:
            raise UnknownIdError(
                f"cpus override for rank {r} names CPU(s) {format_ids(offline)}, which are "
                f"not online (online CPUs: {format_ids(online)})"
            )


def check_overrides(topology: Topology, request: Request) -> None:
    """Names in an override must exist on this machine: checked for all ranks."""
    if request.node_sets is not None:
        need_cpus = request.mode is not CpuMode.NONE and request.cpu_sets is None
        _check_node_sets(topology, request.node_sets, need_cpus)
    if request.cpu_sets is not None:
        _check_cpu_sets(topology, request.cpu_sets)


def _override(
    options: Options, option: str, parse: Callable[[], Tuple[frozenset[int], ...]]
) -> Optional[Tuple[frozenset[int], ...]]:
    """Parse a per-rank override; a bad one from the environment names its variable."""
    if getattr(options, option) is None:
        return None
    try:
        return parse()
    except ConfigError as exc:
        variable = options.from_environment(option)
        if variable is None:
            raise
        raise ConfigError(f"invalid {variable}={shown(getattr(options, option))}: {exc}") from exc


def build_request(topology: Topology, options: Options) -> Request:
    """Check ``options`` against the machine, once for all ranks."""
    if options.cpu_mode is CpuMode.ADVISED:
        raise ConfigError(
            "mode 'advised' follows the advice record, which the planner does not read: "
            "bind_current_process, the CLI and the framework hooks resolve it first; to plan "
            "with it here, pass options=pynumabind.load_advice().recommendation.options()"
        )
    node_sets = cpu_sets = None
    if options.nodes is not None or options.cpus is not None:
        # The overrides' parsers: loaded on use (the planner's docstring).
        from ._overrides import parse_cpus_override, parse_nodes_override

        node_sets = _override(
            options,
            "nodes",
            lambda: parse_nodes_override(options.nodes, universe=frozenset(topology.nodes)),
        )
        cpu_sets = _override(
            options,
            "cpus",
            lambda: parse_cpus_override(
                options.cpus, universe=topology.online_cpus, allowed=topology.allowed_cpus
            ),
        )
    if options.priority_cores and options.cpu_mode in (CpuMode.SOCKET, CpuMode.NONE):
        raise ConfigError(
            f"priority_cores applies to mode node (the exclusive modes always give the "
            f"highest-performance cores out first), not mode {options.cpu_mode.value!r}"
        )
    if cpu_sets is not None and options.cpu_mode is CpuMode.NONE:
        raise ConfigError("a cpus override contradicts mode 'none' (which leaves CPUs alone)")
    lengths = {
        name: len(sets)
        for name, sets in (("nodes", node_sets), ("cpus", cpu_sets))
        if sets is not None
    }
    count, reason = _nprocs(topology, options.nprocs, lengths, options.nprocs_source)
    per_rank, explicit = _rank_gpus(topology, options.rank_gpus, count)
    tiers, plain_policy = _tiers(options)
    interleave = _interleave_nodes(topology, options.effective_policy, options.interleave_nodes)
    return Request(
        nprocs=count,
        mode=options.cpu_mode,
        policy=options.effective_policy,
        rank_gpus=per_rank,
        explicit_gpu=explicit,
        node_sets=node_sets,
        cpu_sets=cpu_sets,
        gpu_memory=options.gpu_memory,
        interleave_nodes=interleave,
        weights=_weights(topology, options, interleave),
        nprocs_reason=reason,
        require_node=options.require_node,
        nprocs_option=options.spelled("nprocs"),
        priority_cores=options.priority_cores,
        fallback=options.fallback or "error",
        tiers=tiers,
        plain_policy=plain_policy,
    )
