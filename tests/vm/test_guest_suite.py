"""Run the guest-side test modules in ``tests/vm/guest`` inside multi-NUMA guests.

Each :class:`GuestSession` is one boot: a topology, a kernel, automatic NUMA balancing on or
off, and the guest modules it runs (one pytest run inside, with the host's interpreter,
``sys.path`` and working tree).  A session passes only if that run passed with nothing
skipped.  The guest's pytest output is shown on failure (and with ``-rP``/``-s`` on success).

Sessions that record a sysfs fixture also compare the guest's NUMA-relevant sysfs files with
the tree committed under ``tests/machines/sysfs/<name>/``; with ``PYNUMABIND_VM_RECORD_SYSFS=1``
they write it instead (then commit it).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from .harness import (
    DEFAULT_KERNEL,
    HMAT_TOPOLOGY,
    HOST_RECORD_ENV,
    REPO_ROOT,
    STANDARD_TOPOLOGY,
    GuestResult,
    GuestTopology,
    VmTools,
    kernel_command_line,
    numa_balancing_arg,
    qemu_argv,
    qemu_version,
    run_pytest_in_guest,
)
from .sysfs_record import (
    FIXTURES_DIR,
    RECORD_ENV,
    differences,
    load_fixture,
    parse_record_lines,
    write_fixture,
)

GUEST_TESTS = Path(__file__).resolve().parent / "guest"

# Plugins the guest-side tests do not use and whose import dominates a guest run under TCG.
# Kept on if the project's addopts need them (an option of a disabled plugin is an error).
SLOW_UNUSED_PLUGINS = {"hypothesispytest": "hypothesis", "benchmark": "benchmark"}


@dataclass(frozen=True)
class GuestSession:
    """One guest boot and the guest-side modules (``tests/vm/guest/<module>``) it runs."""

    name: str
    topology: GuestTopology
    modules: tuple[str, ...]
    kernel: str = DEFAULT_KERNEL.name
    numa_balancing: bool = False
    sysfs_fixture: Optional[str] = None
    """Name of the recorded tree under ``tests/machines/sysfs`` this guest's sysfs must match."""
    deselect: tuple[str, ...] = ()
    """``module::test`` left out of this session (each still runs in another)."""
    timeout: float = 600  # TCG: ~100 s idle for the largest, 210+ s on a loaded 2-core machine

    def pytest_args(self) -> list[str]:
        """The guest pytest's arguments: output options, the modules, the deselected tests."""
        # A test stuck past WATCHDOG_S prints every thread's stack to the console (pytest's
        # faulthandler plugin), so a session the harness kills still says where it hung.
        args = ["-v", "-rfEsxX", "--durations=12", "-o", f"faulthandler_timeout={WATCHDOG_S}"]
        args += [str(GUEST_TESTS / module) for module in self.modules]
        for test in self.deselect:
            args += ["--deselect", f"{GUEST_TESTS.relative_to(REPO_ROOT).as_posix()}/{test}"]
        return args


#: Seconds one guest test may run before its stacks are dumped: the slowest takes ~40 s on a
#: loaded 2-core host under TCG.
WATCHDOG_S = 150


# What checks where pages are (move_pages, verify): run with NUMA balancing on as well.
PLACEMENT_MODULES = (
    "test_guest_placement.py",
    "test_guest_binding.py",
    "test_guest_memory.py",
)

SESSIONS = (
    GuestSession(
        "6.1-standard",
        STANDARD_TOPOLOGY,
        (
            "test_guest_boot.py",
            "test_guest_placement.py",
            "test_guest_discovery.py",
            "test_guest_binding.py",
            "test_guest_confinement.py",
            "test_guest_memory.py",
            "test_guest_advise.py",
        ),
        sysfs_fixture="qemu-6.1-standard",
    ),
    # Automatic NUMA balancing is the kernel's default on multi-node machines, and 6.1's
    # move_pages reports a page waiting for a NUMA-hinting fault as not present.  Left out:
    # the tests whose time is fresh interpreters (4 spawned workers, `pynumabind exec`, a
    # cgroup child) and whose pages are checked by the same census the in-process tests use.
    GuestSession(
        "6.1-standard-numa-balancing",
        STANDARD_TOPOLOGY,
        ("test_guest_boot.py", *PLACEMENT_MODULES),
        numa_balancing=True,
        deselect=(
            "test_guest_binding.py::test_exclusive_four_ranks_spawned_workers",
            "test_guest_binding.py::test_exec_binds_the_child",
            "test_guest_memory.py::"
            "test_a_cpuset_change_during_a_block_restores_the_nearest_allowed_policy",
        ),
    ),
    # Memory tiers from firmware HMAT and weighted interleave need 6.9+ (6.10+ for tiers of
    # CPU-less nodes); discovery and the placement basics run on it too, with balancing on
    # as users have it (6.12's move_pages reports pages the balancer marked; 6.1's does not).
    GuestSession(
        "6.12-hmat",
        HMAT_TOPOLOGY,
        (
            "test_guest_boot.py",
            "test_guest_tiers.py",
            "test_guest_placement.py",
            "test_guest_discovery.py",
        ),
        kernel="6.12",
        numa_balancing=True,
        sysfs_fixture="qemu-6.12-hmat",
    ),
)


def host_record(folder: Path) -> str:
    """This host's advice record (its real machine; a verdict from equal cells), for the guest.

    The guest sees the host's /tmp read-only, so the file is read there at
    this path; in the guest it must be stale (another machine).
    """
    from pynumabind.advisor import MemoryCell, MemoryMatrix, Spread
    from pynumabind.advisor.record import Advice, save_record, this_machine
    from pynumabind.advisor.rule import decide

    same = MemoryCell(Spread.of([99.0, 99.5, 100.0, 100.5, 101.0]))
    memory = MemoryMatrix((0,), (0,), ((same,),))
    advice = Advice(memory, (), "not measured (host test)", None, None, decide(memory))
    return save_record(advice, str(folder / "host-advice.json"), machine=this_machine())


def fixture_readme(session: GuestSession, tools: VmTools) -> str:
    """The README written beside a recorded sysfs tree: what booted it, and how to redo it."""
    argv = qemu_argv(tools, session.topology, "INITRD", kernel_command_line(session.numa_balancing))
    tables = " (SLIT and HMAT)" if session.topology.hmat else " (SLIT)"
    argv = [in_checkout(arg) for arg in argv]
    lines, i = [argv[0]], 1
    while i < len(argv):  # one option (and its value) a line
        take = 2 if i + 1 < len(argv) and not argv[i + 1].startswith("-") else 1
        lines.append(shlex.join(argv[i : i + take]))
        i += take
    command = " \\\n    ".join(lines)
    return f"""# `{session.sysfs_fixture}`: sysfs of a QEMU guest, recorded

The NUMA-relevant files of `/sys` (paths relative to it) as the guest of the `{session.name}`
session of `tests/vm/test_guest_suite.py` showed them, recorded by
`tests/vm/guest/test_guest_boot.py` (`tests/vm/sysfs_record.py`, `FILE_PATTERNS`).

- Kernel: Debian `{tools.guest_kernel.meta_package}` -> `{tools.kernel_release}`
  (`{tools.kernel.name}`), {numa_balancing_arg(session.numa_balancing)}.
- QEMU: {qemu_version(tools)}, under TCG.
- Topology and firmware tables{tables}: `harness.{topology_name(session.topology)}`.
  The command line (`INITRD`: the initramfs the harness writes for each run):

```
{command}
```

- Regular files only. The kernel's symbolic links that matter (HMAT initiators,
  `nodeN/access*/initiators/nodeM -> ../../../nodeM`) are listed in `SYMLINKS`;
  `tests/vm/sysfs_record.materialize(path, dest)` makes a sysfs root with them.
- `nodeN/meminfo` is a snapshot: free memory varies, and so does a node's `MemTotal` by the
  ~45 MB the kernel image takes wherever KASLR loads it. The session compares `MemTotal`
  only (64 MiB per node, 1% in all) and every other file exactly, on each run.

Re-record (needs root and apt, as the guest tests do):

```sh
PYNUMABIND_VM_RECORD_SYSFS=1 PYTHONPATH=$PWD/src python3 -m pytest -q -p no:cacheprovider \\
    tests/vm/test_guest_suite.py -k {session.name}
```
"""


def in_checkout(arg: str) -> str:
    """``arg`` relative to the checkout when it is a path in it (the kernel cache)."""
    try:
        return str(Path(arg).relative_to(REPO_ROOT)) if arg.startswith("/") else arg
    except ValueError:
        return arg


def topology_name(topology: GuestTopology) -> str:
    """The harness constant naming ``topology``."""
    names = {"STANDARD_TOPOLOGY": STANDARD_TOPOLOGY, "HMAT_TOPOLOGY": HMAT_TOPOLOGY}
    return next((name for name, known in names.items() if known == topology), "a custom topology")


def check_sysfs_fixture(session: GuestSession, result: GuestResult, tools: VmTools) -> None:
    records = parse_record_lines(result.output)
    assert len(records) == 1, f"expected one sysfs record in the guest's output, got {len(records)}"
    assert session.sysfs_fixture is not None
    path = FIXTURES_DIR / session.sysfs_fixture
    if os.environ.get(RECORD_ENV) == "1":
        write_fixture(records[0], path, fixture_readme(session, tools))
        sys.stdout.write(f"--- recorded {len(records[0]['files'])} sysfs files into {path} ---\n")
        return
    assert path.is_dir(), f"no recorded sysfs tree at {path}: record it with {RECORD_ENV}=1"
    diff = differences(load_fixture(path), records[0])
    assert not diff, (
        f"the guest's sysfs differs from {path} (re-record with {RECORD_ENV}=1 if the change "
        "is meant):\n" + "\n".join(diff)
    )


@pytest.mark.vm
@pytest.mark.parametrize("session", SESSIONS, ids=[s.name for s in SESSIONS])
def test_guest_session_passes(
    session: GuestSession,
    vm_tools_for: Callable[[str], VmTools],
    pytestconfig: pytest.Config,
    request: pytest.FixtureRequest,
) -> None:
    tools = vm_tools_for(session.kernel)
    # The guest sees the host's /tmp, not tmp_path's RAM-backed base (tests/conftest.py).
    shown_to_the_guest = Path(tempfile.mkdtemp(prefix="pynumabind-host-record-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(shown_to_the_guest, ignore_errors=True))
    addopts = " ".join(str(opt) for opt in pytestconfig.getini("addopts"))
    disabled = [name for name, key in SLOW_UNUSED_PLUGINS.items() if key not in addopts]
    result = run_pytest_in_guest(
        session.topology,
        session.pytest_args(),
        timeout=session.timeout,
        disable_plugins=disabled,
        env={HOST_RECORD_ENV: host_record(shown_to_the_guest)},
        kernel=session.kernel,
        numa_balancing=session.numa_balancing,
    )
    boot = "?" if result.boot_seconds is None else f"{result.boot_seconds:.1f}"
    cpu = "?" if result.cpu_seconds is None else f"{result.cpu_seconds:.1f}"
    sys.stdout.write(
        f"--- guest pytest ({session.name}, {tools.kernel_release}, "
        f"{numa_balancing_arg(session.numa_balancing)}): {result.seconds:.1f} s in all, "
        f"{boot} s of it booting; QEMU used {cpu} s of CPU ---\n{result.output}\n"
    )
    if result.returncode != 0:
        pytest.fail(f"guest pytest exited {result.returncode}:\n{result.output}", pytrace=False)
    assert " passed" in result.output
    assert " skipped" not in result.output, "guest tests skipped inside the guest"
    if session.sysfs_fixture is not None:
        check_sysfs_fixture(session, result, tools)


def test_every_guest_module_runs_in_some_session() -> None:
    """A guest module no session names would never run (no boot collects the folder)."""
    modules = {path.name for path in GUEST_TESTS.glob("test_*.py")}
    named = {m for session in SESSIONS for m in session.modules}
    assert named <= modules, sorted(named - modules)
    assert modules <= named, f"guest modules in no session: {sorted(modules - named)}"
    assert all("test_guest_boot.py" in s.modules for s in SESSIONS)
    assert len({s.name for s in SESSIONS}) == len(SESSIONS)
    for session in SESSIONS:
        for test in session.deselect:
            module, name = test.split("::")
            assert module in session.modules, test
            assert f"\ndef {name}(" in (GUEST_TESTS / module).read_text(), test
            assert any(module in s.modules and test not in s.deselect for s in SESSIONS), test


def test_session_arguments() -> None:
    balancing = next(s for s in SESSIONS if s.numa_balancing and s.kernel == "6.1")
    args = balancing.pytest_args()
    assert args[:3] == ["-v", "-rfEsxX", "--durations=12"]
    assert str(GUEST_TESTS / "test_guest_memory.py") in args
    at = args.index("--deselect")
    assert args[at + 1] == (
        "tests/vm/guest/test_guest_binding.py::test_exclusive_four_ranks_spawned_workers"
    )
