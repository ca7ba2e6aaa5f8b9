"""vLLM: bind each GPU worker, and EngineCore, in-process; no numactl wrapper.

Two ways in, same binding:

* ``--worker-cls pynumabind.integrations.vllm.Worker`` (or
  ``LLM(..., worker_cls=...)``): :class:`Worker` subclasses vLLM's own GPU
  worker and binds at the start of ``init_device``, before the CUDA context
  exists, so the driver's threads inherit the binding.
* ``PYNUMABIND_VLLM=1`` with the stock worker: the ``vllm.general_plugins``
  entry point (:func:`pynumabind.integrations.vllm_plugin`) calls
  :func:`install`, which wraps the stock worker's ``init_device`` the same
  way and the executor's constructor, so that EngineCore binds to the union
  of its data-parallel shard's GPU nodes before it starts the workers (who
  inherit that superset, then narrow it to their own GPU's node).

Which GPU a worker drives is vLLM's own answer: its parallel config's
``get_local_gpu_index(local_rank)`` (``local_rank + data_parallel_rank_local
× world_size`` for the ``mp`` backend on one node, ``local_rank`` for Ray and
external launchers; vLLM 0.34 added an optional ``dp_local_rank`` argument,
which ``init_device`` does not pass and neither does this module), then the
logical-to-visible mapping when ``assigned_physical_gpu_ids`` is set.  That
list comes in two shapes and the index is taken in the list's own space:
the full host list (``--device-ids``), indexed by the logical index, or one
data-parallel rank's shard (vLLM gives each DP rank only its own devices on
platforms that cannot select a device by index, and under Ray), indexed from
the shard's first logical GPU, ``get_local_gpu_index(0)``.  A list of any
other length is a ConfigError saying which lengths were expected.
vLLM's ``init_device`` itself rewrites ``self.local_rank`` to that index, so
the hook computes it from the rank as constructed, exactly once.
EngineCore's shard is the same GPUs vLLM's own ``--numa-bind`` uses:
``[get_local_gpu_index(0), + world_size)`` clipped to the visible GPUs for
``mp`` on one node, every visible GPU otherwise.

Never a double bind:

* vLLM's *explicit* binding on at the same time (``--numa-bind``,
  ``--numa-bind-nodes``, ``--numa-bind-cpus``) is a ConfigError naming the
  flag the user gave and the pynumabind switch that is on, raised in the
  launching process (:mod:`._vllm_launch`), before any process starts, or
  else in EngineCore and each worker.
* vLLM >= 0.34 binds *automatically* when ``numa_bind`` is unset (``None``):
  the launching process resolves it once (``configure_subprocess``) and, on
  a multi-node host with ``numactl``, wraps EngineCore and the workers in
  ``numactl``.  Opting in means pynumabind binds: either opt-in --
  ``PYNUMABIND_VLLM=1`` or ``--worker-cls pynumabind.integrations.vllm.Worker``
  alone -- makes the plugin's check ahead of ``configure_subprocess``
  (:func:`._vllm_launch.resolve_launch`, installed by the plugin entry
  point in every process, opted in or not) turn an unset ``numa_bind``
  into ``False`` before vLLM decides, and log one line naming the opt-in.
  A worker that still finds vLLM's automatic decision (``_numa_bind_auto``:
  the plugin was not loaded in the launching process, or the worker class
  is a subclass named by another path) logs a WARNING saying vLLM started
  it under ``numactl`` and that pynumabind's binding replaces it, then
  binds (it does not fail).
* Mode ``advised`` (``PYNUMABIND_MODE=advised``) with an advice record that
  says binding makes no difference: with an opt-in seen in the launching
  process, vLLM's automatic binding is off as above and pynumabind leaves
  EngineCore and every worker unbound, each logging why.  A worker class
  not recognised there cannot stop vLLM's ``numactl`` in time (see above).

Supported vLLM: the tested range :data:`TESTED` (both ends run in CI).
Outside it the module checks for the hooks it calls (:data:`HOOKS`, and
``ParallelConfig``'s fields in :data:`PARALLEL_FIELDS`) when imported: all
there is one WARNING naming the untested version, anything missing a
ConfigError naming it.  Tested against the real vLLM from PyPI
(``tests/integrations``).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from ..discovery import resolve_topology
from ..discovery._environ import parse_flag
from ..errors import ConfigError
from ..options import environ_value
from ._common import (
    bind_gpu,
    bind_gpus,
    check_release,
    describe_gpus,
    installed_version,
    missing_attributes,
)
from ._vllm_launch import (
    OPT_IN_VARIABLE,
    WORKER_CLS,
    advised,
    install_launch_hook,
    refusal,
    resolve_launch,
    vllm_binding_flag,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding

__all__ = [
    "HOOKS",
    "PARALLEL_FIELDS",
    "TESTED",
    "WORKER_CLS",
    "Worker",
    "check_version",
    "engine_core_gpus",
    "install",
    "missing_hooks",
    "resolve_auto_binding",
    "vllm_binding_flag",
    "worker_gpu",
    "worker_local_gpus",
]

log = logging.getLogger(__name__)
#: A child of vLLM's logger, so each process's binding line appears in vLLM's
#: own log (vLLM configures "vllm", not the root logger pynumabind's lines use).
vllm_log = logging.getLogger("vllm.pynumabind")

#: The tested vLLM releases, oldest and newest (each ``major.minor``, every
#: patch release of it included); CI runs the framework tests on both.
TESTED: Tuple[Tuple[int, ...], Tuple[int, ...]] = ((0, 33), (0, 34))

#: What this module calls in vLLM: ``(module, attribute path)``.
HOOKS: Tuple[Tuple[str, str], ...] = (
    ("vllm.v1.worker.gpu_worker", "Worker.init_device"),
    ("vllm.v1.executor.abstract", "Executor.__init__"),
    ("vllm.config", "ParallelConfig.get_local_gpu_index"),
    ("vllm.plugins", "load_general_plugins"),
)

#: The ``ParallelConfig`` fields and properties this module reads.
PARALLEL_FIELDS: Tuple[str, ...] = (
    "numa_bind",
    "assigned_physical_gpu_ids",
    "world_size",
    "distributed_executor_backend",
    "data_parallel_backend",
    "data_parallel_rank_local",
    "nnodes_within_dp",
)

#: Turning vLLM's automatic binding off needs this, where the release has it.
AUTO_HOOK = ("vllm.utils.numa_utils", "configure_subprocess")

#: The launching process's check (:mod:`._vllm_launch`), under its old name.
resolve_auto_binding = resolve_launch


def missing_hooks() -> List[str]:
    """Which of the hooks this module calls the installed vLLM lacks (none: [])."""
    absent = missing_attributes(HOOKS)
    try:
        import dataclasses

        from vllm.config import ParallelConfig
    except ImportError:
        return absent  # already named by HOOKS
    names = set(dir(ParallelConfig))
    if dataclasses.is_dataclass(ParallelConfig):
        names |= {field.name for field in dataclasses.fields(ParallelConfig)}
    absent += [f"vllm.config.ParallelConfig.{n}" for n in PARALLEL_FIELDS if n not in names]
    if "_numa_bind_auto" in names:  # vLLM binds by default: pynumabind must turn it off
        absent += missing_attributes([AUTO_HOOK])
    return absent


def check_version(version: str) -> None:
    """Inside :data:`TESTED`: nothing; outside: WARNING, or ConfigError if hooks are missing."""
    check_release("vLLM", version, TESTED, __name__, missing_hooks)


check_version(installed_version("vllm", __name__))

from vllm.v1.worker import gpu_worker as _gpu_worker  # noqa: E402

# ----------------------------------------------------------- pure parts


def _switches(worker: Any = None) -> List[Tuple[str, str]]:
    """The pynumabind switches on in this process, each with how to turn it off."""
    on = []
    if worker is not None and isinstance(worker, Worker):
        on.append((f"--worker-cls {WORKER_CLS}", "use vLLM's own worker class"))
    value = environ_value(os.environ, OPT_IN_VARIABLE)  # blank is unset (the one rule)
    if value is not None and parse_flag(OPT_IN_VARIABLE, value):
        on.append((f"{OPT_IN_VARIABLE}=1", f"unset {OPT_IN_VARIABLE}"))
    return on


def _refuse_double_bind(parallel_config: Any, what: str, worker: Any = None) -> None:
    """In EngineCore or a worker: the launching process's refusal, when it did not run there.

    vLLM may have filled ``numa_bind_nodes`` from ``--numa-bind`` by now, so
    the flag named here can be one the user did not give; the launching
    process's check (:mod:`._vllm_launch`) names the user's own.
    """
    flag = vllm_binding_flag(parallel_config)
    if flag:
        raise refusal(what, flag, _switches(worker))


def _warn_auto_bound(parallel_config: Any, what: str) -> None:
    """A process vLLM's automatic binding already started under numactl: say so."""
    if not (getattr(parallel_config, "_numa_bind_auto", False) and parallel_config.numa_bind):
        return
    now = (
        "pynumabind's binding now replaces numactl's, except where this machine's advice "
        "record says not to bind (mode advised): numactl's binding then stays"
        if advised(os.environ)
        else "pynumabind's binding now replaces numactl's"
    )
    vllm_log.warning(
        "%s: vLLM's automatic NUMA binding (numa_bind unset, vLLM >= 0.34) was decided in the "
        "launching process, where pynumabind's plugin was not on, so vLLM started this process "
        "under numactl; %s. To keep vLLM from starting numactl at all, set PYNUMABIND_VLLM=1 "
        "for the launch (or pass --no-numa-bind); --worker-cls %s does it too when named by "
        "that path (a subclass named by another path is not recognised in the launching process)",
        what,
        now,
        WORKER_CLS,
    )


def worker_gpu(parallel_config: Any, local_rank: int) -> int:
    """The visible GPU index a worker constructed with ``local_rank`` drives.

    vLLM's formula, from its own parallel config (see the module docstring).
    """
    index = int(parallel_config.get_local_gpu_index(local_rank))
    return _visible(parallel_config, index)


def _assigned_position(parallel_config: Any, logical: int, assigned: Sequence[Any]) -> int:
    """Where logical GPU ``logical`` is in ``assigned_physical_gpu_ids`` (its own space).

    The full host list is indexed by the logical index; one data-parallel
    rank's shard from the shard's first logical GPU.  Which one it is follows
    from its length (a shard has ``local_world_size`` entries, a full list at
    least up to the shard's end); both agree for the first shard.
    """
    start = int(parallel_config.get_local_gpu_index(0))
    size = int(getattr(parallel_config, "local_world_size", parallel_config.world_size))
    if len(assigned) >= start + size:
        position = logical  # the full list (or the first shard: the same)
    elif len(assigned) == size:
        position = logical - start  # this data-parallel rank's shard
    else:
        raise ConfigError(
            f"vLLM's assigned_physical_gpu_ids {list(assigned)} has {len(assigned)} entries; "
            f"expected this data-parallel rank's shard ({size} entries, for logical GPUs "
            f"{start}-{start + size - 1}) or the full list (at least {start + size} entries)"
        )
    if not 0 <= position < len(assigned):
        raise ConfigError(
            f"vLLM's logical GPU {logical} is outside assigned_physical_gpu_ids "
            f"{list(assigned)} (expected logical GPUs {start}-{start + size - 1} for this "
            "data-parallel rank)"
        )
    return position


def _visible(parallel_config: Any, logical: int) -> int:
    assigned = getattr(parallel_config, "assigned_physical_gpu_ids", None)
    if assigned is None:
        return logical
    # vLLM maps logical -> physical through this list, then physical ->
    # position in CUDA_VISIBLE_DEVICES; pynumabind's GPU list is that order.
    physical = assigned[_assigned_position(parallel_config, logical, assigned)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not visible:
        return int(physical)
    entries = [entry.strip() for entry in visible.split(",")]
    if str(physical) not in entries:
        raise ConfigError(
            f"vLLM assigned physical GPU {physical} (logical {logical}), which is not in "
            f"CUDA_VISIBLE_DEVICES={visible!r}"
        )
    return entries.index(str(physical))


def engine_core_gpus(parallel_config: Any, visible_count: int) -> List[int]:
    """The visible GPU indices of EngineCore's data-parallel shard (vLLM's rule)."""
    single_node_mp = (
        parallel_config.distributed_executor_backend not in ("ray", "external_launcher")
        and parallel_config.data_parallel_backend != "ray"
        and parallel_config.nnodes_within_dp == 1
    )
    if not single_node_mp:
        return list(range(visible_count))
    start = int(parallel_config.get_local_gpu_index(0))
    stop = min(start + int(parallel_config.world_size), visible_count)
    shard = [_visible(parallel_config, i) for i in range(start, stop)]
    return shard or [0]


def worker_local_gpus(parallel_config: Any, index: int) -> Optional[List[int]]:
    """The GPUs vLLM's workers drive on this host: local TP x PP x local DP.

    The exclusive modes slice a node among them.  Their logical indices
    ``0 .. count-1`` go through the same logical-to-visible mapping as each
    worker's own GPU, so ``--device-ids 2,3,5,7`` gives visible GPUs 2, 3, 5
    and 7, not 0-3.  ``None`` (the exclusive modes then ask for
    ``PYNUMABIND_LOCAL_GPUS``) when ``index`` is not among them, or when
    ``assigned_physical_gpu_ids`` is one data-parallel rank's shard: the
    other ranks' GPUs are not known here.
    """
    nnodes = max(1, int(getattr(parallel_config, "nnodes_within_dp", 1) or 1))
    per_dp = max(1, int(parallel_config.world_size) // nnodes)
    local_dp = max(1, int(getattr(parallel_config, "data_parallel_size_local", 1) or 1))
    count = per_dp * local_dp
    assigned = getattr(parallel_config, "assigned_physical_gpu_ids", None)
    if assigned is not None and len(assigned) < count:
        return None  # a shard (or a short list, which worker_gpu refuses by name)
    try:
        peers = [_visible(parallel_config, logical) for logical in range(count)]
    except ConfigError:  # a shard that starts past logical 0: the rest are not in it
        return None
    return peers if index in peers else None


# ----------------------------------------------------------- the hooks


def bind_worker(worker: Any) -> Binding:
    """Bind the process of a vLLM GPU worker (call before its ``init_device``)."""
    existing = getattr(worker, "_pynumabind_binding", None)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    parallel_config = worker.vllm_config.parallel_config
    what = f"vLLM worker rank {worker.rank} local_rank {worker.local_rank}"
    _refuse_double_bind(parallel_config, what, worker)
    _warn_auto_bound(parallel_config, what)
    index = worker_gpu(parallel_config, worker.local_rank)
    topology = resolve_topology()
    peers = worker_local_gpus(parallel_config, index)
    binding = bind_gpu(index, what=f"{what} (GPU {index})", topology=topology, local_gpus=peers)
    worker._pynumabind_binding = binding
    vllm_log.info("%s, GPU %s: %s", what, describe_gpus(topology, [index]), binding.summary())
    return binding


def bind_engine_core(vllm_config: Any) -> Binding:
    """Bind the EngineCore process to its shard's GPUs (before it starts workers)."""
    parallel_config = vllm_config.parallel_config
    what = f"vLLM EngineCore (DP rank {parallel_config.data_parallel_rank_local or 0})"
    _refuse_double_bind(parallel_config, what)
    _warn_auto_bound(parallel_config, what)
    topology = resolve_topology()
    shard = engine_core_gpus(parallel_config, len(topology.gpus))
    binding = bind_gpus(shard, what=what, topology=topology)
    vllm_log.info("%s, GPUs %s: %s", what, describe_gpus(topology, shard), binding.summary())
    return binding


class Worker(_gpu_worker.Worker):  # type: ignore[misc]
    """vLLM's GPU worker, bound to its GPU's NUMA node before the CUDA context."""

    def init_device(self) -> Any:
        bind_worker(self)
        return super().init_device()


def _wrap(method: Callable[..., Any], hook: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    wrapper.__pynumabind_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap the stock GPU worker's ``init_device``, the executor's constructor, and
    vLLM's ``configure_subprocess`` (see the module docstring).

    Idempotent (vLLM loads general plugins once per process, but a forked
    child inherits the wrapped classes).
    """
    worker_cls = _gpu_worker.Worker
    if not getattr(worker_cls.init_device, "__pynumabind_wrapped__", False):
        worker_cls.init_device = _wrap(worker_cls.init_device, bind_worker)
    from vllm.v1.executor import abstract

    executor_cls = abstract.Executor
    if not getattr(executor_cls.__init__, "__pynumabind_wrapped__", False):

        def engine_hook(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
            bind_engine_core(vllm_config)

        executor_cls.__init__ = _wrap(executor_cls.__init__, engine_hook)
    install_launch_hook()
    log.debug(
        "pynumabind: vLLM hooks installed (worker init_device, executor constructor, "
        "configure_subprocess)"
    )
