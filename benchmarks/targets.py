"""The bind path's cost targets, measured in one run, each with its ratio to the goal.

The rows and their targets are those of "a bind path that loads only what it
runs" (they replaced an earlier, looser table: a first bind at most one
numactl exec, an import under 10 ms, a second bind at most 3x the raw
syscalls with one thread):

* ``anchor``: ``numactl --cpunodebind=0 --membind=0 true`` minus ``true``,
  paired per round: numactl's added start time, shown for comparison;
* ``first_bind_preloaded``: ``import pynumabind`` and the first
  ``bind_current_process(0)`` in an interpreter that already imported the
  standard-library modules a torch worker has (own modules + detect + plan
  + apply); target 6 ms;
* ``import_and_first_bind``: ``import pynumabind`` + that first bind in a bare
  interpreter; target 20 ms;
* ``import``: ``import pynumabind`` alone; target 3 ms, loading none of
  pynvml, numpy and json;
* ``second_bind``: ``bind_current_process(0)`` again in the same process,
  with four threads alive, vs the raw syscalls floor for the same four
  threads (:mod:`benchmarks.rawbind`); target 5x the floor;
* ``exec_start``: ``python -m pynumabind exec --rank 0 -- python -c pass``
  minus ``python -c pass``, paired per round: what the exec command adds to
  a program's start (its interpreter, argument parsing, import, bind and
  ``execvp``); target 30 ms;
* ``from_sysfs_dgx_h100``: discovery of the 224-CPU DGX H100 fixture tree
  (``tests/machines/dgx_h100.json``), files only; target 5 ms.

Everything runs round-robin, one fresh process per measurement and per
round, so slow and fast moments of a noisy machine hit every row alike; the
order within a round rotates.  The interpreters of the import and first-bind
rows run with ``-S`` (:func:`benchmarks.common.bare_python`): no ``.pth``
file loads anything before the clock starts, and the JSON lists which
common stdlib modules were loaded before the import.  pynvml is hidden from the bind rows (its
import fails), as in the overhead suite: the rows measure pynumabind's own
cost, not NVML's.  ``build_rows`` is pure (samples in, rows out).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .common import Settings, bare_python, say, worker_env
from .overhead import NVML_BLOCKER, WORKER_PRELOADED, _run_json, _time_command, ensure_numactl
from .probe import cold_source
from .stats import Summary, ratio, summarize

__all__ = ["FORBIDDEN_ON_IMPORT", "TARGETS", "build_rows", "run_targets", "verdict"]

FIXTURE = "dgx_h100"

#: Idle threads started beside the main one for the second bind: four alive.
EXTRA_THREADS = 3

#: Modules ``import pynumabind`` must not load.
FORBIDDEN_ON_IMPORT = ("pynvml", "numpy", "json")

# key -> (what, target text, limit, unit of the limit or the row it is relative to)
TARGETS: Dict[str, Tuple[str, str, Optional[float], str]] = {
    "anchor": (
        "`numactl --cpunodebind=0 --membind=0 true` vs `true`: added start time",
        "— (for comparison)",
        None,
        "ms",
    ),
    "first_bind_preloaded": (
        "first `bind_current_process()` in a worker that already loaded the stdlib "
        "(as under torch): own modules + detect + plan + apply",
        "≤ 6 ms",
        6.0,
        "ms",
    ),
    "import_and_first_bind": (
        "`import pynumabind` + first bind in a bare interpreter",
        "≤ 20 ms",
        20.0,
        "ms",
    ),
    "import": (
        "`import pynumabind`",
        "≤ 3 ms, no pynvml/numpy/json loaded",
        3.0,
        "ms",
    ),
    "second_bind": (
        "second bind in the same process, four threads alive",
        "≤ 5 × the raw syscalls (sched_setaffinity per thread + set_mempolicy), same threads",
        5.0,
        "raw",
    ),
    "exec_start": (
        "`pynumabind exec`'s added start: `python -m pynumabind exec --rank 0 -- python -c pass` "
        "vs `python -c pass`",
        "≤ 30 ms",
        30.0,
        "ms",
    ),
    "from_sysfs_dgx_h100": (
        "discovery from sysfs (`from_sysfs`) on a 224-CPU DGX H100 tree",
        "≤ 5 ms",
        5.0,
        "ms",
    ),
}


def verdict(low: Optional[float], value: float, high: Optional[float]) -> str:
    """Judge a ratio to its target (1.0 = exactly on target, lower is better).

    ``met``/``missed`` when the whole quartile range is on one side of 1,
    ``borderline`` when it straddles 1; with no range (a difference that can
    be zero or negative has none), the median alone decides and says so.
    """
    if low is None or high is None:
        return ("met" if value <= 1.0 else "missed") + " (median only)"
    if high <= 1.0:
        return "met"
    if low > 1.0:
        return "missed"
    return "borderline"


def _fixed(value: Summary, limit: float) -> Dict[str, Any]:
    return {"value": value.median / limit, "low": value.q1 / limit, "high": value.q3 / limit}


def _relative(value: Summary, reference: Summary, factor: float) -> Dict[str, Any]:
    """value / (factor × reference), ranged by the quartiles when the reference is positive."""
    if reference.median <= 0:
        return {"value": float("inf"), "low": None, "high": None}
    try:
        r = ratio("row", value, "reference", reference)
    except ValueError:  # reference quartiles not all positive: no range
        return {"value": value.median / reference.median / factor, "low": None, "high": None}
    return {"value": r.value / factor, "low": r.low / factor, "high": r.high / factor}


def build_rows(
    samples: Dict[str, Sequence[float]],
    modules_after_import: Optional[Sequence[str]],
    notes: Optional[Dict[str, str]] = None,
) -> List[Dict[str, Any]]:
    """The table's rows from raw samples (pure).

    ``samples`` maps row keys to samples in the row's unit (ms, but us for
    ``second_bind``) plus ``raw`` (us, the floor for ``second_bind``);
    missing keys become rows that say so.  ``ratio`` is the row over its
    target (lower is better, 1 = on target) with a quartile range.
    """
    notes = notes or {}
    units = {"second_bind": "us", "raw": "us"}
    summaries = {
        key: summarize(values, units.get(key, "ms")) for key, values in samples.items() if values
    }
    rows: List[Dict[str, Any]] = []
    for key, (what, target, limit, against) in TARGETS.items():
        row: Dict[str, Any] = {"key": key, "what": what, "target": target}
        value = summaries.get(key)
        if key in notes:
            row["note"] = notes[key]
        if value is None:
            row["error"] = notes.get(key, "not measured")
            rows.append(row)
            continue
        row["summary"] = value.to_dict()
        reference: Optional[Summary] = None
        if against == "anchor":
            reference = summaries.get("anchor")
        elif against == "raw":
            reference = summaries.get("raw")
        if against in ("anchor", "raw"):
            if reference is None:
                row["verdict"] = f"no {against} measured: cannot judge"
                rows.append(row)
                continue
            row["reference"] = {"name": against, "summary": reference.to_dict()}
            assert limit is not None
            row["ratio"] = _relative(value, reference, limit)
        elif limit is not None:
            row["ratio"] = _fixed(value, limit)
        if "ratio" in row:
            r = row["ratio"]
            row["verdict"] = verdict(r["low"], r["value"], r["high"])
        if key == "import":
            loaded = sorted(set(modules_after_import or ()) & set(FORBIDDEN_ON_IMPORT))
            row["forbidden_loaded"] = loaded if modules_after_import is not None else None
            row["modules_after_import"] = (
                None if modules_after_import is None else sorted(modules_after_import)
            )
            if modules_after_import is None:
                row["verdict"] += "; modules not checked"
            elif loaded:
                row["verdict"] = "missed (loads " + ", ".join(loaded) + ")"
        rows.append(row)
    return rows


# ------------------------------------------------------------ measuring


def _blocker_env(directory: str) -> Dict[str, str]:
    """The workers' environment with an unimportable ``pynvml`` first on the path."""
    with open(os.path.join(directory, "pynvml.py"), "w", encoding="utf-8") as handle:
        handle.write(NVML_BLOCKER)
    env = worker_env()
    env["PYTHONPATH"] = directory + ":" + env["PYTHONPATH"]
    return env


class _Rows:
    """One run's state: what each row's step measures with, and what it collected."""

    def __init__(self, numactl: Optional[str], how: str, inner: int, scratch: str) -> None:
        self.numactl = numactl
        self.how = how
        self.inner = inner
        self.true = shutil.which("true") or "/bin/true"
        self.samples: Dict[str, List[float]] = {
            k: []
            for k in (
                "true",
                "numactl_true",
                "python_pass",
                "exec_python_pass",
                *TARGETS,
                "raw",
                "first_sysfs",
            )
        }
        self.notes: Dict[str, str] = {}
        self.modules: Optional[List[str]] = None
        self.before: Optional[List[str]] = None
        self.env = _blocker_env(scratch)
        # no site: nothing but what the row says is loaded
        self.python_s, self.env_s = bare_python(self.env)
        self.tree = os.path.join(scratch, "sysfs")
        try:
            from .trees import build_tree

            build_tree(FIXTURE, self.tree)
        except (ImportError, OSError) as exc:
            self.tree = ""
            self.notes["from_sysfs_dgx_h100"] = f"no fixture tree: {type(exc).__name__}: {exc}"

    def steps(self) -> List[Callable[[], None]]:
        return [
            self.start_true,
            self.start_numactl,
            self.cold_bare,
            self.cold_preloaded,
            self.rebind,
            self.exec_pair,
            self.from_sysfs,
        ]

    def start_true(self) -> None:
        elapsed, error = _time_command([self.true], self.env)
        if error:
            self.notes["anchor"] = f"`true` failed: {error}"
        self.samples["true"].append(elapsed * 1e3)

    def start_numactl(self) -> None:
        if self.numactl is None:
            self.notes["anchor"] = f"numactl unavailable: {self.how}"
            return
        argv = [self.numactl, "--cpunodebind=0", "--membind=0", self.true]
        elapsed, error = _time_command(argv, self.env)
        if error:
            self.notes["anchor"] = f"numactl failed: {error}"
        self.samples["numactl_true"].append(elapsed * 1e3)

    def cold_bare(self) -> None:
        result = _run_json([*self.python_s, "-c", cold_source(0)], self.env_s)
        if "error" in result:
            self.notes["import_and_first_bind"] = self.notes["import"] = result["error"]
            return
        self.samples["import"].append(result["import_s"] * 1e3)
        both = (result["import_s"] + result["bind_s"]) * 1e3
        self.samples["import_and_first_bind"].append(both)
        self.modules = result.get("modules_after_import")
        self.before = result.get("loaded_before_import")

    def cold_preloaded(self) -> None:
        program = cold_source(0, WORKER_PRELOADED)
        result = _run_json([*self.python_s, "-c", program], self.env_s)
        if "error" in result:
            self.notes["first_bind_preloaded"] = result["error"]
            return
        # the worker imports pynumabind to bind: its (lazy) import counts too
        both = (result["import_s"] + result["bind_s"]) * 1e3
        self.samples["first_bind_preloaded"].append(both)

    def rebind(self) -> None:
        argv = [sys.executable, "-m", "benchmarks.probe", "rebind", "0", str(self.inner)]
        argv.append(str(EXTRA_THREADS))
        result = _run_json(argv, self.env)
        if "error" in result:
            self.notes["second_bind"] = result["error"]
            return
        self.samples["second_bind"] += result["second_bind_us"]
        self.samples["raw"] += result["raw_us"]

    def exec_pair(self) -> None:
        """``python -c pass`` then the same under ``pynumabind exec``: one pair per round."""
        bare = [sys.executable, "-c", "pass"]
        wrapped = [sys.executable, "-m", "pynumabind", "exec", "--rank", "0", "--", *bare]
        elapsed, error = _time_command(bare, self.env)
        if error:
            self.notes["exec_start"] = f"`python -c pass` failed: {error}"
            return
        wrapped_elapsed, error = _time_command(wrapped, self.env)
        if error:
            self.notes["exec_start"] = f"`pynumabind exec` failed: {error}"
            return
        self.samples["python_pass"].append(elapsed * 1e3)
        self.samples["exec_python_pass"].append(wrapped_elapsed * 1e3)

    def from_sysfs(self) -> None:
        if not self.tree:
            return
        reps = str(self.inner // 2 or 1)
        argv = [sys.executable, "-m", "benchmarks.probe", "sysfs", self.tree, reps]
        result = _run_json(argv, self.env)
        if "error" in result:
            self.notes["from_sysfs_dgx_h100"] = result["error"]
            return
        self.samples["from_sysfs_dgx_h100"] += result["samples_ms"]
        self.samples["first_sysfs"].append(result["first_ms"])


def run_targets(
    settings: Settings,
    *,
    rounds: Optional[int] = None,
    inner_reps: Optional[int] = None,
    warmup: bool = True,
) -> Dict[str, Any]:
    """Measure every row, round-robin; ``rounds``/``inner_reps`` override the settings.

    ``warmup`` runs one round first whose numbers are thrown away (caches).
    """
    rounds = settings.startup_reps if rounds is None else rounds
    inner = settings.inner_reps if inner_reps is None else inner_reps
    numactl, how = ensure_numactl(settings.install_numactl)
    if numactl is None:
        say(f"  targets: numactl unavailable: {how}")
    with tempfile.TemporaryDirectory(prefix="pynumabind-targets-") as scratch:
        run = _Rows(numactl, how, inner, scratch)
        steps = run.steps()
        first = 0 if warmup else 1
        for index in range(first, rounds + 1):  # round 0 warms caches and is thrown away
            order = steps[index % len(steps) :] + steps[: index % len(steps)]
            for step in order:
                step()
            if index == 0:
                for values in run.samples.values():
                    values.clear()
                run.modules = run.before = None
    samples, notes, modules, before = run.samples, run.notes, run.modules, run.before
    paired = min(len(samples["true"]), len(samples["numactl_true"]))
    samples["anchor"] = [samples["numactl_true"][i] - samples["true"][i] for i in range(paired)]
    samples["exec_start"] = [
        wrapped - bare for wrapped, bare in zip(samples["exec_python_pass"], samples["python_pass"])
    ]
    rows = build_rows({k: samples[k] for k in (*TARGETS, "raw")}, modules, notes)
    extra = {
        k: summarize(samples[k], "ms").to_dict()
        for k in ("true", "numactl_true", "python_pass", "exec_python_pass", "first_sysfs")
        if samples[k]
    }
    return {
        "rounds": rounds,
        "warmup_round": warmup,
        "inner_reps": inner,
        "numactl": {"path": numactl, "status": how, "available": numactl is not None},
        "nvml": "hidden (pynvml import fails) in every bind row",
        "preloaded": list(WORKER_PRELOADED),
        "second_bind_threads": EXTRA_THREADS + 1,
        "interpreter": "python -S (no site, no .pth files); pynumabind's path on PYTHONPATH",
        "bare_loaded_before_import": before,
        "fixture": FIXTURE,
        "rows": rows,
        "also": extra,
        "samples": {k: v for k, v in samples.items() if v},
    }
