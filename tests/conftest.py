"""Shared test configuration.

Hypothesis profiles: ``ci`` (default, fast) and ``fuzz`` (>= 100,000
examples per property), chosen with ``HYPOTHESIS_PROFILE``.

Temporary directories (``tmp_path``) live in RAM where the machine has room
(``tests/support/temproot.py``): the discovery, report and reader tests write
recorded machines' sysfs trees, some 5,000 small files each, and on the
development and CI machines' disk (ext4, ``discard``) creating a file took
0.3-0.7 ms while other work wrote to it, against 0.02 ms on tmpfs: such a
test took 5-7 s instead of 0.2 s, and those tests were most of the suite's
time.  ``--basetemp`` or ``PYTEST_DEBUG_TEMPROOT`` given, or a run inside
the QEMU guest (its RAM is small), keeps pytest's own choice.

Every session starts by saying what it will install or start as root
(``tests/support/root_setup.py``; in the header, or on a line of its own
under ``-q``), and ``PYNUMABIND_TESTS_NO_ROOT_SETUP=1``
turns that off; asking for it together with a test that must run
(``PYNUMABIND_VM_REQUIRED=1``, ``PYNUMABIND_SLURM_REQUIRED=1``) is a usage
error before anything runs.
"""

from __future__ import annotations

import os
import signal
from typing import List

import pytest
from hypothesis import HealthCheck, settings

from .support import root_setup
from .support.temproot import ram_temproot

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=100_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# A test run started in the background (bash's `cmd &` in a script, as the
# framework lanes of .ci/integrations are, or `nohup ... &`) inherits SIGINT
# ignored, and CPython then installs no KeyboardInterrupt handler, nor do the
# children the tests start (an ignored signal stays ignored across exec).  The
# Ctrl-C tests would then test nothing and fail; put Ctrl-C back as a
# terminal gives it: KeyboardInterrupt here, the default action in children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin made the factory
def pytest_configure(config: pytest.Config) -> None:
    problem = root_setup.conflict()
    if problem is not None:
        raise pytest.UsageError(problem)
    _temproot_in_ram(config)


def _temproot_in_ram(config: pytest.Config) -> None:
    """This session's ``tmp_path`` base under :func:`ram_temproot` (the module's docstring).

    pytest reads ``PYTEST_DEBUG_TEMPROOT`` (its documented root for the
    temporary directories) once, when the base is first made: it is set for
    that moment only, so no child process of a test inherits it, and pytest's
    own layout, numbering and clean-up (``pytest-of-USER/pytest-N``, the
    retention settings in pyproject.toml) are kept.  The factory is pytest's
    private ``config._tmp_path_factory``; without it, nothing changes.
    """
    factory = getattr(config, "_tmp_path_factory", None)
    if (
        factory is None
        or config.option.basetemp
        or os.environ.get("PYTEST_DEBUG_TEMPROOT")
        or os.environ.get("PYNUMABIND_IN_GUEST")
    ):
        return
    root = ram_temproot()
    if root is None:
        return
    os.environ["PYTEST_DEBUG_TEMPROOT"] = root
    try:
        factory.getbasetemp()
    finally:
        del os.environ["PYTEST_DEBUG_TEMPROOT"]


def pytest_report_header(config: pytest.Config) -> List[str]:
    """What this session will install or start as root (or that it will not)."""
    return root_setup.header()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The same lines where no header is shown (``-q``, ``--no-header``): said once either way."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or (reporter.showheader and not reporter.no_header):
        return
    for line in root_setup.header():
        reporter.write_line(line)
