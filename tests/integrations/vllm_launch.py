"""Launch the real vLLM on CPU as far as it goes without a GPU (run as a script).

    python vllm_launch.py MODEL_DIR WORKER_CLS [numa_bind] [force_auto]

TP=2, the ``mp`` executor, ``VLLM_TARGET_DEVICE=cpu`` and the tiny random
Llama in MODEL_DIR (made offline by :func:`make_tiny_llama`).  vLLM starts
EngineCore, which starts two workers; their ``init_device`` is where a GPU is
needed, and where it fails here.  Prints one JSON line: the error vLLM raised.

``numa_bind``: vLLM's own ``--numa-bind``.  ``force_auto`` (vLLM >= 0.34):
vLLM's automatic-binding check ``numa_utils._can_auto_bind`` answers yes, as
it would on a multi-node host with ``numactl`` and nothing constraining the
launching process (this machine has one NUMA node and no GPU, so the real
check says no); like the real one it records the GPU-to-node map it found,
here every GPU on node 0, the node ``numactl`` can bind to on this machine.
Everything after that decision -- the ``numactl`` wrapper, the spawned
processes -- is vLLM's own.

vLLM 0.34's CPU platform refuses x86 without Triton's CPU backend
(triton-cpu), which PyPI does not ship, and the CUDA build of Triton reports
no active driver without a GPU.  :func:`allow_x86_cpu_platform` tells that
one check, in the launching process, that Triton is there: nothing up to the
GPU step (the workers' ``init_device``) runs a Triton kernel.  The same
function serves ``vllm_serve.py``.

``PROBE_PARK_PYNUMABIND_WORKER=1``: pynumabind's own worker class, named by
its real path (``--worker-cls pynumabind.integrations.vllm.Worker``), gets
what ``vllm_probe.ProbePynumabindWorker`` has -- the Triton stand-in that
lets vLLM >= 0.34 construct a GPU worker here, and the parking after
``init_device`` -- in every process the launch starts
(:func:`park_pynumabind_worker_in_children`).  vLLM imports no probe module
there, but every process started with the spawn method imports the
launching script first (as ``__mp_main__``), and with it this module.
"""

from __future__ import annotations

import json
import os
import sys


def make_tiny_llama(path: str) -> None:
    """A 2-layer random Llama, saved with no tokenizer (vLLM skips it)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    LlamaForCausalLM(config).save_pretrained(path)


def allow_x86_cpu_platform() -> None:
    """Let vLLM >= 0.34's CPU platform start on x86 without triton-cpu (see above).

    Only for the duration of the platform's config check: everywhere else
    vLLM sees the Triton it really has.
    """
    try:
        from vllm import triton_utils
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:
        return
    check = CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config):  # type: ignore[no-untyped-def]
        real = triton_utils.HAS_TRITON
        triton_utils.HAS_TRITON = True
        try:
            return check(cls, vllm_config)
        finally:
            triton_utils.HAS_TRITON = real

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


def force_auto_binding() -> None:
    from vllm.utils import numa_utils

    def can_auto_bind(parallel_config, local_rank, dp_local_rank=None):  # type: ignore[no-untyped-def]
        parallel_config.numa_bind_nodes = [0, 0]
        return True

    numa_utils._can_auto_bind = can_auto_bind


def park_pynumabind_worker_in_children() -> None:
    """In a process the launch started (not the launcher): see the module docstring."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return  # the launching process: it constructs no worker
    import vllm_probe

    vllm_probe.park_pynumabind_worker()


if os.environ.get("PROBE_PARK_PYNUMABIND_WORKER") == "1":
    park_pynumabind_worker_in_children()


def main() -> None:
    model, worker_cls = sys.argv[1], sys.argv[2]
    flags = set(sys.argv[3:])
    if not os.path.exists(os.path.join(model, "config.json")):
        make_tiny_llama(model)
    allow_x86_cpu_platform()
    if "force_auto" in flags:
        force_auto_binding()
    from vllm import LLM

    options = {"numa_bind": True} if "numa_bind" in flags else {}
    try:
        LLM(
            model=model,
            skip_tokenizer_init=True,
            tensor_parallel_size=2,
            distributed_executor_backend="mp",
            worker_cls=worker_cls,
            enforce_eager=True,
            max_model_len=128,
            **options,
        )
    except Exception as exc:  # the expected end of the road without a GPU
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return
    print(json.dumps({"error": None}), flush=True)


if __name__ == "__main__":
    main()
