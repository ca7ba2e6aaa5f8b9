"""What binding costs: import time, bind cold and warm, and numactl wrappers side by side."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .common import Settings, bare_python, say, worker_env
from .machine import read_nodes
from .probe import cold_source
from .stats import Summary, ratio, summarize

__all__ = ["ensure_numactl", "parse_importtime", "run_overhead"]

NVML_BLOCKER = 'raise ImportError("pynvml hidden by the pynumabind benchmark: no-NVML run")\n'


def parse_importtime(stderr: str, module: str) -> Optional[float]:
    """Cumulative microseconds of ``module`` in ``python -X importtime`` output."""
    pattern = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)\s*$")
    for line in stderr.splitlines():
        match = pattern.match(line)
        if match and match.group(4) == module:
            return float(match.group(2))
    return None


def importtime_descendants(stderr: str, module: str) -> List[Tuple[str, float]]:
    """Modules imported *because of* ``module`` with their self time (us), largest first.

    ``-X importtime`` prints a module's imports before the module itself,
    indented deeper, so they are the deeper lines right above it.
    """
    pattern = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|( *)(\S+)\s*$")
    parsed = [m for m in map(pattern.match, stderr.splitlines()) if m]
    for index, match in enumerate(parsed):
        if match.group(4) != module:
            continue
        depth = len(match.group(3))
        found: List[Tuple[str, float]] = []
        for earlier in reversed(parsed[:index]):
            if len(earlier.group(3)) <= depth:
                break
            found.append((earlier.group(4), float(earlier.group(1))))
        return sorted(found, key=lambda item: -item[1])
    return []


def ensure_numactl(install: bool) -> Tuple[Optional[str], str]:
    """numactl's path, installing it with apt when missing and allowed; else ``None`` and why.

    Only the benchmark wants numactl (to compare against it); the library never does.
    """
    found = shutil.which("numactl")
    if found:
        return found, "found on PATH"
    if not install:
        return None, "numactl is not installed and --no-install was given"
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return None, "numactl is not installed and cannot be (needs root and apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    say("  overhead: numactl missing; apt-get install -y numactl")
    wait_for_lock = ["-o", "DPkg::Lock::Timeout=120"]  # others may be running apt right now
    install_argv = [apt, *wait_for_lock, "install", "-y", "-q", "numactl"]
    update_argv = [apt, *wait_for_lock, "update", "-q"]
    attempts: List[List[str]] = [install_argv, update_argv, install_argv]
    detail = ""
    for argv in attempts:
        try:
            done = subprocess.run(
                argv, check=False, capture_output=True, text=True, timeout=300, env=env
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = str(exc)
            continue
        detail = done.stderr.strip()[-300:]
        if "install" in argv and done.returncode == 0:
            break
    found = shutil.which("numactl")
    if found:
        return found, "installed by the benchmark with apt-get"
    return None, f"numactl is not installed and apt-get failed: {detail or 'unknown error'}"


def _time_command(argv: Sequence[str], env: Dict[str, str]) -> Tuple[float, Optional[str]]:
    start = time.perf_counter()
    done = subprocess.run(
        list(argv),
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        return elapsed, f"exit {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}"
    return elapsed, None


def bind_code() -> str:
    """The one-liner a worker runs; through the binder module while the name is not exported."""
    import pynumabind

    if "bind_current_process" in getattr(pynumabind, "_EXPORTS", {}):
        return "import pynumabind; pynumabind.bind_current_process(0)"
    return "from pynumabind import binding; binding.bind_current_process(0)"


def startup_commands(numactl: Optional[str], node: int, cpus: str) -> List[Tuple[str, List[str]]]:
    """(label, argv) of every way of starting a bound (or unbound) process we compare."""
    python = sys.executable
    bind = [f"--cpunodebind={node}", f"--membind={node}"]
    raw = (
        "import os; from pynumabind._os import libnuma as _libnuma; "
        f"os.sched_setaffinity(0, {{{cpus}}}); "
        f"_libnuma.set_mempolicy(_libnuma.MPOL_BIND, {{{node}}})"
    )
    commands: List[Tuple[str, List[str]]] = [
        ("true", [shutil.which("true") or "/bin/true"]),
        ("python -c pass", [python, "-c", "pass"]),
        ("python -c 'import pynumabind'", [python, "-c", "import pynumabind"]),
        ("python, raw syscalls via pynumabind._os.libnuma", [python, "-c", raw]),
        (BIND_LABEL, [python, "-c", bind_code()]),
    ]
    if importlib.util.find_spec("pynumabind.__main__") is not None:
        commands.append(
            (
                EXEC_LABEL,
                [python, "-m", "pynumabind", "exec", "--rank", "0", "--", python, "-c", "pass"],
            )
        )
    if numactl:
        inner = shlex.join([numactl, *bind, python, "-c", "pass"])
        commands += [
            ("numactl true", [numactl, *bind, shutil.which("true") or "/bin/true"]),
            ("numactl python -c pass", [numactl, *bind, python, "-c", "pass"]),
            ("sh -c 'exec numactl ... python -c pass'", ["sh", "-c", f"exec {inner}"]),
        ]
    return commands


BIND_LABEL = "python -c 'import pynumabind; pynumabind.bind_current_process(0)'"
EXEC_LABEL = "python -m pynumabind exec --rank 0 -- python -c pass"
STARTUP_RATIOS: Tuple[Tuple[str, str], ...] = (
    ("numactl true", "true"),
    ("numactl python -c pass", "python -c pass"),
    ("sh -c 'exec numactl ... python -c pass'", "python -c pass"),
    ("python -c 'import pynumabind'", "python -c pass"),
    ("python, raw syscalls via pynumabind._os.libnuma", "python -c pass"),
    (BIND_LABEL, "python -c pass"),
    (BIND_LABEL, "numactl python -c pass"),
    (BIND_LABEL, "sh -c 'exec numactl ... python -c pass'"),
    (EXEC_LABEL, "numactl python -c pass"),
)


def run_startup(settings: Settings, numactl: Optional[str]) -> Dict[str, Any]:
    nodes = [n for n in read_nodes() if n.cpus & os.sched_getaffinity(0)]
    node = nodes[0]
    cpus = ", ".join(str(c) for c in sorted(node.cpus & os.sched_getaffinity(0)))
    commands = startup_commands(numactl, node.id, cpus)
    env = worker_env()
    samples: Dict[str, List[float]] = {label: [] for label, _ in commands}
    errors: Dict[str, str] = {}
    for rep in range(settings.startup_reps + 1):  # round robin; the first round warms caches
        for label, argv in commands:
            if label in errors:
                continue
            elapsed, error = _time_command(argv, env)
            if error:
                errors[label] = error
            elif rep:
                samples[label].append(elapsed * 1e3)
    summaries = {label: summarize(s, "ms") for label, s in samples.items() if s}
    ratios: List[Dict[str, Any]] = []
    for top, bottom in STARTUP_RATIOS:
        if top in summaries and bottom in summaries:
            ratios.append(ratio(top, summaries[top], bottom, summaries[bottom]).to_dict())
    return {
        "node": node.id,
        "commands": [
            {
                "label": label,
                "argv": argv,
                **(
                    {"summary": summaries[label].to_dict(), "samples": samples[label]}
                    if label in summaries
                    else {"error": errors.get(label, "no samples")}
                ),
            }
            for label, argv in commands
        ],
        "ratios": ratios,
    }


def _probe(args: Sequence[str], env: Dict[str, str], timeout: float = 120) -> Dict[str, Any]:
    return _run_json([sys.executable, "-m", "benchmarks.probe", *args], env, timeout)


def _run_json(argv: List[str], env: Dict[str, str], timeout: float = 120) -> Dict[str, Any]:
    """Run a probe; its last stdout line as JSON, or ``{"error": ...}``."""
    try:
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"probe timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"probe exited {done.returncode}: {done.stderr.strip()[-400:]}"}
    result: Dict[str, Any] = json.loads(lines[-1])
    return result


def run_import(settings: Settings) -> Dict[str, Any]:
    """``-X importtime`` of pynumabind, and which heavy modules the import pulls in."""
    env = worker_env()
    cumulative: List[float] = []
    descendants: List[Tuple[str, float]] = []
    python_s, env_s = bare_python(env)  # no .pth file may import typing & co. first
    for _ in range(settings.startup_reps):
        done = subprocess.run(
            [*python_s, "-X", "importtime", "-c", "import pynumabind"],
            check=False,
            capture_output=True,
            text=True,
            env=env_s,
            timeout=60,
        )
        value = parse_importtime(done.stderr, "pynumabind")
        if value is not None:
            cumulative.append(value / 1e3)
            descendants = importtime_descendants(done.stderr, "pynumabind")
    probe = _probe(["import"], env)
    out: Dict[str, Any] = {
        "importtime_cumulative": summarize(cumulative, "ms").to_dict() if cumulative else None,
        "imported_by_pynumabind": [
            {"module": name, "self_ms": us / 1e3} for name, us in descendants[:8]
        ],
        "modules_after_import": probe.get("modules_after_import"),
        "pynvml_imported": "pynvml" in probe.get("modules_after_import", []),
        "numpy_imported": "numpy" in probe.get("modules_after_import", []),
    }
    if "error" in probe:
        out["error"] = probe["error"]
    return out


# Standard-library modules any real GPU worker has loaded before it binds (torch imports them all).
WORKER_PRELOADED = ("typing", "logging", "dataclasses", "json", "re", "enum", "contextlib")


def _cold(settings: Settings, env: Dict[str, str], preload: Tuple[str, ...]) -> Dict[str, Any]:
    """Repeated first calls of bind_current_process(0), each in a fresh interpreter."""
    import_s: List[float] = []
    bind_s: List[float] = []
    rebind_s: List[float] = []
    cold: Dict[str, Any] = {"nvml": "hidden (pynvml import fails)", "preloaded": list(preload)}
    for _ in range(settings.startup_reps):
        python_s, env_s = bare_python(env)
        result = _run_json([*python_s, "-c", cold_source(0, preload)], env_s)
        if "error" in result:
            cold["error"] = result["error"]
            break
        import_s.append(result["import_s"] * 1e3)
        bind_s.append(result["bind_s"] * 1e3)
        rebind_s.append(result["rebind_s"] * 1e3)
        cold["modules_after_bind"] = result.get("modules_after_bind")
        cold["entry"] = result.get("entry")
        cold["loaded_before_import"] = result.get("loaded_before_import")
        cold["binding"] = result.get("binding")
    if bind_s:
        cold["import"] = summarize(import_s, "ms").to_dict()
        cold["bind"] = summarize(bind_s, "ms").to_dict()
        cold["bind_modules_loaded"] = summarize(rebind_s, "ms").to_dict()
    return cold


def run_bind_cost(settings: Settings) -> Dict[str, Any]:
    """bind_current_process() cold without NVML, and apply_plan() warm vs raw syscalls."""
    out: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pynumabind-bench-") as blocker:
        with open(os.path.join(blocker, "pynvml.py"), "w", encoding="utf-8") as handle:
            handle.write(NVML_BLOCKER)
        env = worker_env()
        env["PYTHONPATH"] = blocker + ":" + env["PYTHONPATH"]
        out["cold"] = _cold(settings, env, ())
        out["cold_preloaded"] = _cold(settings, env, WORKER_PRELOADED)
    warm_runs = []
    for threads in (0, 7):
        result = _probe(["warm", "0", str(settings.apply_reps), str(threads)], worker_env())
        entry: Dict[str, Any] = {k: v for k, v in result.items() if not k.endswith("_us")}
        raw = summarize(result["raw_us"], "us") if "raw_us" in result else None
        apply = summarize(result["apply_us"], "us") if "apply_us" in result else None
        if raw:
            entry["raw"] = {**entry.get("raw", {}), "summary": raw.to_dict()}
        if apply:
            entry["apply"] = apply.to_dict()
        if raw and apply:
            entry["ratio"] = ratio("apply_plan", apply, "raw syscalls", raw).to_dict()
        warm_runs.append(entry)
    out["warm"] = warm_runs
    return out


def run_overhead(settings: Settings) -> Dict[str, Any]:
    say("  overhead: import time")
    result: Dict[str, Any] = {"import": run_import(settings)}
    say("  overhead: bind_current_process cold / apply_plan warm")
    result["bind"] = run_bind_cost(settings)
    numactl, how = ensure_numactl(settings.install_numactl)
    result["numactl"] = {"path": numactl, "status": how, "available": numactl is not None}
    if numactl is None:
        say(f"  overhead: numactl unavailable: {how}")
    say("  overhead: process start, numactl wrappers vs in-process binding")
    result["startup"] = run_startup(settings, numactl)
    return result


def summary_of(data: Optional[Dict[str, Any]]) -> Optional[Summary]:
    return None if not data else Summary.from_dict(data)
