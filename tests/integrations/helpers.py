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
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest

from ..support.cli_helpers import run_cli, two_node_snapshot  # noqa: F401 (the framework tests' too)

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


def run_python(
    code: str, env: Optional[Dict[str, str]] = None, args: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, without the caller's PYNUMABIND_* variables.

    Fresh because each framework's plugin loader runs once per process
    (:func:`run_forked` runs many such cases from one interpreter).
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


# The driver of run_forked: run the prelude once, then fork once per case.
_FORKED_DRIVER = r"""
import json, os, sys, traceback
spec = json.load(open(sys.argv[1], encoding="utf-8"))
exec(compile(spec["prelude"], "<prelude>", "exec"), {"__name__": "__prelude__"})
# Each case must see a process in which nothing it tests has run yet.
assert not any(m.split(".")[0] == "pynumabind" for m in sys.modules), "prelude imported pynumabind"
for module, flag in (("vllm.plugins", "plugins_loaded"), ("sglang.srt.plugins", "_plugins_loaded")):
    assert not getattr(sys.modules.get(module), flag, False), "prelude ran " + module + "'s loader"
codes = {}
for name, case in spec["cases"].items():
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            for fd, suffix in ((1, ".out"), (2, ".err")):
                path = os.path.join(spec["dir"], name + suffix)
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(target, fd)
                os.close(target)
            os.environ.update(case["env"])
            try:
                exec(compile(case["code"], "<" + name + ">", "exec"), {"__name__": "__main__"})
                status = 0
            except SystemExit as exc:
                status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)
    codes[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
with open(os.path.join(spec["dir"], "codes.json"), "w", encoding="utf-8") as out:
    json.dump(codes, out)
"""


def run_forked(
    directory: Path,
    prelude: str,
    cases: Dict[str, Tuple[str, Dict[str, str]]],
    env: Optional[Dict[str, str]] = None,
) -> Dict[str, subprocess.CompletedProcess]:
    """Each case's ``(code, env)`` as :func:`run_python` would run it, from one interpreter.

    Importing a framework takes a fresh interpreter 10 s or more here, CPU
    time that CI pays per test.  So one interpreter runs ``prelude`` (the
    framework's imports, nothing that the cases test) under ``env`` and then
    forks once per case: each child applies the case's ``env`` on top and runs
    its code with stdout and stderr to files of its own.  A child is a process
    in which the case's own steps have not run yet, as a fresh one is: the
    driver checks that the prelude neither imported pynumabind nor ran vLLM's
    or SGLang's plugin loader (each runs once per process).  What the framework reads
    from the environment as it is imported must therefore come from ``env``,
    not from a case's.  The result of each case is a CompletedProcess with its
    exit status and its output.
    """
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "dir": str(directory),
                "prelude": textwrap.dedent(prelude),
                "cases": {
                    name: {"code": textwrap.dedent(code), "env": case_env}
                    for name, (code, case_env) in cases.items()
                },
            }
        ),
        encoding="utf-8",
    )
    driver = run_python(_FORKED_DRIVER, env, args=[str(spec)])
    codes_file = directory / "codes.json"
    if driver.returncode != 0 or not codes_file.exists():
        raise AssertionError(
            f"the forked batch's driver failed (exit {driver.returncode}):\n"
            f"{driver.stdout[-3000:]}\n{driver.stderr[-6000:]}"
        )
    codes = json.loads(codes_file.read_text(encoding="utf-8"))
    return {
        name: subprocess.CompletedProcess(
            [sys.executable, f"<{name}>"],
            codes[name],
            (directory / f"{name}.out").read_text(encoding="utf-8", errors="replace"),
            (directory / f"{name}.err").read_text(encoding="utf-8", errors="replace"),
        )
        for name in cases
    }


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
