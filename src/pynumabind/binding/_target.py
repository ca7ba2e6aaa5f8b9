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

:func:`refused` turns a syscall the kernel refused into a
:class:`~pynumabind.errors.PlacementSyscallError` that says what to do
(:func:`fix`): the same words for both tools and for the census's read-back.
"""

from __future__ import annotations

import errno
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Iterable, Optional, Tuple, Union

from .._mempolicy import POLICIES, placing_policies
from .._os import libnuma as _libnuma
from .._text import format_ids
from ..errors import ConfigError, NumaSyscallError, PlacementSyscallError, PlanError, UnknownIdError
from ..model import MemoryPolicy
from ..planner._memory import choose_mems
from ..planner._place import RankState, place_gpu
from ..planner._request import check_memory_nodes

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = ["Target", "fix", "refused", "resolve"]


@dataclass(frozen=True)
class Target:
    """Where memory goes: the ``MPOL_*`` mode and nodes, and why."""

    policy: MemoryPolicy
    mode: int
    nodes: frozenset[int]
    reasons: Tuple[str, ...]


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


def resolve(
    node: Union[int, str, Iterable[int], None],
    gpu: Optional[int],
    policy: Union[str, MemoryPolicy],
    topology: Optional[Topology],
) -> Target:
    """Check the arguments and resolve them to a mode and nodes (see the module docstring)."""
    if node is not None and gpu is not None:
        raise ConfigError(f"give node= or gpu=, not both (node={node!r}, gpu={gpu!r})")
    if node is None and gpu is None:
        raise ConfigError("give node= (a NUMA node) or gpu= (place by that GPU's node)")
    parsed = _parse_policy(policy)
    if node is not None:
        nodes = _parse_nodes(node)
        check_memory_nodes(_machine(topology, gpus=False), nodes, "node=")
        reasons: Tuple[str, ...] = (f"node {format_ids(nodes)} (given)",)
    else:
        assert gpu is not None
        nodes, reasons = _gpu_nodes(_machine(topology, gpus=True), gpu, parsed)
    # The mode is the policy table's, as for a bind (preferred on several nodes
    # needs MPOL_PREFERRED_MANY, probed; its fallback where the kernel lacks it).
    mode, kept, note = POLICIES[parsed].kernel_request(nodes, _libnuma.supports_mode)
    assert mode is not None
    if note:
        reasons = (*reasons, note)
    return Target(parsed, mode, kept, reasons)


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
