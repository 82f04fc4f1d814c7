"""`python run.py gpu-check`: its stage runner, its stages' CPU path, its targets and its plot.

The runner is tested with stand-in stages, written to a temporary module and run each in its own
process as the real ones are: one that raises, one that kills its interpreter with os._exit, one
that hangs past its limit. The others must still report. The real stages run on a CPU at tiny
shapes in Triton's interpreter, their timings labelled as such; the GPU plan's own run is what a
GPU machine checks.
"""

from __future__ import annotations

import argparse
import json
import time

import pytest
import torch

from paged_helpers.demos import gpu_check, stage_runner

from conftest import NOTEBOOKS

STAND_INS = """
import os, time

def passes(value):
    return {"value": value}

def raises():
    raise ValueError("boom")

def exits():
    print("about to leave")
    os._exit(7)

def hangs():
    time.sleep(60)

def prints_then_segfaults():
    import ctypes
    print("from python")
    ctypes.CDLL(None).printf(b"from C\\n")
    ctypes.string_at(0)

def prints_then_hangs():
    import ctypes
    print("from python")
    ctypes.CDLL(None).printf(b"from C\\n")
    time.sleep(60)
"""


@pytest.fixture
def stand_ins(tmp_path):
    (tmp_path / "stand_in_stages.py").write_text(STAND_INS)
    return str(tmp_path)


def test_a_stage_that_raises_crashes_or_hangs_does_not_hide_the_others(stand_ins):
    stages = [
        gpu_check.Stage("first", "stand_in_stages:passes", {"value": 1}),
        gpu_check.Stage("raises", "stand_in_stages:raises"),
        gpu_check.Stage("exits", "stand_in_stages:exits"),
        gpu_check.Stage("hangs", "stand_in_stages:hangs", timeout_s=1.5),
        gpu_check.Stage("last", "stand_in_stages:passes", {"value": 2}),
    ]
    started = time.monotonic()
    records = stage_runner.run_stages(stages, budget_s=60, pythonpath=(stand_ins,))
    assert time.monotonic() - started < 30  # the hanging stage was cut at its limit
    by_name = {record["stage"]: record for record in records}
    assert [record["status"] for record in records] == ["passed", "failed", "crashed", "timeout", "passed"]
    assert by_name["first"]["figures"] == {"value": 1} and by_name["last"]["figures"] == {"value": 2}
    assert by_name["raises"]["error"] == "ValueError: boom" and "raise ValueError" in by_name["raises"]["traceback"]
    assert "status 7" in by_name["exits"]["error"] and by_name["exits"]["printed"] == "about to leave\n"
    assert "killed" in by_name["hangs"]["error"]
    json.dumps(records)  # every record is JSON


def test_what_a_stage_printed_survives_a_segfault_or_a_kill_whatever_the_environment(stand_ins, monkeypatch):
    # stdout is a file: without the runner's own unbuffering, Python's and C's lines would be lost.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    stages = [
        gpu_check.Stage("segfaults", "stand_in_stages:prints_then_segfaults"),
        gpu_check.Stage("hangs", "stand_in_stages:prints_then_hangs", timeout_s=1.5),
    ]
    segfaults, hangs = stage_runner.run_stages(stages, budget_s=60, pythonpath=(stand_ins,))
    assert segfaults["status"] == "crashed" and segfaults["printed"] == "from python\nfrom C\n"
    assert "Segmentation fault" in segfaults["stderr"] and "prints_then_segfaults" in segfaults["stderr"]
    assert hangs["status"] == "timeout" and hangs["printed"] == "from python\nfrom C\n"


def test_a_stage_that_would_start_after_the_budget_is_skipped(stand_ins):
    stages = [
        gpu_check.Stage("hangs", "stand_in_stages:hangs", timeout_s=60),
        gpu_check.Stage("after", "stand_in_stages:passes", {"value": 3}),
    ]
    records = stage_runner.run_stages(stages, budget_s=1.5, pythonpath=(stand_ins,))
    assert [record["status"] for record in records] == ["timeout", "skipped"]
    assert "budget" in records[1]["reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the bandwidth stage times compiled kernels")
def test_the_bandwidth_stage_on_a_cpu_labels_its_timings_as_the_interpreters():
    figures = gpu_check.stage_bandwidth(
        str(NOTEBOOKS), {"batch_sizes": [1], "context_lengths": [16], "block_sizes": [8]}
    )
    assert figures["timing"] == gpu_check.INTERPRETER_TIMING
    [row] = figures["rows"]
    assert row["max_abs_error_vs_sdpa"] < 1e-4
    assert {"paged_ms", "gather_ms", "sdpa_ms"} <= set(row)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the bandwidth stage times compiled kernels")
def test_a_real_stage_runs_in_its_own_process_by_its_name_in_the_plan():
    [stage] = [stage for stage in gpu_check.plan(NOTEBOOKS) if stage.name == "bandwidth"]
    tiny = gpu_check.Stage(
        stage.name,
        stage.target,
        {**stage.kwargs, "grid": {"batch_sizes": [1], "context_lengths": [8], "block_sizes": [8]}},
        stage.timeout_s,
    )
    record = stage_runner.run_stage(tiny)
    assert record["status"] == "passed", record.get("error")
    assert record["figures"]["timing"] == gpu_check.INTERPRETER_TIMING and record["stderr"] == ""


def test_the_gather_paths_fork_milestone_runs_in_bfloat16_within_its_tolerance():
    from paged_helpers.checks import copy_on_write

    original = copy_on_write.tiny_qwen3
    assert gpu_check.stage_fork_logits(str(NOTEBOOKS), "bfloat16") == {"dtype": "bfloat16"}
    assert copy_on_write.tiny_qwen3 is original  # restored for whoever runs next in this process


def _row(batch, context, paged_ms, gather_ms, share):
    return {
        "batch": batch,
        "context": context,
        "block_size": 16,
        "paged_ms": paged_ms,
        "gather_ms": gather_ms,
        "paged_of_peak": share,
    }


def test_the_targets_are_numbers_never_failures():
    rows = [
        _row(1, 1024, 2.0, 1.0, 0.2),
        _row(1, 4096, 1.0, 3.0, 0.7),
        _row(8, 2048, 1.0, 0.9, 0.5),
        _row(8, 8192, 1.0, 2.0, 0.55),
    ]
    targets = gpu_check.evaluate_targets({"rows": rows})
    share = targets["share_of_peak"]
    assert share["lowest"] == 0.55 and share["met"] is False
    assert set(share["by_shape"]) == {"batch 1, context 4096", "batch 8, context 8192"}  # context >= 4k only
    faster = targets["kernel_faster_than_gather"]
    assert faster["slowest_speedup_by_batch"] == {"1": 3.0, "8": 0.9} and faster["met"] is False


def test_the_gpu_plan_covers_every_stage_within_the_budget(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "_on_gpu", lambda: True)
    names = [stage.name for stage in gpu_check.plan(tmp_path)]
    assert names[:3] == ["compile[instructor]", f"compile[{tmp_path}]", "kernel_fork_logits[bfloat16]"]
    assert {"engine", "bandwidth", "checks", "fork_logits[float32]"} <= set(names)
    bandwidth = next(stage for stage in gpu_check.plan(NOTEBOOKS) if stage.name == "bandwidth")
    grid = bandwidth.kwargs["grid"]
    assert min(grid["context_lengths"]) == 512 and max(grid["context_lengths"]) == 32768
    assert min(grid["batch_sizes"]) == 1 and max(grid["batch_sizes"]) == 64


def test_the_plot_draws_a_benchmark_result(tmp_path):
    rows = [
        {"batch": b, "context": c, "block_size": 16, "paged_GBs": 100.0, "gather_GBs": 50.0, "sdpa_GBs": 120.0}
        for b in (1, 8)
        for c in (512, 2048)
    ]
    path = tmp_path / "gpu_check.png"
    gpu_check._plot({"rows": rows, "device": "a GPU", "dtype": "bfloat16", "peak_GBs": 200.0}, path)
    assert path.stat().st_size > 1000


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the default folder is docs/")
def test_on_a_cpu_the_json_goes_to_the_folder_given_never_docs(monkeypatch, tmp_path, stand_ins):
    monkeypatch.setattr(
        gpu_check, "plan", lambda impl: [gpu_check.Stage("one", "stand_in_stages:passes", {"value": 4})]
    )
    monkeypatch.setenv("PYTHONPATH", stand_ins)
    parser = argparse.ArgumentParser()
    gpu_check.add_arguments(parser)
    assert parser.parse_args([]).out is None  # a CPU run without --out writes to a temporary folder
    summary = gpu_check.run(parser.parse_args(["--out", str(tmp_path / "out")]))
    written = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert summary["ran_on"] == "cpu" and summary["statuses"] == {"one": "passed"}
    assert written["stages"][0]["figures"] == {"value": 4} and written["plot"] is None
    assert written["targets"] == "not evaluated: no GPU timings"
