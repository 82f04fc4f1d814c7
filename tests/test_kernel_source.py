"""The grader's GPU compile runs nothing of the learner's (``paged_helpers.running.kernel_source``).

Compiling a Triton kernel runs Python: its module's top level, its decorators, default arguments
and annotations, and, inside Triton's code generator, every call in its body to something that is
not a Triton builtin. So the grader takes the kernels' source from the notebook as text and
validates it before any of it runs. Each hostile kernel below would create a marker file when
run; it is refused with a message naming what it does, and the marker never appears. The
course's own kernels (the solutions of notebooks 06, 07 and 09) are accepted and compile for
sm_90 here, from the module read out of the notebook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import nbformat
import pytest
import torch

from paged_helpers.running import gpu_compile
from paged_helpers.running.gpu_compile import Launch, capture_launches, compile_launches, explain_failure
from paged_helpers.running.kernel_source import (
    KernelSourceRefused,
    kernel_module_from_notebook,
    validate_kernel_module,
)

from conftest import NOTEBOOKS, solution

WARMUP, DECODE, PREFILL = "06_triton_warmup", "07_paged_decode_kernel", "09_paged_prefill_kernel"

# The launches the course's launchers make at one small shape each (captured: no kernel runs).
_f32 = dict(dtype=torch.float32)
COURSE_LAUNCHERS = {
    WARMUP: [
        ("scale", lambda: (torch.ones(20, **_f32), torch.empty(20, **_f32), 2.0)),
        ("row_max", lambda: (torch.ones(3, 10, **_f32), torch.empty(3, **_f32))),
        (
            "gather_rows",
            lambda: (torch.ones(6, 8, **_f32), torch.tensor([1, 0, 5], dtype=torch.int32), torch.empty(3, 8, **_f32)),
        ),
        ("softmax", lambda: (torch.ones(3, 10, **_f32), torch.empty(3, 10, **_f32))),
        (
            "load_block",
            lambda: (
                torch.ones(5, 4, 2, 8, **_f32),
                torch.tensor([3, 1], dtype=torch.int32),
                6,
                1,
                1,
                torch.empty(4, 8, **_f32),
            ),
        ),  # fmt: skip
    ],
}


def _course_launches(notebook: str) -> list[Launch]:
    if notebook in COURSE_LAUNCHERS:
        return [
            launch
            for name, make_args in COURSE_LAUNCHERS[notebook]
            for launch in capture_launches(solution(notebook, name), make_args())
        ]
    from paged_helpers.checks.kernels.scenarios import DECODE_CASES, PREFILL_CASES, decode_inputs, prefill_inputs

    if notebook == DECODE:
        return capture_launches(
            solution(DECODE, "paged_decode_attention"), decode_inputs(DECODE_CASES[0], torch.float16).args()
        )
    return capture_launches(
        solution(PREFILL, "paged_prefill_attention"), prefill_inputs(PREFILL_CASES[0], torch.float16).args()
    )


@pytest.mark.parametrize("notebook", [WARMUP, DECODE, PREFILL])
def test_the_course_kernels_read_from_their_notebooks_are_accepted_and_compile_for_sm_90(notebook, capsys):
    launches = _course_launches(notebook)
    started = time.perf_counter()
    module = kernel_module_from_notebook(NOTEBOOKS / f"{notebook}.ipynb", {launch.kernel for launch in launches})
    read = time.perf_counter() - started
    assert "import torch" not in module.source and "def scale(" not in module.source  # kernels only
    started = time.perf_counter()
    results = compile_launches([launch.with_source(module.source) for launch in launches], (90,))
    with capsys.disabled():  # the numbers the closing note quotes
        print(f"\n{notebook}: module read and validated in {read * 1000:.0f} ms; {len(results)} sm_90 compiles "
              f"in {time.perf_counter() - started:.1f} s")  # fmt: skip
    assert all(result.ok for result in results), [explain_failure(r) for r in results if not r.ok]


# -- hostile kernels --------------------------------------------------------------------------

HONEST_BODY = """    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, factor * tl.load(x_ptr + offsets, mask=mask), mask=mask)
"""
SIGNATURE = "def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):\n"


def _notebook(tmp_path, *cells: str):
    path = tmp_path / "06_triton_warmup.ipynb"
    cells = ("import paged_helpers as ph", "import torch\nimport triton\nimport triton.language as tl", *cells)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


def _hostile(marker) -> dict[str, tuple[list[str], str]]:
    """name -> (the notebook's cells after the imports, a phrase of the refusal)."""
    touch = f"open({str(marker)!r}, 'w').write('ran')"
    return {
        "a decorator that runs code": (
            [f"def spy(fn):\n    {touch}\n    return fn", "@spy\n@triton.jit\n" + SIGNATURE + HONEST_BODY],
            "@spy, @triton.jit",
        ),
        "a default argument that calls a function": (
            [
                f"def block():\n    {touch}\n    return 16",
                "@triton.jit\ndef scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr = block()):\n"
                + HONEST_BODY,
            ],
            "default `block()` is computed when the module loads",
        ),
        "an annotation that calls a function": (
            [
                f"def constexpr():\n    {touch}\n    return tl.constexpr",
                "@triton.jit\ndef scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: constexpr()):\n" + HONEST_BODY,
            ],
            "the annotation `constexpr()`",
        ),
        "an import of os the kernel uses": (
            ["import os", "@triton.jit\n" + SIGNATURE + f"    os.system('touch {marker}')\n" + HONEST_BODY],
            "`import os`",
        ),
        "a constant computed by a call": (
            [
                f"import os\nFACTOR = os.system('touch {marker}')",
                "@triton.jit\n" + SIGNATURE + "    f = FACTOR\n" + HONEST_BODY,
            ],
            "scale_kernel uses FACTOR, which is not",  # not a constant: the loader never binds it
        ),
        "os reached through Triton's own modules at compile time": (
            ["@triton.jit\n" + SIGNATURE + f"    triton.compiler.compiler.os.system('touch {marker}')\n" + HONEST_BODY],
            "triton.compiler is not one of triton.language's or math's names",
        ),
        "exec reached through triton.language's own modules at compile time": (
            ["@triton.jit\n" + SIGNATURE + f"    tl.core.builtins.exec({touch!r})\n" + HONEST_BODY],
            "tl.core is not one of triton.language's or math's names",
        ),
        "the builtins through a dunder name": (
            [
                "@triton.jit\n"
                + SIGNATURE
                + f"    __builtins__.__import__('os').system('touch {marker}')\n"
                + HONEST_BODY
            ],
            "scale_kernel: the name __builtins__ starts with '_'",
        ),
        "getattr on a module": (
            ["@triton.jit\n" + SIGNATURE + f"    getattr(tl, 'core').builtins.exec(\"{touch}\")\n" + HONEST_BODY],
            "scale_kernel uses getattr",
        ),
        "a helper that is a plain function": (
            [f"def helper():\n    {touch}", "@triton.jit\n" + SIGNATURE + "    helper()\n" + HONEST_BODY],
            "helper is a function without @triton.jit",
        ),
        "a kernel from another notebook": (
            ['scale_kernel = ph.load_from_notebook("05_prefix_caching", "scale_kernel")'],
            "comes from another notebook",
        ),
    }


HOSTILE = list(_hostile("marker"))


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_kernel_module_is_refused_with_a_message_and_never_runs(case, tmp_path):
    marker = tmp_path / "ran"
    cells, phrase = _hostile(marker)[case]
    path = _notebook(tmp_path, *cells)
    with pytest.raises(KernelSourceRefused) as refused:
        kernel_module_from_notebook(path, ["scale_kernel"])
    assert phrase in str(refused.value), str(refused.value)
    assert "06_triton_warmup.ipynb" in str(refused.value)  # where it is: the notebook and its cell
    assert not marker.exists()


def test_module_level_code_is_refused_before_anything_compiles(tmp_path):
    """The compile itself validates every module it is handed (the learner's lab bundles too)."""
    marker = tmp_path / "ran"
    honest = "import triton\nimport triton.language as tl\n\n@triton.jit\n" + SIGNATURE + HONEST_BODY
    launch = Launch("scale_kernel", "", ({"tensor": "float32"},) * 2 + ({"value": 3}, {"value": 2.0}), (
        ("BLOCK", {"value": 8}),))  # fmt: skip
    for hostile, phrase in [
        (f"import os\nos.system('touch {marker}')\n" + honest, "`import os`"),
        (honest + f"\nimport triton.language as tl\nprint(open({str(marker)!r}, 'w'))\n", "runs when the module loads"),
        (honest.replace("import triton\n", "import triton\n__import__('os')\n"), "runs when the module loads"),
    ]:
        with pytest.raises(KernelSourceRefused, match=phrase):
            compile_launches([launch.with_source(hostile)], (90,))
    assert not marker.exists()
    validate_kernel_module(honest)  # the same kernel, without them: accepted


def test_without_the_validation_compiling_a_kernel_body_would_run_the_learners_call(tmp_path):
    """Why the body is validated too: Triton's code generator calls, at compile time, whatever a
    kernel's body reaches that is not a Triton builtin. Triton's own dependency scan refuses a
    function reached through ``triton.compiler`` but looks no further into ``triton.language``, so
    ``tl.core.builtins.exec`` goes through. Sent straight to the compile worker (which only the
    validated path may do), this kernel creates the marker (and compiles); through
    ``compile_launches`` it is refused first."""
    marker = tmp_path / "ran"
    touch = f"open({str(marker)!r}, 'w').write('ran')"
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        + SIGNATURE
        + f"    tl.core.builtins.exec({touch!r})\n"
        + HONEST_BODY
    )
    launch = Launch("scale_kernel", source, ({"tensor": "float32"},) * 2 + ({"value": 3}, {"value": 2.0}), (
        ("BLOCK", {"value": 8}),))  # fmt: skip
    with pytest.raises(KernelSourceRefused):
        compile_launches([launch], (90,))
    assert not marker.exists()
    module_id = gpu_compile._module_id(source)
    request = {
        "modules": {module_id: source},
        "jobs": [{"key": "k", "module": module_id, "kernel": "scale_kernel", "target": 90,
                  "args": list(launch.args), "kwargs": dict(launch.kwargs)}],
    }  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run(
        [sys.executable, str(gpu_compile._WORKER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=environment,
        timeout=gpu_compile.COMPILE_TIME_LIMIT_S,
        check=True,
    )
    assert marker.exists(), "the unvalidated compile ran the kernel's os.system"
