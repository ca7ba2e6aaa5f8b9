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
external launchers), then the logical-to-visible mapping when
``assigned_physical_gpu_ids`` is set.  vLLM's ``init_device`` itself rewrites
``self.local_rank`` to that index, so the hook computes it from the rank as
constructed, exactly once.  EngineCore's shard is the same GPUs vLLM's own
``--numa-bind`` uses: ``[get_local_gpu_index(0), + world_size)`` clipped to
the visible GPUs for ``mp`` on one node, every visible GPU otherwise.

vLLM's own ``--numa-bind`` (``parallel_config.numa_bind``) on at the same time
is a ConfigError naming both switches: never a double bind.

Supported vLLM: :data:`SUPPORTED` (checked when this module is imported;
outside it, a ConfigError names the installed and the supported versions).
Tested against the real vLLM from PyPI (``tests/integrations``).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from ..discovery import resolve_topology
from ..errors import ConfigError
from ._common import bind_gpu, bind_gpus, check_release, installed_version

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding

__all__ = ["SUPPORTED", "Worker", "engine_core_gpus", "install", "worker_gpu", "worker_local_gpus"]

log = logging.getLogger(__name__)
#: A child of vLLM's logger, so each process's binding line appears in vLLM's
#: own log (vLLM configures "vllm", not the root logger pynumabind's lines use).
vllm_log = logging.getLogger("vllm.pynumabind")

#: Supported vLLM releases: ``(lowest, first unsupported)``.
SUPPORTED: Tuple[Tuple[int, int, int], Tuple[int, int, int]] = ((0, 33, 0), (0, 34, 0))


def check_version(version: str) -> None:
    """ConfigError unless ``version`` is in :data:`SUPPORTED`."""
    check_release("vLLM", version, SUPPORTED, __name__)


check_version(installed_version("vllm", __name__))

from vllm.v1.worker import gpu_worker as _gpu_worker  # noqa: E402

# ----------------------------------------------------------- pure parts


def _refuse_double_bind(parallel_config: Any, what: str) -> None:
    if getattr(parallel_config, "numa_bind", False):
        raise ConfigError(
            f"{what}: vLLM's own NUMA binding (--numa-bind) is on, and pynumabind was asked "
            "to bind too (PYNUMABIND_VLLM=1 or --worker-cls pynumabind.integrations.vllm.Worker);"
            " turn one off: drop --numa-bind, or unset PYNUMABIND_VLLM and use vLLM's worker"
        )


def worker_gpu(parallel_config: Any, local_rank: int) -> int:
    """The visible GPU index a worker constructed with ``local_rank`` drives.

    vLLM's formula, from its own parallel config (see the module docstring).
    """
    index = int(parallel_config.get_local_gpu_index(local_rank))
    return _visible(parallel_config, index)


def _visible(parallel_config: Any, logical: int) -> int:
    assigned = getattr(parallel_config, "assigned_physical_gpu_ids", None)
    if assigned is None:
        return logical
    # vLLM maps logical -> physical through this list, then physical ->
    # position in CUDA_VISIBLE_DEVICES; pynumabind's GPU list is that order.
    import os

    physical = assigned[logical]
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
    """The GPUs vLLM's workers drive on this host: local TP x PP x local DP (issue 22 item 3).

    The exclusive modes slice a node among them.  ``None`` (the exclusive
    modes then ask for ``PYNUMABIND_LOCAL_GPUS``) when ``index`` is not
    among them: the count is not known here.
    """
    nnodes = max(1, int(getattr(parallel_config, "nnodes_within_dp", 1) or 1))
    per_dp = max(1, int(parallel_config.world_size) // nnodes)
    local_dp = max(1, int(getattr(parallel_config, "data_parallel_size_local", 1) or 1))
    peers = list(range(per_dp * local_dp))
    return peers if index in peers else None


# ----------------------------------------------------------- the hooks


def bind_worker(worker: Any) -> Binding:
    """Bind the process of a vLLM GPU worker (call before its ``init_device``)."""
    existing = getattr(worker, "_pynumabind_binding", None)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    parallel_config = worker.vllm_config.parallel_config
    what = f"vLLM worker rank {worker.rank} local_rank {worker.local_rank}"
    _refuse_double_bind(parallel_config, what)
    index = worker_gpu(parallel_config, worker.local_rank)
    peers = worker_local_gpus(parallel_config, index)
    binding = bind_gpu(index, what=f"{what} (GPU {index})", local_gpus=peers)
    worker._pynumabind_binding = binding
    vllm_log.info("%s: %s", what, binding.summary())
    return binding


def bind_engine_core(vllm_config: Any) -> Binding:
    """Bind the EngineCore process to its shard's GPUs (before it starts workers)."""
    parallel_config = vllm_config.parallel_config
    what = f"vLLM EngineCore (DP rank {parallel_config.data_parallel_rank_local or 0})"
    _refuse_double_bind(parallel_config, what)
    topology = resolve_topology()
    shard = engine_core_gpus(parallel_config, len(topology.gpus))
    binding = bind_gpus(shard, what=what, topology=topology)
    vllm_log.info("%s, GPUs %s: %s", what, ",".join(map(str, shard)), binding.summary())
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
    """Wrap the stock GPU worker's ``init_device`` and the executor's constructor.

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
    log.debug("pynumabind: vLLM hooks installed (worker init_device, executor constructor)")
