"""Which node and which policy: the arguments of ``bind_memory`` and ``memory_on``, resolved.

:func:`resolve` checks ``node=``, ``gpu=`` and ``policy=`` and turns them
into a :class:`Target`: the policy, the kernel mode and the nodes it is set
on, and the reasons.  The rules are the ones "Which node" and "Which policy"
state in :mod:`pynumabind.binding.placement`, and none is re-derived here: a
node is checked by the planner's one rule
(:func:`pynumabind.planner._request.check_memory_nodes`), a GPU's nodes are
the ones a plan for a rank on it binds to (:func:`pynumabind.planner._place.place_gpu`,
:func:`pynumabind.planner._memory.choose_mems`), and the mode, with its
fallback on a kernel without it, is the policy's row in the policy table
(:meth:`pynumabind._mempolicy.PolicyRow.kernel_request`, as for a bind).
The machine is the one given, else the one plans use
(:func:`~pynumabind.discovery.resolve_topology`: the nodes only, and NVML
only when a GPU is named).

Weights (``weighted-interleave`` only): ``weights=`` names the nodes, alone
or with a ``node=`` naming the same ones (not with ``gpu=``), checked by the
same rule.  For :func:`~pynumabind.bind_memory` they are honoured exactly:
the target is *exact* (``Target.exact``), placed in runs of one node each
(``MPOL_BIND``, laid out by :func:`pynumabind._weights.weighted_runs`), and
the kernel's weights play no part.  For :func:`~pynumabind.memory_on` (a
thread's policy) the kernel's system-wide weights rule: they are read and
compared, and a mismatch is a reason and one :class:`RuntimeWarning`.
Without weights, weighted interleave is the kernel's mode with the kernel's
weights, read for the census to judge the split by (``Target.weights``).

:func:`refused` turns a syscall the kernel refused into a
:class:`~pynumabind.errors.PlacementSyscallError` that says what to do
(:func:`fix`): the same words for both tools and for the census's read-back.
"""

from __future__ import annotations

import errno
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Dict, Iterable, Mapping, Optional, Tuple, Union

from .._mempolicy import POLICIES, placing_policies
from .._os import libnuma as _libnuma
from .._text import format_ids, named
from .._weights import check_weights, format_weights, kernel_difference
from ..errors import (
    ConfigError,
    ListParseError,
    NumaSyscallError,
    PlacementSyscallError,
    PlanError,
    PynumabindError,
    UnknownIdError,
)
from ..model import MemoryPolicy
from ..planner._memory import choose_mems
from ..planner._place import RankState, place_gpu
from ..planner._request import check_memory_nodes

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = ["Target", "fix", "refused", "resolve"]


@dataclass(frozen=True)
class Target:
    """Where memory goes: the ``MPOL_*`` mode and nodes, and why.

    ``weights``: what the split of the pages is judged against (the
    requested weights, or the kernel's for its own weighted interleave;
    ``None``: not judged); ``exact``: the requested weights are laid out in
    runs of ``MPOL_BIND`` (``bind_memory``), ``mode`` being ``MPOL_BIND``;
    ``mismatch``: a thread's weighted interleave follows kernel weights that
    split pages otherwise than the requested ones (``memory_on``).
    """

    policy: MemoryPolicy
    mode: int
    nodes: frozenset[int]
    reasons: Tuple[str, ...]
    weights: Optional[Mapping[int, int]] = field(default=None, hash=False)
    exact: bool = False
    mismatch: Optional[str] = None


def _parse_policy(policy: Union[str, MemoryPolicy]) -> MemoryPolicy:
    """A policy that places a buffer (its row in the policy table says so)."""
    choices = ", ".join(placing_policies())
    try:
        parsed = MemoryPolicy(policy)
    except ValueError:
        raise ConfigError(
            f"invalid placement policy {policy!r}; choose one of: {choices}"
        ) from None
    if not POLICIES[parsed].places:
        raise ConfigError(
            f"placement policy {parsed.value!r} places nothing on a node; choose one of: {choices}"
        )
    return parsed


def _node_id(value: object, what: str) -> int:
    """An integer id (an int, or a numpy integer); bool and anything else are ConfigErrors."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ConfigError(f"{what} must be an integer id, not {value!r:.40}")
    return operator.index(value)


def _parse_nodes(node: Union[int, str, Iterable[int]]) -> frozenset[int]:
    if isinstance(node, str):
        from ..cpulist import parse_nodelist

        nodes = parse_nodelist(node)
    elif isinstance(node, bool) or hasattr(node, "__index__"):
        nodes = frozenset({_node_id(node, "node")})
    else:
        try:
            items = list(node)
        except TypeError:
            raise ConfigError(
                f"node must be a node id or a node list, not {type(node).__name__}"
            ) from None
        nodes = frozenset(_node_id(n, "each node of a node list") for n in items)
    if not nodes:
        raise ConfigError("node list is empty")
    negative = [n for n in nodes if n < 0]
    if negative:
        raise UnknownIdError(f"node {min(negative)} does not exist (node ids are >= 0)")
    return nodes


def _gpu_nodes(
    topology: Topology, gpu: int, policy: MemoryPolicy
) -> Tuple[frozenset[int], Tuple[str, ...]]:
    """GPU ``gpu``'s memory nodes by the planner's rules, and its reasons."""
    gpu = _node_id(gpu, "gpu (a GPU index)")
    count = len(topology.gpus)
    if not 0 <= gpu < count:
        seen = f"GPUs 0-{count - 1}" if count > 1 else ("GPU 0" if count else "no GPU")
        raise UnknownIdError(f"no GPU {gpu}: this process sees {seen}")
    chosen = topology.gpus[gpu]
    state = RankState(0, chosen)  # positional: rank, then the rank's GPU
    place_gpu(topology, state, chosen)
    mems, planned = choose_mems(
        topology, state, policy=policy, interleave_nodes=None, gpu_memory=False, nodes_given=False
    )
    if not mems or planned is MemoryPolicy.NONE:
        raise PlanError(
            f"GPU {gpu}'s memory node is unknown ({'; '.join(state.reasons)}); give node= instead"
        )
    return mems, tuple(state.reasons)


def _machine(topology: Optional[Topology], gpus: bool) -> Topology:
    """The machine ``node``/``gpu`` are checked against: given, or as plans get it."""
    if topology is not None:
        return topology
    from ..discovery import resolve_topology
    from ..model import Detail

    # NVML only when a GPU is named: a node needs the nodes and allowed sets alone.
    return resolve_topology(detail=Detail.NODES, reuse=True, use_nvml=gpus)


def _weights(
    weights: Union[str, Mapping[int, int], None],
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    policy: MemoryPolicy,
) -> Optional[Dict[int, int]]:
    """The weights checked against the other arguments (see the module docstring)."""
    if weights is None:
        return None
    try:
        checked = check_weights(weights, "weights")
    except ListParseError as exc:
        raise ConfigError(f"weights: {exc}") from exc
    if not POLICIES[policy].weighted:
        raise ConfigError(
            f"weights= go with policy='weighted-interleave', not {policy.value!r}: pass that "
            "policy too, or leave the weights out"
        )
    if gpu is not None:
        raise ConfigError(
            "give weights= alone (their nodes are the nodes) or with node= naming the same "
            f"nodes, not with gpu= (gpu={gpu!r})"
        )
    if node is not None and _parse_nodes(node) != frozenset(checked):
        raise ConfigError(
            f"weights= name nodes {format_ids(frozenset(checked))} but node= names "
            f"{format_ids(_parse_nodes(node))}: give the same nodes, or weights= alone"
        )
    return checked


def _kernel_weights(nodes: frozenset[int]) -> Tuple[Optional[Dict[int, int]], Optional[str]]:
    """The kernel's weights for ``nodes`` (1 where it shows none), or None and why not."""
    from .._os import weights as _system

    try:
        found = _system.read_weights()
    except PynumabindError as exc:
        return None, f"the kernel's interleave weights unreadable: {exc}"
    if found is None:
        return {n: 1 for n in nodes}, None
    return found.for_nodes(nodes), None


def _where(
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    parsed: MemoryPolicy,
    weights: Optional[Dict[int, int]],
    topology: Optional[Topology],
) -> Tuple[frozenset[int], Tuple[str, ...]]:
    """The nodes named (by weights, node or gpu), checked, and the reason."""
    if weights is not None:
        nodes = frozenset(weights)
        check_memory_nodes(_machine(topology, gpus=False), nodes, "weights=")
        return nodes, (f"{named('node', nodes)} (the weights {format_weights(weights)})",)
    if node is not None:
        nodes = _parse_nodes(node)
        check_memory_nodes(_machine(topology, gpus=False), nodes, "node=")
        return nodes, (f"node {format_ids(nodes)} (given)",)
    assert gpu is not None
    return _gpu_nodes(_machine(topology, gpus=True), gpu, parsed)


def resolve(
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    policy: Union[str, MemoryPolicy],
    topology: Optional[Topology],
    weights: Union[str, Mapping[int, int], None] = None,
    *,
    exact: bool = False,
) -> Target:
    """Check the arguments and resolve them to a mode and nodes (see the module docstring).

    ``exact``: requested weights are to be laid out in runs (``bind_memory``),
    not left to the kernel's weights (``memory_on``).
    """
    if node is not None and gpu is not None:
        raise ConfigError(f"give node= or gpu=, not both (node={node!r}, gpu={gpu!r})")
    parsed = _parse_policy(policy)
    checked = _weights(weights, node, gpu, parsed)
    if node is None and gpu is None and checked is None:
        raise ConfigError("give node= (a NUMA node) or gpu= (place by that GPU's node)")
    nodes, reasons = _where(node, gpu, parsed, checked, topology)
    if exact and checked is not None:
        runs = "in runs of pages, each bound to one node (MPOL_BIND), in proportion to them"
        return Target(parsed, _libnuma.MPOL_BIND, nodes, (*reasons, runs), checked, True)
    # The mode is the policy table's, as for a bind (preferred on several nodes
    # needs MPOL_PREFERRED_MANY, probed; its fallback where the kernel lacks it).
    mode, kept, note = POLICIES[parsed].kernel_request(nodes, _libnuma.supports_mode, _release)
    assert mode is not None
    if note:
        reasons = (*reasons, note)
    if mode != _libnuma.MPOL_WEIGHTED_INTERLEAVE:
        return Target(parsed, mode, kept, reasons)
    kernel, unreadable = _kernel_weights(kept)
    if kernel is None:
        return Target(parsed, mode, kept, (*reasons, str(unreadable)), checked)
    reasons = (*reasons, f"the kernel's system-wide weights: {format_weights(kernel)}")
    difference = None if checked is None else kernel_difference(checked, kernel)
    if difference is None:
        return Target(parsed, mode, kept, reasons, kernel)
    mismatch = (
        f"{difference}: a thread's weighted interleave follows the kernel's (Linux has no "
        "per-task weights); bind_memory(buffer, weights=...) places a buffer by them exactly"
    )
    return Target(parsed, mode, kept, (*reasons, mismatch), checked, mismatch=mismatch)


def _release() -> str:
    from .._os.sysfs import kernel_release

    return kernel_release()


# ------------------------------------------------------------------ errors


def fix(err: int, what: str) -> str:
    if err == errno.EPERM:
        return (
            f"EPERM from {what} usually means a container seccomp profile: Docker's default "
            "profile allows mbind, set_mempolicy and get_mempolicy only with CAP_SYS_NICE; run "
            "the container with '--cap-add SYS_NICE' (Kubernetes: securityContext.capabilities."
            "add: [SYS_NICE]) or with a seccomp profile that allows them"
        )
    if err == errno.EFAULT:
        return "part of the address range is not mapped in this process (freed, or a bad address)"
    if err == errno.EINVAL:
        return (
            "the kernel rejected the request: a node outside this process's allowed memory "
            "nodes, or a range it cannot take (hugetlbfs needs huge-page alignment)"
        )
    if err == errno.ENOMEM:
        return "the kernel ran out of memory for the request (vm.max_map_count reached?)"
    return "see the error"


def refused(exc: NumaSyscallError, operation: str, nodes: Optional[AbstractSet[int]]) -> Exception:
    err = exc.errno if exc.errno is not None else 0
    call = operation.partition("(")[0].strip()
    return PlacementSyscallError(err, operation, nodes, fix(err, call))
