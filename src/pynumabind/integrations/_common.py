"""What the framework hooks share: version checks, per-GPU overrides, binding once per process.

Re-exported by :mod:`pynumabind.integrations` (see its docstring for the
rules); :mod:`.vllm` and :mod:`.sglang` import from here, never from the
package, so the package's lazy import of them closes no cycle.
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
    "installed_version",
    "per_gpu_override",
    "release",
]

log = logging.getLogger("pynumabind.integrations")

#: Where each process's binding is recorded, so a second hook in the same
#: process (a worker class calling a patched parent, a plugin loaded twice)
#: does not bind again: GPU indices -> Binding.
_BOUND: Dict[Tuple[int, ...], Binding] = {}


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
    """``variable`` as the core reads it (:func:`pynumabind._environ.override_text`).

    Unset, empty or ASCII-blank is None, as in the core; vLLM's
    space-separated form (``"0 0 1 1"``) is parsed by the planner's one
    override reader, like ``,`` and ``;``, with the same rule for spaces
    (ASCII whitespace only).
    """
    from .._environ import override_text

    return override_text(os.environ if environ is None else environ, variable)


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


def _gpu_key(indices: Sequence[int], what: str) -> Tuple[int, ...]:
    """``indices`` sorted, once each, checked as ``gpus=`` is (the one check of a GPU list)."""
    from .._options import Options
    from ..errors import ConfigError

    if isinstance(indices, Sequence) and not isinstance(indices, (str, bytes)) and not indices:
        raise ConfigError(f"{what}: no GPU to bind to")
    try:
        checked = Options(gpus=indices).gpus or ()  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    return tuple(sorted(set(checked)))


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
    per GPU index (:func:`per_gpu_override`).  ``indices`` is checked as
    ``gpus=`` is: a ConfigError for anything but a sequence of ints.
    ``PYNUMABIND_DISABLE=1`` still turns it into a logged no-op.
    """
    from ..binding import bind_current_process
    from ..errors import ConfigError, PlanError

    env = os.environ if environ is None else environ
    # The one check of a GPU list (ConfigError for ['0'], b'\x00', 3 ...).
    key = _gpu_key(indices, what)
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
