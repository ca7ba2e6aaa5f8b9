"""Framework integrations: vLLM, SGLang, Ray (and the helpers they share).

Rules
-----
* **Installing pynumabind never changes a framework's behaviour.**  The
  plugin entry points (``vllm.general_plugins``, ``sglang.srt.plugins``)
  point at :func:`vllm_plugin` and :func:`sglang_plugin` here, which import
  nothing heavy and do nothing unless the user opted in with
  ``PYNUMABIND_VLLM`` / ``PYNUMABIND_SGLANG`` on -- or, for vLLM, with
  ``--worker-cls pynumabind.integrations.vllm.Worker``, which only the
  launch's config shows: so :func:`vllm_plugin` always puts one check in
  front of vLLM's ``configure_subprocess``
  (:mod:`pynumabind.integrations._vllm_launch`), which does nothing unless
  one of the two opt-ins is there.  The on/off values are the
  one set every switch takes (``1/true/yes/on``, ``0/false/no/off``, empty
  or unset; :func:`pynumabind.discovery._environ.parse_flag`); any other value is a
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
* **A worker always starts.**  The hooks bind with ``fallback="nearest"``
  (:func:`._common.hook_fallback`): a worker whose GPU's node has no CPU in its
  cpuset (a Slurm job's) is bound to the nearest allowed CPUs, its memory
  on the GPU's node when allowed, with one warning naming the cpuset,
  instead of failing -- the framework would kill it, and the job, where its
  own binding would have started it unbound.  ``PYNUMABIND_FALLBACK=error``
  restores the core's error; blank (``PYNUMABIND_FALLBACK=""`` from a
  template) is unset, as for every variable
  (:func:`pynumabind.options.environ_value`).
* **Which GPU.**  A framework worker has no launcher rank; it knows the index
  of the GPU it drives among the GPUs it can see (vLLM: its parallel
  config's ``get_local_gpu_index``; SGLang: ``gpu_id``).  That index is the
  rank for pynumabind's per-rank overrides, and the number of visible GPUs
  is the number of ranks; a launcher's rank and size variables in the
  worker's environment are not read.
* **Overrides.**  ``PYNUMABIND_NODES`` and ``PYNUMABIND_CPUS`` are per *GPU
  index*.  They are read exactly as in the core (one reader,
  :func:`pynumabind.discovery._environ.override_text`, and one parser,
  :mod:`pynumabind.planner._overrides`): blank is unset, only ASCII
  whitespace separates or is trimmed, and vLLM's space-separated form
  (``PYNUMABIND_NODES="0 0 1 1"``, ``PYNUMABIND_CPUS="0-7 8-15"``) is
  accepted besides pynumabind's ``,``/``;`` forms, as it is everywhere.  As
  for vLLM's own ``--numa-bind-nodes``, an entry is needed for every GPU
  index a process drives, and only for those; a missing one is a
  ConfigError naming the index that needs it.
* **Where the machine comes from.**  ``PYNUMABIND_TOPOLOGY=FILE`` plans from
  a snapshot, as everywhere: the machine comes from
  :func:`pynumabind.discovery.resolve_topology`, as for the core and the CLI.
* **Modules.**  This package holds only the entry points (:func:`gate` and
  the two plugins); what the hooks share -- version checks, the per-GPU
  overrides, :func:`bind_gpus`, the Ray rule -- is :mod:`._common`,
  re-exported here, so ``vllm`` and ``sglang`` import it and not this
  package: no import cycle, lazy or not.
* **A process driving several GPUs** (vLLM's EngineCore, for its
  data-parallel shard) is bound to the union of those GPUs' plans
  (``bind_current_process(gpus=[...])``): every CPU and memory node any
  of them would get, in modes ``node``, ``socket`` and ``none``.
* **Ray: ask Ray** (:func:`pynumabind.discovery.ray_gpus`).  Inside a Ray
  task or actor (``ray`` already imported and initialised; pynumabind never
  imports it), a process without a rank is bound to the GPUs
  ``ray.get_gpu_ids()`` names; none is the ConfigError of a process with
  nothing to bind to.
* **Measuring a Ray cluster**: :func:`pynumabind.integrations.ray.advise_nodes`
  runs advise once on every alive Ray node and saves each node's record into
  one directory of records; :mod:`pynumabind.integrations.ray` imports Ray
  only when called, as above.
* **Binding lines** name each GPU by visible index, physical (NVML) index,
  UUID and bus id (:func:`describe_gpus`).
* **Every mode in framework workers.**  The exclusive modes slice a node
  among the GPUs the framework runs on this host, as among launcher ranks:
  the hooks pass them to :func:`bind_gpu`/:func:`bind_gpus` as
  ``local_gpus`` (vLLM's workers: the local TP x PP x local DP GPUs; SGLang's
  schedulers: its ``tp_size`` GPUs; :func:`bind_visible_gpus`, a Ray actor:
  the GPUs it sees).  Where a hook cannot tell, the ConfigError says to set
  ``PYNUMABIND_LOCAL_GPUS`` (the visible GPU indices of the job's
  processes on this host, such as ``0-3``).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from .._os import forksafe as _forksafe
from ._common import (
    bind_gpu,
    bind_gpus,
    bind_visible_gpus,
    check_release,
    describe_gpus,
    installed_version,
    missing_attributes,
    per_gpu_override,
    release,
)

__all__ = [
    "bind_gpu",
    "bind_gpus",
    "bind_visible_gpus",
    "check_release",
    "describe_gpus",
    "gate",
    "installed_version",
    "missing_attributes",
    "per_gpu_override",
    "release",
    "sglang_plugin",
    "vllm_plugin",
]


def gate(variable: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the opt-in ``variable`` is on (``1``/``true``/``yes``/``on``).

    Unset, blank and ``0``/``false``/``no``/``off`` are off; anything else is
    a ConfigError naming the variable.
    """
    with _forksafe.lock():  # a fork waits for this first-use import (see _os.forksafe)
        from ..discovery._environ import parse_flag
        from ..options import environ_value

    env = os.environ if environ is None else environ
    value = environ_value(env, variable)  # blank is unset (the one rule)
    return value is not None and parse_flag(variable, value)


def vllm_plugin() -> None:
    """The ``vllm.general_plugins`` entry point: binds only with ``PYNUMABIND_VLLM=1``.

    vLLM calls it in every process it starts (front end, EngineCore,
    workers).  When on, it wraps vLLM's GPU worker's ``init_device`` and its
    executor's constructor so that each worker binds to its GPU's node before
    the CUDA context exists and EngineCore binds to its shard's nodes before
    it starts the workers (see :mod:`pynumabind.integrations.vllm`).  Off, it
    only puts the launching process's check in front of vLLM's
    ``configure_subprocess``, which acts when the launch names pynumabind's
    worker class and does nothing otherwise
    (:mod:`pynumabind.integrations._vllm_launch`).
    """
    if not gate("PYNUMABIND_VLLM"):
        with _forksafe.lock():  # ours only; vLLM's numa_utils (in the hook) is not
            from . import _vllm_launch

        _vllm_launch.install_launch_hook()
        return
    with _forksafe.lock():  # ours only; vLLM's own imports (in install) are not
        from . import vllm

    vllm.install()


def sglang_plugin() -> None:
    """The ``sglang.srt.plugins`` entry point; a no-op unless ``PYNUMABIND_SGLANG=1``.

    SGLang calls it first thing in each scheduler process; when on, it binds
    that process to its ``gpu_id`` (see :mod:`pynumabind.integrations.sglang`).
    """
    if not gate("PYNUMABIND_SGLANG"):
        return
    with _forksafe.lock():  # ours only; SGLang's own imports (in install) are not
        from . import sglang

    sglang.install()
