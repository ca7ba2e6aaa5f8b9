"""Bind and restore cost against the number of bindings in force (issue 25 item 9).

``python -m benchmarks.stack [--quick] [--counts N ...] [--out FILE.json]``

Every binding in force sits in the per-process restore stack
(:class:`pynumabind.binding._apply.Journal`); a restore checks that no newer binding
changed the same things.  Issue 25 measured the old list-based stack: one
restore took 105 µs with 2,500 bindings in force and 915 µs with 20,000, and
keeping 20,000 took 18 s and restoring them 26 s (each step linear in the
stack, so the whole quadratic).  For each count, a fresh process (binds
change the process) keeps that many bindings (each the same plan: the
process's own CPUs and a preferred policy on its first memory node, so every
journal holds a CPU and a policy record), then times ``reps`` more
``apply_plan`` + ``restore()`` pairs on top of them, then restores all of
them newest first.  Reported: median [IQR] per bind and per restore in µs,
and the totals.  Flat per-operation figures across the counts mean O(1);
the algorithmic property itself is tested without timing in
``tests/binding/test_restore.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence

from .common import worker_env
from .stats import summarize

__all__ = ["main", "run_stack"]

COUNTS = (0, 2500, 20000)
QUICK_COUNTS = (0, 1000, 5000)
REPS = 200

_WORKER = """
import json, os, sys, time
from pynumabind._os import libnuma as _libnuma
from pynumabind.binding import apply_plan
from pynumabind.model import MemoryPolicy, Plan
count, reps = int(sys.argv[1]), int(sys.argv[2])
plan = Plan(rank=0, gpu_info=None, cpus=frozenset(os.sched_getaffinity(0)),
            mems=frozenset({min(_libnuma.get_mems_allowed())}), policy=MemoryPolicy.PREFERRED)
start = time.perf_counter()
kept = [apply_plan(plan) for _ in range(count)]
keep_s = time.perf_counter() - start
bind_us, restore_us = [], []
for _ in range(reps):
    t0 = time.perf_counter()
    top = apply_plan(plan)
    t1 = time.perf_counter()
    top.restore()
    t2 = time.perf_counter()
    bind_us.append((t1 - t0) * 1e6)
    restore_us.append((t2 - t1) * 1e6)
start = time.perf_counter()
for binding in reversed(kept):
    binding.restore()
restore_all_s = time.perf_counter() - start
print(json.dumps({"count": count, "keep_s": keep_s, "restore_all_s": restore_all_s,
                  "bind_us": bind_us, "restore_us": restore_us}))
"""


def run_stack(counts: Sequence[int] = COUNTS, reps: int = REPS) -> List[Dict[str, Any]]:
    """One fresh process per count; the summaries."""
    rows: List[Dict[str, Any]] = []
    for count in counts:
        done = subprocess.run(
            [sys.executable, "-c", _WORKER, str(count), str(reps)],
            capture_output=True,
            text=True,
            env=worker_env(),
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            rows.append({"count": count, "error": done.stderr.strip()[-500:]})
            continue
        raw = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "count": count,
                "bind": summarize(raw["bind_us"], "µs").to_dict(),
                "restore": summarize(raw["restore_us"], "µs").to_dict(),
                "keep_all_s": raw["keep_s"],
                "restore_all_s": raw["restore_all_s"],
            }
        )
    return rows


def _table(rows: List[Dict[str, Any]]) -> str:
    lines = [
        "| bindings in force | bind (median [IQR]) | restore (median [IQR]) "
        "| keep all | restore all |",
        "|---:|---|---|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['count']:,} | error: {row['error']} | | | |")
            continue
        bind, restore = row["bind"], row["restore"]
        lines.append(
            f"| {row['count']:,} | {bind['median']:.0f} [{bind['q1']:.0f}–{bind['q3']:.0f}] µs "
            f"| {restore['median']:.0f} [{restore['q1']:.0f}–{restore['q3']:.0f}] µs "
            f"| {row['keep_all_s']:.2f} s | {row['restore_all_s']:.2f} s |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stack", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"counts {QUICK_COUNTS}")
    parser.add_argument("--counts", type=int, nargs="+", help=f"default {COUNTS}")
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--out", help="also write the summaries as JSON here")
    args = parser.parse_args(list(argv))
    counts = args.counts or (QUICK_COUNTS if args.quick else COUNTS)
    started = time.monotonic()
    rows = run_stack(counts, args.reps)
    print(_table(rows))
    print(f"({time.monotonic() - started:.0f} s, one fresh process per row, {args.reps} reps)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"stack": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
