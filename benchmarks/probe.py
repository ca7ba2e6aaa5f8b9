"""Measurements that need a fresh interpreter: ``python -m benchmarks.probe WHAT``.

``COLD_SOURCE`` is run with ``python -c`` rather than ``-m`` (runpy itself
loads importlib, contextlib and functools, which pynumabind would otherwise
pay for), so the cold figures include every module the first bind loads.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

WATCHED_MODULES = ("pynvml", "numpy", "torch", "cffi", "_cffi_backend")

# First import, then the first bind_current_process(RANK): detect, plan, apply.
# Only builtin modules (time, sys) are loaded before the clock stops.
COLD_SOURCE = """
PRELOAD
import time
start = time.perf_counter()
import pynumabind
imported = time.perf_counter()
import sys
WATCHED = WATCHED_TUPLE
after_import = sorted(m for m in WATCHED if m in sys.modules)
begin = time.perf_counter()
bind = getattr(pynumabind, "bind_current_process", None)
entry = "pynumabind.bind_current_process"
if bind is None:
    from pynumabind import binder
    bind = binder.bind_current_process
    entry = "pynumabind.binder.bind_current_process (not exported)"
binding = bind(RANK)
bound = time.perf_counter()
# Again, now that the modules are loaded: detect, plan and apply all run anew
# (nothing is cached between calls), so this is the cold cost without imports.
binding.restore()
again = time.perf_counter()
binding = bind(RANK)
rebound = time.perf_counter()
import json
try:
    described = binding.to_dict()
    json.dumps(described)
except Exception:
    described = {"repr": repr(binding)[:400]}
print(json.dumps({
    "import_s": imported - start,
    "bind_s": bound - begin,
    "rebind_s": rebound - again,
    "entry": entry,
    "modules_after_import": after_import,
    "modules_after_bind": sorted(m for m in WATCHED if m in sys.modules),
    "binding": described,
}))
"""


def _node0_cpus() -> frozenset:
    """Node 0's CPUs as the kernel lists them (empty when there is no node 0)."""
    from pynumabind.cpulist import parse_cpulist

    try:
        with open("/sys/devices/system/node/node0/cpulist", encoding="ascii") as handle:
            return parse_cpulist(handle.read().strip())
    except OSError:
        return frozenset()


def cold_source(rank: int, preload: Tuple[str, ...] = ()) -> str:
    """The ``python -c`` program of one cold measurement; ``preload``: modules imported first."""
    for name in preload:
        if not name.replace(".", "").replace("_", "").isalnum():
            raise ValueError(f"not a module name: {name!r}")
    return (
        COLD_SOURCE.replace("PRELOAD", "".join(f"import {name}\n" for name in preload))
        .replace("WATCHED_TUPLE", repr(WATCHED_MODULES))
        .replace("RANK", str(int(rank)))
    )


def loaded(names: Tuple[str, ...] = WATCHED_MODULES) -> List[str]:
    return sorted(n for n in names if n in sys.modules)


def bind_entry(pynumabind: Any) -> Tuple[Callable[..., Any], str]:
    """``pynumabind.bind_current_process``; the binder module's own while it is not exported."""
    public = getattr(pynumabind, "bind_current_process", None)
    if public is not None:
        return public, "pynumabind.bind_current_process"
    from pynumabind import binder

    return binder.bind_current_process, "pynumabind.binder.bind_current_process (not exported)"


def probe_import() -> Dict[str, Any]:
    start = time.perf_counter()
    import pynumabind  # noqa: F401

    return {"import_s": time.perf_counter() - start, "modules_after_import": loaded()}


# ------------------------------------------------------------------- warm

_POLICY_MODES = {"bind": "MPOL_BIND", "interleave": "MPOL_INTERLEAVE", "local": "MPOL_LOCAL"}


def _mode_for(policy: str, mems: frozenset[int]) -> Optional[int]:
    """The set_mempolicy mode a plan's policy turns into (``None``: policy left alone)."""
    from pynumabind import _libnuma

    if policy == "none":
        return None
    if policy == "preferred":
        return _libnuma.MPOL_PREFERRED if len(mems) <= 1 else _libnuma.MPOL_PREFERRED_MANY
    return int(getattr(_libnuma, _POLICY_MODES[policy]))


def _timed(reps: int, body: Callable[[], Any], undo: Callable[[Any], None]) -> List[float]:
    samples: List[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        token = body()
        samples.append((time.perf_counter() - start) * 1e6)
        undo(token)
    return samples


def probe_warm(rank: int, reps: int, extra_threads: int) -> Dict[str, Any]:
    """``apply_plan(plan)`` again and again, against the raw syscalls it stands for.

    Raw = list this process's threads, ``sched_setaffinity`` each, then
    ``set_mempolicy`` once: the minimum any in-process binder must do.
    Both run with ``extra_threads`` idle threads alive, because binding
    every thread (not only the caller) is part of the job.
    """
    import pynumabind
    from pynumabind import _libnuma
    from pynumabind.cpulist import format_cpulist

    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(extra_threads)]
    for thread in idle:
        thread.start()
    out: Dict[str, Any] = {"threads": len(os.listdir("/proc/self/task")), "reps": reps}
    original_cpus = frozenset(os.sched_getaffinity(0))
    try:
        plan, apply_plan, out["plan_source"] = _plan_and_applier(pynumabind, rank)
    except Exception as exc:
        plan, apply_plan = None, None
        out["apply_unavailable"] = f"{type(exc).__name__}: {exc}"
    if plan is not None and apply_plan is not None:
        cpus = plan.cpus if plan.cpus is not None else original_cpus
        mems = frozenset(plan.mems)
        policy = str(getattr(plan.policy, "value", plan.policy))
        out["plan"] = plan.to_dict() if hasattr(plan, "to_dict") else repr(plan)
        out["apply_us"] = _timed(reps, lambda: apply_plan(plan), lambda b: b.restore())
    else:  # what a node-0 binding would be
        node0 = _node0_cpus() & original_cpus
        cpus, mems, policy = node0 or original_cpus, frozenset({0}), "bind"
    mode = _mode_for(policy, mems)

    def raw() -> None:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
        if mode is not None:
            _libnuma.set_mempolicy(mode, mems)

    def raw_undo(_: Any) -> None:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), original_cpus)
            except ProcessLookupError:
                pass
        _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)

    out["raw"] = {"cpus": format_cpulist(cpus), "mems": format_cpulist(mems), "policy": policy}
    out["raw_us"] = _timed(reps, raw, raw_undo)
    stop.set()
    return out


def _plan_and_applier(pynumabind: Any, rank: int) -> Tuple[Any, Callable[[Any], Any], str]:
    """A plan to re-apply, ``binder.apply_plan``, and where the plan came from.

    The plan is the one ``bind_current_process(rank)`` applies; if that call
    cannot run here (no discovery yet), a node-0 plan built by hand, the
    same one the raw syscalls get.
    """
    from pynumabind import binder
    from pynumabind.model import MemoryPolicy, Plan

    try:
        binding = bind_entry(pynumabind)[0](rank)
    except Exception as exc:
        cpus = _node0_cpus() & frozenset(os.sched_getaffinity(0))
        plan = Plan(rank, None, cpus, frozenset({0}), MemoryPolicy.BIND, node=0)
        return plan, binder.apply_plan, f"node 0 by hand ({type(exc).__name__}: {exc})"
    applied: Any = getattr(binding, "plan", None)
    binding.restore()
    if applied is None:
        raise AttributeError("the Binding has no .plan to re-apply")
    return applied, binder.apply_plan, f"bind_current_process({rank})"


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    what = args[0]
    try:
        if what == "import":
            result = probe_import()
        elif what == "warm":
            result = probe_warm(int(args[1]), int(args[2]), int(args[3]))
        else:
            raise SystemExit(f"unknown probe {what!r}")
    except Exception as exc:  # reported as data: the suite goes on
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
