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


def run_cli(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``python -m pynumabind ARGS`` with ``env`` over a clean environment.

    No ``PYNUMABIND_*``, launcher rank/size or ``CUDA_VISIBLE_DEVICES`` of
    the test's own environment leaks in; ``env`` adds what the test sets.
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        full.pop(name, None)
    full.pop("CUDA_VISIBLE_DEVICES", None)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pynumabind", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


def two_node_snapshot(path: Path, gpu_nodes: Sequence[int] = (0, 1)) -> Path:
    """A two-node machine, GPU 0 on node 0 (CPU 0), GPU 1 on node 1 (CPU 1).

    Its CPUs are this machine's CPUs 0 and 1, so a plan made from it can be
    applied here for real.  This machine has one memory node, so the planner
    (reading the allowed memory nodes from the process, not the file) puts
    node 1's memory on node 0, and the plans say so.  ``gpu_nodes`` moves the
    GPUs: ``(1, 1)`` puts both on node 1.
    """
    data = {
        "schema": 1,
        "nodes": [
            {"id": 0, "cpus": "0", "has_memory": True, "distances": {"0": 10, "1": 21}},
            {"id": 1, "cpus": "1", "has_memory": True, "distances": {"0": 21, "1": 10}},
        ],
        "cpus": [
            {"id": 0, "node": 0, "package": 0, "core": 0, "siblings": "0", "l3": "0"},
            {"id": 1, "node": 1, "package": 1, "core": 0, "siblings": "1", "l3": "1"},
        ],
        "gpus": [
            {
                "index": index,
                "pci_bus_id": bus,
                "vendor": "nvidia",
                "numa_node": gpu_nodes[index],
                "local_cpus": str(gpu_nodes[index]),
                "uuid": f"GPU-0000000{index}-test-snapshot",
                "model": "snapshot GPU",
                "memory_node": None,
                "physical_index": index,
                "source": "snapshot",
            }
            for index, bus in ((0, "0000:17:00.0"), (1, "0000:65:00.0"))
        ],
        "allowed_cpus": "0-1",
        "allowed_mems": "0-1",
        "notes": ["two-node test machine over this machine's CPUs 0 and 1"],
    }
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


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
