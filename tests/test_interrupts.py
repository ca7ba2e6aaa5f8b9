"""Never half-bound: a KeyboardInterrupt at any moment of a bind or a restore.

A real SIGINT raises where CPython checks for pending signals: on entering a
Python function, on a loop's jump back, and right after a C call returned (so
after ``sched_setaffinity`` or ``set_mempolicy`` took effect).  Firing real
signals at random moments finds the bad ones only by luck; instead the child
raises ``KeyboardInterrupt`` deterministically at the k-th such point inside
pynumabind (a profile and a trace function find those points), for every k
until the bind completes untouched.  Each time the
process must be either bound (a Binding came back) or exactly as before.
"""

from __future__ import annotations

import os

import pytest

from bindchild import run_child
from pynumabind import _libnuma

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)

INTERRUPTER = """
from pynumabind import _libnuma
from pynumabind.binding import apply_plan
from pynumabind.model import MemoryPolicy, Plan

stop = threading.Event()
def pool(pin=None):
    if pin:
        os.sched_setaffinity(0, pin)
    stop.wait()
workers = [threading.Thread(target=pool, daemon=True) for _ in range(6)]
workers.append(threading.Thread(target=pool, args=({0},), daemon=True))
for t in workers:
    t.start()
while len(os.listdir("/proc/self/task")) < 8 or os.sched_getaffinity(workers[-1].native_id) != {0}:
    time.sleep(0.01)
plan = Plan(rank=0, gpu=None, cpus=frozenset({1}), mems=frozenset({0}),
            policy=MemoryPolicy.BIND)

def state():
    masks = {}
    for t in os.listdir("/proc/self/task"):
        masks[int(t)] = sorted(os.sched_getaffinity(int(t)))
    policy = _libnuma.get_mempolicy()
    return masks, policy.mode, sorted(policy.nodes)

class Interrupter:
    def __init__(self, at):
        self.at, self.count, self.fired, self.last = at, 0, False, {}
    def _tick(self):
        if not self.fired:
            self.count += 1
            if self.count == self.at:
                self.fired = True
                raise KeyboardInterrupt
    @staticmethod
    def _ours(frame):
        return frame.f_globals.get("__name__", "").startswith("pynumabind")
    def _trace(self, frame, event, arg):
        if event == "call":
            return self._trace if self._ours(frame) else None
        if event == "line":
            if frame.f_lasti < self.last.get(frame, -1):  # a loop jumping back
                self._tick()
            self.last[frame] = frame.f_lasti
        return self._trace
    def _profile(self, frame, event, arg):
        if event in ("call", "c_return") and self._ours(frame):
            self._tick()
    def run(self, action):
        sys.setprofile(self._profile)
        sys.settrace(self._trace)
        try:
            return action()
        finally:
            sys.settrace(None)
            sys.setprofile(None)
"""


BIND_CALLS = {
    "apply_plan": "lambda: apply_plan(plan, migrate=True)",
    "bind_current_process": "lambda: bind_current_process(0, topology=topology, nprocs=1, "
    "memory='bind', cpus='1', environ={})",
}


@pytest.mark.parametrize("call", sorted(BIND_CALLS))
def test_interrupt_at_every_point_of_a_bind_leaves_it_bound_or_untouched(call: str) -> None:
    result, _ = run_child(
        INTERRUPTER
        + f"call = {BIND_CALLS[call]}\n"
        + """
from pynumabind import bind_current_process
from pynumabind.discovery import detect_topology
topology = detect_topology(use_nvml=False)
baseline = state()
bad, interrupted, k = [], 0, 0
while True:
    k += 1
    interrupter = Interrupter(k)
    try:
        binding = interrupter.run(call)
    except KeyboardInterrupt:
        interrupted += 1
        if state() != baseline:
            bad.append(k)
            break
        continue
    bound = state()
    binding.restore()
    if state() != baseline or bound[0][threading.get_native_id()] != [1]:
        bad.append(k)
    if not interrupter.fired:
        break
stop.set()
emit({"points": k - 1, "interrupted": interrupted, "bad": bad})
"""
    )
    assert result["bad"] == [], result
    # Every point up to the last one really was interrupted (hundreds of them).
    assert result["interrupted"] == result["points"] >= 300, result


def test_interrupted_restore_can_be_finished_by_calling_it_again() -> None:
    result, _ = run_child(
        INTERRUPTER
        + """
baseline = state()
bad, interrupted, k = [], 0, 0
while True:
    k += 1
    binding = apply_plan(plan)
    interrupter = Interrupter(k)
    try:
        interrupter.run(binding.restore)
    except KeyboardInterrupt:
        interrupted += 1
        binding.restore()  # finishes what was left
    if state() != baseline or not binding.restored:
        bad.append(k)
        break
    if not interrupter.fired:
        break
stop.set()
emit({"points": k - 1, "interrupted": interrupted, "bad": bad})
"""
    )
    assert result["bad"] == [], result
    assert result["interrupted"] == result["points"] >= 50, result
