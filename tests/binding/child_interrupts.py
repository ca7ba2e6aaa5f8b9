"""Child bodies of binding/test_interrupts.py: a KeyboardInterrupt at the k-th point.

See binding/test_interrupts.py for what the points are and why.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from pynumabind import bind_current_process
from pynumabind._os import libnuma as _libnuma
from pynumabind.binding import Binding, apply_plan
from pynumabind.discovery import detect_topology
from pynumabind.model import MemoryPolicy, Plan

PLAN = Plan(
    rank=0, gpu_info=None, cpus=frozenset({1}), mems=frozenset({0}), policy=MemoryPolicy.BIND
)

State = Tuple[Dict[int, List[int]], int, List[int]]


def start_pool() -> threading.Event:
    """Six pool threads and one pinned to CPU 0, all running; set the event to stop them."""
    stop = threading.Event()

    def pool(pin: Optional[Iterable[int]] = None) -> None:
        if pin:
            os.sched_setaffinity(0, pin)
        stop.wait()

    workers = [threading.Thread(target=pool, daemon=True) for _ in range(6)]
    workers.append(threading.Thread(target=pool, args=({0},), daemon=True))
    for t in workers:
        t.start()
    pinned = workers[-1].native_id
    while len(os.listdir("/proc/self/task")) < 8 or (
        pinned is None or os.sched_getaffinity(pinned) != {0}
    ):
        time.sleep(0.01)
        pinned = workers[-1].native_id
    return stop


def state() -> State:
    masks = {}
    for t in os.listdir("/proc/self/task"):
        masks[int(t)] = sorted(os.sched_getaffinity(int(t)))
    policy = _libnuma.get_mempolicy()
    return masks, policy.mode, sorted(policy.nodes)


class Interrupter:
    """Raises KeyboardInterrupt at the ``at``-th signal-check point inside pynumabind.

    A point can fall inside code that the interpreter, not pynumabind, runs
    in passing: a weakref callback (the journal stack's, when the cyclic
    garbage collector frees an old binding at some allocation), or a
    destructor.  CPython hands an exception raised there to
    ``sys.unraisablehook`` and carries on, for a real Ctrl-C as for this one,
    so the call under test never sees it.  Such a point is counted in
    ``swallowed`` (with where it fired), not as a lost interrupt; the state
    checks still apply to it.  When it happens depends on the collector, so
    it is rare and varies from run to run.
    """

    def __init__(self, at: int) -> None:
        self.at, self.count, self.fired = at, 0, False
        self.last: Dict[FrameType, int] = {}
        self.where = ""
        self.swallowed = False

    def _tick(self, frame: FrameType) -> None:
        if not self.fired:
            self.count += 1
            if self.count == self.at:
                self.fired = True
                self.where = f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
                raise KeyboardInterrupt

    @staticmethod
    def _ours(frame: FrameType) -> bool:
        return str(frame.f_globals.get("__name__", "")).startswith("pynumabind")

    def _trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            return self._trace if self._ours(frame) else None
        if event == "line":
            if frame.f_lasti < self.last.get(frame, -1):  # a loop jumping back
                self._tick(frame)
            self.last[frame] = frame.f_lasti
        return self._trace

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_return") and self._ours(frame):
            self._tick(frame)

    def _unraisable(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.fired:
            self.swallowed = True
        else:
            sys.__unraisablehook__(unraisable)

    def run(self, action: Callable[[], Any]) -> Any:
        hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        sys.setprofile(self._profile)
        sys.settrace(self._trace)
        try:
            return action()
        finally:
            sys.settrace(None)
            sys.setprofile(None)
            sys.unraisablehook = hook

    def lost(self) -> Optional[str]:
        """Where the interrupt fired if it was lost without the interpreter swallowing it."""
        return None if not self.fired or self.swallowed else self.where


def bind_calls() -> Dict[str, Callable[[], Binding]]:
    """The two ways to bind, by name (the test's parameter)."""
    topology = detect_topology(use_nvml=False)
    return {
        "apply_plan": lambda: apply_plan(PLAN, migrate=True),
        "bind_current_process": lambda: bind_current_process(
            0, topology=topology, nprocs=1, policy="bind", cpus="1", environ={}
        ),
    }


class Tally:
    """What the runs at points 1..k came to, as the tests read it."""

    def __init__(self) -> None:
        self.interrupted, self.swallowed = 0, 0
        self.lost: List[str] = []
        self.bad: List[int] = []

    def not_raised(self, interrupter: Interrupter) -> None:
        """The call returned: count a swallowed interrupt, or note a lost one."""
        self.swallowed += interrupter.swallowed
        self.lost.extend(filter(None, [interrupter.lost()]))

    def result(self, points: int) -> Dict[str, Any]:
        return {
            "points": points,
            "interrupted": self.interrupted,
            "swallowed": self.swallowed,
            "lost": self.lost,
            "bad": self.bad,
        }


def interrupt_every_point_of_a_bind(call_name: str) -> Dict[str, Any]:
    stop = start_pool()
    call = bind_calls()[call_name]
    baseline = state()
    tally = Tally()
    k = 0
    while True:
        k += 1
        interrupter = Interrupter(k)
        try:
            binding = interrupter.run(call)
        except KeyboardInterrupt:
            tally.interrupted += 1
            if state() != baseline:
                tally.bad.append(k)
                break
            continue
        tally.not_raised(interrupter)
        bound = state()
        binding.restore()
        if state() != baseline or bound[0][threading.get_native_id()] != [1]:
            tally.bad.append(k)
        if not interrupter.fired:
            break
    stop.set()
    return tally.result(k - 1)


def interrupt_every_point_of_a_restore() -> Dict[str, Any]:
    stop = start_pool()
    baseline = state()
    tally = Tally()
    k = 0
    while True:
        k += 1
        binding = apply_plan(PLAN)
        interrupter = Interrupter(k)
        try:
            interrupter.run(binding.restore)
        except KeyboardInterrupt:
            tally.interrupted += 1
            binding.restore()  # finishes what was left
        else:
            tally.not_raised(interrupter)
        if state() != baseline or not binding.restored:
            tally.bad.append(k)
            break
        if not interrupter.fired:
            break
    stop.set()
    return tally.result(k - 1)
