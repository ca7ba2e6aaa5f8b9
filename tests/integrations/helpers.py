"""Shared parts of the real-framework tests (vLLM, SGLang, Ray).

The frameworks are big and pin conflicting torch builds, so they are not in
the ``test`` extra: ``.ci/install-frameworks ROOT`` installs each in its own
virtual environment, and the tests run with that environment's Python (see
``tox -e integrations``).  Elsewhere a test whose framework is not importable
skips, saying how to install it; with ``PYNUMABIND_INTEGRATIONS_REQUIRED=1``
(set by ``.ci/run``) it fails instead, so CI cannot pass without them.

No GPU exists here.  Each test says which step needs one; up to that step
everything is real: the framework's own classes, plugin loader and process
launch, pynumabind's binding syscalls on this kernel, and the result read
from outside the bound process through /proc.  The one stand-in is the
machine description: ``PYNUMABIND_TOPOLOGY`` names a snapshot of a two-node
machine with one GPU per node whose CPUs are this machine's CPUs 0 and 1
(see :func:`two_node_snapshot`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

import pytest

from cli_helpers import run_cli, two_node_snapshot  # noqa: F401 (the framework tests' too)

REQUIRED_ENV = "PYNUMABIND_INTEGRATIONS_REQUIRED"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def require(module: str, framework_venv: str) -> None:
    """Skip the calling test module (or fail, in CI) unless ``module`` is importable."""
    if importlib.util.find_spec(module) is not None:
        return
    message = (
        f"{module} is not installed in this Python; run .ci/install-frameworks ROOT "
        f"{framework_venv} and use ROOT/{framework_venv}/bin/python -m pytest (or tox -e "
        "integrations)"
    )
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{REQUIRED_ENV}=1 but {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def run_python(code: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, without the caller's PYNUMABIND_* variables.

    Fresh because each framework's plugin loader runs once per process.
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def require_two_cpus() -> None:
    allowed = os.sched_getaffinity(0)
    if not {0, 1} <= allowed:
        pytest.skip(f"needs CPUs 0 and 1 allowed (have {sorted(allowed)})")


class ParkedLaunch:
    """A framework launch whose processes park (``*_probe``) until released.

    Runs ``python SCRIPT...`` in a new session with ``env`` over a cleaned
    environment (no ``PYNUMABIND_*`` from outside, offline Hugging Face),
    output to a log.  The probe in each framework process writes a JSON file
    into ``PROBE_DIR`` and waits for ``PROBE_DIR/go``.  ``affinity`` starts
    the launch with that CPU affinity, as a Slurm or Kubernetes cpuset would.
    """

    def __init__(
        self,
        tmp_path: Path,
        script: Sequence[str],
        env: Dict[str, str],
        *,
        pythonpath: Sequence[Path] = (),
        affinity: Optional[Set[int]] = None,
    ) -> None:
        self.dir = tmp_path / "probe"
        self.dir.mkdir(exist_ok=True)
        self.log = tmp_path / "launch.log"
        full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
        paths = [str(p) for p in pythonpath] + [os.environ.get("PYTHONPATH", "")]
        full.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "PROBE_DIR": str(self.dir),
                "PROBE_WAIT": "300",
                "PYTHONPATH": os.pathsep.join(p for p in paths if p),
            }
        )
        full.update(env)
        # preexec_fn: the affinity must hold from the first instruction (vLLM
        # reads it at start-up); the test process starts no threads of its own.
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full,
                start_new_session=True,
                preexec_fn=None if affinity is None else lambda: os.sched_setaffinity(0, affinity),  # noqa: PLW1509
            )

    def parked(self, pattern: str, count: int, timeout: float = 600) -> List[Dict[str, object]]:
        """The probe records, once ``count`` processes have parked."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = sorted(self.dir.glob(pattern))
            if len(found) == count:
                return [json.loads(p.read_text(encoding="utf-8")) for p in found]
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{count} processes did not park; log tail:\n{self.output()[-6000:]}")

    def release(self, timeout: float = 300) -> str:
        """Let the parked processes go on (to their failure); the whole log."""
        (self.dir / "go").touch()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.output()

    def finish(self, timeout: float = 300) -> str:
        """Wait for the launch to end without parking; the whole log."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.output()

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")
