"""What the launcher and the user said through environment variables.

:func:`resolve` merges them into the one :class:`~pynumabind.options.Options`
(explicit arguments win).  Pure apart from reading the mapping it is given
(``os.environ`` by default in the binding), so every rule here is tested with
plain dicts.
Values are only ever parsed into ints, enums and id sets: nothing from the
environment reaches a shell, ``eval`` or a command line.

Rules
-----
* The local rank comes from the first variable set among ``LOCAL_RANK``
  (torchrun, DeepSpeed, Accelerate), ``OMPI_COMM_WORLD_LOCAL_RANK`` (Open
  MPI's mpirun) and ``SLURM_LOCALID`` (srun).  Slurm's comes last because it
  leaks: mpirun inside an sbatch script starts every rank with the batch
  step's (or its daemon's) ``SLURM_LOCALID=0``.
* The number of local processes comes from the *same* launcher as the rank
  when it sets one: ``LOCAL_WORLD_SIZE``; Slurm's ``SLURM_NTASKS_PER_NODE``
  (set by ``--ntasks-per-node``), else ``SLURM_TASKS_PER_NODE`` only when
  every node runs the same number of tasks (``4`` or ``4(x2)``) -- a mixed
  layout such as ``2(x3),1`` does not say how many tasks *this* node runs, so
  it is ignored and the planner decides; ``OMPI_COMM_WORLD_LOCAL_SIZE``.
  With an explicit rank, the first launcher that sets a size is used.
* ``PYNUMABIND_MODE``/``PYNUMABIND_POLICY`` take the CLI's values;
  ``PYNUMABIND_NODES``/``PYNUMABIND_CPUS`` the planner's per-rank overrides
  (``0,0,1,1``, ``0-3;4-7``, or vLLM's space-separated ``1 1 0 0``), read by
  :func:`override_text` (the framework hooks use it too) and parsed by the
  planner's one reader (:mod:`pynumabind.planner._overrides`) against the topology.
* Every ``PYNUMABIND_*`` variable is read through the one rule for blank
  values (:func:`pynumabind.options.environ_value`): an empty value counts as
  unset (``PYNUMABIND_MODE= cmd`` clears it), and so does one of only ASCII
  whitespace.  Only ASCII whitespace is trimmed: any other character, a no-break space
  (U+00A0) included, is part of the value, so a value of only such characters is a
  :class:`~pynumabind.errors.ConfigError` naming the variable, never "unset".
* ``PYNUMABIND_DISABLE``: ``1/true/yes/on`` disables binding (a logged
  no-op); ``0/false/no/off``, blank or unset leave it enabled.
  ``PYNUMABIND_REQUIRE_NODE`` takes the same values: a GPU whose NUMA node
  is unknown then fails the plan instead of leaving the rank unbound.
* ``PYNUMABIND_LOCAL_GPUS``: the visible GPU indices the job's processes
  drive on this host (``0-3``, ``0,1``; spaces separate too), so a process
  given its ``gpus`` can slice a node in the exclusive modes;
  ``PYNUMABIND_PRIORITY_CORES`` (a flag, as ``PYNUMABIND_DISABLE``): mode
  ``node`` uses only the highest-performance cores (see
  :mod:`pynumabind.options`).
* ``PYNUMABIND_FALLBACK``: ``error`` or ``nearest`` (any case), what a rank
  gets when its GPU's node has no CPU in the process's cpuset
  (:mod:`pynumabind.planner._fallback`); the framework hooks default to
  ``nearest`` and read this variable to be told ``error``.
* ``PYNUMABIND_TIERS``: ``local`` or ``all`` (any case): ``all`` spreads
  each rank's memory over its own nodes and the nearest slower memory tier
  (:mod:`pynumabind.planner._tiers`); a bad value is a
  :class:`~pynumabind.errors.ConfigError` naming the variable.
* ``PYNUMABIND_WEIGHTS``: the interleave weights of ``weighted-interleave``
  (``0:3,2:1``: ``NODE:WEIGHT`` items, weights 1 to 255; read by
  :func:`pynumabind._weights.parse_weights`, and a bad value is a
  :class:`~pynumabind.errors.ConfigError` naming the variable); blank counts
  as unset.  That they go with that policy and name allowed nodes with memory
  is the planner's check, which names the variable too.
* ``PYNUMABIND_TOPOLOGY=FILE``: plan from that snapshot (``pynumabind
  snapshot``) instead of this machine; only the file name is read here
  (:func:`~pynumabind.discovery.resolve_topology` loads it, and a missing or
  bad file is an error naming it).
* Explicit arguments always win over the environment.
* A rank or size variable that is set must be a non-negative integer (a
  size a positive one), even when empty: a launcher that exports
  ``LOCAL_RANK=`` is broken, and guessing another variable could bind the
  wrong rank.  Every bad value raises :class:`~pynumabind.errors.ConfigError`
  naming the variable and the value.
"""

from __future__ import annotations

import re

from .._record import replace
from .._text import Pattern, shown
from ..errors import ConfigError
from ..model import CpuMode, MemoryPolicy
from ..options import (
    ASCII_SPACE,
    Options,
    check_nprocs,
    environ_value,
    parse_choice,
    parse_fallback,
    parse_tiers,
)

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = [
    "CPUS_VARIABLE",
    "DISABLE_VARIABLE",
    "FALLBACK_VARIABLE",
    "FLAG_FALSE",
    "FLAG_TRUE",
    "LOCAL_GPUS_VARIABLE",
    "MODE_VARIABLE",
    "NODES_VARIABLE",
    "POLICY_VARIABLE",
    "PRIORITY_VARIABLE",
    "RANK_VARIABLES",
    "TIERS_VARIABLE",
    "TOPOLOGY_VARIABLE",
    "WEIGHTS_VARIABLE",
    "override_text",
    "parse_flag",
    "resolve",
    "topology_file",
]

RANK_VARIABLES: Tuple[str, ...] = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")

# rank variable -> the same launcher's local-size variables, in order.
SIZE_VARIABLES: Mapping[str, Tuple[str, ...]] = {
    "LOCAL_RANK": ("LOCAL_WORLD_SIZE",),
    "SLURM_LOCALID": ("SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    "OMPI_COMM_WORLD_LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_SIZE",),
}

MODE_VARIABLE = "PYNUMABIND_MODE"
POLICY_VARIABLE = "PYNUMABIND_POLICY"
NODES_VARIABLE = "PYNUMABIND_NODES"
CPUS_VARIABLE = "PYNUMABIND_CPUS"
DISABLE_VARIABLE = "PYNUMABIND_DISABLE"
REQUIRE_NODE_VARIABLE = "PYNUMABIND_REQUIRE_NODE"
TOPOLOGY_VARIABLE = "PYNUMABIND_TOPOLOGY"
LOCAL_GPUS_VARIABLE = "PYNUMABIND_LOCAL_GPUS"
PRIORITY_VARIABLE = "PYNUMABIND_PRIORITY_CORES"
FALLBACK_VARIABLE = "PYNUMABIND_FALLBACK"
WEIGHTS_VARIABLE = "PYNUMABIND_WEIGHTS"
TIERS_VARIABLE = "PYNUMABIND_TIERS"

NO_RANK = (
    "no local rank: pass rank= or set one of "
    + ", ".join(RANK_VARIABLES)
    + " (torchrun, srun and mpirun set them)"
)


def no_rank(options: Optional[Options] = None) -> str:
    """:data:`NO_RANK`, naming the option of the interface used (``--rank`` on the command line)."""
    if options is None or not options.flags:
        return NO_RANK
    return NO_RANK.replace("pass rank=", f"pass {options.spelled('rank')}", 1)


_ASCII_SPACE = ASCII_SPACE  # only ASCII whitespace is trimmed (see options.ASCII_SPACE)
#: The one set of boolean values, for every on/off variable (``PYNUMABIND_DISABLE``,
#: ``PYNUMABIND_REQUIRE_NODE``, ``PYNUMABIND_VLLM``, ``PYNUMABIND_SGLANG``), in any
#: letter case, ASCII whitespace around them ignored (docs/site/frameworks.md lists it).
FLAG_TRUE = frozenset({"1", "true", "yes", "on"})
FLAG_FALSE = frozenset({"", "0", "false", "no", "off"})
_INT = Pattern(re.compile, r"[0-9]{1,9}\Z")  # no sign, no spaces inside; < 10**9
_SLURM_TASKS = Pattern(re.compile, r"([0-9]{1,9})(?:\(x[0-9]{1,9}\))?\Z")


def parse_flag(name: str, value: str) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off/empty (the one parser of them)."""
    folded = value.strip(_ASCII_SPACE).lower()
    if folded in FLAG_TRUE:
        return True
    if folded in FLAG_FALSE:
        return False
    raise ConfigError(
        f"invalid {name}={shown(value)}; use 1/true/yes/on to enable or 0/false/no/off (or empty)"
    )


def _parse_int(name: str, value: str, minimum: int) -> int:
    text = value.strip(_ASCII_SPACE)
    if not _INT.match(text) or int(text) < minimum:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise ConfigError(f"invalid {name}={shown(value)}; expected {kind}")
    return int(text)


def _parse_slurm_tasks(name: str, value: str) -> Optional[int]:
    """``4`` or ``4(x2),4`` -> 4; ``2(x3),1`` -> None (differs per node)."""
    counts = set()
    for group in value.strip(_ASCII_SPACE).split(","):
        match = _SLURM_TASKS.match(group.strip(_ASCII_SPACE))
        if match is None:
            raise ConfigError(
                f"invalid {name}={shown(value)}; "
                "expected Slurm's task layout such as '4' or '4(x2)'"
            )
        counts.add(int(match.group(1)))
    if len(counts) != 1:
        return None
    (count,) = counts
    if count < 1:
        raise ConfigError(f"invalid {name}={shown(value)}; expected a positive task count")
    return count


def _local_size(
    environ: Mapping[str, str], variables: Tuple[str, ...]
) -> Optional[Tuple[int, str]]:
    for name in variables:
        value = environ.get(name)
        if value is None:
            continue
        if name == "SLURM_TASKS_PER_NODE":
            count = _parse_slurm_tasks(name, value)
            if count is None:
                continue  # ambiguous: tasks differ per node
            return count, name
        return _parse_int(name, value, 1), name
    return None


def _option(environ: Mapping[str, str], name: str) -> Optional[str]:
    return environ_value(environ, name)  # blank is unset (the one rule)


def override_text(environ: Mapping[str, str], variable: str) -> Optional[str]:
    """A per-rank override variable as the planner parses it: None when unset or blank.

    Only ASCII whitespace around it is trimmed; the core and the framework
    hooks both read ``PYNUMABIND_NODES``/``PYNUMABIND_CPUS`` here.
    """
    text = _option(environ, variable)
    return None if text is None else text.strip(_ASCII_SPACE)


def topology_file(environ: Mapping[str, str]) -> Optional[str]:
    """``PYNUMABIND_TOPOLOGY``, or None when unset or blank (resolve_topology's and resolve's)."""
    return _option(environ, TOPOLOGY_VARIABLE)


def _rank(environ: Mapping[str, str], given: Options) -> Tuple[Optional[int], Optional[str]]:
    if given.rank is not None:
        return given.rank, given.rank_source
    for name in RANK_VARIABLES:
        value = environ.get(name)
        if value is not None:
            return _parse_int(name, value, 0), name
    return None, None


def _nprocs(
    environ: Mapping[str, str], given: Options, rank_source: Optional[str]
) -> Tuple[Optional[int], Optional[str]]:
    if given.nprocs is not None:
        return given.nprocs, given.nprocs_source
    order = list(RANK_VARIABLES)
    if rank_source is not None and rank_source in SIZE_VARIABLES:
        order = [rank_source]  # the rank's own launcher only
    for rank_name in order:
        found = _local_size(environ, SIZE_VARIABLES[rank_name])
        if found is not None:
            count, name = found
            return check_nprocs(count, name), name
    return None, None


def _choices(environ: Mapping[str, str], given: Options, sources: Dict[str, str]) -> Dict[str, Any]:
    """mode, policy and the per-rank overrides: the argument if given, else the variable."""
    out: Dict[str, Any] = {}
    variables = (
        ("mode", MODE_VARIABLE),
        ("policy", POLICY_VARIABLE),
        ("nodes", NODES_VARIABLE),
        ("cpus", CPUS_VARIABLE),
    )
    for option, variable in variables:
        value = getattr(given, option)
        text = _option(environ, variable)
        if value is not None or text is None:
            out[option] = value
        elif option == "mode":
            out[option] = parse_choice(CpuMode, text, option, variable=variable)
        elif option == "policy":
            out[option] = parse_choice(MemoryPolicy, text, option, variable=variable)
        else:
            # "0,0,1,1", "0-3;4-7" go to the planner as text: it parses them
            # against the topology and names the variable in errors.
            out[option] = override_text(environ, variable)
        if value is None and text is not None:
            sources[option] = variable
    return out


def _peers_and_priority(
    environ: Mapping[str, str], given: Options, sources: Dict[str, str]
) -> Dict[str, Any]:
    """``local_gpus`` and ``priority_cores``: the argument if given, else the variable."""
    from ..cpulist import parse_cpulist
    from ..errors import ListParseError

    out: Dict[str, Any] = {"local_gpus": given.local_gpus, "priority_cores": given.priority_cores}
    text = _option(environ, LOCAL_GPUS_VARIABLE)
    if given.local_gpus is None and text is not None:
        try:
            ids = parse_cpulist(",".join(text.split()))
        except ListParseError as exc:
            raise ConfigError(
                f"invalid {LOCAL_GPUS_VARIABLE}={shown(text)}: {exc}; give the visible GPU "
                "indices of the job's processes on this host, such as 0-3"
            ) from exc
        out["local_gpus"] = tuple(sorted(ids))
        sources["local_gpus"] = LOCAL_GPUS_VARIABLE
    flag = _option(environ, PRIORITY_VARIABLE)
    if not given.priority_cores and flag is not None and parse_flag(PRIORITY_VARIABLE, flag):
        out["priority_cores"] = True
        sources["priority_cores"] = PRIORITY_VARIABLE
    fallback = _option(environ, FALLBACK_VARIABLE)
    if given.fallback is None and fallback is not None:
        out["fallback"] = parse_fallback(fallback, variable=FALLBACK_VARIABLE)
        sources["fallback"] = FALLBACK_VARIABLE
    tiers = _option(environ, TIERS_VARIABLE)
    if given.tiers is None and tiers is not None:
        out["tiers"] = parse_tiers(tiers, variable=TIERS_VARIABLE)
        sources["tiers"] = TIERS_VARIABLE
    weights = _option(environ, WEIGHTS_VARIABLE)
    if given.weights is None and weights is not None:
        from .._weights import invalid_variable, parse_weights
        from ..errors import ListParseError

        try:
            out["weights"] = parse_weights(weights)
        except ListParseError as exc:
            raise invalid_variable(WEIGHTS_VARIABLE, weights, exc) from exc
        sources["weights"] = WEIGHTS_VARIABLE
    return out


def resolve(
    environ: Mapping[str, str],
    given: Optional[Options] = None,
    *,
    need_rank: bool = True,
) -> Options:
    """Merge the options given (which win) with ``environ``: the one :class:`Options`.

    ``given`` is options already built and checked (by a public function's
    keyword front, the CLI, or the caller); ``None`` is none given.
    ``need_rank=False`` leaves ``rank`` None when neither an argument nor a
    launcher gives one (the binding then binds to the GPUs the process sees).
    """
    if given is None:
        given = Options()
    disable_value = _option(environ, DISABLE_VARIABLE)
    disabled = disable_value is not None and parse_flag(DISABLE_VARIABLE, disable_value)
    rank, rank_source = _rank(environ, given)
    if rank is None and not disabled and need_rank:
        raise ConfigError(no_rank(given))
    nprocs, nprocs_source = _nprocs(environ, given, rank_source)
    if rank is not None and nprocs is not None and rank >= nprocs:
        raise ConfigError(
            f"local rank {rank} (from {rank_source}) is not below the number of local "
            f"processes {nprocs} (from {nprocs_source})"
        )
    sources = dict(given.sources)
    require_node = given.require_node
    require_value = _option(environ, REQUIRE_NODE_VARIABLE)
    if not require_node and require_value is not None:
        require_node = parse_flag(REQUIRE_NODE_VARIABLE, require_value)
        if require_node:
            sources["require_node"] = REQUIRE_NODE_VARIABLE
    snapshot = topology_file(environ)
    if snapshot is not None:
        sources["topology_file"] = TOPOLOGY_VARIABLE
    return replace(
        given,
        topology_file=snapshot,
        rank=rank,
        rank_source=rank_source,
        nprocs=nprocs,
        nprocs_source=nprocs_source,
        disabled=disabled,
        require_node=require_node,
        disabled_by=f"{DISABLE_VARIABLE}={disable_value}" if disabled else None,
        **_choices(environ, given, sources),
        **_peers_and_priority(environ, given, sources),
        sources=sources,
    )
