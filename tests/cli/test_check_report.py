"""What ``pynumabind check`` shows: deliberate no-ops, the GPU of a failed rank, each warning once.

Every run is the real console script with real spawned workers.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..support.cli_helpers import run, two_node_snapshot


def test_disabled_binding_is_not_bound_on_purpose_not_a_failure() -> None:
    """The troubleshooting page recommends PYNUMABIND_DISABLE=1; check used to call it FAIL."""
    result = run("check", "--no-nvml", "--nprocs", "1", env={"PYNUMABIND_DISABLE": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[-1] == "ok", lines[1]
    assert "Problems" not in result.stdout
    section = lines.index("Not bound, on purpose")
    assert lines[section + 1] == "  rank 0: disabled by PYNUMABIND_DISABLE=1"
    assert lines[-1] == "0 of 1 workers bound as planned, 1 not bound, on purpose"
    assert result.stderr == ""


def test_disabled_binding_in_json_says_why() -> None:
    result = run("check", "--json", "--no-nvml", "--nprocs", "2", env={"PYNUMABIND_DISABLE": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    for worker in report["workers"]:
        assert worker["ok"] is True and worker["problems"] == []
        assert worker["not_bound"] == "disabled by PYNUMABIND_DISABLE=1"
        assert worker["planned_cpus"] == "unbound" and worker["policy"] == "none"


def test_a_failed_rank_still_names_its_gpu(tmp_path: Path) -> None:
    """Rank 1's node has no allowed CPU: it fails, and the table names GPU 1, not 'none'."""
    snapshot = two_node_snapshot(tmp_path / "machine.json")
    result = run("check", "--topology", str(snapshot), "--allowed-cpus", "0")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:3]}
    assert rows["0"][1:3] == ["0", "0000:17:00.0"] and rows["0"][-1] == "ok"
    assert rows["1"][1:3] == ["1", "0000:65:00.0"] and rows["1"][-1] == "FAIL"
    workers = json.loads(
        run("check", "--json", "--topology", str(snapshot), "--allowed-cpus", "0").stdout
    )["workers"]
    assert [w["gpu"] for w in workers] == ["0 0000:17:00.0", "1 0000:65:00.0"]
