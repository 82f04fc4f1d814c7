"""Prove the course on a CUDA GPU in one command: kernels compiled, fork logits, engine, bandwidth.

    python run.py gpu-check [--impl DIR] [--out FOLDER] [--budget-s 480]

Each stage runs in a process of its own (``stage_runner.run_stage``), so a stage that raises, crashes the
interpreter or hangs past its time limit is recorded as such and the next one still runs. Every
stage leaves one JSON record: its status (passed, failed, crashed, timeout, skipped), its seconds,
its figures, and the tail of what it printed. In order (``plan``), within ``--budget-s`` of device
time in all (8 minutes by default; a stage that would start after the budget is spent is skipped):

  compile[...]         the instructor's kernels (notebooks 07, 09), and those of --impl, built for
                       this GPU and run once per dtype against the float64 reference; registers and
                       spills of the decode kernel at num_warps 4 and 8
  kernel_fork_logits   notebook 04's fork milestone on the kernel path (``checks.kernels.model_path``), model
                       and cache in bfloat16, held to ``checks.reading.scratch``'s tolerance for that dtype
  engine               notebook 08's engine on the kernel path against the gather path
                       (``demos.system.ablation``): tokens/s of each, and whether the outputs are identical
  bandwidth            the decode kernel's bandwidth utilisation as FlashInfer defines it (bytes of K/V
                       read / kernel time / peak HBM bandwidth, L2 flushed before every timed run), over
                       context lengths 512 to 32k and batch sizes 1 to 64, beside SDPA on a contiguous
                       cache and the gather path (``demos.kernel.benchmark``)
  fork_logits[...], checks, notebook ...
                       the earlier checks: notebook 04's milestone on the gather path in bfloat16 and
                       float32, every check of the registry, notebooks 06, 07 and 09 top to bottom

It writes ``gpu_check.json`` (every record, and the targets) and, when the bandwidth stage has GPU
timings to draw, ``gpu_check.png``, in --out (default: the course's docs/). The targets for the
instructor's kernels, >= 60% of peak bandwidth at context >= 4k and the kernel path faster than the
gather path for every batch at context >= 2k, are reported as numbers, never as failures.

Without a GPU the same runner runs a CPU plan: tiny shapes in Triton's interpreter, the kernels
compiled for sm_90 by Triton's own compiler (no GPU needed), every timing labelled as an
interpreter timing, and the JSON written to a temporary folder unless --out names one (a CPU's
numbers never belong in docs/).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ..device import DEVICE, INFO
from .implementation import COURSE_NOTEBOOKS, add_impl_argument
from .stage_runner import TIME_BUDGET_S, Stage, run_stage

COMMAND = "gpu-check"  # python run.py gpu-check

__all__ = ["Stage", "add_arguments", "evaluate_targets", "plan", "run"]

KERNEL_NOTEBOOKS = ("06_triton_warmup", "07_paged_decode_kernel", "09_paged_prefill_kernel")
# FlashInfer's batch-decode figures span these batch sizes and context lengths; one block size
# keeps the sweep inside the budget (notebook 07's benchmark sweeps block sizes).
BANDWIDTH_GRID = {
    "batch_sizes": (1, 4, 16, 64),
    "context_lengths": (512, 1024, 2048, 4096, 8192, 16384, 32768),
    "block_sizes": (16,),
}
CPU_BANDWIDTH_GRID = {"batch_sizes": (1, 2), "context_lengths": (16, 32), "block_sizes": (8,)}
TARGET_SHARE_OF_PEAK = 0.60
TARGET_SHARE_FROM_CONTEXT = 4096
TARGET_FASTER_FROM_CONTEXT = 2048
INTERPRETER_TIMING = "Triton interpreter timing (the kernels run as Python on the CPU): not a GPU's speed"


# -- the stages (each runs in its own process) ----------------------------------------------------------


def _load(impl: str, notebook: str, name: str):
    from ..notebook_loader import load_from_notebook

    return load_from_notebook(notebook, name, search=[Path(impl).expanduser()], allow_unimplemented=False)


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def _on_gpu() -> bool:
    return DEVICE.type == "cuda" and not INFO.triton_interpreted


def stage_compile(impl: str, dtypes: list[str]) -> dict:
    """The kernels of ``impl`` built and run once per dtype against the float64 reference.

    On a GPU the first call compiles for this device (its seconds are reported) and the decode
    kernel's registers and spills are read at num_warps 4 and 8; on a CPU the kernels are compiled
    for sm_90 by Triton's compiler and run at a tiny shape in the interpreter.
    """
    from ..running.gpu_compile import record_launches
    from .kernel import _compiled_warps

    decode = _load(impl, "07_paged_decode_kernel", "paged_decode_attention")
    prefill = _load(impl, "09_paged_prefill_kernel", "paged_prefill_attention")
    shape, chunk, start, capability = _compile_shape()
    figures: dict[str, Any] = {"impl": impl, "device": str(DEVICE), "shape": shape, "by_dtype": {}}
    failures = []
    for name in dtypes:
        figures["by_dtype"][name], batch = _run_once(decode, prefill, shape, chunk, start, _dtype(name))
        if not figures["by_dtype"][name]["within_tolerance"]:
            failures.append(name)
    _, launches = record_launches(decode, (*batch, shape["block_size"]))  # the last dtype's batch
    figures["decode_registers_by_warps"] = {str(w): f for w, f in _compiled_warps(launches, capability).items()}
    figures["compiled_for"] = f"sm_{capability}" + ("" if _on_gpu() else " (Triton's compiler on the CPU, no GPU)")
    if failures or not all(f["ok"] for f in figures["decode_registers_by_warps"].values()):
        raise AssertionError(f"kernels wrong or not compiling: {json.dumps(figures)}")
    return figures


def _compile_shape() -> tuple[dict[str, int], int, int, int]:
    """(the decode batch's shape, the prefill chunk, its start, the compute capability to compile for)."""
    import torch

    if _on_gpu():
        shape = {"batch": 4, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "length": 1000, "block_size": 16}
        major, minor = torch.cuda.get_device_capability(DEVICE)
        return shape, 128, 300, 10 * major + minor
    shape = {"batch": 2, "q_heads": 4, "kv_heads": 2, "head_dim": 16, "length": 12, "block_size": 4}
    return shape, 5, 6, 90


def _run_once(decode, prefill, shape: dict[str, int], chunk: int, start: int, dtype) -> tuple[dict, tuple]:
    """(the figures of one dtype, the decode batch it ran): each kernel once, against the float64 reference."""
    import torch

    from ..checks.kernels.paged_attention import TOLERANCES
    from ..reference import paged_decode_reference, paged_prefill_reference
    from .kernel import _paged_batch

    q, k_pool, v_pool, tables, lengths = _paged_batch(**shape, dtype=dtype)
    started = time.perf_counter()
    out = decode(q, k_pool, v_pool, tables, lengths, shape["block_size"])
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    first_call = time.perf_counter() - started
    expected = paged_decode_reference(
        q, k_pool, v_pool, tables, lengths, shape["block_size"], compute_dtype=torch.float64
    )
    decode_error = float((out.double() - expected).abs().max())
    chunk_q = torch.randn((chunk, shape["q_heads"], shape["head_dim"]), device=DEVICE).to(dtype)
    got = prefill(chunk_q, k_pool, v_pool, tables[0], start, shape["block_size"])
    wanted = paged_prefill_reference(
        chunk_q, k_pool, v_pool, tables[0], start, shape["block_size"], compute_dtype=torch.float64
    )
    prefill_error = float((got.double() - wanted).abs().max())
    atol, rtol = TOLERANCES[dtype]
    # The same test as the kernel checks: |error| <= atol + rtol * |expected|, at the worst element.
    ok = bool(
        ((out.double() - expected).abs() <= atol + rtol * expected.abs()).all()
        and ((got.double() - wanted).abs() <= atol + rtol * wanted.abs()).all()
    )
    figures = {
        "first_decode_call_s": round(first_call, 3),
        "decode_max_abs_error": decode_error,
        "prefill_max_abs_error": prefill_error,
        "within_tolerance": ok,
    }
    return figures, (q, k_pool, v_pool, tables, lengths)


def stage_kernel_fork_logits(impl: str, dtype: str) -> dict:
    """``check_kernel_fork_logits`` with the model and the learner's cache in ``dtype``.

    The check builds both itself in float32; here its model factory and the cache class are given
    ``dtype`` for the duration of the call. The logits are
    held to ``checks.reading.scratch.logit_tolerance`` for the device and that dtype.
    """
    from ..checks.kernels import model_path as kernel_path
    from ..checks.reading.scratch import logit_tolerance

    wanted = _dtype(dtype)
    cache_class = _load(impl, "04_fork_and_copy_on_write", "PagedKVCache")

    class CacheInDtype(cache_class):  # the learner's cache, built in the model's dtype
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("dtype", wanted)
            super().__init__(*args, **kwargs)

    original = kernel_path.tiny_qwen3
    kernel_path.tiny_qwen3 = lambda *args, **kwargs: original(*args, **{**kwargs, "dtype": wanted})
    started = time.perf_counter()
    try:
        kernel_path.check_kernel_fork_logits(
            _load(impl, "09_paged_prefill_kernel", "paged_prefill_attention"),
            _load(impl, "07_paged_decode_kernel", "paged_decode_attention"),
            CacheInDtype,
        )
    finally:  # a caller in this process (a test) gets the check back as it was
        kernel_path.tiny_qwen3 = original
    return {
        "dtype": dtype,
        "tolerance": logit_tolerance(DEVICE, wanted),
        "seconds": round(time.perf_counter() - started, 2),
        "timing": "compiled GPU kernels" if _on_gpu() else INTERPRETER_TIMING,
    }


def stage_fork_logits(impl: str, dtype: str) -> dict:
    """``check_fork_logits`` (notebook 04, the gather path) with the model and the cache in ``dtype``."""
    from ..checks import check_fork_logits, copy_on_write

    wanted = _dtype(dtype)
    cache_class = _load(impl, "04_fork_and_copy_on_write", "PagedKVCache")

    class CacheInDtype(cache_class):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("dtype", wanted)
            super().__init__(*args, **kwargs)

    original = copy_on_write.tiny_qwen3
    copy_on_write.tiny_qwen3 = lambda *args, **kwargs: original(*args, **{**kwargs, "dtype": wanted})
    try:
        check_fork_logits(CacheInDtype)
    finally:
        copy_on_write.tiny_qwen3 = original
    return {"dtype": dtype}


def stage_engine(impl: str, sizes: dict) -> dict:
    """Notebook 08's engine on the gather path and on the kernel path: tokens/s and identical outputs."""
    from . import system

    classes = [
        _load(impl, "08_continuous_batching", "ContinuousBatchingEngine"),
        _load(impl, "04_fork_and_copy_on_write", "PagedKVCache"),
        _load(impl, "05_prefix_caching", "PrefixCache"),
        _load(impl, "07_paged_decode_kernel", "paged_decode_attention"),
        _load(impl, "09_paged_prefill_kernel", "paged_prefill_attention"),
    ]
    # JSON has no tuples: the workload's (low, high) ranges come back as pairs.
    table = system.ablation(*classes, **{k: tuple(v) if isinstance(v, list) else v for k, v in sizes.items()})
    gather, kernels = table["rows"]["paged + prefix"], table["rows"]["paged + prefix + kernels"]
    figures = {
        "sizes": sizes,
        "gather_tokens_per_second": gather["tokens_per_second"],
        "kernel_tokens_per_second": kernels["tokens_per_second"],
        "kernel_over_gather": round(kernels["tokens_per_second"] / gather["tokens_per_second"], 3)
        if gather["tokens_per_second"]
        else None,
        "outputs_identical": table["outputs_identical"],
        "timing": table["kernel_timing"] if _on_gpu() else INTERPRETER_TIMING,
        "rows": table["rows"],
    }
    if not table["outputs_identical"]:
        raise AssertionError(f"the kernel path's outputs differ from the gather path's: {json.dumps(figures)}")
    return figures


def _interpreter_rows(decode, batch_sizes, context_lengths, block_sizes) -> dict:
    """``kernel.benchmark``'s rows at tiny shapes, timed by the wall clock in the interpreter (labelled)."""
    import torch

    from .kernel import build_contenders

    rows = []
    for batch in batch_sizes:
        for length in context_lengths:
            for block_size in block_sizes:
                contenders = build_contenders(decode, batch, length, block_size, 4, 2, 16, torch.float32)
                row = {
                    "batch": batch,
                    "context": length,
                    "block_size": block_size,
                    "max_abs_error_vs_sdpa": contenders.max_abs_error_vs_sdpa,
                }
                for name, function in contenders.timed.items():
                    started = time.perf_counter()
                    function()
                    row[f"{name}_ms"] = round((time.perf_counter() - started) * 1e3, 3)
                rows.append(row)
    return {
        "device": "cpu",
        "timing": INTERPRETER_TIMING,
        "dtype": "float32",
        "heads": "4 query heads, 2 KV heads, head_dim 16",
        "peak_GBs": None,
        "rows": rows,
    }


def stage_bandwidth(impl: str, grid: dict) -> dict:
    """The decode benchmark over ``grid`` (GPU), with the targets; tiny interpreter rows on a CPU."""
    from . import kernel

    decode = _load(impl, "07_paged_decode_kernel", "paged_decode_attention")
    if not _on_gpu():
        return _interpreter_rows(decode, **grid)
    result = kernel.benchmark(decode, **grid)
    result["impl"] = impl  # the targets are set for the instructor's kernels (the default --impl)
    result["targets"] = evaluate_targets(result)
    return result


def stage_checks(impl: str) -> dict:
    """Every check of the registry against ``impl``; each check's outcome is a figure."""
    import contextlib
    import io

    from ..checks import REGISTRY

    outcomes = {}
    for name, info in REGISTRY.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                info.function(
                    _load(impl, info.notebook, info.builds),
                    *[_load(impl, notebook, built) for notebook, built in info.partners],
                )
            outcomes[name] = "passed"
        except Exception as error:  # one check's failure is a figure; the others still run
            outcomes[name] = f"failed: {type(error).__name__}: {str(error)[:500]}"
    failed = [name for name, outcome in outcomes.items() if outcome != "passed"]
    if failed:
        raise AssertionError(f"{len(failed)} of {len(outcomes)} checks failed: {json.dumps(outcomes)}")
    return outcomes


def stage_notebook(impl: str, notebook: str) -> dict:
    """``notebook`` top to bottom: no error and nothing on stderr (nbgrader zeroes a cell that writes it)."""
    import nbformat
    from nbclient import NotebookClient

    folder = Path(impl).expanduser()
    book = nbformat.read(folder / f"{notebook}.ipynb", as_version=4)
    NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    problems = []
    for index, cell in enumerate(book.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                problems.append(f"cell {index} raised {output.get('ename')}: {output.get('evalue')}")
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                problems.append(f"cell {index} wrote to stderr: {output['text'][:500]}")
    if problems:
        raise AssertionError("\n".join(problems))
    return {"cells": len(book.cells)}


# -- the targets, the plan, the command ------------------------------------------------------------------


def evaluate_targets(result: dict) -> dict:
    """The instructor's targets as numbers: share of peak at context >= 4k, kernel vs gather at >= 2k."""
    rows = result.get("rows", [])
    share_rows = [r for r in rows if r["context"] >= TARGET_SHARE_FROM_CONTEXT and "paged_of_peak" in r]
    faster_rows = [r for r in rows if r["context"] >= TARGET_FASTER_FROM_CONTEXT]
    by_batch: dict[int, list[float]] = {}
    for row in faster_rows:
        by_batch.setdefault(row["batch"], []).append(row["gather_ms"] / row["paged_ms"])
    lowest_share = min((r["paged_of_peak"] for r in share_rows), default=None)
    return {
        "share_of_peak": {
            "target": f">= {TARGET_SHARE_OF_PEAK:.0%} of peak at context >= {TARGET_SHARE_FROM_CONTEXT}",
            "lowest": lowest_share,
            "met": None if lowest_share is None else lowest_share >= TARGET_SHARE_OF_PEAK,
            "by_shape": {f"batch {r['batch']}, context {r['context']}": r["paged_of_peak"] for r in share_rows},
        },
        "kernel_faster_than_gather": {
            "target": "paged kernel faster than the gather path for every batch at context >= "
            f"{TARGET_FASTER_FROM_CONTEXT}",
            "slowest_speedup_by_batch": {str(b): round(min(s), 3) for b, s in sorted(by_batch.items())},
            "met": None if not by_batch else all(min(s) > 1 for s in by_batch.values()),
        },
        "counted_as": "targets are reported, never failures",
    }


def plan(impl: Path) -> list[Stage]:
    """The stages for this machine: the GPU plan with a GPU, else the CPU plan (tiny, interpreted)."""
    folders = [str(COURSE_NOTEBOOKS)]
    if Path(impl).expanduser().resolve() != COURSE_NOTEBOOKS.resolve():
        folders.append(str(Path(impl).expanduser()))
    impl_text = folders[-1]
    if _on_gpu():
        return _compile_stages(folders, ["bfloat16", "float16"], 90) + _gpu_stages(impl_text)
    # The CPU plan: the same stages where the interpreter can run them, at tiny shapes. bfloat16
    # cannot run on the kernel path here (the launchers refuse it), so the fork milestone runs in float32.
    return _compile_stages(folders, ["float32", "float16"], 300) + _cpu_stages(impl_text)


def _compile_stages(folders: list[str], dtypes: list[str], timeout_s: float) -> list[Stage]:
    """One compile stage per folder of notebooks: the instructor's, then the learner's if another."""
    return [
        Stage(
            f"compile[{'instructor' if f == str(COURSE_NOTEBOOKS) else f}]",
            f"{__name__}:stage_compile",
            {"impl": f, "dtypes": dtypes},
            timeout_s,
        )
        for f in folders
    ]


# The GPU plan's engine stage: long prompts, a shared system prompt, a budget of 8 slots of 2048 tokens.
_GPU_ENGINE_SIZES = {
    "requests": 32,
    "slots": 8,
    "capacity": 2048,
    "block_size": 16,
    "chunk_size": 512,
    "max_step_tokens": 2048,
    "prompt_range": [256, 1024],
    "output_range": [16, 32],
    "shared_prefix_tokens": 128,
}


def _gpu_stages(impl_text: str) -> list[Stage]:
    """The GPU plan after compiling: milestones, engine, bandwidth, the earlier checks, the kernel notebooks."""
    module = __name__
    stages = [
        Stage(
            "kernel_fork_logits[bfloat16]",
            f"{module}:stage_kernel_fork_logits",
            {"impl": impl_text, "dtype": "bfloat16"},
            60,
        ),
        Stage("engine", f"{module}:stage_engine", {"impl": impl_text, "sizes": _GPU_ENGINE_SIZES}, 90),
        Stage("bandwidth", f"{module}:stage_bandwidth", {"impl": impl_text, "grid": BANDWIDTH_GRID}, 240),
        Stage("fork_logits[bfloat16]", f"{module}:stage_fork_logits", {"impl": impl_text, "dtype": "bfloat16"}, 30),
        Stage("fork_logits[float32]", f"{module}:stage_fork_logits", {"impl": impl_text, "dtype": "float32"}, 30),
        Stage("checks", f"{module}:stage_checks", {"impl": impl_text}, 120),
    ]
    return stages + [
        Stage(f"notebook {n}", f"{module}:stage_notebook", {"impl": impl_text, "notebook": n}, 90)
        for n in KERNEL_NOTEBOOKS
    ]


def _cpu_stages(impl_text: str) -> list[Stage]:
    """The CPU plan after compiling: the milestones, the engine and the bandwidth grid, tiny and interpreted."""
    module = __name__
    return [
        Stage(
            "kernel_fork_logits[float32]",
            f"{module}:stage_kernel_fork_logits",
            {"impl": impl_text, "dtype": "float32"},
            300,
        ),
        Stage("engine", f"{module}:stage_engine", {"impl": impl_text, "sizes": {"requests": 2}}, 300),
        Stage("bandwidth", f"{module}:stage_bandwidth", {"impl": impl_text, "grid": CPU_BANDWIDTH_GRID}, 120),
        Stage("fork_logits[bfloat16]", f"{module}:stage_fork_logits", {"impl": impl_text, "dtype": "bfloat16"}, 120),
    ]


def _plot(result: dict, path: Path) -> None:
    """Achieved bandwidth against context length, one panel per batch: paged kernel, gather, SDPA, peak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    batches = sorted({row["batch"] for row in rows})
    figure, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 4), sharey=True, squeeze=False)
    for axis, batch in zip(axes[0], batches, strict=True):
        for block_size in sorted({row["block_size"] for row in rows}):
            mine = [row for row in rows if row["batch"] == batch and row["block_size"] == block_size]
            axis.plot(
                [r["context"] for r in mine],
                [r["paged_GBs"] for r in mine],
                marker="o",
                label=f"paged, block {block_size}",
            )
        largest = [
            row for row in rows if row["batch"] == batch and row["block_size"] == max(r["block_size"] for r in rows)
        ]
        for name, style in (("gather", "--"), ("sdpa", ":")):
            axis.plot(
                [r["context"] for r in largest], [r[f"{name}_GBs"] for r in largest], style, color="black", label=name
            )
        if result.get("peak_GBs"):
            axis.axhline(result["peak_GBs"], color="grey", linewidth=0.8, label="peak")
            axis.axhline(
                TARGET_SHARE_OF_PEAK * result["peak_GBs"],
                color="grey",
                linewidth=0.8,
                linestyle="--",
                label=f"{TARGET_SHARE_OF_PEAK:.0%} of peak",
            )
        axis.set_xscale("log", base=2)
        axis.set_xlabel("context length (tokens)")
        axis.set_title(f"batch {batch}")
    axes[0][0].set_ylabel("achieved GB/s (K and V read once, L2 flushed)")
    axes[0][-1].legend(fontsize=7)
    figure.suptitle(f"paged decode on {result['device']} ({result['dtype']})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(args: argparse.Namespace) -> dict:
    stages = plan(args.impl)
    on_gpu = _on_gpu()
    out = (
        Path(args.out)
        if args.out is not None
        else (COURSE_NOTEBOOKS.parent / "docs" if on_gpu else Path(tempfile.mkdtemp(prefix="gpu_check_cpu_")))
    )
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"gpu-check: {len(stages)} stages on {'the GPU' if on_gpu else 'the CPU (tiny shapes, interpreter)'}, "
        f"budget {args.budget_s:.0f} s"
    )
    started = time.perf_counter()
    records = []
    deadline = time.monotonic() + args.budget_s
    for stage in stages:
        record = run_stage(stage, time_left_s=deadline - time.monotonic())
        print(f"  {record['stage']}: {record['status']} ({record.get('seconds', 0)} s)")
        records.append(record)
    seconds = round(time.perf_counter() - started, 1)
    bandwidth = next((r.get("figures") for r in records if r["stage"] == "bandwidth" and r["status"] == "passed"), None)
    written = [out / "gpu_check.json"]
    drawn = bool(bandwidth and bandwidth.get("rows") and "paged_GBs" in bandwidth["rows"][0])
    if drawn:
        _plot(bandwidth, out / "gpu_check.png")
        written.append(out / "gpu_check.png")
    result = {
        "ran_on": "gpu" if on_gpu else "cpu",
        "device": INFO.banner(),
        "ok": all(r["status"] == "passed" for r in records),
        "seconds": seconds,
        "budget_s": args.budget_s,
        "within_budget": seconds <= args.budget_s,
        "stages": records,
        "targets": (bandwidth or {}).get("targets", "not evaluated: no GPU timings"),
        "plot": str(out / "gpu_check.png") if drawn else None,
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    return {key: result[key] for key in ("ran_on", "ok", "seconds", "within_budget")} | {
        "statuses": {r["stage"]: r["status"] for r in records},
        "written": [str(path) for path in written],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_argument(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for gpu_check.json and gpu_check.png (default: the course's docs/ on a GPU, "
        "a temporary folder on a CPU)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=TIME_BUDGET_S, help=f"seconds for all stages (default {TIME_BUDGET_S})"
    )
