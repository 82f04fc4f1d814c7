"""The logit-gap helper behind notebook 09's "Why cached and fresh logits differ" section.

The reference functions stand in for the kernels where only the bookkeeping is tested (no
interpreter time); one run goes through the instructor's kernels in float32, as a learner's does.
"""

from __future__ import annotations

import pytest
import torch

from paged_helpers.demos import logit_gap
from paged_helpers.device import DEVICE
from paged_helpers.reference import paged_decode_reference, paged_prefill_reference

from conftest import solution


@pytest.fixture(scope="module")
def cache_class():
    return solution("04_fork_and_copy_on_write", "PagedKVCache")


def test_the_instructors_kernels_differ_from_the_gather_in_the_last_bits_only(cache_class):
    [record] = logit_gap.measure_logit_gaps(
        solution("07_paged_decode_kernel", "paged_decode_attention"),
        solution("09_paged_prefill_kernel", "paged_prefill_attention"),
        cache_class,
        dtypes=(torch.float32,),
        prompt_tokens=6,
        steps=1,
    )
    assert record["ran"] and record["steps"] == 2
    assert 0 < record["max_abs_gap"] <= record["tolerance"]  # another order of sums: close, not equal
    assert record["within_tolerance"] and record["same_greedy_tokens"]
    assert record["bitwise_equal_steps"] < record["steps"]


def test_every_step_compares_the_same_tokens_and_reports_each_gap(cache_class):
    records = logit_gap.measure_logit_gaps(
        paged_decode_reference, paged_prefill_reference, cache_class, dtypes=(torch.float32,), steps=3
    )
    [record] = records
    assert record["steps"] == 4 and len(record["gap_per_step"]) == 4
    assert record["max_abs_gap"] == max(record["gap_per_step"])
    assert "float32: bitwise equal in" in logit_gap.format_gaps(records)


@pytest.mark.skipif(DEVICE.type == "cuda", reason="on a GPU bfloat16 runs")
def test_bfloat16_in_the_interpreter_is_reported_with_the_launchers_reason(cache_class):
    kernel = solution("07_paged_decode_kernel", "paged_decode_attention")
    prefill = solution("09_paged_prefill_kernel", "paged_prefill_attention")
    [record] = logit_gap.measure_logit_gaps(kernel, prefill, cache_class, dtypes=(torch.bfloat16,), steps=0)
    assert record == {"dtype": "bfloat16", "ran": False, "reason": record["reason"]}
    assert "bfloat16" in record["reason"] and "interpreter" in record["reason"]
    assert "not run here" in logit_gap.format_gaps([record])
