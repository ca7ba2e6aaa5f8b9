"""What both test probes do once parked: report this process, then wait for the test.

Imported by ``vllm_probe`` and ``sglang_probe`` inside the framework's own
processes (this directory is on their ``PYTHONPATH``).  The record goes to
``$PROBE_DIR/<name>.json`` atomically (written, then renamed); the process
then waits until the test creates ``$PROBE_DIR/go``, at most ``$PROBE_WAIT``
seconds (120 by default), so the test can read its binding through /proc.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict


def report_and_wait(name: str, record: Dict[str, Any]) -> None:
    report_dir = os.environ["PROBE_DIR"]
    path = os.path.join(report_dir, f"{name}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.rename(path + ".tmp", path)
    go = os.path.join(report_dir, "go")
    deadline = time.monotonic() + float(os.environ.get("PROBE_WAIT", "120"))
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
