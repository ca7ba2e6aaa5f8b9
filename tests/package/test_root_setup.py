"""The suite says at its start what it installs or starts as root, and one variable turns it off.

Someone evaluating the package on a shared GPU node runs ``python3 -m pytest``
as root and must not be surprised: the header names the packages and daemons
(``tests/support/root_setup.py``), ``PYNUMABIND_TESTS_NO_ROOT_SETUP=1`` makes
the tests that would install or start something skip, saying how to run
them, and asking for that together with CI's ``PYNUMABIND_VM_REQUIRED=1`` or
``PYNUMABIND_SLURM_REQUIRED=1`` stops the session at once.  The sessions here
are real pytest runs in a child, on tests that skip before doing anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

import pytest

from ..support import root_setup

REPO = Path(__file__).resolve().parents[2]
VARIABLE = "PYNUMABIND_TESTS_NO_ROOT_SETUP"

#: Tests that would make cgroups as root; under the switch they skip before touching anything.
CGROUP_TESTS = [
    "tests/binding/test_cpuset.py",
    "tests/discovery/test_sysfs.py::test_live_cpuset_restriction_is_seen",
]


def _session(args: List[str], env: Dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A child pytest session, its output read from files once it exits.

    Files, not pipes: a process the child leaves behind (a worker, a
    multiprocessing helper) would hold a pipe open, and reading to its end
    would wait for that process, not for the session.  The session runs in a
    process group of its own, killed whole if it outlives 300 s; then the test
    fails with what it printed, the stacks faulthandler dumps at 60 s included
    (one such session was once seen stuck under CI's load, with nothing shown).
    """
    environ = {
        k: v
        for k, v in os.environ.items()
        if k != VARIABLE and k not in root_setup.REQUIRED_VARIABLES
    }
    environ.update(env)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-o",
        "faulthandler_timeout=60",
        *args,
    ]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            argv,
            cwd=REPO,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            returncode = child.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            returncode = None
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if returncode is None:
        pytest.fail(f"{argv} still ran after 300 s; what it printed:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(argv, returncode, stdout, stderr)


def test_header_names_every_install_and_daemon_as_root() -> None:
    text = "\n".join(root_setup.header({}, euid=0))
    for name in (
        *root_setup.QEMU_PACKAGES,
        *root_setup.SLURM_PACKAGES,
        *root_setup.SLURM_DAEMONS,
        "apt-get install",
        "cgroup v1 groups",
        f"{VARIABLE}=1 turns all of this off",
    ):
        assert name in text, name


def test_header_when_off_or_not_root() -> None:
    (off,) = root_setup.header({VARIABLE: "1"}, euid=0)
    assert off.startswith(f"root setup: off ({VARIABLE}=1): nothing is installed or started")
    (user,) = root_setup.header({}, euid=1000)
    assert user.startswith("root setup: none (not root)")


@pytest.mark.parametrize("value", ["", "0", "yes", "true", " 2"])
def test_only_1_turns_it_off(value: str) -> None:
    assert not root_setup.off({VARIABLE: value})
    assert root_setup.conflict({VARIABLE: value, "PYNUMABIND_VM_REQUIRED": "1"}) is None


def test_required_and_off_together_is_a_contradiction() -> None:
    assert root_setup.conflict({VARIABLE: "1"}) is None
    problem = root_setup.conflict(
        {VARIABLE: "1", "PYNUMABIND_VM_REQUIRED": "1", "PYNUMABIND_SLURM_REQUIRED": "1"}
    )
    assert problem is not None
    assert "PYNUMABIND_VM_REQUIRED=1 and PYNUMABIND_SLURM_REQUIRED=1" in problem
    assert "unset one or the other" in problem


@pytest.mark.parametrize("quiet", [[], ["-q"], ["-qq"], ["--no-header"]])
def test_a_session_says_it_once_however_quiet(quiet: List[str]) -> None:
    done = _session(["--collect-only", *quiet, *CGROUP_TESTS], {})
    assert done.returncode == 0, done.stdout + done.stderr
    for line in root_setup.header():
        assert done.stdout.count(line) == 1, done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root these tests skip anyway")
def test_a_session_with_the_switch_skips_the_cgroup_tests_saying_how_to_run_them() -> None:
    done = _session(["-q", *CGROUP_TESTS], {VARIABLE: "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"root setup: off ({VARIABLE}=1)" in done.stdout
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped, done.stdout
    for line in skipped:
        assert f"{VARIABLE}=1: not creating a cgroup v1" in line, line
        assert "unset it" in line, line
    # test_cpuset.py has three tests that need no cgroup: they still run, and pass.
    assert " failed" not in done.stdout and " 8 skipped" in done.stdout, done.stdout


@pytest.mark.parametrize("required", root_setup.REQUIRED_VARIABLES)
def test_a_session_asking_for_required_and_no_root_setup_stops_at_once(required: str) -> None:
    done = _session(["-q", *CGROUP_TESTS], {VARIABLE: "1", required: "1"})
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"{VARIABLE}=1 (install and start nothing as root) contradicts {required}=1" in (
        done.stderr
    ), done.stderr
    assert "passed" not in done.stdout and "skipped" not in done.stdout
