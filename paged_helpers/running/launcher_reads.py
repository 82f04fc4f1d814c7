"""Values only a Triton kernel may read: the float tensors a kernel check hands the learner's launcher.

A launcher looks at its inputs' shapes, strides and dtypes, allocates outputs like them and
launches the kernel, which loads the values. It has no reason to read a value itself; reading
them in Python (``x.tolist()``, ``float(k_pool[0, 0, 0])``, ``k_pool * 2``, ``copy.deepcopy(v)``)
is how an answer computed outside the kernel begins, before a kernel of the learner's own copies
it into the output.

``launcher_inputs(args)`` marks, for the duration of one launcher call, the memory of the float
tensors among ``args`` (queries, key/value pools, ``x``; integer tables and lengths may be read,
to size a grid). ``reads_values(func, args, kwargs, result)`` says whether one torch call read
marked values out: the grader's clean run asks it for every torch call its student code makes
(``autograde/paged_grading/opinion_runner.py``) and flags the ones that did. Allowed: metadata
(shape, strides, dtype, ...), views and in-place updates (the result shares the marked memory),
and allocations that copy no values (``empty_like``, ``new_zeros``, ...).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

# Calls that hand out no values of their tensor arguments: metadata, views, allocations without
# values; printing too (a leftover debug print is no answer; its text goes nowhere in the clean run).
METADATA = frozenset(
    {
        "__get__",  # properties: shape, dtype, device, ndim, is_cuda, T (a view), ...
        "size", "stride", "dim", "ndimension", "numel", "nelement", "element_size", "storage_offset",
        "is_contiguous", "is_floating_point", "is_complex", "is_signed", "get_device", "__len__",
        "view", "as_strided", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "narrow",
        "select", "detach", "unflatten",
        "empty_like", "zeros_like", "ones_like", "full_like", "new_empty", "new_zeros", "new_ones", "new_full",
        "__repr__", "__str__", "__format__",
    }
)  # fmt: skip
# How a tensor is printed. A learner's debug print is no answer, but the printed text can be read
# back (with torch.set_printoptions raised, to every digit): the clean run, where printed text goes
# nowhere, hands student code a placeholder instead (``printed_text``).
PRINTING = frozenset({"__repr__", "__str__", "__format__"})
PLACEHOLDER = "<a tensor the check gave your launcher; its values are printed in your notebook only>"
# Copies that keep the values (another layout, dtype or device): allowed, and the copy is marked in
# its turn, so reading values from it later is seen.
COPIES = frozenset({"contiguous", "reshape", "flatten", "clone", "to", "float", "half", "type", "cpu", "cuda"})

# The marked memory: (data pointer, bytes) of each float input of the launcher being called.
_MARKED: contextvars.ContextVar[tuple[tuple[int, int], ...]] = contextvars.ContextVar("launcher_reads", default=())


@contextlib.contextmanager
def launcher_inputs(args: tuple) -> Iterator[None]:
    """Mark the float tensors of ``args`` while the block runs (see the module docstring)."""
    with torch._C.DisableTorchFunction():
        marked = tuple(
            _span(arg) for arg in args if type(arg) is torch.Tensor and arg.is_floating_point() and arg.numel()
        )
    token = _MARKED.set(marked)
    try:
        yield
    finally:
        _MARKED.reset(token)


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """(first address, bytes) of the memory behind ``tensor`` (its whole storage: views share it)."""
    with torch._C.DisableTorchFunction():
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()


def _in_marked_memory(value: object, marked: tuple[tuple[int, int], ...]) -> bool:
    if not isinstance(value, torch.Tensor):
        return False
    pointer, _ = _span(value)
    return any(start <= pointer < start + size for start, size in marked)


def _tensors(args: tuple, kwargs: dict | None) -> Iterator[object]:
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def reads_values(func, args: tuple, kwargs: dict | None, result: object) -> bool:
    """Whether the torch call ``func(*args, **kwargs) -> result`` read values of a marked input
    out (a number, a list, a new tensor computed from them)."""
    marked = _MARKED.get()
    if not marked or not any(_in_marked_memory(value, marked) for value in _tensors(args, kwargs)):
        return False
    name = getattr(func, "__name__", "")
    if name in METADATA or _in_marked_memory(result, marked):  # a view or an in-place update
        return False
    if name in COPIES and isinstance(result, torch.Tensor):
        _MARKED.set((*marked, _span(result)))
        return False
    return True


def printed_text(func, args: tuple) -> str | None:
    """The placeholder to print instead of a marked input (None: print it as usual)."""
    marked = _MARKED.get()
    if marked and getattr(func, "__name__", "") in PRINTING and args and _in_marked_memory(args[0], marked):
        return PLACEHOLDER
    return None
