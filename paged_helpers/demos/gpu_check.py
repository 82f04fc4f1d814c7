"""Verify the course on a CUDA GPU in one command: checks, fork logits, kernel notebooks, benchmark.

    python run.py gpu-check [--impl DIR] [--out docs]

On a CUDA machine, within about 8 minutes, it runs

  1. every check (``paged_helpers.checks.REGISTRY``) against the definitions in --impl (default:
     the instructor's notebooks), the kernel checks in float16 and bfloat16 as a GPU runs them;
  2. ``check_fork_logits`` with the model and the cache in bfloat16 and in float32;
  3. notebooks 06 (Triton warm-up), 07 (decode kernel) and 09 (prefill kernel) top to bottom, failing on any error
     or any output on stderr (nbgrader zeroes a cell that writes stderr);
  4. the decode benchmark over batch size, context length and block size;

and writes one JSON (``gpu_check.json``) and one plot (``gpu_check.png``) in --out. Every step
is recorded, passed or not, so one run shows everything a GPU breaks. On a machine without CUDA
it says what it would do and exits cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
import traceback
from pathlib import Path

import torch

from ..device import DEVICE, INFO
from .implementation import COURSE_NOTEBOOKS, add_impl_argument

COMMAND = "gpu-check"  # python run.py gpu-check

__all__ = ["PLAN", "add_arguments", "run"]

KERNEL_NOTEBOOKS = ("06_triton_warmup", "07_paged_decode_kernel", "09_paged_prefill_kernel")
FORK_DTYPES = (torch.bfloat16, torch.float32)
BENCHMARK_GRID = {"batch_sizes": (1, 8, 32), "context_lengths": (512, 2048, 8192), "block_sizes": (16, 32, 64, 128)}
TIME_BUDGET_S = 8 * 60

PLAN = (
    "every check in paged_helpers.checks.REGISTRY against the notebooks' definitions (kernel checks in "
    "float16 and bfloat16)",
    "check_fork_logits with model and cache in bfloat16, then float32",
    f"notebooks {', '.join(KERNEL_NOTEBOOKS)} end to end: no error, nothing on stderr",
    "the decode benchmark over batch sizes {batch_sizes}, context lengths {context_lengths}, block sizes "
    "{block_sizes}".format(**BENCHMARK_GRID),
    "write gpu_check.json and gpu_check.png in --out",
)


def _step(name: str, action) -> dict:
    """Run one step; record passed/failed, seconds, what it printed, and the error if any."""
    printed = io.StringIO()
    started = time.perf_counter()
    record: dict = {"step": name}
    try:
        with contextlib.redirect_stdout(printed):
            detail = action()
        record.update(ok=True, detail=detail)
    except Exception as error:  # every step is recorded, passed or not
        record.update(ok=False, error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc()[-3000:])
    record["seconds"] = round(time.perf_counter() - started, 2)
    record["printed"] = printed.getvalue()[-3000:]
    return record


def _load(folder: Path, notebook: str, name: str):
    from ..notebook_loader import load_from_notebook

    return load_from_notebook(notebook, name, search=[folder], allow_unimplemented=False)


def _run_checks(folder: Path) -> list[dict]:
    from ..checks import REGISTRY

    def run_one(info):
        def action():
            learner = _load(folder, info.notebook, info.builds)
            partners = [_load(folder, notebook, name) for notebook, name in info.partners]
            info.function(learner, *partners)

        return action

    return [_step(name, run_one(info)) for name, info in REGISTRY.items()]


def _fork_logits(folder: Path, dtype: torch.dtype) -> dict:
    """check_fork_logits with the model and the learner's cache in ``dtype``.

    The check builds both itself (float32); here its model factory and the cache class are
    given ``dtype`` for the duration of the call.
    """
    from ..checks import check_fork_logits, copy_on_write

    cache_class = _load(folder, "04_fork_and_copy_on_write", "PagedKVCache")

    class CacheInDtype(cache_class):  # the learner's cache, built in the model's dtype
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("dtype", dtype)
            super().__init__(*args, **kwargs)

    original = copy_on_write.tiny_qwen3
    copy_on_write.tiny_qwen3 = lambda *args, **kwargs: original(*args, **{**kwargs, "dtype": dtype})
    try:
        return _step(f"check_fork_logits[{str(dtype).removeprefix('torch.')}]", lambda: check_fork_logits(CacheInDtype))
    finally:
        copy_on_write.tiny_qwen3 = original


def _run_notebook(folder: Path, notebook: str) -> dict:
    import nbformat
    from nbclient import NotebookClient

    def action():
        path = folder / f"{notebook}.ipynb"
        book = nbformat.read(path, as_version=4)
        NotebookClient(
            book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
        ).execute()
        problems = []
        for index, cell in enumerate(book.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    problems.append(f"cell {index} raised {output.get('ename')}: {output.get('evalue')}")
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    problems.append(f"cell {index} wrote to stderr: {output['text'][:500]}")
        if problems:
            raise AssertionError("\n".join(problems))
        return "ran clean"

    return _step(f"notebook {notebook}", action)


def _plot(result: dict, path: Path) -> None:
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
        axis.set_xscale("log", base=2)
        axis.set_xlabel("context length (tokens)")
        axis.set_title(f"batch {batch}")
    axes[0][0].set_ylabel("achieved GB/s (K and V read once)")
    axes[0][-1].legend(fontsize=7)
    figure.suptitle(f"paged decode on {result['device']} ({result['dtype']})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run(args: argparse.Namespace) -> dict:
    if DEVICE.type != "cuda" or INFO.triton_interpreted:
        lines = [f"  {number}. {step}" for number, step in enumerate(PLAN, 1)]
        print("gpu-check: no CUDA GPU here, so nothing was run. On a CUDA machine it would run:\n" + "\n".join(lines))
        return {"ran": False, "device": str(DEVICE), "would_run": list(PLAN)}
    from . import kernel

    folder = Path(args.impl).expanduser()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    steps = _run_checks(folder)
    steps += [_fork_logits(folder, dtype) for dtype in FORK_DTYPES]
    steps += [_run_notebook(folder, notebook) for notebook in KERNEL_NOTEBOOKS]
    decode = _load(folder, "07_paged_decode_kernel", "paged_decode_attention")
    bench = _step("decode benchmark", lambda: kernel.benchmark(decode, **BENCHMARK_GRID))
    steps.append({key: value for key, value in bench.items() if key != "detail"})
    seconds = round(time.perf_counter() - started, 1)
    result = {
        "ran": True,
        "device": torch.cuda.get_device_name(DEVICE),
        "ok": all(step["ok"] for step in steps),
        "seconds": seconds,
        "within_budget": seconds <= TIME_BUDGET_S,
        "steps": steps,
        "benchmark": bench.get("detail"),
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    if bench.get("detail"):
        _plot(bench["detail"], out / "gpu_check.png")
    return {key: result[key] for key in ("ran", "device", "ok", "seconds", "within_budget")} | {
        "failed": [step["step"] for step in steps if not step["ok"]],
        "written": [str(out / "gpu_check.json"), str(out / "gpu_check.png")],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_argument(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=COURSE_NOTEBOOKS.parent / "docs",
        help="folder for gpu_check.json and gpu_check.png (default: the course's docs/)",
    )
