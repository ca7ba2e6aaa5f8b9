"""Run the real ``vllm serve`` CLI in this process (run as a script).

    python vllm_serve.py serve MODEL_DIR [vllm serve options...]

The same entry point as the ``vllm`` console script (``vllm.entrypoints.cli.
main``), with the one CPU stand-in of :mod:`vllm_launch`
(:func:`~vllm_launch.allow_x86_cpu_platform`) applied first.
``PROBE_FORCE_AUTO=1``: vLLM's automatic-binding check answers yes, as
``vllm_launch.py``'s ``force_auto`` does (:func:`~vllm_launch.force_auto_binding`).
"""

from __future__ import annotations

import os
import sys

from vllm_launch import allow_x86_cpu_platform, force_auto_binding


def main() -> None:
    allow_x86_cpu_platform()
    if os.environ.get("PROBE_FORCE_AUTO") == "1":
        force_auto_binding()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
