"""Framework integrations: vLLM, SGLang, Ray (and the helpers they share).

Rules
-----
* **Installing pynumabind never changes a framework's behaviour.**  The
  plugin entry points (``vllm.general_plugins``, ``sglang.srt.plugins``)
  point at :func:`vllm_plugin` and :func:`sglang_plugin` here, which import
  nothing heavy and do nothing unless the user opted in with
  ``PYNUMABIND_VLLM`` / ``PYNUMABIND_SGLANG`` on.  The on/off values are the
  one set every switch takes (``1/true/yes/on``, ``0/false/no/off``, empty
  or unset; :func:`pynumabind._environ.parse_flag`); any other value is a
  :class:`~pynumabind.errors.ConfigError` naming the variable (a typo must
  not silently leave workers unbound).  Only once opted in are
  :mod:`pynumabind.integrations.vllm` / ``.sglang`` imported.
* **Versions** (:func:`check_release`): each integration has a tested range,
  oldest to newest release, both ends run in CI.  Inside it: silent.
  Outside it: the hooks the integration calls are looked up; all there is
  one WARNING naming the untested version, any missing a ConfigError naming
  the version and each missing hook.
* **Never a double bind.**  When the framework's own NUMA binding is also on
  (vLLM ``--numa-bind``/``--numa-bind-nodes``/``--numa-bind-cpus``; SGLang
  ``SGLANG_NUMA_BIND_V2`` or ``numa_node``), the hook raises a ConfigError
  naming both switches instead of binding: the framework has already
  wrapped the process in ``numactl`` and a second, different binding would
  hide which one is in force.  A framework that binds *by default* (vLLM
  >= 0.34) is turned off by the opt-in (see :mod:`.vllm`).
* **Which GPU.**  A framework worker has no launcher rank; it knows the index
  of the GPU it drives among the GPUs it can see (vLLM: its parallel
  config's ``get_local_gpu_index``; SGLang: ``gpu_id``).  That index is the
  rank for pynumabind's per-rank overrides, and the number of visible GPUs
  is the number of ranks; a launcher's rank and size variables in the
  worker's environment are not read.
* **Overrides.**  ``PYNUMABIND_NODES`` and ``PYNUMABIND_CPUS`` are per *GPU
  index*, and here also accept vLLM's space-separated form
  (``PYNUMABIND_NODES="0 0 1 1"``, ``PYNUMABIND_CPUS="0-7 8-15"``) besides
  pynumabind's ``,``/``;`` forms.  As for vLLM's own ``--numa-bind-nodes``,
  an entry is needed for every GPU index a process drives, and only for
  those; a missing one is a ConfigError naming the index that needs it.
* **Where the machine comes from.**  ``PYNUMABIND_TOPOLOGY=FILE`` plans from
  a snapshot, as everywhere (:func:`pynumabind.discovery.process_topology`).
* **A process driving several GPUs** (vLLM's EngineCore, for its
  data-parallel shard) is bound to the union of those GPUs' plans
  (``bind_current_process(devices=[...])``): every CPU and memory node any
  of them would get, in modes ``node``, ``socket`` and ``none``.
* **Ray: ask Ray** (:func:`ray_gpus`).  Inside a Ray task or actor (``ray``
  already imported and initialised; pynumabind never imports it), a process
  without a rank is bound to the GPUs ``ray.get_gpu_ids()`` names; none is
  the ConfigError of a process with nothing to bind to.
* **Binding lines** name each GPU by visible index, physical (NVML) index,
  UUID and bus id (:func:`describe_gpus`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..binder import Binding
    from ..model import Topology

__all__ = [
    "bind_gpu",
    "bind_gpus",
    "bind_visible_gpus",
    "check_release",
    "describe_gpus",
    "gate",
    "installed_version",
    "load_topology",
    "missing_attributes",
    "per_gpu_override",
    "ray_gpus",
    "release",
    "sglang_plugin",
    "vllm_plugin",
]

log = logging.getLogger(__name__)

#: Where each process's binding is recorded, so a second hook in the same
#: process (a worker class calling a patched parent, a plugin loaded twice)
#: does not bind again: GPU indices -> Binding.
_BOUND: Dict[Tuple[int, ...], Binding] = {}


def gate(variable: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the opt-in ``variable`` is on (``1``/``true``/``yes``/``on``).

    Unset, empty and ``0``/``false``/``no``/``off`` are off; anything else is
    a ConfigError naming the variable.
    """
    from .._environ import parse_flag

    env = os.environ if environ is None else environ
    value = env.get(variable)
    return value is not None and parse_flag(variable, value)


def vllm_plugin() -> None:
    """The ``vllm.general_plugins`` entry point; a no-op unless ``PYNUMABIND_VLLM=1``.

    vLLM calls it in every process it starts (front end, EngineCore,
    workers).  When on, it wraps vLLM's GPU worker's ``init_device`` and its
    executor's constructor so that each worker binds to its GPU's node before
    the CUDA context exists and EngineCore binds to its shard's nodes before
    it starts the workers (see :mod:`pynumabind.integrations.vllm`).
    """
    if not gate("PYNUMABIND_VLLM"):
        return
    from . import vllm

    vllm.install()


def sglang_plugin() -> None:
    """The ``sglang.srt.plugins`` entry point; a no-op unless ``PYNUMABIND_SGLANG=1``.

    SGLang calls it first thing in each scheduler process; when on, it binds
    that process to its ``gpu_id`` (see :mod:`pynumabind.integrations.sglang`).
    """
    if not gate("PYNUMABIND_SGLANG"):
        return
    from . import sglang

    sglang.install()


# ------------------------------------------------------------ versions


def release(text: str) -> Tuple[int, ...]:
    """The leading numeric release of a version string (``0.33.0rc1`` -> (0, 33, 0))."""
    parts = []
    for piece in text.split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def check_release(
    framework: str,
    version: str,
    tested: Tuple[Tuple[int, ...], Tuple[int, ...]],
    module: str,
    missing: Callable[[], List[str]],
) -> None:
    """The version policy: tested range, else the hooks decide (see the module docstring).

    ``tested`` is ``(oldest, newest)``, compared on as many leading numbers
    as each gives (``(0, 34)`` covers every 0.34.x).  Inside it: nothing.
    Outside it: ``missing()`` lists the hooks the integration needs that this
    release lacks; none missing logs one WARNING naming the untested version,
    else a ConfigError names the version and what is missing.
    """
    from ..errors import ConfigError

    oldest, newest = tested
    found = release(version)
    if found and oldest <= found[: len(oldest)] and found[: len(newest)] <= newest:
        return
    span = f"{'.'.join(map(str, oldest))} to {'.'.join(map(str, newest))}"
    absent = missing()
    if absent:
        raise ConfigError(
            f"{module}: {framework} {version} is outside the tested range ({span}) and lacks "
            f"what the integration calls: {', '.join(absent)}; install {framework} {span}"
        )
    log.warning(
        "pynumabind: %s %s is outside the range %s tests (%s); the hooks it calls are all "
        "there, so it goes on, untested with this version",
        framework,
        version,
        module,
        span,
    )


def missing_attributes(wanted: Sequence[Tuple[str, str]]) -> List[str]:
    """Of ``(module, "Class.attribute")`` pairs, those that do not resolve (imports allowed)."""
    import importlib

    absent = []
    for module_name, dotted in wanted:
        try:
            target: object = importlib.import_module(module_name)
            for part in dotted.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError):
            absent.append(f"{module_name}.{dotted}")
    return absent


def installed_version(distribution: str, module: str) -> str:
    """The installed version of ``distribution``, or a ConfigError saying it is missing."""
    from importlib.metadata import PackageNotFoundError, version

    from ..errors import ConfigError

    try:
        return version(distribution)
    except PackageNotFoundError:
        raise ConfigError(f"{module} needs {distribution}, which is not installed") from None


# ------------------------------------------------------------ topology


def load_topology(environ: Optional[Mapping[str, str]] = None) -> Topology:
    """This process's topology: ``PYNUMABIND_TOPOLOGY``'s snapshot when set, else detected."""
    from .._environ import TOPOLOGY_VARIABLE
    from ..discovery import detect_topology, process_topology

    env = os.environ if environ is None else environ
    path = env.get(TOPOLOGY_VARIABLE, "")
    if not path.strip():  # unset or empty: this machine, as for every PYNUMABIND_ variable
        return detect_topology(environ=env)
    return process_topology(path, env)


def _ids(ids: frozenset[int]) -> str:
    from ..errors import format_ids

    return format_ids(ids)


# ------------------------------------------------------------ overrides


def per_gpu_override(variable: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``variable`` in pynumabind's per-rank form, read as vLLM's when space-separated.

    ``"0 0 1 1"`` -> ``"0;0;1;1"`` (one item per GPU index).  A value with
    ``,`` or ``;``, or a single item, is pynumabind's own form and is
    returned unchanged; unset is None.
    """
    env = os.environ if environ is None else environ
    value = env.get(variable)
    if value is None:
        return None
    items = value.split()
    if len(items) < 2 or "," in value or ";" in value:
        return value
    return ";".join(items)


# ------------------------------------------------------------ binding


def bind_visible_gpus(
    *,
    what: str = "this process",
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Bind this process to the GPUs it sees: one -> its node, several -> the union.

    For processes that a scheduler gives their own GPUs and no rank (a Ray
    actor with ``num_gpus=1`` sees ``CUDA_VISIBLE_DEVICES=3``).  Inside a Ray
    task or actor the GPUs are Ray's answer (:func:`ray_gpus`).  No GPU is a
    ConfigError.
    """
    from ..errors import ConfigError

    env = os.environ if environ is None else environ
    if topology is None:
        topology = load_topology(env)
    given = ray_gpus(topology, env)  # inside a Ray worker: Ray's answer
    if given is not None:
        return bind_gpus(given, what=what, topology=topology, environ=env)
    if not topology.gpus:
        raise ConfigError(
            f"{what} sees no GPU (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}); "
            "nothing to bind to"
        )
    return bind_gpus(range(len(topology.gpus)), what=what, topology=topology, environ=env)


def bind_gpu(
    index: int,
    *,
    what: str,
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Bind this process to visible GPU ``index``'s node (once per process).

    ``what`` names the process in messages (``"vLLM worker local_rank 1"``).
    """
    return bind_gpus([index], what=what, topology=topology, environ=environ)


def bind_gpus(
    indices: Sequence[int],
    *,
    what: str,
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Bind this process to visible GPUs ``indices`` (once per process).

    :func:`~pynumabind.bind_current_process` with ``devices=``: one GPU's
    node, or the union of several GPUs' plans, the per-rank overrides read
    per GPU index (here also in vLLM's space-separated form), needing an
    entry for every GPU index in ``indices`` only (vLLM's rule for its own
    ``--numa-bind-nodes``): a missing one is a ConfigError naming that index.
    The launcher's rank and size variables are not read: a framework worker
    has no launcher rank.  ``PYNUMABIND_DISABLE=1`` still turns it into a
    logged no-op.
    """
    from .._environ import RANK_VARIABLES, SIZE_VARIABLES
    from ..binder import bind_current_process
    from ..errors import ConfigError, PlanError

    env = os.environ if environ is None else environ
    key = tuple(sorted(set(indices)))
    if not key:
        raise ConfigError(f"{what}: no GPU to bind to")
    done = _BOUND.get(key)
    if done is not None:
        log.debug("pynumabind: %s already bound to GPU(s) %s", what, _ids(frozenset(key)))
        return done
    if topology is None:
        topology = load_topology(env)
    count = len(topology.gpus)
    outside = [i for i in key if i >= count]
    if outside:
        raise ConfigError(
            f"{what} drives GPU index {_ids(frozenset(outside))}, but this process sees "
            f"{count} GPU(s) (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    nodes = _per_gpu_entries("PYNUMABIND_NODES", env, topology, key, what)
    cpus = _per_gpu_entries("PYNUMABIND_CPUS", env, topology, key, what)
    launcher = set(RANK_VARIABLES).union(*SIZE_VARIABLES.values())
    worker_env = {k: v for k, v in env.items() if k not in launcher}
    try:
        binding = bind_current_process(
            devices=list(key), topology=topology, environ=worker_env, nodes=nodes, cpus=cpus
        )
    except (ConfigError, PlanError) as exc:
        # The overrides reach the core as arguments (split per GPU index here),
        # so the core cannot name their variables: say where they came from.
        given = [
            f"{variable}={env[variable]!r}, one entry per GPU index in use"
            for variable, value in (("PYNUMABIND_NODES", nodes), ("PYNUMABIND_CPUS", cpus))
            if value is not None
        ]
        if not given:
            raise
        raise type(exc)(f"{exc} (from {'; '.join(given)})") from exc
    _BOUND[key] = binding
    return binding


def _per_gpu_entries(
    variable: str,
    env: Mapping[str, str],
    topology: Topology,
    key: Sequence[int],
    what: str,
) -> Optional[str]:
    """``variable``'s entries, one per visible GPU index, in the core's per-rank form.

    Only the indices in ``key`` need an entry (vLLM's rule).  Entries past
    the given ones are filled with the entry of ``key[0]``: they are checked
    against the machine like any entry but never planned, since the core
    plans exactly the indices in ``key``.  None when unset or empty.
    """
    from ..cpulist import format_cpulist
    from ..errors import ConfigError
    from ..planner import parse_cpus_override, parse_nodes_override

    value = per_gpu_override(variable, env)
    if value is None or not value.strip():
        return None
    try:
        if variable == "PYNUMABIND_NODES":
            entries = list(parse_nodes_override(value, universe=frozenset(topology.nodes)))
        else:
            entries = list(
                parse_cpus_override(
                    value, universe=topology.online_cpus, allowed=topology.allowed_cpus
                )
            )
    except ConfigError as exc:
        raise ConfigError(f"invalid {variable}={env[variable]!r}: {exc}") from exc
    missing = [i for i in key if i >= len(entries)]
    if missing:
        raise ConfigError(
            f"{what} drives GPU index {missing[0]}, but {variable}={env[variable]!r} has "
            f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} (GPU indices "
            f"0-{len(entries) - 1}): give an entry for every GPU index in use, "
            f"index {missing[0]} included"
        )
    count = len(topology.gpus)
    padded = entries[:count] + [entries[key[0]]] * (count - len(entries))
    return ";".join(format_cpulist(entry) for entry in padded)


def describe_gpus(topology: Topology, indices: Sequence[int]) -> str:
    """``"1 (physical 3, GPU-..., 0000:65:00.0)"``: each visible index with what names it.

    The visible index is the process's own ordinal; the physical index
    (NVML's) and the UUID say which board that is on the machine.
    """
    parts = []
    for index in indices:
        if not 0 <= index < len(topology.gpus):
            parts.append(str(index))
            continue
        gpu = topology.gpus[index]
        names = [] if gpu.physical_index is None else [f"physical {gpu.physical_index}"]
        names += [gpu.uuid] if gpu.uuid else []
        parts.append(f"{index} ({', '.join([*names, gpu.pci_bus_id])})")
    return ", ".join(parts)


# ------------------------------------------------------------ Ray


def _ray_gpu_ids() -> Optional[List[str]]:
    """``ray.get_gpu_ids()`` in a Ray task or actor whose Ray is imported and initialised."""
    import sys

    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized() or ray.get_runtime_context().get_task_id() is None:
            return None
        return [str(i) for i in ray.get_gpu_ids()]
    except AttributeError:  # a partial or unknown ray module: not Ray's answer
        return None


def ray_gpus(
    topology: Topology, environ: Optional[Mapping[str, str]] = None
) -> Optional[List[int]]:
    """Inside a Ray task or actor, the visible GPU indices Ray gave it; else None.

    Ray's own answer (``ray.get_gpu_ids()``), asked only when ``ray`` is
    already imported in this process and initialised, and this process runs
    a Ray task or actor (not the driver): pynumabind never imports Ray.  An
    actor with ``num_gpus=0`` gets no GPU from Ray (and no
    ``CUDA_VISIBLE_DEVICES`` under Ray 2.60, so it would "see" every GPU):
    that is the ConfigError of a process with no GPU to bind to.
    """
    from ..errors import ConfigError

    ids = _ray_gpu_ids()
    if ids is None:
        return None
    if not ids:
        raise ConfigError(
            "this Ray task or actor was given no GPU (ray.get_gpu_ids() is empty: "
            "num_gpus=0?), so there is nothing to bind to; give it num_gpus, or pass "
            "rank= and nprocs= to bind by rank"
        )
    env = os.environ if environ is None else environ
    visible = [e.strip() for e in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    by_physical = {str(g.physical_index): g.index for g in topology.gpus}
    indices = []
    for gpu_id in ids:
        if visible and gpu_id in visible:
            indices.append(visible.index(gpu_id))
        elif not visible and gpu_id in by_physical:
            indices.append(by_physical[gpu_id])
        else:
            raise ConfigError(
                f"Ray gave this process GPU {gpu_id} (ray.get_gpu_ids() = {ids}), which is not "
                f"among the GPUs it sees (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})"
            )
    return sorted(set(indices))
