"""Launch the real SGLang on CPU as far as it goes without a GPU (run as a script).

    python sglang_launch.py MODEL_DIR [numa_node]

``sgl.Engine(device="cpu", tp_size=2)`` on the tiny random Llama in
MODEL_DIR: SGLang starts one scheduler process per GPU id (0 and 1), which
load the general plugins, configure themselves, then fail building the model
runner ("Expected a cuda device").  SGLang then kills its own process tree,
this process included, so the test runs it as a subprocess.  With
``numa_node`` SGLang's own binding is asked for too (``numa_node=[0, 0]``).
"""

from __future__ import annotations

import sys


def main() -> None:
    model = sys.argv[1]
    options = {}
    if len(sys.argv) > 2 and sys.argv[2] == "numa_node":
        options["numa_node"] = [0, 0]
    import sglang as sgl

    sgl.Engine(
        model_path=model,
        device="cpu",
        tp_size=2,
        skip_tokenizer_init=True,
        disable_cuda_graph=True,
        mem_fraction_static=0.5,
        log_level="info",
        **options,
    )
    print("ENGINE STARTED", flush=True)


if __name__ == "__main__":
    main()
