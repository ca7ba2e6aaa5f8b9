"""Child bodies of binding/test_cpuset.py: binding under a real cpuset or affinity mask."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import threads as _threads
from pynumabind.binding import apply_plan
from pynumabind.errors import BindError
from pynumabind.model import MemoryPolicy, Plan

from ..support.childstate import cpus_allowed, task_cpus


def apply_cpus(wanted: str) -> Dict[str, Any]:
    """Bind to the CPUs ``wanted`` (comma-separated) and memory node 0; report."""
    plan = Plan(
        rank=0,
        gpu_info=None,
        cpus=frozenset(int(cpu) for cpu in wanted.split(",")),
        mems=frozenset({0}),
        policy=MemoryPolicy.BIND,
    )
    with open("/proc/self/cpuset") as handle:
        out: Dict[str, Any] = {"cpuset": handle.read().strip(), "before": cpus_allowed()}
    try:
        apply_plan(plan, on_error="warn")
        out["error"] = None
    except BindError as exc:
        out["error"] = str(exc)
    out.update(after=cpus_allowed(), policy=_libnuma.get_mempolicy().kernel_policy)
    return out


def apply_cpus_once_moved(wanted: str) -> Dict[str, Any]:
    """:func:`apply_cpus` after the parent has moved us and says "go" on stdin."""
    sys.stdin.readline()
    return apply_cpus(wanted)


def one_thread_in_a_cpuset(tasks_file: str) -> Dict[str, Any]:
    """A thread moves itself into a cpuset's ``tasks_file``; bind everyone to CPU 1."""
    stop = threading.Event()
    moved = threading.Event()

    def confined() -> None:
        with open(tasks_file, "w") as handle:
            handle.write(str(threading.get_native_id()))
        moved.set()
        stop.wait()

    os.sched_setaffinity(0, {0})
    t = threading.Thread(target=confined)
    t.start()
    moved.wait()
    out: Dict[str, Any] = {
        "main": threading.get_native_id(),
        "confined": t.native_id,
        "before": task_cpus(),
    }
    try:
        _threads.bind_threads(frozenset({1}))
    except _threads.ThreadAffinityError as exc:
        out.update(
            errno=exc.errno,
            tid=exc.tid,
            rolled_back=list(exc.rolled_back),
            failures=list(exc.restore_failures),
            message=str(exc),
        )
    out["after"] = task_cpus()
    stop.set()
    return out


def bind_with_fallback(snapshot: str, how: str) -> Dict[str, Any]:
    """Once moved into a cpuset, bind rank 0 of a machine whose GPUs are on node 1.

    ``how``: ``core`` (the default, the clear error), ``nearest``
    (``fallback="nearest"``), ``hook`` (the framework hooks' default) or
    ``hook-error`` (``PYNUMABIND_FALLBACK=error`` in a hook).
    """
    import logging

    from pynumabind import bind_current_process
    from pynumabind.errors import PlanError
    from pynumabind.integrations import bind_gpu

    sys.stdin.readline()
    logged: list = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                logged.append(record.getMessage())

    logging.getLogger("pynumabind").addHandler(Keep())
    env = {"PYNUMABIND_TOPOLOGY": snapshot}
    if how == "hook-error":
        env["PYNUMABIND_FALLBACK"] = "error"
    with open("/proc/self/cpuset") as handle:
        out: Dict[str, Any] = {"cpuset": handle.read().strip(), "before": cpus_allowed()}
    try:
        if how in ("hook", "hook-error"):
            bind_gpu(0, what="test worker", environ=env, local_gpus=[0, 1])
        else:
            fallback = "nearest" if how == "nearest" else None
            bind_current_process(0, nprocs=2, environ=env, fallback=fallback)
        out["error"] = None
    except PlanError as exc:
        out["error"] = str(exc)
    policy = _libnuma.get_mempolicy()
    out.update(
        after=cpus_allowed(),
        policy=policy.kernel_policy,
        policy_nodes=sorted(policy.nodes),
        warnings=[m for m in logged if "fallback nearest" in m],
    )
    return out


def bind_as_a_ray_actor(snapshot: str, fallback: str) -> Dict[str, Any]:
    """``bind_current_process()`` with no rank in what Ray's API says is an actor given GPU 0.

    The stand-in ``ray`` module answers the three calls
    :func:`pynumabind.discovery.ray_gpus` makes (Ray itself is tested in
    ``tests/integrations/test_ray.py``); everything else is real.
    ``fallback``: the value of ``PYNUMABIND_FALLBACK``, or ``""`` for unset.
    """
    import logging
    import types

    from pynumabind import bind_current_process
    from pynumabind.errors import PlanError

    ray = types.ModuleType("ray")
    context = types.SimpleNamespace(get_task_id=lambda: "actor-task")
    ray.is_initialized = lambda: True  # type: ignore[attr-defined]
    ray.get_runtime_context = lambda: context  # type: ignore[attr-defined]
    ray.get_gpu_ids = lambda: [0]  # type: ignore[attr-defined]
    sys.modules["ray"] = ray
    logged: list = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                logged.append(record.getMessage())

    logging.getLogger("pynumabind").addHandler(Keep())
    env = {"PYNUMABIND_TOPOLOGY": snapshot, "CUDA_VISIBLE_DEVICES": "0"}
    if fallback:
        env["PYNUMABIND_FALLBACK"] = fallback
    out: Dict[str, Any] = {"before": cpus_allowed()}
    try:
        binding = bind_current_process(environ=env)
        out["error"] = None
        out["reasons"] = list(binding.plan.reasons if binding.plan else ())
    except PlanError as exc:
        out["error"] = str(exc)
    out.update(after=cpus_allowed(), warnings=[m for m in logged if "fallback nearest" in m])
    return out


def bind_through_a_hook(snapshot: str, hook: str, fallback: str) -> Dict[str, Any]:
    """Bind as a framework hook does, with ``PYNUMABIND_FALLBACK=fallback`` (blank: a template's).

    ``hook``: ``bind_gpu`` (what the vLLM and SGLang hooks call, GPU 0 of
    two), ``ray`` (:func:`~pynumabind.integrations.bind_visible_gpus` in what
    Ray's API says is an actor given GPU 0, as in :func:`bind_as_a_ray_actor`).
    """
    import logging
    import types

    from pynumabind.errors import PlanError
    from pynumabind.integrations import bind_gpu, bind_visible_gpus

    logged: list = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                logged.append(record.getMessage())

    logging.getLogger("pynumabind").addHandler(Keep())
    env = {"PYNUMABIND_TOPOLOGY": snapshot, "PYNUMABIND_FALLBACK": fallback}
    out: Dict[str, Any] = {"before": cpus_allowed()}
    try:
        if hook == "ray":
            ray = types.ModuleType("ray")
            context = types.SimpleNamespace(get_task_id=lambda: "actor-task")
            ray.is_initialized = lambda: True  # type: ignore[attr-defined]
            ray.get_runtime_context = lambda: context  # type: ignore[attr-defined]
            ray.get_gpu_ids = lambda: [0]  # type: ignore[attr-defined]
            sys.modules["ray"] = ray
            bind_visible_gpus(what="test actor", environ={**env, "CUDA_VISIBLE_DEVICES": "0"})
        else:
            bind_gpu(0, what="test worker", environ=env, local_gpus=[0, 1])
        out["error"] = None
    except PlanError as exc:
        out["error"] = str(exc)
    out.update(after=cpus_allowed(), warnings=[m for m in logged if "fallback nearest" in m])
    return out
