"""SGLang: bind each scheduler process to its GPU's NUMA node, in-process.

SGLang runs one scheduler process per GPU, and calls its general plugins
(entry point group ``sglang.srt.plugins``, filtered by ``SGLANG_PLUGINS``)
first thing in each: ``run_scheduler_process`` starts with ``load_plugins()``.
With ``PYNUMABIND_SGLANG=1`` pynumabind's plugin
(:func:`pynumabind.integrations.sglang_plugin`) calls :func:`install`, which
registers an AFTER hook, through SGLang's own ``HookRegistry``, on
``sglang.srt.managers.scheduler.configure_scheduler_process(server_args,
gpu_id, ...)``.  That function names the process and sets up its logging and
SGLang's own binding; right after it, and before the ``Scheduler`` (model,
CUDA context) exists, the hook binds the process to visible GPU ``gpu_id``.
Threads started later (the CUDA driver's, the model's) inherit the binding.

Never a double bind: when SGLang would bind this scheduler itself (its
``numa_node`` server argument, or automatic NUMA binding on a multi-node
machine, which ``SGLANG_NUMA_BIND_V2`` does with a ``numactl`` wrapper and the
older path in-process; or ``SGLANG_SET_CPU_AFFINITY``), the hook raises a
ConfigError naming what to turn off, and the scheduler fails to start.  The
question "would SGLang bind?" is answered by SGLang's own
``get_numa_node_if_available(server_args, gpu_id)``.

Errors while *registering* (a bad ``PYNUMABIND_SGLANG`` value, an SGLang
lacking a hook) happen inside SGLang's plugin loader, which logs them with
their traceback and carries on unbound; errors while *binding* stop the
scheduler.

Supported SGLang: the tested range :data:`TESTED` (CI runs the framework
tests on it).  Outside it the module checks, when imported, for the hooks it
calls (:data:`HOOKS`): all there is one WARNING naming the untested version,
anything missing a ConfigError naming it.

The binding line (INFO, in SGLang's log with the scheduler's prefix) names
the visible GPU index with its physical index, UUID and bus id.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from ..discovery import resolve_topology
from ..errors import ConfigError
from ._common import (
    bind_gpu,
    check_release,
    describe_gpus,
    installed_version,
    missing_attributes,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..binding import Binding

__all__ = [
    "HOOKS",
    "TARGET",
    "TESTED",
    "bind_scheduler",
    "check_version",
    "install",
    "scheduler_gpus",
]

log = logging.getLogger(__name__)

#: The tested SGLang releases, oldest and newest (both ends run in CI).
TESTED: Tuple[Tuple[int, ...], Tuple[int, ...]] = ((0, 5, 22), (0, 5, 23))

#: The function after which a scheduler process is bound.
TARGET = "sglang.srt.managers.scheduler.configure_scheduler_process"

#: What this module calls in SGLang: ``(module, attribute path)``.
HOOKS: Tuple[Tuple[str, str], ...] = (
    ("sglang.srt.managers.scheduler", "configure_scheduler_process"),
    ("sglang.srt.plugins.hook_registry", "HookRegistry.register"),
    ("sglang.srt.plugins.hook_registry", "HookType.AFTER"),
    ("sglang.srt.utils.numa_utils", "get_numa_node_if_available"),
    ("sglang.srt.environ", "envs.SGLANG_SET_CPU_AFFINITY"),
    ("sglang.srt.environ", "envs.SGLANG_NUMA_BIND_V2"),
)


def missing_hooks() -> List[str]:
    """Which of the hooks this module calls the installed SGLang lacks (none: [])."""
    return missing_attributes(HOOKS)


def check_version(version: str) -> None:
    """Inside :data:`TESTED`: nothing; outside: WARNING, or ConfigError if hooks are missing."""
    check_release("SGLang", version, TESTED, __name__, missing_hooks)


check_version(installed_version("sglang", __name__))


def _sglang_would_bind(server_args: Any, gpu_id: int) -> str:
    """Why SGLang itself binds this scheduler, or ``""`` when it does not."""
    from sglang.srt.environ import envs
    from sglang.srt.utils.numa_utils import get_numa_node_if_available

    if envs.SGLANG_SET_CPU_AFFINITY.get():
        return "SGLANG_SET_CPU_AFFINITY is on (unset it)"
    node = get_numa_node_if_available(server_args, gpu_id)
    if node is None:
        return ""
    if getattr(server_args, "numa_node", None) is not None:
        how = "its numa_node server argument is set (drop --numa-node)"
    else:
        how = "automatic NUMA binding is on (set SGLANG_AUTO_NUMA_BIND=0)"
    v2 = "numactl wrapper, SGLANG_NUMA_BIND_V2" if envs.SGLANG_NUMA_BIND_V2.get() else "in-process"
    return f"SGLang binds GPU {gpu_id}'s scheduler to node {node} itself ({v2}): {how}"


def bind_scheduler(server_args: Any, gpu_id: int) -> Binding:
    """Bind this scheduler process to visible GPU ``gpu_id`` (once per process)."""
    what = f"SGLang scheduler (gpu_id {gpu_id})"
    conflict = _sglang_would_bind(server_args, gpu_id)
    if conflict:
        raise ConfigError(
            f"{what}: PYNUMABIND_SGLANG=1 asks pynumabind to bind, but {conflict}; "
            "or unset PYNUMABIND_SGLANG to keep SGLang's binding"
        )
    # This line lands in SGLang's log: SGLang configures the root logger in
    # each scheduler, with the TP rank as prefix.
    topology = resolve_topology()
    binding = bind_gpu(
        int(gpu_id),
        what=what,
        topology=topology,
        local_gpus=scheduler_gpus(server_args, int(gpu_id)),
    )
    log.info("%s, GPU %s: %s", what, describe_gpus(topology, [int(gpu_id)]), binding.summary())
    return binding


def scheduler_gpus(server_args: Any, gpu_id: int) -> Optional[List[int]]:
    """The GPUs SGLang's schedulers drive on this host: its ``tp_size`` GPUs.

    ``base_gpu_id + k * gpu_id_step`` for the node's share of ``tp_size``;
    ``None`` (the exclusive modes then ask for ``PYNUMABIND_LOCAL_GPUS``)
    when ``gpu_id`` is not among them.
    """
    nnodes = max(1, int(getattr(server_args, "nnodes", 1) or 1))
    per_node = max(1, int(server_args.tp_size) // nnodes)
    base = int(getattr(server_args, "base_gpu_id", 0) or 0)
    step = max(1, int(getattr(server_args, "gpu_id_step", 1) or 1))
    peers = [base + k * step for k in range(per_node)]
    return peers if gpu_id in peers else None


def _after_configure(result: Any, *args: Any, **kwargs: Any) -> Any:
    server_args = args[0] if args else kwargs["server_args"]
    gpu_id = args[1] if len(args) > 1 else kwargs["gpu_id"]
    bind_scheduler(server_args, gpu_id)
    return result


def install() -> None:
    """Register the AFTER hook with SGLang's HookRegistry (applied by SGLang)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, _after_configure, HookType.AFTER)
