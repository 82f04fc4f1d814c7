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
import math
import os
import subprocess
import sys
import time

import nbformat
import pytest
import torch
import triton

from paged_helpers.device import INFO
from paged_helpers.notebook_loader import load_definitions
from paged_helpers.running import gpu_compile
from paged_helpers.running.gpu_compile import Launch, capture_launches, compile_launches, explain_failure
from paged_helpers.running.kernel_source import (
    KERNEL_CELL_RULES,
    RULES,
    WHAT_IS_ALLOWED,
    KernelSourceRefused,
    allowed_attributes,
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
                torch.ones(5, 2, 4, 8, **_f32),  # [num_blocks, heads, block_size, head_dim], as in 03 and 07
                torch.tensor([3, 1], dtype=torch.int32),
                6,
                1,
                1,
                torch.empty(4, 8, **_f32),
            ),
        ),  # fmt: skip
        ("block_scores", lambda: (torch.ones(8, **_f32), torch.ones(11, 8, **_f32), 0.35)),
        (
            "online_attention",
            lambda: (torch.ones(8, **_f32), torch.ones(11, 8, **_f32), torch.ones(11, 8, **_f32), 0.35),
        ),
        ("causal_scores", lambda: (torch.ones(9, 16, **_f32), torch.ones(14, 16, **_f32), 5, 0.25)),
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
            "scale_kernel: the name __builtins__ starts with '__'",
        ),
        "the host's numpy array through a tensor's handle (interpreted)": (
            [
                "@triton.jit\n"
                + SIGNATURE
                + "    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n"
                + f"    x.handle.data.tofile({str(marker)!r})\n"
                + HONEST_BODY
            ],
            "`x.handle.data.tofile` reads .handle, which is not an attribute of Triton's values",
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
    if case != "a kernel from another notebook":  # the validation's refusals name the rule broken
        assert "(rule: " in str(refused.value) and "The rules of a kernel cell" in str(refused.value)
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


# -- what Triton's own tutorials write is accepted -------------------------------------------------

UNDERSCORED_CELLS = (
    "import math",
    'NEG_INF = tl.constexpr(float("-inf"))\n_BLOCK = tl.constexpr(16)',
    "@triton.jit\ndef _online_step(m, x, _scale):\n    return tl.maximum(m, x * _scale)",
    "@triton.jit\n"
    "def _attn_fwd(x_ptr, out_ptr, n):\n"
    "    offsets = tl.arange(0, _BLOCK)\n"
    "    mask = offsets < n\n"
    "    x = tl.load(x_ptr + offsets, mask=mask, other=NEG_INF).to(tl.float32)\n"
    "    width = x.shape[0]\n"
    "    m = _online_step(tl.max(x, axis=0), x, _scale=1.0)\n"
    "    tl.store(out_ptr + offsets, m.to(out_ptr.dtype.element_ty), mask=mask & (offsets < width))",
    "out = torch.empty(3)\n_attn_fwd[(1,)](torch.tensor([-3.0, -1.5, -7.0]), out, 3)",  # a demo: not kept
)


def test_underscored_kernels_helpers_and_a_constexpr_negative_infinity_are_accepted_and_compile(tmp_path):
    """``_attn_fwd`` calling ``_online_step``, reading ``NEG_INF = tl.constexpr(float("-inf"))`` and
    ``_BLOCK``: read from the notebook (the loader keeps both constants), validated, compiled for
    sm_90, and run where this machine runs Triton (padding with -inf: the row's max of negatives)."""
    path = _notebook(tmp_path, *UNDERSCORED_CELLS)
    module = kernel_module_from_notebook(path, ["_attn_fwd"])
    for needed in ('NEG_INF = tl.constexpr(float("-inf"))', "_BLOCK = tl.constexpr(16)", "def _online_step("):
        assert needed in module.source, module.source
    assert "torch.empty" not in module.source and "import math" not in module.source  # only what it reads
    launch = Launch("_attn_fwd", module.source, ({"tensor": "float32"},) * 2 + ({"value": 3},), ())
    results = compile_launches([launch], (90,))
    assert all(result.ok for result in results), [explain_failure(r) for r in results if not r.ok]
    learner = load_definitions(path, module_name="learner_underscored_kernels")
    if INFO.problem is None:
        x = torch.tensor([-3.0, -1.5, -7.0], device=INFO.device)
        out = torch.empty(3, device=INFO.device)
        learner._attn_fwd[(1,)](x, out, 3)
        assert out.tolist() == [-1.5, -1.5, -1.5]


CONSTANT_FORMS = [
    'tl.constexpr(float("-inf"))',
    'float("inf")',
    '-float("inf")',
    "tl.constexpr(-1e30)",
    "math.inf",
    "-math.inf",
    "tl.constexpr(math.pi)",
    "triton.language.constexpr(-math.inf)",
    "+16",
]


@pytest.mark.parametrize("form", CONSTANT_FORMS)
def test_a_constant_expression_is_accepted_and_kept_by_the_notebook_loader(form, tmp_path):
    source = (
        "import math\nimport triton\nimport triton.language as tl\n\n"
        f"LIMIT = {form}\n_limit = {form}\n\n"
        "@triton.jit\ndef _fill(out_ptr, BLOCK: tl.constexpr):\n"
        "    tl.store(out_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), LIMIT, tl.float32) + _limit)\n"
    )
    validate_kernel_module(source)
    path = _notebook(
        tmp_path, "import math", f"LIMIT = {form}\n_limit = {form}", "@triton.jit\n" + source.split("@triton.jit\n")[1]
    )
    module = kernel_module_from_notebook(path, ["_fill"])
    assert f"LIMIT = {form}" in module.source and f"_limit = {form}" in module.source
    learner = load_definitions(path, module_name="learner_constant_forms")
    expected = eval(form, {"math": math, "tl": triton.language, "triton": triton})  # the test's own text
    for name in ("LIMIT", "_limit"):
        value = getattr(learner, name)
        assert getattr(value, "value", value) == getattr(expected, "value", expected)


def test_the_loader_keeps_constant_expressions_of_any_name_and_nothing_computed(tmp_path):
    path = _notebook(
        tmp_path,
        "import math",
        'NEG_INF = tl.constexpr(float("-inf"))\nneg_inf = -math.inf\n_BLOCK = 16\nPOWER = 2 ** 10\n'
        "SHOWN = print('computed at load')\n__name__ = 'renamed'\nNOT_A_NUMBER = float('abc')",
    )
    learner = load_definitions(path, module_name="learner_constants_kept")
    assert learner.NEG_INF.value == float("-inf") and learner.neg_inf == float("-inf") and learner._BLOCK == 16
    assert not hasattr(learner, "POWER") and not hasattr(learner, "SHOWN") and not hasattr(learner, "NOT_A_NUMBER")
    assert learner.__name__ == "learner_constants_kept"


def test_the_attributes_a_kernel_may_read_are_tritons_values_own_without_handle():
    import triton.language as tl

    allowed = allowed_attributes()
    assert "handle" in dir(tl.tensor(None, tl.block_type(tl.float32, [4])))  # an instance's, set in __init__
    assert "handle" not in dir(tl.tensor)  # not the class's
    assert "handle" not in allowed and not any(name.startswith("_") for name in allowed)
    for name in ("to", "dtype", "element_ty", "shape", "T", "reshape", "trans", "value"):
        assert name in allowed, name
    for name in ("data", "ctypes", "tofile", "fn", "run", "src", "cache"):
        assert name not in allowed, name
    validate_kernel_module(
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def k(x_ptr, out_ptr, BLOCK: tl.constexpr):\n"
        "    x = tl.load(x_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])\n"
        "    y = x.to(tl.float32).T + x.trans().to(x.dtype) + x.reshape(BLOCK, BLOCK)\n"
        "    z = tl.zeros(x.shape, out_ptr.dtype.element_ty) + BLOCK.value + tl.float32.primitive_bitwidth\n"
        "    tl.store(out_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], y + z)\n"
    )


# -- what reaches past Triton is refused, naming the line and the rule ------------------------------

MODULE_HEAD = "import math\nimport triton\nimport triton.language as tl\n\n"
IN_KERNEL = MODULE_HEAD + "@triton.jit\ndef _k(x, out_ptr):\n    {}\n"  # the line is line 7
REFUSED = {
    "x.handle.data.tofile": (IN_KERNEL.format("x.handle.data.tofile('/tmp/f')"), 7, "reads .handle", "kernel code"),
    "x.handle.data.ctypes": (IN_KERNEL.format("p = x.handle.data.ctypes"), 7, "reads .handle", "kernel code"),
    "x.handle": (IN_KERNEL.format("h = x.handle"), 7, "`x.handle` reads .handle", "kernel code"),
    "a loaded tensor's handle": (
        IN_KERNEL.format("h = tl.load(out_ptr).handle"),
        7,
        "reads .handle",
        "kernel code",
    ),  # fmt: skip
    "a Triton dtype's handle": (
        IN_KERNEL.format("h = tl.float32.handle"),
        7,
        "handle is not an attribute",
        "kernel code",
    ),
    "a kernel's Python function": (IN_KERNEL.format("f = _k.fn"), 7, "reads .fn", "kernel code"),
    "a JIT function's launcher": (IN_KERNEL.format("r = triton.cdiv.run"), 7, "run is not an attribute", "kernel code"),
    "__class__ of a value": (IN_KERNEL.format("c = x.__class__"), 7, "dunder attribute __class__", "names"),
    'float("-inf").__class__': (
        IN_KERNEL.format("c = float('-inf').__class__"),
        7,
        "dunder attribute __class__",
        "names",
    ),  # fmt: skip
    "a dunder local": (IN_KERNEL.format("__x = 1"), 7, "the name __x starts with '__'", "names"),
    "a dunder builtin": (IN_KERNEL.format("b = __builtins__"), 7, "the name __builtins__ starts with '__'", "names"),
    "a dunder kernel": (MODULE_HEAD + "@triton.jit\ndef __k(x):\n    pass\n", 6, "the name __k starts", "names"),
    "a dunder argument": (MODULE_HEAD + "@triton.jit\ndef k(__x):\n    pass\n", 6, "argument __x starts", "names"),
    "a dunder constant": (MODULE_HEAD + "__LIMIT = 16\n", 5, "the name __LIMIT starts with '__'", "names"),
    "Triton's private keyword": (
        IN_KERNEL.format("y = tl.load(out_ptr, _semantic=None)"),
        7,
        "the keyword _semantic=",
        "names",
    ),  # fmt: skip
    "a private attribute of tl": (IN_KERNEL.format("c = tl._core"), 7, "reads a private attribute", "kernel code"),
    "a computed constant": (MODULE_HEAD + "NEG = 2 ** 10\n", 5, "`NEG = 2 ** 10` computes a value", "constants"),
    "a computed constexpr": (MODULE_HEAD + "NEG = tl.constexpr(2 ** 10)\n", 5, "computes a value", "constants"),
    "float of a number": (MODULE_HEAD + "NEG = float(16)\n", 5, "computes a value", "constants"),
    "a math function": (MODULE_HEAD + "NEG = math.sqrt\n", 5, "computes a value", "constants"),
    "math not imported": ("import triton.language as tl\nINF = math.inf\n", 2, "reads math, which is not", "constants"),
    "float rebound": (
        "import triton.language as tl\nfrom triton.language import float32 as float\nINF = float('inf')\n",
        3,
        "reads float, which this module binds itself",
        "constants",
    ),  # fmt: skip
    "an import of os": ("import os\n", 1, "`import os`", "imports"),
    "I/O at the top level": (MODULE_HEAD + "open('/tmp/f', 'w')\n", 5, "runs when the module loads", "functions"),
    "I/O in a kernel": (IN_KERNEL.format("open('/tmp/f', 'w')"), 7, "_k uses open", "kernel code"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_reach_past_tritons_values_is_refused_naming_the_line_and_the_rule(case):
    source, line, phrase, rule = REFUSED[case]
    with pytest.raises(KernelSourceRefused) as refused:
        validate_kernel_module(source)
    message = str(refused.value)
    assert phrase in message and f"line {line}: " in message, message
    assert f"(rule: {rule})" in message and RULES[rule] in message, message


def test_the_rules_are_stated_once_for_learners():
    lines = KERNEL_CELL_RULES.splitlines()
    assert 3 <= len(lines) <= 5 and lines == list(RULES.values())
    assert all(statement in WHAT_IS_ALLOWED for statement in lines)
    assert "x.handle" in KERNEL_CELL_RULES and "tl.constexpr" in KERNEL_CELL_RULES and "__" in KERNEL_CELL_RULES


@pytest.mark.skipif(
    not INFO.triton_interpreted, reason="under Triton's interpreter only: compiled, x.handle is an IR value"
)
def test_without_the_validation_an_interpreted_kernel_reaches_the_hosts_array_through_handle(tmp_path):
    """Why attribute reads on values are limited: interpreted, a kernel's body is Python on numpy
    arrays, and ``x.handle.data`` is the array itself. Loaded without the validation (the learner's
    own process does this), this kernel writes a file; read for a compile it is refused."""
    marker = tmp_path / "ran"
    cell = (
        "@triton.jit\ndef leak_kernel(x_ptr, BLOCK: tl.constexpr):\n"
        "    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n"
        f"    x.handle.data.tofile({str(marker)!r})\n"
    )
    path = _notebook(tmp_path, cell)
    with pytest.raises(KernelSourceRefused, match="reads .handle"):
        kernel_module_from_notebook(path, ["leak_kernel"])
    assert not marker.exists()
    learner = load_definitions(path, module_name="learner_leak_kernel")
    learner.leak_kernel[(1,)](torch.ones(4), BLOCK=4)
    assert marker.exists(), "the interpreted kernel did not reach the host's array"
