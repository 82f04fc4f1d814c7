"""data/: the tiny Qwen3 checkpoint, its tokenizer, the request-length traces and the expected
figures; rebuilt byte for byte by `python -m paged_helpers.course_data build`, found from a clone
and from an installed wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import paged_helpers as ph
from paged_helpers.checkpoint import load_qwen3
from paged_helpers.course_data import CHECKSUMS, TINY_QWEN3, data_dir, data_path, expected_figures
from paged_helpers.course_data.build import PAPER, TRACES, build, mismatches, read_checksums
from paged_helpers.model import random_qwen3
from paged_helpers.words import UNKNOWN, WordTokenizer, tokenizer
from paged_helpers.workloads import length_trace, workload_lengths, workload_names

from conftest import ROOT

TOKENS = torch.randint(0, 256, (3, 41), generator=torch.Generator().manual_seed(5))


# --- the checkpoint ------------------------------------------------------------------------------


def test_data_folder_is_the_clones_and_small():
    assert data_dir() == ROOT / "data"
    size = sum(path.stat().st_size for path in data_dir().rglob("*") if path.is_file())
    assert size < 2_000_000, f"data/ holds {size} bytes; keep it a few hundred kB"


def test_checkpoint_loads_through_load_qwen3_with_the_in_memory_models_logits():
    loaded = load_qwen3(data_path(TINY_QWEN3), device="cpu", dtype=torch.float32)
    in_memory = random_qwen3(0)
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS), in_memory(TOKENS))
        assert torch.equal(ph.tiny_qwen3(device="cpu")(TOKENS), in_memory(TOKENS))


def test_tiny_qwen3_builds_other_seeds_and_configs_in_memory():
    other = ph.tiny_qwen3(seed=1, device="cpu")
    with torch.no_grad():
        assert not torch.equal(other(TOKENS), ph.tiny_qwen3(device="cpu")(TOKENS))
        assert torch.equal(other(TOKENS), random_qwen3(1)(TOKENS))
    small = ph.tiny_qwen3(config=ph.model.tiny_config(num_hidden_layers=1), device="cpu")
    assert small.config.num_hidden_layers == 1


def test_checkpoint_is_read_by_transformers_too():
    transformers = pytest.importorskip("transformers")
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(data_path(TINY_QWEN3)).eval()
    with torch.no_grad():
        torch.testing.assert_close(ph.tiny_qwen3(device="cpu")(TOKENS), theirs(TOKENS).logits, rtol=1e-5, atol=1e-5)


# --- rebuild and checksums -----------------------------------------------------------------------


def test_rebuild_reproduces_every_file_byte_for_byte(tmp_path):
    built = build(tmp_path, data_dir())
    committed = read_checksums(data_dir())
    assert read_checksums(tmp_path) == committed
    assert {path.relative_to(tmp_path).as_posix() for path in built} == {*committed, CHECKSUMS}
    for name in committed:
        assert (tmp_path / name).read_bytes() == (data_dir() / name).read_bytes(), name
    assert mismatches(data_dir()) == []


def test_check_command_reports_a_changed_file(tmp_path):
    build(tmp_path, data_dir())
    weights = tmp_path / TINY_QWEN3 / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    done = subprocess.run(
        [sys.executable, "-m", "paged_helpers.course_data", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 1
    assert "tiny-qwen3/model.safetensors" in done.stdout and "1 file(s) differ" in done.stdout


# --- the tokenizer -------------------------------------------------------------------------------


def course_prompts() -> dict:
    return json.loads(data_path("prompts.json").read_text())


def test_tokenizer_round_trips_the_course_prompts():
    words = tokenizer()
    prompts = course_prompts()
    texts = [prompts["system_prompt"], *prompts["questions"], prompts["fork_prompt"], *prompts["examples"]]
    for text in texts:
        ids = words.encode(text)
        assert UNKNOWN not in words.tokens(ids)
        assert words.decode(ids) == text
    # The chapter's shapes: a 96-token system prompt, 8 tokens per question, a 40-token fork prompt.
    assert len(words.encode(prompts["system_prompt"])) == 96
    assert [len(words.encode(q)) for q in prompts["questions"]] == [8] * 8
    assert len(words.encode(prompts["fork_prompt"])) == 40


def test_every_id_of_the_model_has_a_word():
    words = tokenizer()
    assert words.vocab_size == ph.tiny_qwen3(device="cpu").config.vocab_size == 256
    assert len(set(words.tokens(range(256)))) == 256
    assert words.token_text(1) == "the" and words.tokens([3, 1]) == ["a", "the"]
    assert words.decode(words.encode("the cache, the block.")) == "the cache, the block."


def test_tokenizer_errors_name_the_problem():
    words = tokenizer()
    with pytest.raises(ValueError, match=r"\['zebra'\].*unknown='unk'"):
        words.encode("the zebra")
    assert words.encode("the zebra", unknown="unk") == [1, 0]
    with pytest.raises(ValueError, match=r"token_id must lie in \[0, 256\), got 256"):
        words.token_text(256)
    with pytest.raises(ValueError, match="distinct"):
        WordTokenizer(["the", "the"])


# --- workloads and figures -----------------------------------------------------------------------


def test_traces_match_the_published_means_and_say_how_they_were_made():
    for name, stats in TRACES.items():
        trace = length_trace(name)
        assert len(trace.input_tokens) == len(trace.output_tokens) == 1000
        for side in ("input", "output"):
            values = getattr(trace, f"{side}_tokens")
            assert sum(values) / len(values) == pytest.approx(stats[f"mean_{side}_tokens"], rel=0.01)
        assert max(trace.total_tokens) <= trace.static_capacity
        assert trace.source == PAPER and "sigma" in trace.how_made
    assert workload_names() == ["uniform", "alpaca", "sharegpt"]
    assert workload_lengths("alpaca", 5, seed=1) == workload_lengths("alpaca", 5, seed=1)
    with pytest.raises(ValueError, match="workload must be one of"):
        workload_lengths("nosuch")


def run_paged(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "run.py", "paged", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("workload", ["uniform", "alpaca", "sharegpt"])
def test_run_paged_prints_each_workloads_expected_figure(workload):
    assert run_paged("--workload", workload) == expected_figures()["workloads"][workload]["run_paged"]


def test_uniform_workload_is_the_chapters_figure():
    figures = expected_figures()
    assert figures["workloads"]["uniform"]["run_paged"] == figures["chapter"]["paged"]


def test_utilization_by_block_size_matches_the_expected_figures():
    from paged_helpers.plots.utilization import utilization_by_block_size

    for name, expected in expected_figures()["workloads"].items():
        measured = utilization_by_block_size(workload_lengths(name))
        assert {str(size): round(share, 3) for size, share in measured.items()} == expected[
            "paged_utilization_by_block_size"
        ]


def test_plot_by_workload_draws_one_line_per_workload():
    import matplotlib

    matplotlib.use("Agg")
    from paged_helpers.plots.utilization import plot_utilization_by_workload

    figure = plot_utilization_by_workload()
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert [label.split()[0] for label in labels] == ["uniform", "alpaca", "sharegpt"]
    assert "static slots: 30.3%" in labels[0]


# --- installed from a wheel ----------------------------------------------------------------------


@pytest.mark.slow
def test_an_installed_wheel_finds_its_data(tmp_path):
    """pip install . puts data/ inside the package; the installed copy needs no clone."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)], check=True)
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), *map(str, wheels.glob("*.whl"))], check=True)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import paged_helpers as ph\n"
        "from paged_helpers.course_data import data_dir\n"
        "from paged_helpers.course_data.build import mismatches\n"
        "print(data_dir()); print(mismatches(data_dir()))\n"
        "print(ph.tiny_qwen3(device='cpu').config.vocab_size, ph.tokenizer().decode([1, 2]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(target / "paged_helpers" / "course_data" / "files")
    assert lines[1:] == ["[]", "256 the."]
