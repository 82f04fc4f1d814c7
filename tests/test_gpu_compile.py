"""Compiling the kernels for CUDA GPUs without one (``paged_helpers.running.gpu_compile``).

Every instructor kernel of notebooks 07 and 09 must compile for sm_80 and sm_90 at the check
shapes (a GPU runs the same checks) and the benchmark's shapes, without register spills; a
kernel that only Triton's interpreter accepts (a ``tl.dot`` under the tensor cores' minimum)
must fail the check with a message naming the shapes.
"""

from __future__ import annotations

import time

import pytest
import torch
from test_checks_kernels import DECODE, PREFILL, kernel_variant, launcher_variant, message_of

from paged_helpers.checks import check_paged_prefill_kernel
from paged_helpers.checks.kernels.scenarios import (
    BENCHMARK_DECODE_CASE,
    DECODE_CASES,
    PREFILL_CASES,
    SPLIT_K_CASES,
    DecodeCase,
    PrefillCase,
    decode_inputs,
    prefill_inputs,
)
from paged_helpers.running.gpu_compile import TARGETS, capture_launches, compile_launches, explain_failure

from conftest import solution

# The benchmark's block sizes at its shape (paged_helpers.demos.kernel), and a Qwen3-sized
# prefill chunk (what the kernel would serve in an engine).
BENCHMARK_DECODE = tuple(
    DecodeCase(f"benchmark, blocks of {size}", (size + 1,), size, 32, 8, 128) for size in (16, 32, 64, 128)
)
QWEN3_PREFILL = PrefillCase("Qwen3-sized prefill chunk", 0, 40, 16, 32, 8, 128)


def _distinct(cases: tuple) -> tuple:
    """One case per (head_dim, block_size): the compiled code depends on nothing else here."""
    return tuple({(c.head_dim, c.block_size): c for c in cases}.values())


def _launches(notebook: str, name: str, cases: tuple, make_args) -> list:
    launcher = solution(notebook, name)
    launches = []
    for case in cases:
        for launch in capture_launches(launcher, make_args(case)):
            launches += [launch, launch.with_dtype("float16", "bfloat16")]
    return launches


def _decode_args(case):
    return decode_inputs(case, torch.float16).args()


def _split_args(case):
    return decode_inputs(case, torch.float16).args() + (max(case.splits, 2),)


def _prefill_args(case):
    return prefill_inputs(case, torch.float16).args()


KERNELS = {
    "paged decode": (DECODE, "paged_decode_attention", _distinct(DECODE_CASES) + BENCHMARK_DECODE, _decode_args),
    "split-K decode": (
        DECODE,
        "split_k_decode_attention",
        _distinct(SPLIT_K_CASES) + (BENCHMARK_DECODE_CASE,),
        _split_args,
    ),
    "paged prefill": (PREFILL, "paged_prefill_attention", _distinct(PREFILL_CASES), _prefill_args),
}


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_instructor_kernel_compiles_for_both_targets_without_spills(kernel, capsys):
    notebook, name, cases, make_args = KERNELS[kernel]
    launches = _launches(notebook, name, cases, make_args)
    started = time.perf_counter()
    results = compile_launches(launches, TARGETS)
    seconds = time.perf_counter() - started
    assert len(results) == len(launches) * len(TARGETS)
    with capsys.disabled():  # the numbers the closing note quotes
        print(f"\n{kernel}: {len(results)} compiles in {seconds:.1f} s")
        for r in results:
            dtype = next(d["tensor"] for d in r.launch.args if "tensor" in d)
            print(
                f"  sm_{r.target} {dtype:9} {r.launch.constexpr_values()}: {r.registers} registers, "
                f"{r.spill_bytes} bytes spilled, {r.seconds:.2f} s"
            )
    failures = [explain_failure(r) for r in results if not r.ok]
    assert not failures, failures
    assert all(r.registers for r in results)
    spilling = [(r.target, r.launch.constexpr_values(), r.spill_bytes) for r in results if r.spill_bytes]
    assert not spilling, spilling


@pytest.mark.slow
def test_a_qwen3_sized_prefill_chunk_compiles_without_spills():
    """head_dim 128: with Triton's default 4 warps the kernel spills on sm_90 (636 bytes measured),
    so the instructor's launcher asks for 8 warps there."""
    (launch,) = capture_launches(solution(PREFILL, "paged_prefill_attention"), _prefill_args(QWEN3_PREFILL))
    assert launch.constexpr_values()["num_warps"] == 8
    results = compile_launches([launch.with_dtype("float16", "bfloat16")], TARGETS)
    assert all(r.ok for r in results), [explain_failure(r) for r in results]
    assert not any(r.spill_bytes for r in results), [(r.target, r.registers, r.spill_bytes) for r in results]


def test_compiling_twice_hits_the_cache():
    launches = _launches(DECODE, "paged_decode_attention", DECODE_CASES[:1], _decode_args)
    compile_launches(launches)
    started = time.perf_counter()
    compile_launches(launches)
    assert time.perf_counter() - started < 0.05


# A prefill kernel that multiplies the probabilities by V with tl.dot: right in the interpreter,
# but its inner dimension is the block size, and blocks of 4 are under the tensor cores' minimum.
DOT_FOR_PV = (
    "acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)",
    'acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")',
)


def test_a_small_tl_dot_passes_the_interpreter_but_fails_the_gpu_compile(tmp_path):
    wrong = kernel_variant(tmp_path, PREFILL, "paged_prefill_kernel", DOT_FOR_PV)
    message = message_of(check_paged_prefill_kernel, wrong)
    assert "compiled for a GPU (sm_80" in message
    assert "this tl.dot is 16 x 4 times 4 x 16 (M x K times K x N) in fp32" in message
    assert "the inner dimension K >= 8 for fp32 operands" in message
    assert "Triton's interpreter on the CPU does not check this" in message


def test_a_half_precision_tl_dot_names_the_16_minimum(tmp_path):
    """The same product in the pools' dtype: K must reach 16 for 16-bit operands."""
    wrong = launcher_variant(
        tmp_path,
        PREFILL,
        "paged_prefill_attention",
        (DOT_FOR_PV[0], "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v.to(v.dtype)).to(tl.float32)"),
        (
            "v = tl.load(v_pool + offsets, mask=in_cache[:, None], other=0.0).to(tl.float32)",
            "v = tl.load(v_pool + offsets, mask=in_cache[:, None], other=0.0)",
        ),
    )
    (launch,) = capture_launches(wrong, _prefill_args(PREFILL_CASES[0]))
    results = compile_launches([launch.with_dtype("float16", "bfloat16")], (90,))
    assert not results[0].ok
    assert "this tl.dot is 16 x 4 times 4 x 16 (M x K times K x N) in bf16" in explain_failure(results[0])
    assert "K >= 16 for bf16 operands" in explain_failure(results[0])


def test_launches_that_differ_only_in_lengths_share_one_compile():
    """The benchmark runs many context lengths per block size: one compile each, not one per length."""
    small = BENCHMARK_DECODE[0]
    longer = DecodeCase("longer", (10 * small.block_size + 3,), small.block_size, 32, 8, 128)
    (first,) = capture_launches(solution(DECODE, "paged_decode_attention"), _decode_args(small))
    (second,) = capture_launches(solution(DECODE, "paged_decode_attention"), _decode_args(longer))
    assert first == second
    assert first.constexpr_values() == {"BLOCK": 16, "D": 128}


def test_the_compile_process_binds_tensors_right_without_importing_torch():
    """The compiling process stands for each tensor with its dtype and an aligned address (importing
    torch there cost more than most compiles). Triton's binder remembers a dtype by its object's
    identity: stand-ins made afresh per argument and freed were, at random, read as another dtype
    (an int32 table bound as bfloat16). Every launch is compiled three times over, all must agree."""
    import json
    import os
    import subprocess
    import sys

    from paged_helpers.running import gpu_compile

    launches = _launches(DECODE, "paged_decode_attention", DECODE_CASES, _decode_args)
    modules = {gpu_compile._module_id(launch.module_source): launch.module_source for launch in launches}
    jobs = [
        {
            "key": f"{copy}-{index}",
            "module": gpu_compile._module_id(launch.module_source),
            "kernel": launch.kernel,
            "target": 80,
            "args": list(launch.args),
            "kwargs": dict(launch.kwargs),
        }
        for copy in range(3)
        for index, launch in enumerate(launches)
    ]
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(gpu_compile._WORKER)],
        input=json.dumps({"modules": modules, "jobs": jobs}),
        capture_output=True,
        text=True,
        env=environment,
        timeout=gpu_compile.COMPILE_TIME_LIMIT_S,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported
    answers = {answer["key"]: answer for answer in json.loads(done.stdout)}
    failed = [(key, answer["error"][-300:]) for key, answer in answers.items() if not answer["ok"]]
    assert not failed, failed
    for index in range(len(launches)):
        assert len({answers[f"{copy}-{index}"]["registers"] for copy in range(3)}) == 1


def test_a_graded_run_trusts_no_compile_result_on_disk(tmp_path, monkeypatch):
    """A launcher runs before its kernel is compiled, and the cache key is public: in a graded run a
    result file it planted would pass a kernel that never compiles for a GPU."""
    import json

    from paged_helpers.running import gpu_compile

    wrong = launcher_variant(tmp_path, PREFILL, "paged_prefill_attention", DOT_FOR_PV)
    (launch,) = capture_launches(wrong, _prefill_args(PREFILL_CASES[0]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_compile, "_CACHE", {})
    planted = gpu_compile._cache_folder() / f"{gpu_compile._key(launch, 80)}.json"
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"ok": True, "seconds": 0.1, "registers": 32, "spill_bytes": 0, "num_warps": 4}))
    monkeypatch.setattr(gpu_compile, "_DISK_CACHE", True)  # the learner's own runs: the file is believed
    assert compile_launches([launch], (80,))[0].ok
    monkeypatch.setattr(gpu_compile, "_CACHE", {})
    monkeypatch.setattr(gpu_compile, "_DISK_CACHE", False)  # graded
    assert not compile_launches([launch], (80,))[0].ok
    assert json.loads(planted.read_text())["ok"], "a graded run writes no result either"


def test_the_disk_cache_is_off_when_the_package_is_imported_for_grading():
    import subprocess
    import sys

    script = "import paged_helpers.running.gpu_compile as g; print('DISK', g._DISK_CACHE)"
    for graded, expected in (("1", "DISK False"), ("", "DISK True")):
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**__import__("os").environ, "PAGED_HELPERS_GRADED": graded},
            timeout=120,
            check=True,
        )
        assert expected in done.stdout
