"""Worker classes for the real vLLM launch test (imported by vLLM's workers by name).

Each calls its parent's ``init_device`` (where the binding under test happens,
before vLLM's own device set-up, which fails on a machine without a GPU:
"Unsupported device type: cpu").  When that fails, the worker reports its pid
in a file and waits until the test has read its binding from outside, through
/proc, then lets the failure continue.  Nothing here binds or reads a binding.

vLLM >= 0.34's GPU worker refuses to be constructed unless Triton has an
active driver, which takes a GPU; importing this module (which vLLM does in
each worker, to resolve the worker class) tells the GPU worker module that it
has one, as ``vllm_launch.allow_x86_cpu_platform`` does for the CPU platform's
config check.  Nothing before the GPU step runs a Triton kernel.
"""

from __future__ import annotations

import os
from typing import Any

from probe_report import report_and_wait
from vllm.v1.worker import gpu_worker
from vllm.v1.worker.gpu_worker import Worker as StockWorker

from pynumabind.integrations.vllm import Worker as PynumabindWorker

if hasattr(gpu_worker, "HAS_TRITON"):  # vLLM >= 0.34 (see above)
    gpu_worker.HAS_TRITON = True


def _park(worker: Any) -> None:
    parallel_config = worker.vllm_config.parallel_config
    dp = getattr(parallel_config, "data_parallel_index", None)
    if dp is None:
        dp = parallel_config.data_parallel_rank
    record = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "rank": worker.rank,
        "local_rank": worker.local_rank,
        "dp": dp,
        # Set by vLLM for a process it starts through its numactl wrapper.
        "numactl": os.environ.get("_VLLM_INTERNAL_NUMACTL_ARGS"),
    }
    report_and_wait(f"worker-{dp}-{worker.rank}", record)


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


def park_pynumabind_worker() -> None:
    """pynumabind's own Worker parks after ``init_device``, as :class:`ProbePynumabindWorker`.

    For a launch that names it by its real path (``vllm_launch``'s
    ``PROBE_PARK_PYNUMABIND_WORKER``); importing this module has already
    given vLLM's GPU worker module its Triton stand-in.
    """
    init_device = PynumabindWorker.init_device
    if getattr(init_device, "probe_parks", False):
        return

    def parked(self: Any) -> Any:
        try:
            return init_device(self)
        finally:
            _park(self)

    parked.probe_parks = True  # type: ignore[attr-defined]
    PynumabindWorker.init_device = parked
