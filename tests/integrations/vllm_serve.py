"""Run the real ``vllm serve`` CLI in this process (run as a script).

    python vllm_serve.py serve MODEL_DIR [vllm serve options...]

The same entry point as the ``vllm`` console script (``vllm.entrypoints.cli.
main``), with the one CPU stand-in of :mod:`vllm_launch`
(:func:`~vllm_launch.allow_x86_cpu_platform`) applied first.
"""

from __future__ import annotations

import sys

from vllm_launch import allow_x86_cpu_platform


def main() -> None:
    allow_x86_cpu_platform()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
