"""Why cached and fresh logits differ: the gather path against the kernel path, bit for bit.

Notebook 09's last section measures, with the learner's own kernels on the tiny Qwen3, how far
the kernel path's logits are from the gather path's: one prompt is prefilled and a few greedy
tokens decoded on two copies of the learner's ``PagedKVCache`` driven alike, one gathering
(``attention=None``), one on ``model.PagedAttention(decode, prefill)``. Both paths feed the same
tokens (the gather path's greedy choices), so every step compares the same inputs.

For each dtype it reports whether the two paths' logits are bitwise equal, the largest absolute
gap, the course's tolerance for that device and dtype (``checks.reading.scratch.logit_tolerance``) and
whether the greedy tokens agree. bfloat16 in Triton's interpreter is reported as not run, with the
launcher's reason: the course's launchers refuse it there, and rightly (in Triton 3.9 the
interpreter's ``tl.dot`` returns wrong numbers on bfloat16 operands, without raising).

This is a demo helper, not a check: it grades nothing and builds no kernel or cache of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..checkpoint import tiny_qwen3
from ..checks.reading.scratch import logit_tolerance
from ..device import DEVICE, INFO
from ..model import PagedAttention

__all__ = ["DEFAULT_DTYPES", "format_gaps", "measure_logit_gaps"]

# float32, and the two half formats. In the interpreter bfloat16 is reported as not run (see above),
# and float16 is the half-precision row that runs.
DEFAULT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _step(model: Any, cache: Any, seq: str, tokens: list[int], attention: Any) -> torch.Tensor:
    """One forward pass of ``tokens`` for ``seq`` on ``cache``: logits [T, vocab]."""
    cache.reserve(seq, len(tokens))
    cache.set_batch([seq])
    start = cache.lengths[seq]  # tokens written so far (reserve makes room, the forward pass writes)
    positions = torch.tensor([[start + t for t in range(len(tokens))]], device=model.device)
    with torch.no_grad():
        return model(torch.tensor([tokens], device=model.device), positions, cache=cache, attention=attention)[0]


def _one_dtype(
    decode: Callable,
    prefill: Callable,
    cache_class: Any,
    dtype: torch.dtype,
    prompt: list[int],
    steps: int,
    block_size: int,
) -> dict:
    model = tiny_qwen3(device=DEVICE, dtype=dtype)
    config = model.config
    blocks = -(-(len(prompt) + steps) // block_size)
    caches = {
        path: cache_class(
            config.num_hidden_layers,
            blocks,
            block_size,
            config.num_key_value_heads,
            config.head_dim,
            device=model.device,
            dtype=dtype,
        )
        for path in ("gather", "kernels")
    }
    kernels = PagedAttention(decode=decode, prefill=prefill)
    for cache in caches.values():
        cache.create("seq")
    gaps, equal, same_token = [], [], []
    new = list(prompt)
    for _ in range(steps + 1):
        gathered = _step(model, caches["gather"], "seq", new, None)[-1]
        on_kernels = _step(model, caches["kernels"], "seq", new, kernels)[-1]
        gaps.append(float((gathered.float() - on_kernels.float()).abs().max()))
        equal.append(bool(torch.equal(gathered, on_kernels)))
        choice = int(gathered.argmax())
        same_token.append(choice == int(on_kernels.argmax()))
        new = [choice]  # both paths are fed the gather path's greedy token: the same inputs every step
    tolerance = logit_tolerance(DEVICE, dtype)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "ran": True,
        "steps": len(gaps),
        "bitwise_equal_steps": sum(equal),
        "max_abs_gap": max(gaps),
        "gap_per_step": gaps,
        "tolerance": tolerance,
        "within_tolerance": max(gaps) <= tolerance,
        "same_greedy_tokens": all(same_token),
    }


def measure_logit_gaps(
    decode: Callable,
    prefill: Callable,
    cache_class: Any,
    dtypes: tuple[torch.dtype, ...] = DEFAULT_DTYPES,
    prompt_tokens: int = 10,
    steps: int = 2,
    block_size: int = 4,
) -> list[dict]:
    """Gather path vs kernel path on the tiny Qwen3, one record per dtype (see the module docstring).

    A prompt of ``prompt_tokens`` runs through the learner's prefill kernel, then ``steps`` greedy
    tokens through the decode kernel, in blocks of ``block_size`` (small: many blocks per sequence).
    """
    prompt = [(7 * i + 3) % tiny_qwen3().config.vocab_size for i in range(prompt_tokens)]
    records = []
    for dtype in dtypes:
        try:
            records.append(_one_dtype(decode, prefill, cache_class, dtype, prompt, steps, block_size))
        except TypeError as error:
            # Only bfloat16 in the interpreter is expected to be refused; anything else is the learner's bug.
            if not (dtype == torch.bfloat16 and INFO.triton_interpreted):
                raise
            records.append(
                {"dtype": str(dtype).removeprefix("torch."), "ran": False, "reason": f"{type(error).__name__}: {error}"}
            )
    return records


def format_gaps(records: list[dict]) -> str:
    """One line per dtype, for a notebook cell."""
    lines = []
    for record in records:
        if not record["ran"]:
            lines.append(f"{record['dtype']:>9}: not run here ({record['reason']})")
            continue
        lines.append(
            f"{record['dtype']:>9}: bitwise equal in {record['bitwise_equal_steps']} of {record['steps']} steps, "
            f"max |kernels - gather| = {record['max_abs_gap']:.2e} (tolerance {record['tolerance']:g}), "
            f"same greedy tokens: {'yes' if record['same_greedy_tokens'] else 'NO'}"
        )
    return "\n".join(lines)
