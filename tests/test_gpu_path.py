"""What a GPU would hit that a CPU run can show: a cache built in another dtype than the model,
and Triton's first-compile warning on stderr."""

from __future__ import annotations

import os

import pytest
import torch

from paged_helpers import tiny_qwen3
from paged_helpers.baselines import StaticKVCache


def _cache_for(model, dtype):
    config = model.config
    cache = StaticKVCache(config.num_hidden_layers, 1, 16, config.num_key_value_heads, config.head_dim, dtype=dtype)
    cache.create(0)
    cache.set_batch([0])
    return cache


def test_a_float32_cache_under_a_bfloat16_model_says_what_to_change():
    """load_qwen3 gives bfloat16 on a GPU while caches default to float32."""
    model = tiny_qwen3(dtype=torch.bfloat16)
    with pytest.raises(TypeError) as raised, torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), torch.arange(3), _cache_for(model, torch.float32))
    message = str(raised.value)
    assert "StaticKVCache holds float32 keys and values, but the model computes in bfloat16" in message
    assert "StaticKVCache(..., dtype=model.dtype, device=model.device)" in message
    assert "model.to(torch.float32)" in message


def test_a_cache_in_the_models_dtype_works():
    model = tiny_qwen3(dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]]), torch.arange(3), _cache_for(model, model.dtype))
    assert logits.dtype == torch.bfloat16


def test_fp_fusion_is_decided_before_triton_compiles():
    """Triton 3.9 writes a warning to stderr at its first compile unless this is set."""
    assert os.environ.get("TRITON_DEFAULT_FP_FUSION") == "1"
