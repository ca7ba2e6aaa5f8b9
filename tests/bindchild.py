"""Run binding code in a fresh interpreter, so the pytest process stays unbound.

The child gets ``tests/`` and ``src/`` on its path, runs ``code`` and must
print one JSON object as its last stdout line; :func:`run_child` returns it
together with the child's stderr (where its log records go).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

PRELUDE = """\
import faulthandler, json, logging, os, signal, sys, threading, time
# A hung child dumps its stacks and dies (a signal, not a watchdog thread:
# the tests count threads).
faulthandler.register(signal.SIGALRM, chain=True)
signal.alarm(60)
sys.path.insert(0, {tests!r})

def cpus_allowed(path="/proc/self/status"):
    with open(path) as handle:
        for line in handle:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()

def task_cpus():
    out = {{}}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = cpus_allowed(f"/proc/self/task/{{t}}/status")
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that just exited (join() returns slightly early)
    return out

def emit(obj):
    sys.stdout.write("\\n" + json.dumps(obj) + "\\n")
    sys.stdout.flush()
"""


def run_child(
    code: str,
    *,
    env: Optional[Mapping[str, str]] = None,
    preexec_fn: Optional[Callable[[], None]] = None,
    stdin: Optional[str] = None,
    timeout: float = 120,
) -> Tuple[Dict[str, Any], str]:
    """Run ``code`` in a child interpreter; return (its JSON result, its stderr)."""
    source = PRELUDE.format(tests=TESTS_DIR) + textwrap.dedent(code)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    proc = subprocess.run(
        [sys.executable, "-c", source],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env,
        preexec_fn=preexec_fn,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"child failed (rc {proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return json.loads(lines[-1]), proc.stderr
