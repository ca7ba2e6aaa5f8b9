"""Shared test configuration.

Hypothesis profiles: ``ci`` (default, fast) and ``fuzz`` (>= 100,000
examples per property), chosen with ``HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os
import signal

from hypothesis import HealthCheck, settings

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
