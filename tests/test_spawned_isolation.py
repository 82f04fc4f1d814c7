"""On a GPU the launcher checks run the learner's launcher in a spawned child (``running.spawned``).

The mechanism does not need a GPU: inside ``spawned.session()`` the checks use the spawned
child on the CPU too (it runs Triton's interpreter there), so the path a GPU takes is tested
here: right launchers pass, a bug, a crash and a hang become messages, and this process survives.
"""

from __future__ import annotations

import pytest
from test_checks_kernels import DECODE, PREFILL, launcher_variant, message_of

from paged_helpers.checks import check_paged_decode, check_paged_prefill
from paged_helpers.checks.kernels import paged_attention as kernel_checks
from paged_helpers.running import spawned

from conftest import solution


def test_right_launchers_pass_through_the_spawned_child(capfd):
    with spawned.session():
        check_paged_decode(solution(DECODE, "paged_decode_attention"))
    out, err = capfd.readouterr()
    assert "check_paged_decode: 4 scenarios passed" in out
    assert err == ""


def test_a_bug_is_named_through_the_spawned_child(tmp_path):
    wrong = launcher_variant(tmp_path, PREFILL, "paged_prefill_attention", ("kvh = h // group\n", "kvh = h\n"))
    with spawned.session():
        assert "query head h read KV head h." in message_of(check_paged_prefill, wrong)


def test_a_crash_in_the_spawned_child_is_a_message(tmp_path):
    wild = launcher_variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "block = tl.load(tables_ptr + seq * max_blocks + i)",
            "block = tl.load(tables_ptr + seq * max_blocks + i + (1 << 40))",
        ),
        cell="def paged_decode_kernel(",
    )
    with spawned.session():
        message = message_of(check_paged_decode, wild)
    assert "the process died" in message


def test_a_hang_in_the_spawned_child_is_a_message(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_checks, "GPU_TIME_LIMIT_S", 3.0)
    stuck = launcher_variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)\n",
            "validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)\n"
            "    while True:\n"
            "        pass\n",
        ),
        cell="def paged_decode_attention(",
    )
    with spawned.session():
        message = message_of(check_paged_decode, stuck)
    assert "to return within 3 s" in message


def test_calling_without_a_session_is_refused():
    with pytest.raises(RuntimeError, match="spawned.session"):
        spawned.call(print, (), 1.0)
