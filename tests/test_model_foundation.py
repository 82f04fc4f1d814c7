"""The chapter's test file: the foundation the notebooks stand on.

- the model is Qwen3: the same logits as Hugging Face's Qwen3ForCausalLM on tiny random weights;
- it runs on a cache unchanged: cached decode (also batched, at different lengths) equals the
  full forward pass;
- bad input gets errors that name the argument;
- a real checkpoint folder loads, and a broken one is refused naming the file and the field;
- device selection switches Triton's interpreter on before triton is imported;
- run.py paged prints the chapter's figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from paged_helpers import tiny_qwen3
from paged_helpers.baselines import SlotsExhausted, StaticKVCache
from paged_helpers.checkpoint import load_qwen3
from paged_helpers.course_data import expected_figures
from paged_helpers.model import Qwen3Config, tiny_config
from paged_helpers.workloads import request_lengths, serving_workload, shared_prefix_prompts

from conftest import ROOT

transformers = pytest.importorskip("transformers")

HF_TINY = dict(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=8,
    rope_theta=10_000.0,
)


def hf_twin(config: Qwen3Config, ours: torch.nn.Module):
    """Hugging Face's Qwen3ForCausalLM holding exactly our weights."""
    hf_config = transformers.Qwen3Config(**config.to_dict())
    hf = transformers.Qwen3ForCausalLM(hf_config).eval()
    state = {f"model.{name}": tensor for name, tensor in ours.state_dict().items()}
    state["lm_head.weight"] = ours.embed_tokens.weight
    hf.load_state_dict(state)
    return hf


@pytest.mark.parametrize("seed", [0, 1])
def test_same_logits_as_hugging_face_qwen3(seed):
    config = tiny_config(**HF_TINY)
    ours = tiny_qwen3(seed=seed, config=config, device="cpu")
    hf = hf_twin(config, ours)
    tokens = torch.randint(0, config.vocab_size, (2, 37), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits, rtol=1e-5, atol=1e-5)


def test_hugging_face_comparison_can_fail():
    """A different rope_theta must show: the equivalence test is not vacuous."""
    config = tiny_config(**HF_TINY)
    ours = tiny_qwen3(seed=0, config=config, device="cpu")
    hf = hf_twin(Qwen3Config(**{**config.to_dict(), "rope_theta": 500.0}), ours)
    tokens = torch.randint(0, config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (ours(tokens) - hf(tokens).logits).abs().max() > 1e-3


def decode_with_cache(model, prompts, steps):
    """Prefill each prompt, then decode greedily in one batch; returns per-step logits per sequence."""
    config = model.config
    cache = StaticKVCache(
        config.num_hidden_layers, len(prompts), 256, config.num_key_value_heads, config.head_dim
    )
    sequences = [list(p) for p in prompts]
    logits_seen: list[list[torch.Tensor]] = [[] for _ in prompts]
    with torch.no_grad():
        for index, prompt in enumerate(prompts):
            cache.create(index)
            cache.set_batch([index])
            out = model(torch.tensor([prompt]), torch.arange(len(prompt)), cache)
            logits_seen[index].extend(out[0])
            sequences[index].append(int(out[0, -1].argmax()))
        cache.set_batch(list(range(len(prompts))))
        for _ in range(steps):
            tokens = torch.tensor([[seq[-1]] for seq in sequences])
            positions = torch.tensor([[len(seq) - 1] for seq in sequences])
            out = model(tokens, positions, cache)
            for index, seq in enumerate(sequences):
                logits_seen[index].append(out[index, 0])
                seq.append(int(out[index, 0].argmax()))
    return sequences, logits_seen


def test_cached_batched_decode_at_different_lengths_equals_full_forward():
    model = tiny_qwen3(seed=3, device="cpu")
    prompts = [list(range(5, 5 + n)) for n in (3, 17, 9)]
    sequences, logits_seen = decode_with_cache(model, prompts, steps=6)
    for sequence, seen in zip(sequences, logits_seen, strict=True):
        full = model.logits_from_scratch([sequence[:-1]])[0]
        torch.testing.assert_close(torch.stack(seen), full, rtol=1e-5, atol=1e-5)
    assert len({tuple(s[-6:]) for s in sequences}) > 1, "greedy outputs should differ between prompts"


def test_tiny_model_is_deterministic_per_seed():
    a, b, other = (tiny_qwen3(seed=seed, device="cpu") for seed in (7, 7, 8))
    tokens = torch.randint(0, 256, (1, 64))
    with torch.no_grad():
        torch.testing.assert_close(a(tokens), b(tokens), rtol=0, atol=0)
        assert not torch.allclose(a(tokens), other(tokens))


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda m: m(torch.tensor([[1, 2, 999]])), ["tokens", "vocab_size=256", "999"]),
        (lambda m: m(torch.tensor([[1, -2]])), ["tokens", "-2"]),
        (lambda m: m(torch.tensor([[1.0, 2.0]])), ["tokens", "integer"]),
        (lambda m: m(torch.tensor([[1, 2, 3]]), torch.tensor([0, 1])), ["positions", "[3]", "(2,)"]),
        (lambda m: m(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), cache=object()), ["update"]),
        (
            lambda m: m(torch.tensor([[1, 2]]), cache=StaticKVCache(2, 1, 8, 2, 16)),
            ["positions are required"],
        ),
    ],
)
def test_bad_input_names_the_argument(call, words):
    model = tiny_qwen3(device="cpu")
    with pytest.raises((ValueError, AttributeError)) as caught:
        call(model)
    for word in words:
        assert word in str(caught.value)


class ShortChangingCache:
    """Returns keys without the kv_heads dimension: the model must say so."""

    def update(self, layer, k, v, positions):
        return k[:, 0], v[:, 0], positions


class WrongPositionsCache:
    def update(self, layer, k, v, positions):
        return k, v, torch.arange(k.shape[2] + 1)


@pytest.mark.parametrize(
    "cache, words",
    [
        (ShortChangingCache(), ["keys", "kv_heads=2"]),
        (WrongPositionsCache(), ["key_positions", "one absolute position"]),
    ],
)
def test_cache_breaking_the_protocol_gets_a_clear_error(cache, words):
    model = tiny_qwen3(device="cpu")
    with pytest.raises(ValueError) as caught:
        model(torch.tensor([[1, 2, 3]]), torch.tensor([0, 1, 2]), cache)
    assert type(cache).__name__ in str(caught.value)
    for word in words:
        assert word in str(caught.value)


def test_static_cache_refuses_to_overflow_before_any_work():
    cache = StaticKVCache(1, 1, 8, 2, 16)
    cache.create("a")
    with pytest.raises(SlotsExhausted, match="holds 8"):
        cache.reserve("a", 9)
    with pytest.raises(SlotsExhausted, match="all 1 slots"):
        cache.create("b")
    assert cache.lengths == {"a": 0}


# --- checkpoints -----------------------------------------------------------------------------


def save_hf_checkpoint(folder, seed=0):
    config = tiny_config(**HF_TINY)
    ours = tiny_qwen3(seed=seed, config=config, device="cpu")
    hf_twin(config, ours).save_pretrained(folder)
    return ours


def test_loads_a_hugging_face_checkpoint_folder(tmp_path):
    ours = save_hf_checkpoint(tmp_path)
    loaded = load_qwen3(tmp_path, device="cpu", dtype=torch.float32)
    tokens = torch.randint(0, HF_TINY["vocab_size"], (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), ours(tokens), rtol=0, atol=0)


def test_checkpoint_problems_name_the_file_and_field(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_qwen3(tmp_path)
    save_hf_checkpoint(tmp_path)
    config_path = tmp_path / "config.json"
    raw = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**raw, "num_key_value_heads": 3}))
    with pytest.raises(ValueError, match="num_key_value_heads"):
        load_qwen3(tmp_path, device="cpu")
    del raw["hidden_size"]
    config_path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"config.json is missing the field\(s\) hidden_size"):
        load_qwen3(tmp_path, device="cpu")
    config_path.write_text(json.dumps({**raw, "hidden_size": 64}))
    with pytest.raises(ValueError, match="weight .* has shape"):
        load_qwen3(tmp_path, device="cpu")
    for shard in tmp_path.glob("*.safetensors"):
        shard.unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_qwen3(tmp_path, device="cpu")


# --- device and Triton mode --------------------------------------------------------------------


def run_python(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_import_switches_on_the_interpreter_before_triton_and_stays_silent():
    done = run_python(
        "import paged_helpers, os, triton, triton.language as tl, torch\n"
        "print(os.environ['TRITON_INTERPRET'])\n"
        "@triton.jit\n"
        "def add_one(x_ptr, N: tl.constexpr):\n"
        "    offsets = tl.arange(0, N)\n"
        "    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + tl.sum(tl.full((N,), 1.0, tl.float32)) / N)\n"
        "x = torch.zeros(8)\n"
        "add_one[(1,)](x, N=8)\n"
        "print(x.tolist())\n"
        "print(paged_helpers.banner())\n"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "1"
    assert lines[1] == str([1.0] * 8)
    assert "device cpu" in lines[2] and "interpreted" in lines[2] and torch.__version__ in lines[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_triton_imported_first_is_explained_in_the_banner():
    done = run_python("import triton, paged_helpers; print(paged_helpers.banner())")
    assert done.returncode == 0, done.stderr
    assert "imported before paged_helpers" in done.stdout
    assert "`import paged_helpers as ph` before any cell that imports triton" in done.stdout


# --- workloads and run.py --------------------------------------------------------------------


def test_workloads_are_seeded():
    assert request_lengths(seed=4) == request_lengths(seed=4) != request_lengths(seed=5)
    assert all(20 <= n <= 500 for n in request_lengths())
    prompts = shared_prefix_prompts()
    assert len(prompts) == 8 and all(len(p) == 104 and p[:96] == prompts[0][:96] for p in prompts)
    assert serving_workload(seed=1) == serving_workload(seed=1)


def run_demo(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "run.py", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_run_paged_prints_the_chapter_figure():
    figure = run_demo("paged")
    assert figure == expected_figures()["chapter"]["paged"]
    assert figure["requests"] == 32 and figure["static_slots_reserved"] == 32 * 1024
    assert figure["paged_slots_reserved"] - figure["tokens_stored"] < 32 * 16


def test_run_paged_options():
    small_blocks = run_demo("paged", "--block-size", "1", "--requests", "8", "--seed", "3")
    assert small_blocks["paged_utilization"] == 1.0 and small_blocks["requests"] == 8
    assert run_demo("paged", "--block-size", "128")["paged_utilization"] < 0.9


def test_run_paged_on_the_notebooks_cache_matches_the_arithmetic():
    assert run_demo("paged", "--impl", "notebooks") == run_demo("paged")


def test_run_paged_counts_the_blocks_of_the_cache_in_impl(tmp_path):
    """A cache that takes one block too many per request must show in the figure."""
    import nbformat

    shutil.copy(ROOT / "notebooks" / "02_block_allocator.ipynb", tmp_path)
    notebook = nbformat.read(ROOT / "notebooks" / "03_paged_kv_cache.ipynb", as_version=4)
    right = "return -(-tokens // self.block_size)"
    edited = [cell for cell in notebook.cells if right in cell.source]
    assert len(edited) == 1, "notebook 03's blocks_needed changed: update this test"
    edited[0].source = edited[0].source.replace(right, "return -(-tokens // self.block_size) + 1")
    nbformat.write(notebook, tmp_path / "03_paged_kv_cache.ipynb")
    wasteful = run_demo("paged", "--impl", str(tmp_path))
    assert wasteful["paged_slots_reserved"] == run_demo("paged")["paged_slots_reserved"] + 32 * 16
