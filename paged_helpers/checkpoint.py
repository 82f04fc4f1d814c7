"""Load a real Qwen3 checkpoint (config.json + *.safetensors) from a local folder.

Never downloads: point it at a folder you already have, for example a Hugging Face cache
snapshot of Qwen/Qwen3-0.6B. Every problem names the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .model import Qwen3, Qwen3Config


def load_qwen3(
    folder: str | Path, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> Qwen3:
    """Qwen3 from ``folder/config.json`` and the ``*.safetensors`` files beside it."""
    from safetensors.torch import load_file

    from .device import DEVICE

    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{config_path} not found: load_qwen3 needs a folder holding config.json and *.safetensors"
        )
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_path} is not valid JSON: {error}") from error
    model_type = raw.get("model_type")
    if model_type not in (None, "qwen3"):
        raise ValueError(f"{config_path}: model_type is {model_type!r}; this course's model is 'qwen3'")
    config = Qwen3Config.from_dict(raw, source=str(config_path))

    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(
            f"no *.safetensors file in {folder}: download the weights there first (this loader never does)"
        )
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        for name, tensor in load_file(str(shard)).items():
            state[name.removeprefix("model.")] = tensor
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)

    model = Qwen3(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(
            f"{folder}: the safetensors files lack {len(missing)} weight(s) the config implies, e.g. {missing[:3]}"
        )
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise ValueError(
                f"{folder}: weight {name} has shape {tuple(state[name].shape)} but config.json implies "
                f"{tuple(tensor.shape)}; check hidden_size, num_attention_heads, num_key_value_heads and head_dim"
            )
    model.load_state_dict({k: state[k] for k in expected})
    model.eval()
    device = torch.device(device or DEVICE)
    # bfloat16 halves the memory of a real checkpoint on a GPU; the CPU stays in float32.
    target_dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    return model.to(device=device, dtype=target_dtype)
