"""Measure every node of a Ray cluster into one directory of advice records.

:func:`advise_nodes` runs :func:`pynumabind.advise` once on every alive Ray
node, each in a Ray task pinned to its node
(``NodeAffinitySchedulingStrategy(node_id, soft=False)``: the task runs
there or not at all), and saves each node's record into one directory of
records (:mod:`pynumabind.records._paths`): one file per machine type, so
the nodes of one type write the same file (atomically: the last one stays)
and every type gets its own.  Workers then set ``PYNUMABIND_MODE=advised``
and ``PYNUMABIND_ADVICE=DIR/`` (through ``runtime_env={"env_vars": ...}``)
and each follows its machine's record.

Rules
-----
* **Ray is imported only when called.**  Importing this module (or
  pynumabind) imports no Ray; :func:`advise_nodes` imports it, and needs
  ``ray.init()`` to have run in the calling process (a ConfigError says so).
* **A directory, seen by every node.**  ``path`` must name a directory by the
  path rule (ending with ``/``, or an existing directory), on storage every
  node sees (NFS, a shared volume): a single record file would keep only the
  last node's machine type, so it is a ConfigError before anything runs.
  Each node checks the place before it measures
  (:func:`pynumabind.records.store.prepare_save`): a node that cannot write
  there fails at once, not after measuring.
* **Per node, reported; all failed, raised.**  A node whose task failed (the
  place is not writable there, the node died, the measurement raised) is a
  :class:`NodeAdvice` with ``error`` set, and the others still count: one
  bad node must not lose the fleet's measurements.  When *every* node
  failed, nothing was saved, and that is a
  :class:`~pynumabind.errors.PynumabindError` naming each node and its error.
* **A timeout stops what it gave up on.**  At ``timeout`` seconds every
  node's task still running is cancelled with ``force=True`` (Ray stops the
  worker running it), all of them before any is waited for, and then each
  is confirmed: its node's error says it was still measuring, and no record
  of it appears in the directory after ``advise_nodes`` returned.  A task
  that ended just before its cancel keeps its result.  (A worker stopped
  in the middle of its write may leave a hidden ``.advice-*.tmp`` file,
  which readers skip: the record itself is written or not.)
* **Each node measures itself.**  The task runs pynumabind in a Ray worker
  on that node, which needs pynumabind installed there; it asks Ray for no
  CPU (``num_cpus=0``), so a busy cluster cannot keep it waiting forever,
  and measures whatever else runs there too: run it on idle nodes.
  ``advise_kwargs`` go to :func:`pynumabind.advise` (``copies``,
  ``latency``, ``buffer_bytes``, ``repeats``, ``min_effect``);
  ``ray_options`` to the task's ``.options()`` (a ``runtime_env``, say).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError, PynumabindError

__all__ = ["NodeAdvice", "advise_nodes"]


@dataclass(frozen=True)
class NodeAdvice:
    """What :func:`advise_nodes` did on one Ray node.

    ``path`` (the record file written) and ``verdict`` are set when the node
    measured and saved; ``error`` (why not) otherwise.  ``pid`` is the Ray
    worker process that measured, None when the task did not run.
    """

    node_id: str
    hostname: str
    path: Optional[str] = None
    verdict: Optional[str] = None
    pid: Optional[int] = None
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _advise_here(path: str, quick: bool, advise_kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The task run on each node: check the place, measure, save; a dict for the driver."""
    import ray  # in the Ray worker, where Ray is running already

    from ..advisor import advise
    from ..records.store import prepare_save

    reply: Dict[str, Any] = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }
    try:
        target = prepare_save(path)  # before measuring: a place this node cannot write fails now
        advice = advise(quick=quick, **advise_kwargs)
        reply["path"] = advice.save(target.file)
        reply["verdict"] = advice.recommendation.verdict
    except PynumabindError as exc:
        reply["error"] = f"{type(exc).__name__}: {exc}"
    return reply


def _directory(path: str) -> str:
    from ..records._paths import names_directory

    if not isinstance(path, str) or not path or "\0" in path:
        raise ConfigError(f"advise_nodes: invalid directory {path!r}")
    if not names_directory(path):
        raise ConfigError(
            f"advise_nodes({path!r}): name a directory of records (end the path with "
            f"{os.sep!r}): nodes of several machine types write one record each, and a single "
            "record file would keep only the last one"
        )
    return path if path.endswith(os.sep) else path + os.sep


def advise_nodes(
    path: str,
    *,
    quick: bool = False,
    timeout: Optional[float] = None,
    ray_options: Optional[Mapping[str, Any]] = None,
    **advise_kwargs: Any,
) -> List[NodeAdvice]:
    """Run advise once on every alive Ray node and save each record into directory ``path``.

    Returns one :class:`NodeAdvice` per node, in Ray's order of nodes: the
    record file written and the verdict, or the error (see the module
    docstring).  ``timeout`` (seconds) bounds the wait for all the nodes
    together; a node still measuring then has its task cancelled (see the
    module docstring) and is reported with the timeout as its error.

    Raises:
        ConfigError: ``path`` does not name a directory, Ray is not installed
            or not initialised, or it lists no alive node.
        PynumabindError: every node failed (the message names each one's
            error).
    """
    directory = _directory(path)
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as exc:
        raise ConfigError(f"advise_nodes needs Ray, which cannot be imported: {exc}") from None
    if not ray.is_initialized():
        raise ConfigError("advise_nodes: Ray is not initialised here: call ray.init() first")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if not nodes:
        raise ConfigError("advise_nodes: Ray lists no alive node")
    task = ray.remote(_advise_here)
    options: Dict[str, Any] = {"num_cpus": 0, "max_retries": 0}
    options.update(ray_options or {})
    pending = []
    for node in nodes:
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        ref = task.options(scheduling_strategy=strategy, **options).remote(
            directory, quick, advise_kwargs
        )
        pending.append((node, ref))
    results = _gather(ray, pending, timeout)
    if not any(r.ok for r in results):
        each = "; ".join(f"node {r.node_id} ({r.hostname}): {r.error}" for r in results)
        raise PynumabindError(f"advise_nodes: no node saved a record into {directory}: {each}")
    return results


#: Seconds to wait, after a forced cancel, for Ray to say the task ended.
CANCEL_WAIT = 60.0


def _gather(ray: Any, pending: List[Any], timeout: Optional[float]) -> List[NodeAdvice]:
    """Each node's result; the tasks still running at the deadline cancelled, then confirmed.

    One deadline for all the nodes: a slow node does not extend it.  Every
    overdue task is cancelled before any is waited for, so the nodes stop
    together.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    results: List[Optional[NodeAdvice]] = []
    overdue = []
    for index, (node, ref) in enumerate(pending):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            results.append(_collect(ray, node, ref, left))
        except ray.exceptions.GetTimeoutError:
            results.append(None)
            overdue.append(index)
    for index in overdue:
        ray.cancel(pending[index][1], force=True)
    for index in overdue:
        node, ref = pending[index]
        results[index] = _cancelled(ray, node, ref, timeout)
    return [result for result in results if result is not None]


def _cancelled(ray: Any, node: Mapping[str, Any], ref: Any, timeout: Optional[float]) -> NodeAdvice:
    """A node's task cancelled at the deadline: its result if it ended first, else the error."""
    errors = ray.exceptions
    try:
        ray.get(ref, timeout=CANCEL_WAIT)
    except (errors.TaskCancelledError, errors.WorkerCrashedError):
        why = "its task was cancelled and its worker stopped, so no record of it appears later"
    except errors.GetTimeoutError:
        why = f"Ray was told to stop its task, which still ran {CANCEL_WAIT:g} s later"
    except Exception:  # it failed on its own before the cancel: _collect says how
        why = None
    else:  # it ended just before the cancel: its result stands
        why = None
    if why is None:
        return _collect(ray, node, ref, 0.0)
    node_id, hostname = _names(node)
    return NodeAdvice(node_id, hostname, error=f"still measuring after {timeout:g} s: {why}")


def _names(node: Mapping[str, Any]) -> Tuple[str, str]:
    """A node's id and host name, as Ray lists them."""
    hostname = str(node.get("NodeManagerHostname") or node.get("NodeManagerAddress") or "?")
    return str(node["NodeID"]), hostname


def _collect(ray: Any, node: Mapping[str, Any], ref: Any, timeout: Optional[float]) -> NodeAdvice:
    """One node's result, any failure of its task turned into the result's error.

    A wait that times out raises Ray's ``GetTimeoutError``: the caller
    cancels the task (:func:`_gather`).
    """
    node_id, hostname = _names(node)
    try:
        reply = ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise
    except Exception as exc:  # the node died, the task raised
        return NodeAdvice(node_id, hostname, error=f"{type(exc).__name__}: {exc}")
    if reply.get("node_id") != node_id:  # soft=False promises this; say so if it broke
        return NodeAdvice(
            node_id,
            hostname,
            pid=reply.get("pid"),
            error=f"the task ran on node {reply.get('node_id')}, not on this one",
        )
    return NodeAdvice(
        node_id,
        hostname,
        path=reply.get("path"),
        verdict=reply.get("verdict"),
        pid=reply.get("pid"),
        error=reply.get("error"),
    )
