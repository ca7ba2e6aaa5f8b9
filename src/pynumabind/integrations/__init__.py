"""Framework integrations: vLLM, SGLang (and the helpers they share).

Rules
-----
* **Installing pynumabind never changes a framework's behaviour.**  The
  plugin entry points (``vllm.general_plugins``, ``sglang.srt.plugins``)
  point at :func:`vllm_plugin` and :func:`sglang_plugin` here, which import
  nothing heavy and do nothing unless the user opted in with
  ``PYNUMABIND_VLLM=1`` / ``PYNUMABIND_SGLANG=1``.  ``0`` or unset means off;
  any other value is a :class:`~pynumabind.errors.ConfigError` naming the
  variable (a typo must not silently leave workers unbound).  Only once
  opted in are :mod:`pynumabind.integrations.vllm` / ``.sglang`` imported;
  they check the framework's version against the supported range and raise
  a ConfigError outside it.
* **Never a double bind.**  When the framework's own NUMA binding is also on
  (vLLM ``--numa-bind``; SGLang ``SGLANG_NUMA_BIND_V2`` or ``numa_node``),
  the hook raises a ConfigError naming both switches instead of binding:
  the framework has already wrapped the process in ``numactl`` and a second,
  different binding would hide which one is in force.
* **Which GPU.**  A framework worker has no launcher rank; it knows the index
  of the GPU it drives among the GPUs it can see (vLLM: its parallel
  config's ``get_local_gpu_index``; SGLang: ``gpu_id``).  That index is the
  rank for pynumabind's per-rank overrides, and the number of visible GPUs
  is the number of ranks.  So ``PYNUMABIND_NODES`` and ``PYNUMABIND_CPUS``
  are per *GPU index*, and here also accept vLLM's space-separated form
  (``PYNUMABIND_NODES="0 0 1 1"``, ``PYNUMABIND_CPUS="0-7 8-15"``) besides
  pynumabind's ``,``/``;`` forms.
* **Where the machine comes from.**  ``PYNUMABIND_TOPOLOGY=FILE`` plans from
  a snapshot, as everywhere: the machine comes from
  :func:`pynumabind.discovery.resolve_topology`, as for the core and the CLI.
* **A process driving several GPUs** (vLLM's EngineCore, for its
  data-parallel shard) is bound to the union of those GPUs' plans
  (``bind_current_process(devices=[...])``): every CPU and memory node any
  of them would get, in modes ``node``, ``socket`` and ``none``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding
    from ..model import Topology

__all__ = [
    "bind_gpu",
    "bind_gpus",
    "bind_visible_gpus",
    "check_release",
    "gate",
    "installed_version",
    "per_gpu_override",
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
    supported: Tuple[Tuple[int, int, int], Tuple[int, int, int]],
    module: str,
) -> None:
    """ConfigError unless ``version`` lies in ``supported`` = (lowest, first unsupported)."""
    from ..errors import ConfigError

    low, high = supported
    found = release(version)
    if not found or not (low <= found < high):
        raise ConfigError(
            f"{module} supports {framework} >={'.'.join(map(str, low))},"
            f"<{'.'.join(map(str, high))}; {framework} {version} is installed"
        )


def installed_version(distribution: str, module: str) -> str:
    """The installed version of ``distribution``, or a ConfigError saying it is missing."""
    from importlib.metadata import PackageNotFoundError, version

    from ..errors import ConfigError

    try:
        return version(distribution)
    except PackageNotFoundError:
        raise ConfigError(f"{module} needs {distribution}, which is not installed") from None


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
    actor with ``num_gpus=1`` sees ``CUDA_VISIBLE_DEVICES=3``).  No visible
    GPU is a ConfigError.
    """
    from ..errors import ConfigError

    env = os.environ if environ is None else environ
    if topology is None:
        from ..discovery import resolve_topology

        topology = resolve_topology(environ=env)
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
    per GPU index (here also in vLLM's space-separated form).
    ``PYNUMABIND_DISABLE=1`` still turns it into a logged no-op.
    """
    from ..binding import bind_current_process
    from ..errors import ConfigError, PlanError

    env = os.environ if environ is None else environ
    key = tuple(sorted(set(indices)))
    if not key:
        raise ConfigError(f"{what}: no GPU to bind to")
    done = _BOUND.get(key)
    if done is not None:
        log.debug("pynumabind: %s already bound to GPU(s) %s", what, _ids(frozenset(key)))
        return done
    nodes = per_gpu_override("PYNUMABIND_NODES", env)
    cpus = per_gpu_override("PYNUMABIND_CPUS", env)
    if topology is None:
        from ..discovery import resolve_topology

        topology = resolve_topology(environ=env)
    count = len(topology.gpus)
    outside = [i for i in key if i >= count]
    if outside:
        raise ConfigError(
            f"{what} drives GPU index {_ids(frozenset(outside))}, but this process sees "
            f"{count} GPU(s) (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    try:
        binding = bind_current_process(
            devices=list(key), topology=topology, environ=env, nodes=nodes, cpus=cpus
        )
    except (ConfigError, PlanError) as exc:
        # The overrides reach the core as arguments (split per GPU index here),
        # so the core cannot name their variables: say where they came from.
        given = [
            f"{variable}={env[variable]!r}, one entry per visible GPU index"
            for variable, value in (("PYNUMABIND_NODES", nodes), ("PYNUMABIND_CPUS", cpus))
            if value is not None
        ]
        if not given:
            raise
        raise type(exc)(f"{exc} (from {'; '.join(given)})") from exc
    _BOUND[key] = binding
    return binding
