"""Launch the real vLLM on CPU as far as it goes without a GPU (run as a script).

    python vllm_launch.py MODEL_DIR WORKER_CLS [numa_bind]

TP=2, the ``mp`` executor, ``VLLM_TARGET_DEVICE=cpu`` and the tiny random
Llama in MODEL_DIR (made offline by :func:`make_tiny_llama`).  vLLM starts
EngineCore, which starts two workers; their ``init_device`` is where a GPU is
needed, and where it fails here.  Prints one JSON line: the error vLLM raised.
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


def main() -> None:
    model, worker_cls = sys.argv[1], sys.argv[2]
    numa_bind = len(sys.argv) > 3 and sys.argv[3] == "numa_bind"
    if not os.path.exists(os.path.join(model, "config.json")):
        make_tiny_llama(model)
    from vllm import LLM

    try:
        LLM(
            model=model,
            skip_tokenizer_init=True,
            tensor_parallel_size=2,
            distributed_executor_backend="mp",
            worker_cls=worker_cls,
            enforce_eager=True,
            max_model_len=128,
            numa_bind=numa_bind,
        )
    except Exception as exc:  # the expected end of the road without a GPU
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return
    print(json.dumps({"error": None}), flush=True)


if __name__ == "__main__":
    main()
