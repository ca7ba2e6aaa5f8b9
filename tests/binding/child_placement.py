"""Child bodies of binding/test_placement.py: memory placement under a real seccomp filter.

pynumabind and libnuma load first (at import of this module, then
``_libnuma.load()``), the filter goes in after, as in the old child text.
"""

from __future__ import annotations

import _signal
import gc
import json
import mmap
import os
import random
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

from pynumabind._os import libnuma as _libnuma
from pynumabind.binding.placement import bind_memory, memory_on

from ..support import seccomp_filter


def _filter(denied: str) -> None:
    """Load libnuma, then deny the syscalls ``denied`` (comma-separated numbers) with EPERM."""
    _libnuma.load()
    seccomp_filter.install(tuple(int(nr) for nr in denied.split(",")))


def bind_and_memory_on(denied: str) -> Dict[str, Any]:
    _filter(denied)
    out: Dict[str, Any] = {}
    region = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    region[0] = 1
    calls: List[Tuple[str, Callable[[], Any]]] = [
        ("bind", lambda: bind_memory(region, node=0)),
        ("memory_on", lambda: memory_on(node=0).__enter__()),
    ]
    for name, call in calls:
        try:
            call()
            out[name] = "no error"
        except Exception as exc:
            out[name] = [type(exc).__name__, getattr(exc, "errno", None), str(exc)]
    out["policy"] = _libnuma.get_mempolicy().mode
    return out


def memory_on_without_get_mempolicy(denied: str) -> Dict[str, Any]:
    _filter(denied)
    out: Dict[str, Any] = {}
    try:
        memory_on(node=0).__enter__()
    except Exception as exc:
        out["error"] = [type(exc).__name__, getattr(exc, "errno", None), str(exc)]
    return out


def bind_without_move_pages(denied: str) -> Dict[str, Any]:
    _filter(denied)
    region = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    result = bind_memory(region, node=0)
    return {"result": result.to_dict(), "summary": result.summary()}


def interrupt_every_point_of_memory_on() -> Dict[str, Any]:
    """A KeyboardInterrupt at the k-th point of a memory_on block, for every k (see
    binding/test_interrupts.py for what the points are).  Each time, once the interrupt is dropped,
    the thread's policy must be the one before the block and no block left in force."""
    from pynumabind.binding import _memory_on
    from pynumabind.discovery import detect_topology

    from .child_interrupts import Interrupter, Tally

    topology = detect_topology(use_nvml=False)
    _libnuma.set_mempolicy(_libnuma.MPOL_PREFERRED, {0})
    baseline = _libnuma.get_mempolicy()

    def block() -> None:
        with memory_on(node=0, policy="interleave", topology=topology):
            assert _libnuma.get_mempolicy().mode == _libnuma.MPOL_INTERLEAVE

    tally, k, where = Tally(), 0, {}
    while True:
        k += 1
        interrupter = Interrupter(k)
        try:
            interrupter.run(block)
        except KeyboardInterrupt:
            tally.interrupted += 1
        else:
            tally.not_raised(interrupter)
        fired = interrupter.fired
        where[k] = interrupter.where
        # The Interrupter keeps the frames it saw (and so the memory_on object) in a cycle;
        # a real interrupt's traceback is freed when its handler ends.
        del interrupter
        gc.collect()
        if _libnuma.get_mempolicy() != baseline or _memory_on._BLOCKS.stack:
            tally.bad.append(k)
            _libnuma.set_mempolicy(baseline.mode, baseline.nodes, baseline.flags)
            _memory_on._BLOCKS.stack.clear()
        if not fired:
            break
    result = tally.result(k - 1)
    result["bad_where"] = [where[b] for b in tally.bad]
    return result


def sigint_race(seconds: str) -> Dict[str, Any]:
    """memory_on blocks in a loop while real SIGINTs arrive at random moments.

    A thread sends this process SIGINT every 0-2 ms.  SIGINT is blocked in every thread
    but while the main thread runs a block (from unblocking it to blocking it again, inside
    the ``try``), so each KeyboardInterrupt lands in memory_on's code or in the block, never
    in this loop's own.  After each block (once the interrupt is handled) the policy must be
    the one from before it and no block left in force.
    """
    from pynumabind.binding import _memory_on
    from pynumabind.discovery import detect_topology

    topology = detect_topology(use_nvml=False)
    baseline = _libnuma.get_mempolicy()
    sigint = {signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigint)  # the firing thread inherits the mask
    stop = threading.Event()

    def fire() -> None:
        rng = random.Random()
        while not stop.is_set():
            time.sleep(rng.uniform(0, 0.002))
            os.kill(os.getpid(), signal.SIGINT)

    counts = {"blocks": 0, "interrupted": 0, "leaked": 0}
    firing = threading.Thread(target=fire, daemon=True)
    firing.start()
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        counts["blocks"] += 1
        try:
            _signal.pthread_sigmask(signal.SIG_UNBLOCK, sigint)
            with memory_on(node=0, policy="interleave", topology=topology):
                pass
            _signal.pthread_sigmask(signal.SIG_BLOCK, sigint)
        except KeyboardInterrupt:
            while True:  # a second SIGINT may land before SIGINT is blocked again
                try:
                    _signal.pthread_sigmask(signal.SIG_BLOCK, sigint)
                    break
                except KeyboardInterrupt:
                    pass
            counts["interrupted"] += 1
        if _libnuma.get_mempolicy() != baseline or _memory_on._BLOCKS.stack:
            counts["leaked"] += 1
            _libnuma.set_mempolicy(baseline.mode, baseline.nodes, baseline.flags)
            _memory_on._BLOCKS.stack.clear()
    stop.set()
    firing.join()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards the SIGINT still pending
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigint)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    counts["final"] = _libnuma.get_mempolicy() == baseline and not _memory_on._BLOCKS.stack
    return counts


def fork_inside_a_block() -> Dict[str, Any]:
    """A child forked inside a block leaves it (as the parent does) and reports its policy."""
    from pynumabind.binding import _memory_on
    from pynumabind.discovery import detect_topology

    topology = detect_topology(use_nvml=False)
    _libnuma.set_mempolicy(_libnuma.MPOL_PREFERRED, {0})
    before = _libnuma.get_mempolicy()
    read, write = os.pipe()
    with memory_on(node=0, policy="interleave", topology=topology):
        inside = _libnuma.get_mempolicy().kernel_policy
        pid = os.fork()
    if pid == 0:  # the child: its one thread is the forking thread's copy, and left the block
        try:
            now = _libnuma.get_mempolicy()
            report = [now == before, now.kernel_policy, len(_memory_on._BLOCKS.stack)]
            os.write(write, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as handle:
        child = json.loads(handle.read())
    return {
        "inside": inside,
        "child": child,
        "child_status": status,
        "parent": _libnuma.get_mempolicy() == before,
    }
