"""Fixtures of the real-framework tests; see :mod:`tests.integrations.helpers`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .helpers import REQUIRED_ENV, two_node_snapshot


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return two_node_snapshot(tmp_path / "two-node.json")


@pytest.fixture
def numactl() -> str:
    found = shutil.which("numactl")
    if found is None:
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail("numactl is not on PATH (.ci/integrations puts Debian's there)")
        pytest.skip("numactl is not installed")
    return found
