"""Load a real Qwen3 checkpoint (config.json + *.safetensors) from a local folder, and save one;
the course's tiny Qwen3 (``tiny_qwen3``) is loaded from its own checkpoint in data/ this way.

Never downloads: point it at a folder you already have, for example a Hugging Face cache
snapshot of Qwen/Qwen3-0.6B, or the course's own ``data/tiny-qwen3``.

Honesty rules, so a checkpoint never loads silently wrong:
- a key missing from config.json takes the default of transformers' ``Qwen3Config``
  (``HF_DEFAULTS``), not the course's tiny model's;
- a setting this model does not implement (attention biases, rope scaling such as YaRN, sliding
  windows, an activation other than SiLU) is refused with a message naming the field;
- every problem with the files names the file: a folder with only ``pytorch_model.bin``, a
  truncated ``.safetensors``, a shard that the index lists but the folder lacks, an index beside a
  ``model.safetensors`` it does not list (transformers would read that file, this loader the shards).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .data_files import TINY_QWEN3, data_path
from .model import Qwen3, Qwen3Config, random_qwen3, tiny_config

# What transformers' Qwen3Config assumes when config.json omits a key (transformers 5.x).
HF_DEFAULTS: dict[str, Any] = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10_000.0,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32_768,
    "head_dim": 128,
    "hidden_act": "silu",
    "attention_bias": False,
    "use_sliding_window": False,
}
# Sizes have defaults in transformers too (a 4096-wide model), but no real checkpoint omits them:
# a missing size is far more likely a broken file than a wish for those defaults.
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
WEIGHTS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
# Buffers some exporters save although they are recomputed from the config.
DERIVED_BUFFERS = ("rotary_emb.inv_freq",)


def config_from_hf(raw: dict[str, Any], source: str = "config.json") -> Qwen3Config:
    """Our config from a Hugging Face Qwen3 config dict, or a ValueError naming the field.

    Missing keys take transformers' defaults; settings this model cannot honour are refused.
    """
    model_type = raw.get("model_type")
    if model_type not in (None, "qwen3"):
        raise ValueError(f"{source}: model_type is {model_type!r}; this course's model is 'qwen3'")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise ValueError(f"{source} is missing the field(s) {', '.join(missing)} that a Qwen3 model needs")
    _refuse_what_the_model_cannot_honour(raw, source)
    values = dict(HF_DEFAULTS)
    values.update({key: value for key, value in raw.items() if value is not None})
    values["rope_theta"] = _rope_theta(raw)
    # transformers: num_key_value_heads None or absent means one KV head per query head (no GQA).
    if values.get("num_key_value_heads") is None:
        values["num_key_value_heads"] = values["num_attention_heads"]
    names = Qwen3Config.__dataclass_fields__
    try:
        return Qwen3Config(**{key: values[key] for key in names})
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from error


def _rope_theta(raw: dict[str, Any]) -> float:
    """transformers 5 keeps rope_theta inside rope_parameters; 4.x at the top level."""
    parameters = raw.get("rope_parameters")
    if isinstance(parameters, dict) and parameters.get("rope_theta") is not None:
        return float(parameters["rope_theta"])
    if raw.get("rope_theta") is not None:
        return float(raw["rope_theta"])
    return float(HF_DEFAULTS["rope_theta"])


def _refuse_what_the_model_cannot_honour(raw: dict[str, Any], source: str) -> None:
    def refuse(field: str, value: Any, why: str) -> None:
        raise ValueError(f"{source}: {field} = {value!r} is not supported by the course's model ({why})")

    if raw.get("attention_bias"):
        refuse("attention_bias", raw["attention_bias"], "its q/k/v/o projections have no bias")
    activation = raw.get("hidden_act", HF_DEFAULTS["hidden_act"])
    if activation != "silu":
        refuse("hidden_act", activation, "its MLP is SwiGLU with SiLU")
    for field in ("rope_scaling", "rope_parameters"):
        parameters = raw.get(field)
        if parameters is None:
            continue
        if not isinstance(parameters, dict):
            refuse(field, parameters, "expected a dict of rotary settings")
        rope_type = parameters.get("rope_type", parameters.get("type", "default"))
        if rope_type != "default":
            refuse(f"{field}.rope_type", rope_type, "it implements plain rotary embeddings only, no scaling")
        if parameters.get("partial_rotary_factor", 1.0) != 1.0:
            refuse(f"{field}.partial_rotary_factor", parameters["partial_rotary_factor"], "it rotates all dims")
    if raw.get("use_sliding_window"):
        refuse("use_sliding_window", raw["use_sliding_window"], "its attention is full and causal")
    sliding_layers = [kind for kind in raw.get("layer_types") or [] if kind != "full_attention"]
    if sliding_layers:
        refuse("layer_types", sliding_layers[0], "every layer must be 'full_attention'")


def hf_config_dict(config: Qwen3Config) -> dict[str, Any]:
    """config.json for ``config``, every field explicit, readable by transformers' Qwen3Config."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **config.to_dict(),
        "hidden_act": "silu",
        "attention_bias": False,
        "use_sliding_window": False,
        "torch_dtype": "float32",
    }


def save_qwen3(model: Qwen3, folder: str | Path) -> list[Path]:
    """Write ``config.json`` and ``model.safetensors`` (float32, Hugging Face names); returns them.

    The bytes depend only on the weights and the config, so saving the same model twice gives
    identical files (the course's data/ checksums rely on it).
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "config.json"
    config_path.write_text(json.dumps(hf_config_dict(model.config), indent=2, sort_keys=True) + "\n")
    weights = {
        f"model.{name}": t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()
    }
    weights_path = folder / "model.safetensors"
    save_file(weights, str(weights_path), metadata={"format": "pt"})
    return [config_path, weights_path]


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files to read: the index's shards when there is an index, else every file."""
    index_path = folder / WEIGHTS_INDEX
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{index_path} is not a safetensors index (needs a 'weight_map'): {error}") from error
        shards = sorted(set(weight_map.values()))
        single = folder / SINGLE_WEIGHTS
        if single.is_file() and SINGLE_WEIGHTS not in shards:
            # transformers reads model.safetensors first and never opens the index; this loader reads
            # the index's shards. Two loaders, two models: refuse rather than pick one silently.
            raise ValueError(
                f"{folder} holds both {WEIGHTS_INDEX} (listing {len(shards)} shard(s): {', '.join(shards[:3])}"
                f"{', ...' if len(shards) > 3 else ''}) and {SINGLE_WEIGHTS}, which the index does not list: "
                f"transformers would load {SINGLE_WEIGHTS} and ignore the index, while this loader reads the "
                f"shards, so the two would load different weights. Keep one set: delete or move "
                f"{SINGLE_WEIGHTS} if the shards are the checkpoint, or {WEIGHTS_INDEX} and the shards if "
                f"{SINGLE_WEIGHTS} is"
            )
        absent = [name for name in shards if not (folder / name).is_file()]
        if absent:
            raise FileNotFoundError(
                f"{index_path} lists the shard(s) {', '.join(absent)} but {folder} does not hold them: "
                "the download is incomplete; fetch the missing file(s) again"
            )
        return [folder / name for name in shards]
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        return shards
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if pickles:
        raise FileNotFoundError(
            f"{folder} holds {', '.join(pickles)} but no *.safetensors: this loader reads only safetensors "
            "(a .bin file is a pickle, which can run code when loaded). Convert it once where you trust it: "
            "transformers' from_pretrained(folder).save_pretrained(folder, safe_serialization=True)"
        )
    raise FileNotFoundError(
        f"no *.safetensors file in {folder}: download the weights there first (this loader never does)"
    )


def _read_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError) as error:
            size = path.stat().st_size if path.exists() else 0
            raise ValueError(
                f"{path} could not be read as safetensors ({size} bytes; truncated or corrupt download?): {error}"
            ) from error
        for name, tensor in tensors.items():
            state[name.removeprefix("model.")] = tensor
    return state


def load_qwen3(folder: str | Path, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Qwen3:
    """Qwen3 from ``folder/config.json`` and the ``*.safetensors`` files beside it."""
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
    config = config_from_hf(raw, source=str(config_path))

    state = _read_weights(_weight_files(folder))
    for name in [n for n in state if n.endswith(DERIVED_BUFFERS)]:
        del state[name]
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)

    model = Qwen3(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(
            f"{folder}: the safetensors files lack {len(missing)} weight(s) the config implies, e.g. {missing[:3]}"
            + ("; config.json says tie_word_embeddings is false" if "lm_head.weight" in missing else "")
        )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise ValueError(
            f"{folder}: the safetensors files hold {len(unexpected)} weight(s) this model has no place for, "
            f"e.g. {unexpected[:3]}; loading without them would change the logits"
        )
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise ValueError(
                f"{folder}: weight {name} has shape {tuple(state[name].shape)} but config.json implies "
                f"{tuple(tensor.shape)}; check hidden_size, num_attention_heads, num_key_value_heads and head_dim"
            )
    model.load_state_dict(state)
    model.eval()
    device = torch.device(device or DEVICE)
    # bfloat16 halves the memory of a real checkpoint on a GPU; the CPU stays in float32.
    target_dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    return model.to(device=device, dtype=target_dtype)


def tiny_qwen3(
    seed: int = 0,
    config: Qwen3Config | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Qwen3:
    """The course's tiny Qwen3 (seed 0, default config) loaded from its checkpoint in data/, or
    ``random_qwen3(seed, config)`` built in memory for any other seed or config.

    The checkpoint goes through ``load_qwen3``, the same call that loads a real
    Qwen3, so the loader's validation runs on every start; its logits equal the in-memory model's
    exactly (tests/test_course_data.py).
    """
    from .device import DEVICE

    device = device or DEVICE
    if seed == 0 and (config is None or config == tiny_config()):
        return load_qwen3(data_path(TINY_QWEN3), device=device, dtype=dtype)
    return random_qwen3(seed, config).to(device=device, dtype=dtype)
