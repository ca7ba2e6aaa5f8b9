"""Shared test configuration.

Hypothesis profiles: ``ci`` (default, fast) and ``fuzz`` (>= 100,000
examples per property), chosen with ``HYPOTHESIS_PROFILE``.

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


def pytest_configure(config: pytest.Config) -> None:
    problem = root_setup.conflict()
    if problem is not None:
        raise pytest.UsageError(problem)


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
