"""The checkpoint loader is honest: transformers' defaults, refusals naming the field, file errors
naming the file. Every case is a tiny checkpoint saved by transformers itself."""

from __future__ import annotations

import json

import pytest
import torch

from paged_helpers.checkpoint import HF_DEFAULTS, load_qwen3

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=8,
    # Large initial weights: logits far from uniform, so a wrong rope_theta or head shows.
    initializer_range=0.3,
)


def save_checkpoint(folder, **overrides):
    """A random transformers Qwen3 saved to ``folder``; returns the model."""
    torch.manual_seed(0)
    config = transformers.Qwen3Config(**{**TINY, "tie_word_embeddings": False, **overrides})
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.save_pretrained(folder)
    return model


def edit_config(folder, drop=(), **changes):
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    for key in drop:
        raw.pop(key, None)
    raw.update(changes)
    path.write_text(json.dumps(raw))


TOKENS = torch.randint(0, TINY["vocab_size"], (2, 23), generator=torch.Generator().manual_seed(1))


def assert_same_logits_as_transformers(folder):
    """Both libraries read the same folder; the logits must agree."""
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(folder).eval()
    ours = load_qwen3(folder, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(ours(TOKENS), theirs(TOKENS).logits, rtol=1e-5, atol=1e-5)


def test_defaults_are_transformers_defaults():
    config = transformers.Qwen3Config()
    assert HF_DEFAULTS["tie_word_embeddings"] == config.tie_word_embeddings
    assert HF_DEFAULTS["rope_theta"] == config.rope_parameters["rope_theta"]
    for key in ("rms_norm_eps", "max_position_embeddings", "head_dim", "hidden_act", "attention_bias"):
        assert HF_DEFAULTS[key] == getattr(config, key), key


def test_a_complete_checkpoint_loads_like_transformers(tmp_path):
    save_checkpoint(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    assert_same_logits_as_transformers(tmp_path)


def test_no_tie_word_embeddings_key_means_untied_as_in_transformers(tmp_path):
    save_checkpoint(tmp_path)
    edit_config(tmp_path, drop=["tie_word_embeddings"])
    assert_same_logits_as_transformers(tmp_path)
    assert load_qwen3(tmp_path, device="cpu").lm_head is not None


def test_no_rope_theta_key_means_transformers_default(tmp_path):
    save_checkpoint(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    edit_config(tmp_path, drop=["rope_parameters", "rope_theta"])
    assert_same_logits_as_transformers(tmp_path)
    assert load_qwen3(tmp_path, device="cpu").config.rope_theta == 10_000.0


def test_legacy_top_level_rope_theta_is_read(tmp_path):
    save_checkpoint(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 500_000.0})
    edit_config(tmp_path, drop=["rope_parameters"], rope_theta=500_000.0)
    assert_same_logits_as_transformers(tmp_path)


def test_the_comparison_can_fail(tmp_path):
    """A loader that guessed rope_theta differently would be caught: logits move by far more than 1e-5."""
    save_checkpoint(tmp_path)
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path).eval()
    edit_config(tmp_path, drop=["rope_parameters"], rope_theta=1_000_000.0)
    ours = load_qwen3(tmp_path, device="cpu")
    with torch.no_grad():
        assert (ours(TOKENS) - theirs(TOKENS).logits).abs().max() > 1e-3


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}, "rope_parameters.rope_type"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling.rope_type"),
        ({"use_sliding_window": True, "sliding_window": 8}, "use_sliding_window"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"model_type": "llama"}, "model_type"),
    ],
)
def test_settings_the_model_cannot_honour_are_refused_by_name(tmp_path, changes, field):
    save_checkpoint(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(ValueError) as caught:
        load_qwen3(tmp_path, device="cpu")
    message = str(caught.value)
    assert field in message and "config.json" in message, message


def test_a_checkpoint_with_attention_biases_is_refused(tmp_path):
    """transformers saves the bias weights too; the config alone is enough to refuse."""
    save_checkpoint(tmp_path, attention_bias=True)
    with pytest.raises(ValueError, match="attention_bias = True"):
        load_qwen3(tmp_path, device="cpu")


def test_unexpected_weights_are_named(tmp_path):
    save_checkpoint(tmp_path, attention_bias=True)
    edit_config(tmp_path, attention_bias=False)
    with pytest.raises(ValueError, match=r"no place for.*q_proj.bias"):
        load_qwen3(tmp_path, device="cpu")


def test_missing_lm_head_says_the_config_is_untied(tmp_path):
    save_checkpoint(tmp_path, tie_word_embeddings=True)
    edit_config(tmp_path, drop=["tie_word_embeddings"])
    with pytest.raises(ValueError, match="lm_head.weight.*tie_word_embeddings is false"):
        load_qwen3(tmp_path, device="cpu")


def test_a_bin_only_folder_names_the_file(tmp_path):
    model = save_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError) as caught:
        load_qwen3(tmp_path, device="cpu")
    assert "pytorch_model.bin" in str(caught.value) and "safetensors" in str(caught.value)
    assert "download" not in str(caught.value)


def test_a_truncated_file_is_named(tmp_path):
    save_checkpoint(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors could not be read .*truncated"):
        load_qwen3(tmp_path, device="cpu")


def test_a_missing_shard_is_named(tmp_path):
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**TINY)).eval()
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 2
    assert_same_logits_as_transformers(tmp_path)
    shards[1].unlink()
    with pytest.raises(FileNotFoundError) as caught:
        load_qwen3(tmp_path, device="cpu")
    assert shards[1].name in str(caught.value) and "model.safetensors.index.json" in str(caught.value)


def test_shards_beside_a_stale_single_file_are_refused_naming_both(tmp_path):
    """transformers reads model.safetensors first and ignores the index; the shards are another model."""
    torch.manual_seed(0)
    sharded = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**TINY)).eval()
    sharded.save_pretrained(tmp_path, max_shard_size="20KB")
    stale = tmp_path / "stale"
    save_checkpoint(stale, num_hidden_layers=1, tie_word_embeddings=True)
    (stale / "model.safetensors").rename(tmp_path / "model.safetensors")
    with pytest.raises(ValueError) as caught:
        load_qwen3(tmp_path, device="cpu")
    message = str(caught.value)
    assert "model.safetensors.index.json" in message
    assert "and model.safetensors, which the index does not list" in message
    assert "transformers would load model.safetensors" in message


def test_an_index_listing_the_single_file_still_loads(tmp_path):
    """Some repositories ship an index whose every entry names model.safetensors: one set of weights."""
    save_checkpoint(tmp_path)
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        weight_map = {name: "model.safetensors" for name in weights.keys()}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert_same_logits_as_transformers(tmp_path)
