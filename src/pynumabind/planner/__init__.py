"""The pure planner: a :class:`Topology` and a rank in, a :class:`Plan` out.

Nothing here does I/O, reads the environment or logs: every decision is
returned in the plan's ``reasons`` (and the ones a launcher should surface in
``warnings``), so the planner can be run on recorded machines and on
thousands of generated ones.

How a rank is placed
--------------------
1. Its GPU: ``gpu=`` if given (``rank_gpus=`` for every rank), else GPU
   ``rank % len(topology.gpus)``
   (more ranks than GPUs wrap around, with a warning).  Without GPUs, ranks
   are spread evenly, in contiguous blocks, over the NUMA nodes that have
   allowed CPUs; memory-only nodes never get CPU ranks.
2. Its CPU node(s): the GPU's ``numa_node`` when that node has CPUs; when it
   is a CPU-less memory node (Grace/GB200 HBM as NVML reports it) the nodes of
   the GPU's ``local_cpus`` or, without those, the nearest CPU node by SLIT
   distance (ties: lowest id); when the node is unknown, the nodes of
   ``local_cpus``; with neither, the rank is left unbound (``cpus=None``).
3. Its CPUs, by mode: ``node`` (all allowed CPUs of the node, or of the
   GPU's affinity when the rank was placed by it), ``socket``
   (all allowed CPUs of the node's package), ``exclusive`` (disjoint,
   contiguous whole-core slices among the ranks on the same node, balanced to
   within one core; a GPU affinity spanning nodes is narrowed to the node
   holding most of it), ``core-complex`` (the same, but whole L3 groups per
   rank when there are enough, else exclusive within groups) or ``none``.
   Plans never leave the allowed CPUs; an empty intersection is a
   :class:`PlanError`, never a silently unbound worker -- unless
   ``fallback="nearest"`` (:mod:`._fallback`): a rank whose GPU's node has
   no allowed CPU is then bound to the nearest node that has some, its
   memory on the GPU's node when allowed, with one warning.
4. Its memory nodes: the nodes of its CPUs (a ``nodes`` override names them
   directly); a node without memory (or whose
   memory is outside the allowed mems) is replaced by the nearest node with
   allowed memory.  ``gpu_memory=True`` adds the GPU's own memory node.
   ``interleave`` uses ``interleave_nodes`` or, by default, these same nodes;
   ``weighted-interleave`` too, unless ``weights`` name its nodes (the plan's
   ``weights``; without them a process follows the kernel's system-wide
   weights).  ``tiers="all"`` (:mod:`._tiers`) makes it weighted interleave
   over these nodes and the memory-only nodes of the nearest slower memory
   tier.

A process driving several GPUs
------------------------------
:func:`plan_gpus_for` (``plan(topology, gpus=[i, j])``,
``bind_current_process(gpus=[...])``): a process with no rank that drives
several visible GPUs (vLLM's EngineCore for its data-parallel shard, a Ray
actor with two GPUs, a pipeline stage) gets the union of what each GPU's
rank would get, each planned as rank ``i`` of one rank per visible GPU, so
the per-rank overrides read per GPU index: every CPU and memory node of any
of them, in modes ``node``, ``socket`` and ``none``.  ``exclusive`` and
``core-complex`` slice a node among the ranks sharing it: there the ranks
are ``local_gpus``, the GPUs the job drives on this host (a framework's
workers: vLLM's local TP x PP x local DP GPUs, SGLang's ``tp_size`` GPUs;
a process with no rank: the GPUs it sees), each planned as the rank of its
index and only those taking slices, so a worker gets exactly what its
launcher rank would, and a process driving several gets their slices'
union.  Without ``local_gpus`` the count is unknown: a ConfigError naming
``local_gpus=`` and ``PYNUMABIND_LOCAL_GPUS``.  A union plan has
``rank=None`` and its GPU indices in ``Plan.gpus``.

Priority cores
--------------
Where the cores being sliced differ in ACPI CPPC highest performance
(``Cpu.highest_perf``: Intel priority cores), the exclusive modes deal them
out highest-performance first, in turn, so every rank holds its share of the
fastest ones (:mod:`._sets`); ``priority_cores=True`` in mode ``node`` keeps
only the fastest.  Cores that do not differ change nothing.

Overrides
---------
``nodes`` and ``cpus`` give every local rank its node(s) or CPUs and win over
detection; they are validated against the machine and the allowed sets.

* ``nodes``: a string, ranks separated by ``;`` when the string contains one
  (``"0-1;2-3"``: each item a node list), else by ``,`` (``"0,0,1,1"``: the
  vLLM form, one node per rank); or a sequence whose items are an ``int``, a
  node-list string or a set of ints.
* ``cpus``: a string with ranks separated by ``;`` (``"0-7;8-15"``: each item
  a cpulist, ``+`` and ``!`` and ``all`` as in numactl); or a sequence whose
  items are cpulist strings or sets of ints.  ``|`` is rejected, so a string
  never has two readings.

One parser reads both (:mod:`._overrides`).

A ``cpus`` override that moves a rank off its GPU's node warns, and its
memory follows the CPUs, not the GPU (vLLM's choice is the GPU; see
:mod:`._cpus`).

With ``nprocs=None`` an override's length is the number of local ranks;
otherwise it must match ``nprocs``.

The planner takes an :class:`~pynumabind.Options` already merged with the
environment (by the binding or the CLI): it never reads the environment.
The public functions take ``options=`` or, as a thin front that builds one,
the keywords (:class:`~pynumabind.options.OptionKeywords`, written once).

Modules
-------
* :mod:`._overrides`: the one parser of the per-rank overrides;
* :mod:`._request`: options checked against the machine once for all ranks,
  and the one default number of local ranks (:func:`default_nprocs`);
* :mod:`._place`: each rank's GPU and node(s), the one owner of GPU
  locality;
* :mod:`._fallback`: ``fallback="nearest"``, a cpuset without the GPU's
  node's CPUs;
* :mod:`._cpus`: the CPUs, one function per mode;
* :mod:`._sets`: cores, balanced slices, L3 groups and D'Hondt seats, on
  plain sets (no Topology);
* :mod:`._memory`: the memory nodes and policy;
* :mod:`._tiers`: ``tiers="all"``, memory over the nearest slower tier too.

Consistency
-----------
:func:`plan` computes every rank's placement and returns its own, so rank
``r``'s plan is the same whether it comes from ``plan(r)`` or from
``plan_all()[r]``.  Errors are per rank where they can be: ``plan(r)`` fails
only for its own rank's problems (another rank's node may lie outside this
process's cpuset).

Loaded on use: the rules a plan takes only when asked for -- the overrides'
parsers (:mod:`._overrides`, ``nodes``/``cpus``), ``fallback="nearest"``
(:mod:`._fallback`) and ``tiers="all"`` (:mod:`._tiers`) -- are imported by
the step that needs them, so a worker's first bind does not load them.

Cost: every rank is placed (cheap), but only the asked-for rank and the
ranks it slices a node with get CPUs, memory and reasons, and a list of
ranks in a message is cut short past 60 characters; one rank of 65,536
plans in about half a second (``python -m benchmarks.bench_planner``).
"""

from __future__ import annotations

import collections.abc as _abc

from .._mempolicy import POLICIES
from .._record import replace
from .._text import counted, format_ids
from ..errors import ConfigError, PlanError, PynumabindError, UnknownIdError
from ..model import CpuMode, Gpu, MemoryPolicy, Plan, Topology
from ..options import MAX_NPROCS, NOT_GPU_LISTS, Options, check_int, union_front
from ._cpus import choose_cpus
from ._memory import choose_mems
from ._place import (
    RankState,
    nodes_of,
    place,
    primary_node,
    require_known_node,
    sharing_ranks,
)
from ._request import (
    Request,
    build_request,
    check_overrides,
    default_nprocs,
    gpu_index,
)

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple, Union

    from typing_extensions import Unpack

    from ..options import OptionKeywords

__all__ = [
    "OptionKeywords",
    "Options",
    "plan",
    "plan_all",
    "plan_each",
    "plan_gpus_for",
]


def __getattr__(name: str) -> object:
    """``OptionKeywords``, from :mod:`pynumabind.options`, which makes it on first use."""
    if name == "OptionKeywords":
        from .. import options

        return options.OptionKeywords
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _finish(topology: Topology, request: Request, state: RankState) -> Union[Plan, PynumabindError]:
    """The rank's plan from its placement and CPUs: memory, node, reasons."""
    if state.error is not None:
        return state.error
    try:
        mems, policy, weights = _memory(topology, request, state)
    except PlanError as exc:
        return exc
    node = state.primary
    if state.cpus is not None:
        nodes = nodes_of(topology, state.cpus)
        if node not in nodes and nodes:
            node = primary_node(topology, nodes, state.cpus)
    assert state.cpus is None or (state.cpus and state.cpus <= topology.allowed_cpus)
    assert mems <= topology.allowed_mems
    return Plan(
        rank=state.rank,
        gpu_info=state.gpu,
        cpus=state.cpus,
        mems=mems,
        policy=policy,
        mode=request.mode,
        node=node,
        reasons=(request.nprocs_reason, *state.reasons),
        warnings=tuple(state.warnings),
        weights=weights,
    )


def _memory(
    topology: Topology, request: Request, state: RankState
) -> Tuple[frozenset[int], MemoryPolicy, Optional[Mapping[int, int]]]:
    """The rank's memory nodes, policy and weights: over the tiers (:mod:`._tiers`) or not."""
    policy = request.policy
    if request.tiers:
        from ._tiers import choose_tier_mems  # tiers="all" only: loaded on use

        spread = choose_tier_mems(
            topology,
            state,
            gpu_memory=request.gpu_memory,
            nodes_given=request.node_sets is not None,
            weights=request.weights,
        )
        if spread is not None:
            return spread
        policy = request.plain_policy
    mems, planned = choose_mems(
        topology,
        state,
        policy=policy,
        interleave_nodes=request.interleave_nodes,
        gpu_memory=request.gpu_memory,
        nodes_given=request.node_sets is not None,
        weights=request.weights,
    )
    weighted = request.weights is not None and planned is policy and POLICIES[policy].weighted
    return mems, planned, request.weights if weighted else None


def _plan_ranks(
    topology: Topology, request: Request, wanted: Optional[AbstractSet[int]] = None
) -> Dict[int, Union[Plan, PynumabindError]]:
    """Plans (or errors) for the ``wanted`` ranks, all by default.

    Every rank is placed (cheaply: it is what tells which ranks share a
    node), but CPUs and memory are chosen only for the wanted ranks and the
    ranks they slice a node with, so one rank costs O(its node's ranks).
    """
    check_overrides(topology, request)
    shared_by = sharing_ranks(request.rank_gpus)
    states = [
        place(
            topology,
            r,
            nprocs=request.nprocs,
            gpu=request.rank_gpus[r],
            explicit_gpu=request.explicit_gpu[r],
            shared_by=shared_by,
            node_set=None if request.node_sets is None else request.node_sets[r],
        )
        for r in range(request.nprocs)
    ]
    if request.require_node and request.node_sets is None:
        for state in states:
            require_known_node(topology, state)
    if _falls_back(request):
        from ._fallback import place_nearest_allowed  # fallback="nearest" only: loaded on use

        for state in states:
            place_nearest_allowed(topology, state, request.mode)
    running = (
        states if request.running is None else [s for s in states if s.rank in request.running]
    )
    choose_cpus(
        topology,
        request.mode,
        running,
        cpu_sets=request.cpu_sets,
        nodes_given=request.node_sets is not None,
        wanted=wanted,
        priority_cores=request.priority_cores,
    )
    ranks = range(request.nprocs) if wanted is None else sorted(wanted)
    return {r: _finish(topology, request, states[r]) for r in ranks}


def _falls_back(request: Request) -> bool:
    """Whether ``fallback="nearest"`` applies: no override decides, and CPUs are bound."""
    return (
        request.fallback == "nearest"
        and request.node_sets is None
        and request.cpu_sets is None
        and request.mode is not CpuMode.NONE
    )


def _one(topology: Topology, request: Request, rank: int) -> Plan:
    if rank >= request.nprocs:
        raise UnknownIdError(
            f"rank {rank} out of range: there {'is' if request.nprocs == 1 else 'are'} "
            f"{counted(request.nprocs, 'local rank')} ({request.nprocs_reason}); "
            f"pass {request.nprocs_option} to plan more"
        )
    result = _plan_ranks(topology, request, {rank})[rank]
    if isinstance(result, PynumabindError):
        raise result
    return result


def plan_for(topology: Topology, options: Options) -> Plan:
    """The plan for ``options.rank``, from options built once (see :mod:`pynumabind.options`).

    ``options.gpu`` overrides this rank's GPU; the other ranks keep
    ``rank % len(gpus)``.  An error caused by a setting from the environment
    says which settings came from there.
    """
    return _plan_rank(topology, options)


def _plan_rank(
    topology: Topology, options: Options, running: Optional[frozenset[int]] = None
) -> Plan:
    """:func:`plan_for`; ``running``: only those ranks run (take a slice of a node)."""
    if options.rank is None:
        raise ConfigError("no rank to plan: options.rank is not set")
    try:
        request = build_request(topology, options)
        if options.gpu is not None:
            request = _with_gpu(topology, request, options.rank, options.gpu)
        if running is not None:
            request = replace(
                request,
                running=running,
                nprocs_reason=f"{len(running)} local ranks: the job's GPUs {format_ids(running)}",
            )
        return _one(topology, request, options.rank)
    except (ConfigError, PlanError) as exc:
        blamed = options.blame(exc)
        if blamed is exc:
            raise
        raise blamed from exc


def _with_gpu(topology: Topology, request: Request, rank: int, gpu: int) -> Request:
    if rank >= request.nprocs:
        return request  # out of range: _one says so
    index = gpu_index(topology, gpu)
    per_rank = list(request.rank_gpus)
    explicit = list(request.explicit_gpu)
    per_rank[rank] = index
    explicit[rank] = True
    return replace(request, rank_gpus=tuple(per_rank), explicit_gpu=tuple(explicit))


def plan_each_for(topology: Topology, options: Options) -> List[Union[Plan, PynumabindError]]:
    """Every local rank's plan, or the error that stops that rank alone, in rank order.

    A problem with the options themselves (a bad override, a GPU out of
    range) still raises: it concerns every rank.
    """
    return list(_plan_ranks(topology, build_request(topology, options)).values())


def plan_all_for(topology: Topology, options: Options) -> List[Plan]:
    """Plans for every local rank, in rank order; raises the first failing rank's error."""
    return _all_or_first_error(plan_each_for(topology, options))


def local_ranks(topology: Topology, options: Options) -> int:
    """How many local ranks ``options`` give on ``topology``: ``nprocs``, else the one default.

    The default (:func:`default_nprocs`): one rank per entry of a per-rank
    override, else per visible GPU, else per NUMA node with allowed CPUs.
    The count does not depend on the mode, so mode ``advised`` needs no
    record here.
    """
    if options.cpu_mode is CpuMode.ADVISED:
        options = replace(options, mode=None)
    return build_request(topology, options).nprocs


def gpus_by_rank(topology: Topology, options: Options) -> Tuple[Optional[Gpu], ...]:
    """The GPU each local rank drives (``None``: none), by the rule its plan uses.

    For a report about ranks that were not planned (``pynumabind check``
    names the GPU of a rank whose worker failed); as :func:`local_ranks`, it
    needs no advice record in mode ``advised``.
    """
    if options.cpu_mode is CpuMode.ADVISED:
        options = replace(options, mode=None)
    request = build_request(topology, options)
    return tuple(None if g is None else topology.gpus[g] for g in request.rank_gpus)


UNION_MODES = (CpuMode.NODE, CpuMode.SOCKET, CpuMode.NONE)


def plan_gpus_for(topology: Topology, options: Options, gpus: Sequence[int]) -> Plan:
    """The union of visible GPUs ``gpus``' plans, for one process (see the module docstring).

    ``options.rank``, ``nprocs`` and ``gpu`` are not used: each GPU is
    planned as the rank of its own index among the visible GPUs.  The union
    plan's ``rank`` is ``None`` (it is no rank) and its ``gpus`` the indices.
    """
    indices = _union_indices(topology, gpus)
    count = len(topology.gpus)
    try:
        peers = _peers(topology, options, indices)
    except ConfigError as exc:
        blamed = options.blame(exc)
        if blamed is exc:
            raise
        raise blamed from exc
    # The launcher's rank and size (LOCAL_RANK, LOCAL_WORLD_SIZE) are not used:
    # each GPU is its own index's rank among the visible GPUs, and says so.
    unused = [
        f"{what} from {source}"
        for what, source in (("rank", options.rank_source), ("nprocs", options.nprocs_source))
        if options.from_launcher(what)
    ]
    each = replace(
        options,
        gpus=None,
        rank_gpus=None,
        local_gpus=None,
        rank_source=None,
        nprocs_source=None,
        rank=None,
    )
    plans = [_union_member(topology, each, i, count, peers) for i in indices]
    union = _union(plans, indices, count)
    reasons = list(union.reasons)
    if peers is not None:
        reasons.insert(
            0,
            f"mode {options.cpu_mode.value}: the ranks are the {len(peers)} GPU(s) "
            f"{format_ids(peers)} the job drives on this host ({_peers_source(options)}); "
            "each GPU is the rank of its index, and this process takes its GPUs' slices",
        )
    if unused:
        reasons.append(
            f"{' and '.join(unused)} not used: a process given gpus= is no local rank "
            f"(each GPU is planned as the rank of its index among {count} visible GPUs)"
        )
    return replace(union, reasons=tuple(reasons))


def _union_member(
    topology: Topology, each: Options, index: int, count: int, peers: Optional[frozenset[int]]
) -> Plan:
    """GPU ``index``'s plan in a union; an error names the GPU, not a rank."""
    try:
        return _plan_rank(topology, replace(each, rank=index, nprocs=count, gpu=index), peers)
    except (ConfigError, PlanError) as exc:
        text = str(exc)
        prefix = f"rank {index}: "
        text = text[len(prefix) :] if text.startswith(prefix) else text
        raise type(exc)(f"GPU {index} (one of the GPUs this process drives): {text}") from exc


def _union_indices(topology: Topology, gpus: Sequence[int]) -> List[int]:
    """``gpus`` checked and sorted, once each."""
    if isinstance(gpus, NOT_GPU_LISTS) or not isinstance(gpus, _abc.Sequence) or not gpus:
        raise ConfigError(f"gpus must be a non-empty sequence of GPU indices, not {gpus!r}")
    return sorted({gpu_index(topology, check_int(d, "GPU index")) for d in gpus})


def _peers_source(options: Options) -> str:
    return options.from_environment("local_gpus") or "local_gpus"


def _peers(topology: Topology, options: Options, indices: List[int]) -> Optional[frozenset[int]]:
    """The ranks a slicing mode slices among: the job's GPUs on this host (``local_gpus``).

    None in the modes that do not slice.  Unknown in a slicing mode is a
    ConfigError naming what to pass.
    """
    if options.cpu_mode in UNION_MODES:
        return None
    if options.local_gpus is None:
        choices = ", ".join(m.value for m in UNION_MODES)
        raise ConfigError(
            f"mode {options.cpu_mode.value!r} slices a node among the processes sharing it, but "
            f"how many GPUs the job drives on this host is not known to a process driving GPU(s) "
            f"{format_ids(frozenset(indices))}: pass local_gpus= (the visible GPU indices of all "
            f"the job's processes here) or set PYNUMABIND_LOCAL_GPUS (such as "
            f"PYNUMABIND_LOCAL_GPUS=0-{len(topology.gpus) - 1}); or use mode {choices}"
        )
    peers = frozenset(gpu_index(topology, i) for i in options.local_gpus)
    missing = frozenset(indices) - peers
    if missing:
        raise ConfigError(
            f"{_peers_source(options)} {format_ids(peers)} must include every GPU of this "
            f"process; GPU(s) {format_ids(missing)} are not among them"
        )
    return peers


def _union_reasons(
    plans: List[Plan], indices: List[int], count: int, placed: frozenset[int]
) -> Tuple[str, ...]:
    """Why the union is what it is, then each GPU's own reasons under its index."""
    reasons = [
        f"GPUs {format_ids(frozenset(indices))}: the union of their plans "
        f"(each planned as rank of its index among {count} visible GPUs): "
        f"CPU nodes {format_ids(placed)}"
    ]
    unplaced = frozenset(i for i, p in zip(indices, plans) if p.cpus is None)
    if unplaced:
        reasons.append(f"CPUs left alone: GPU(s) {format_ids(unplaced)} have no CPU binding")
    return (*reasons, *(f"GPU {i}: {r}" for i, p in zip(indices, plans) for r in p.reasons))


def _union(plans: List[Plan], indices: List[int], count: int) -> Plan:
    """One plan holding every CPU and memory node of ``plans`` (one per GPU in ``indices``).

    If any GPU's plan leaves the CPUs alone, so does the union.
    """
    cpus: Optional[frozenset[int]] = None
    if all(p.cpus is not None for p in plans):
        cpus = frozenset().union(*(p.cpus or frozenset() for p in plans))
    placed = frozenset(p.node for p in plans if p.node is not None)
    return replace(
        plans[0],
        rank=None,
        gpu_info=plans[0].gpu_info if len(plans) == 1 else None,
        cpus=cpus,
        mems=frozenset().union(*(p.mems for p in plans)),
        node=min(placed) if len(placed) == 1 else None,
        reasons=_union_reasons(plans, indices, count, placed),
        warnings=tuple(dict.fromkeys(w for p in plans for w in p.warnings)),
        gpus=tuple(indices),
        weights=_union_weights(plans),
    )


def _union_weights(plans: List[Plan]) -> Optional[Dict[int, int]]:
    """Every plan's weights together (tiers="all": each GPU's own nodes'); None if any has none."""
    if any(p.weights is None for p in plans):
        return None
    return dict(sorted({n: w for p in plans for n, w in (p.weights or {}).items()}.items()))


def plan(
    topology: Topology,
    rank: Optional[int] = None,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode, None] = None,
    policy: Union[str, MemoryPolicy, None] = None,
    *,
    options: Optional[Options] = None,
    **keywords: Unpack[OptionKeywords],
) -> Plan:
    """The plan for local rank ``rank`` of ``nprocs``, or for one process driving ``gpus``.

    ``gpu`` (an index into ``topology.gpus``) overrides this rank's GPU; the
    other ranks keep ``rank % len(gpus)`` when exclusive modes slice a node.
    ``gpus`` (without ``rank``, ``nprocs`` or ``gpu``): the union of those
    GPUs' plans (:func:`plan_gpus_for`).  ``options``: a
    :class:`~pynumabind.Options` instead of the keywords (not both).  Raises
    :class:`PlanError` or :class:`ConfigError` naming what was wrong.

    Args:
        topology: The machine (:func:`~pynumabind.detect_topology`,
            :func:`~pynumabind.load_topology`, ...).
        rank: The local rank to plan for.
        nprocs: How many local processes share the machine (default: one per
            visible GPU, or per NUMA node with CPUs).
        mode: The CPU mode (default ``node``).
        policy: The memory policy (default ``preferred``).
        options: All of these as one :class:`~pynumabind.Options`, instead of
            the keywords.
        **keywords: the rest of :class:`~pynumabind.Options`'s settings, by
            name: ``nodes``, ``cpus``, ``gpu``, ``gpus``, ``rank_gpus``,
            ``gpu_memory``, ``interleave_nodes``, ``weights``, ``require_node``,
            ``local_gpus``, ``priority_cores`` (each described there).

    Returns:
        The rank's :class:`~pynumabind.Plan` -- CPUs, memory nodes, policy and
        the reasons for each decision.  Pure: nothing is applied.

    Raises:
        ConfigError: a bad argument or option (named), neither ``rank`` nor
            ``gpus``, or both ``options`` and keywords.
        PlanError: the rank cannot be planned on this topology: the CPUs it
            needs are not allowed, a node or GPU does not exist
            (:class:`~pynumabind.errors.UnknownIdError`), or its GPU's node is
            unknown under ``require_node``.
    """
    options = union_front(
        options, dict(keywords, rank=rank, nprocs=nprocs, mode=mode, policy=policy)
    )
    if options.gpus is not None:
        return plan_gpus_for(topology, options, options.gpus)
    if options.rank is None:
        raise ConfigError("plan() needs rank= (a local rank) or gpus= (the GPUs of one process)")
    return plan_for(topology, options)


def plan_each(
    topology: Topology,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode, None] = None,
    policy: Union[str, MemoryPolicy, None] = None,
    *,
    options: Optional[Options] = None,
    **keywords: Unpack[OptionKeywords],
) -> List[Union[Plan, PynumabindError]]:
    """Like :func:`plan_all`, but each rank gets its plan or its own error.

    For callers that want the other ranks when some cannot be planned (the
    CLI's table; a launcher whose cpuset covers only some ranks).

    Args:
        topology: The machine.
        nprocs: How many local processes (default: one per visible GPU, or
            per NUMA node with CPUs).
        mode: The CPU mode (default ``node``).
        policy: The memory policy (default ``preferred``).
        options: All of these as one :class:`~pynumabind.Options`, instead of
            the keywords.
        **keywords: the rest of :class:`~pynumabind.Options`'s settings, by
            name: ``nodes``, ``cpus``, ``gpu``, ``gpus``, ``rank_gpus``,
            ``gpu_memory``, ``interleave_nodes``, ``weights``, ``require_node``,
            ``local_gpus``, ``priority_cores`` (each described there).

    Returns:
        One entry per local rank, in rank order -- its
        :class:`~pynumabind.Plan`, or the :class:`~pynumabind.PynumabindError`
        that rank's planning raised.

    Raises:
        ConfigError: a bad argument or option, which no rank could be planned
            with.
    """
    options = Options.from_arguments(
        nprocs=nprocs, mode=mode, policy=policy, options=options, **keywords
    )
    return plan_each_for(topology, options)


def plan_all(
    topology: Topology,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode, None] = None,
    policy: Union[str, MemoryPolicy, None] = None,
    *,
    options: Optional[Options] = None,
    **keywords: Unpack[OptionKeywords],
) -> List[Plan]:
    """Plans for every local rank, in rank order: :func:`plan_each`'s parameters.

    ``rank_gpus`` optionally gives each rank's GPU index.  Raises the first
    failing rank's error (:func:`plan_each` gives every rank's).

    Args:
        topology: The machine.
        nprocs: How many local processes (default: one per visible GPU, or
            per NUMA node with CPUs).
        mode: The CPU mode (default ``node``).
        policy: The memory policy (default ``preferred``).
        options: All of these as one :class:`~pynumabind.Options`, instead of
            the keywords.
        **keywords: the rest of :class:`~pynumabind.Options`'s settings, by
            name: ``nodes``, ``cpus``, ``gpu``, ``gpus``, ``rank_gpus``,
            ``gpu_memory``, ``interleave_nodes``, ``weights``, ``require_node``,
            ``local_gpus``, ``priority_cores`` (each described there).

    Returns:
        One :class:`~pynumabind.Plan` per local rank, in rank order.

    Raises:
        ConfigError: a bad argument or option (named).
        PlanError: the first rank that cannot be planned, as :func:`plan`
            raises it.
    """
    return _all_or_first_error(
        plan_each(topology, nprocs, mode, policy, options=options, **keywords)
    )


def _all_or_first_error(results: List[Union[Plan, PynumabindError]]) -> List[Plan]:
    plans: List[Plan] = []
    for result in results:
        if isinstance(result, PynumabindError):
            raise result
        plans.append(result)
    return plans
