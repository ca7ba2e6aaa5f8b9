"""What the framework hooks share: version checks, per-GPU overrides, binding once per process.

Re-exported by :mod:`pynumabind.integrations` (see its docstring for the
rules); :mod:`.vllm` and :mod:`.sglang` import from here, never from the
package, so the package's lazy import of them closes no cycle.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Sequence, Tuple

from .. import _forksafe

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding
    from ..model import Topology

__all__ = [
    "bind_gpu",
    "bind_gpus",
    "bind_visible_gpus",
    "check_release",
    "installed_version",
    "per_gpu_override",
    "release",
]

log = logging.getLogger("pynumabind.integrations")

#: Where each process's binding is recorded, so a second hook in the same
#: process (a worker class calling a patched parent, a plugin loaded twice)
#: does not bind again: GPU indices -> Binding.  Only a binding still in
#: force in this process is handed back: a restored one binds again, and a
#: forked child starts with the cache empty (its parent's Binding is not its
#: own: the journal names the parent's threads and memory policy).
_BOUND: Dict[Tuple[int, ...], Binding] = {}


def _cached(key: Tuple[int, ...]) -> Optional[Binding]:
    """The binding for ``key`` made in this process and not restored, or None (dropped)."""
    done = _BOUND.get(key)
    if done is None:
        return None
    journal = done._undo
    if done.restored or (journal is not None and journal.pid != os.getpid()):
        _BOUND.pop(key, None)
        return None
    return done


os.register_at_fork(after_in_child=_BOUND.clear)


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


@_forksafe.guarded  # imports, loads the topology, binds (see _forksafe)
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


@_forksafe.guarded  # imports, loads the topology, binds (see _forksafe)
def bind_gpus(
    indices: Sequence[int],
    *,
    what: str,
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Bind this process to visible GPUs ``indices`` (once per process).

    :func:`~pynumabind.bind_current_process` with ``gpus=``: one GPU's
    node, or the union of several GPUs' plans, the per-rank overrides read
    per GPU index (here also in vLLM's space-separated form).
    ``PYNUMABIND_DISABLE=1`` still turns it into a logged no-op.  A binding
    this process made for the same GPUs and still in force is returned
    instead of binding again; a restored one, or one made before a fork, is
    not (see ``_BOUND``).
    """
    from ..binding import bind_current_process
    from ..errors import ConfigError, PlanError

    env = os.environ if environ is None else environ
    key = tuple(sorted(set(indices)))
    if not key:
        raise ConfigError(f"{what}: no GPU to bind to")
    done = _cached(key)
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
            gpus=list(key), topology=topology, environ=env, nodes=nodes, cpus=cpus
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
