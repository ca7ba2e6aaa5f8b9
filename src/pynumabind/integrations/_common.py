"""What the framework hooks share: version checks, per-GPU overrides, binding once per process.

Re-exported by :mod:`pynumabind.integrations` (see its docstring for the
rules); :mod:`.vllm` and :mod:`.sglang` import from here, never from the
package, so the package's lazy import of them closes no cycle.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .._os import forksafe as _forksafe

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding
    from ..model import Topology

__all__ = [
    "bind_gpu",
    "bind_gpus",
    "bind_visible_gpus",
    "check_release",
    "describe_gpus",
    "hook_fallback",
    "installed_version",
    "missing_attributes",
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


def _ids(ids: frozenset[int]) -> str:
    from .._text import format_ids

    return format_ids(ids)


def _machine(env: Mapping[str, str]) -> Topology:
    """This process's machine, from the one place that decides it."""
    from ..discovery import resolve_topology

    return resolve_topology(environ=env)


# ------------------------------------------------------------ overrides


def per_gpu_override(variable: str, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``variable`` as the core reads it (:func:`pynumabind.discovery._environ.override_text`).

    Unset, empty or ASCII-blank is None, as in the core; vLLM's
    space-separated form (``"0 0 1 1"``) is parsed by the planner's one
    override reader, like ``,`` and ``;``, with the same rule for spaces
    (ASCII whitespace only).
    """
    from ..discovery._environ import override_text

    return override_text(os.environ if environ is None else environ, variable)


# ------------------------------------------------------------ binding


@_forksafe.guarded  # imports, loads the topology, binds (see _os.forksafe)
def bind_visible_gpus(
    *,
    what: str = "this process",
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Binding:
    """Bind this process to the GPUs it sees: one -> its node, several -> the union.

    For processes that a scheduler gives their own GPUs and no rank (a Ray
    actor with ``num_gpus=1`` sees ``CUDA_VISIBLE_DEVICES=3``).  Inside a Ray
    task or actor the GPUs are Ray's answer
    (:func:`pynumabind.discovery.ray_gpus`).  No GPU is a
    ConfigError.
    The GPUs it sees are its ranks (``local_gpus``): in the exclusive modes
    it takes their slices.
    """
    from ..errors import ConfigError

    env = os.environ if environ is None else environ
    if topology is None:
        topology = _machine(env)
    from ..discovery import ray_gpus

    given = ray_gpus(topology, env)  # inside a Ray worker: Ray's answer
    if given is not None:
        return bind_gpus(given, what=what, topology=topology, environ=env)
    if not topology.gpus:
        raise ConfigError(
            f"{what} sees no GPU (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}); "
            "nothing to bind to"
        )
    visible = range(len(topology.gpus))
    return bind_gpus(visible, what=what, topology=topology, environ=env, local_gpus=visible)


def bind_gpu(
    index: int,
    *,
    what: str,
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
    local_gpus: Optional[Sequence[int]] = None,
) -> Binding:
    """Bind this process to visible GPU ``index``'s node (once per process).

    ``what`` names the process in messages (``"vLLM worker local_rank 1"``);
    ``local_gpus`` as for :func:`bind_gpus`.
    """
    return bind_gpus([index], what=what, topology=topology, environ=environ, local_gpus=local_gpus)


def _gpu_key(indices: Sequence[int], what: str) -> Tuple[int, ...]:
    """``indices`` sorted, once each, checked as ``gpus=`` is (the one check of a GPU list)."""
    from ..errors import ConfigError
    from ..options import Options

    if isinstance(indices, Sequence) and not isinstance(indices, (str, bytes)) and not indices:
        raise ConfigError(f"{what}: no GPU to bind to")
    try:
        checked = Options(gpus=indices).gpus or ()  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    return tuple(sorted(set(checked)))


@_forksafe.guarded  # imports, loads the topology, binds (see _os.forksafe)
def bind_gpus(
    indices: Sequence[int],
    *,
    what: str,
    topology: Optional[Topology] = None,
    environ: Optional[Mapping[str, str]] = None,
    local_gpus: Optional[Sequence[int]] = None,
) -> Binding:
    """Bind this process to visible GPUs ``indices`` (once per process).

    :func:`~pynumabind.bind_current_process` with ``gpus=``: one GPU's
    node, or the union of several GPUs' plans, the per-rank overrides read
    per GPU index (:func:`per_gpu_override`, which also takes vLLM's
    space-separated form), needing an entry for every GPU index in
    ``indices`` only (vLLM's rule for its own ``--numa-bind-nodes``): a
    missing one is a ConfigError naming that index.  ``indices`` is checked
    as ``gpus=`` is: a ConfigError for anything but a sequence of ints.  The
    launcher's rank and size variables are not read: a framework worker has
    no launcher rank.  ``PYNUMABIND_DISABLE=1`` still turns it into a logged
    no-op.  A binding
    this process made for the same GPUs and still in force is returned
    instead of binding again; a restored one, or one made before a fork, is
    not (see ``_BOUND``).

    ``local_gpus``: every visible GPU index the framework runs on this host
    (one process per GPU: its ranks), ``indices`` among them.  With it the
    exclusive modes slice each node among those GPUs as among launcher ranks
    and this process takes its GPUs' slices; without it (and without
    ``PYNUMABIND_LOCAL_GPUS``) they are a ConfigError saying what to pass.

    ``fallback="nearest"`` is the hooks' default (:func:`hook_fallback`): a
    worker whose GPU's node lies outside its cpuset is bound to the nearest
    allowed CPUs, with a warning, rather than failing to start.
    """
    from ..binding import bind_current_process
    from ..discovery._environ import RANK_VARIABLES, SIZE_VARIABLES
    from ..errors import ConfigError, PlanError

    env = os.environ if environ is None else environ
    # The one check of a GPU list (ConfigError for ['0'], b'\x00', 3 ...).
    key = _gpu_key(indices, what)
    done = _cached(key)
    if done is not None:
        log.debug("pynumabind: %s already bound to GPU(s) %s", what, _ids(frozenset(key)))
        return done
    if topology is None:
        topology = _machine(env)
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
        peers = None if local_gpus is None else tuple(sorted(set(local_gpus)))
        binding = bind_current_process(
            gpus=list(key),
            topology=topology,
            environ=worker_env,
            nodes=nodes,
            cpus=cpus,
            local_gpus=peers,
            fallback=hook_fallback(env),
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


def hook_fallback(env: Mapping[str, str]) -> Optional[str]:
    """The hooks' ``fallback``: ``"nearest"``, unless ``PYNUMABIND_FALLBACK`` says otherwise.

    A framework kills a worker whose binding fails, and the job with it,
    where its own binding would have started it unbound; so in the hooks a
    cpuset without the GPU's node binds to the nearest allowed CPUs (one
    warning).  ``PYNUMABIND_FALLBACK=error`` restores the core's error: the
    variable is then left for the core to read (None here), so it is parsed
    and named in errors as everywhere.  Blank (``PYNUMABIND_FALLBACK=""``, as
    a Kubernetes or Slurm template leaves it) is unset, here as in the core
    (:func:`pynumabind.options.environ_value`): the hooks' ``nearest``.
    """
    from ..discovery._environ import FALLBACK_VARIABLE
    from ..options import environ_value

    return None if environ_value(env, FALLBACK_VARIABLE) is not None else "nearest"


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
    from ..planner._overrides import parse_cpus_override, parse_nodes_override

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
