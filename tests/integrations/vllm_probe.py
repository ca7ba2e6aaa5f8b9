"""Worker classes for the real vLLM launch test (imported by vLLM's workers by name).

Each calls its parent's ``init_device`` (where the binding under test happens,
before vLLM's own device set-up, which fails on a machine without a GPU:
"Unsupported device type: cpu").  When that fails, the worker reports its pid
in a file and waits until the test has read its binding from outside, through
/proc, then lets the failure continue.  Nothing here binds or reads a binding.
"""

from __future__ import annotations

import os
from typing import Any

from probe_report import report_and_wait
from vllm.v1.worker.gpu_worker import Worker as StockWorker

from pynumabind.integrations.vllm import Worker as PynumabindWorker


def _park(worker: Any) -> None:
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "rank": worker.rank,
        "local_rank": worker.local_rank,
    }
    report_and_wait(f"worker-{worker.rank}", record)


class ProbeStockWorker(StockWorker):  # type: ignore[misc]
    """vLLM's own worker (bound, if at all, by the PYNUMABIND_VLLM=1 plugin)."""

    def init_device(self) -> Any:
        try:
            return super().init_device()
        finally:
            _park(self)


class ProbePynumabindWorker(PynumabindWorker):  # type: ignore[misc]
    """pynumabind's --worker-cls."""

    def init_device(self) -> Any:
        try:
            return super().init_device()
        finally:
            _park(self)
