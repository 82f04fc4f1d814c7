"""`python run.py radix`, small: the JSON line, the three servers on one budget, the plots, the workloads."""

from __future__ import annotations

import json

import pytest

import run
from paged_helpers import workloads
from paged_helpers.demos import DEMOS
from paged_helpers.demos import radix as radix_demo

from conftest import solution

KEYS = {
    "workload",
    "requests",
    "flat_hit_rate",
    "radix_hit_rate",
    "fcfs_prefill_tokens",
    "cache_aware_prefill_tokens",
    "fcfs_tokens_per_s",
    "cache_aware_tokens_per_s",
}


@pytest.fixture(scope="module")
def classes():
    return {
        "RadixCache": solution("10_radix_cache", "RadixCache"),
        "cache_aware_order": solution("10_radix_cache", "cache_aware_order"),
        "PrefixCache": solution("05_prefix_caching", "PrefixCache"),
        "PagedKVCache": solution("04_fork_and_copy_on_write", "PagedKVCache"),
    }


def test_radix_is_a_discovered_demo():
    assert DEMOS["radix"] == "radix" and DEMOS["cow"] == "cow" and DEMOS["gpu-check"] == "gpu_check"


def test_run_radix_small_with_the_model(capsys, tmp_path):
    plot = tmp_path / "hit_rate.png"
    argv = ["radix", "--conversations", "4", "--turns", "3", "--blocks", "24", "--batch", "2", "--repeats", "1"]
    argv += ["--plot", str(plot)]
    assert run.main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    lines = out.out.strip().splitlines()
    result = json.loads(lines[-1])
    assert KEYS <= set(result)
    assert result["workload"] == "multi_turn_chats" and result["requests"] == 12
    assert any(line.startswith("radix  cache-aware") for line in lines)
    for rate in ("flat_hit_rate", "radix_hit_rate", "cache_aware_hit_rate"):
        assert 0 <= result[rate] < 1
    prompt_tokens = result["prompt_tokens"]
    assert result["fcfs_prefill_tokens"] == round(prompt_tokens * (1 - result["radix_hit_rate"]))
    assert result["fcfs_tokens_per_s"] > 0 and result["cache_aware_tokens_per_s"] > 0
    assert plot.stat().st_size > 1000


def test_cache_aware_order_prefills_less_under_pressure(classes):
    chats = workloads.multi_turn_chats(conversations=8, turns=4, seed=1)
    flat, fcfs, aware = radix_demo.compare(classes, chats, num_blocks=40)
    assert {run.prompt_tokens for run in (flat, fcfs, aware)} == {chats.prompt_tokens}
    assert aware.prefill_tokens < fcfs.prefill_tokens
    assert aware.longest_wait <= 4 + 8 // 4  # the guard, plus the rounds other starving requests take


def test_with_room_for_everything_every_server_hits_the_same(classes):
    chats = workloads.multi_turn_chats(conversations=3, turns=3, seed=2)
    runs = radix_demo.compare(classes, chats, num_blocks=200)
    assert len({run.cached_tokens for run in runs}) == 1 and runs[0].cached_tokens > 0


def test_tree_picture_marks_locks_and_the_next_eviction():
    from paged_helpers.plots import radix_tree

    RadixCache = solution("10_radix_cache", "RadixCache")
    allocator = solution("02_block_allocator", "BlockAllocator")(8)
    radix = RadixCache(allocator, 2)
    for prompt in ([1, 1, 2, 2], [1, 1, 3, 3], [4, 4]):
        node, blocks = radix.match(prompt)
        table = blocks + [allocator.allocate() for _ in range(len(prompt) // 2 - len(blocks))]
        radix.insert(prompt, table)
    locked, _ = radix.match([1, 1, 3, 3])
    radix.lock(locked)
    assert radix_tree.next_eviction(radix) is radix.eviction_candidate()
    figure = radix_tree.draw_tree(radix)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert any("locked ×1" in text for text in texts) and "root" in texts


def test_chat_prompts_extend_the_previous_turn():
    chats = workloads.multi_turn_chats(conversations=3, turns=4, seed=5)
    assert chats == workloads.multi_turn_chats(conversations=3, turns=4, seed=5)
    for conversation in chats.turns:
        for earlier, later in zip(conversation, conversation[1:], strict=False):
            assert later[: len(earlier)] == earlier and len(later) > len(earlier)
    assert chats.requests == 12


def test_few_shot_and_document_prompts_share_what_they_should():
    few_shot = workloads.few_shot_prompts(count=10, instruction_tokens=16, seed=3)
    assert all(prompt[:16] == few_shot[0][:16] for prompt in few_shot)
    assert len({tuple(prompt[16:]) for prompt in few_shot}) == 10
    documents = workloads.document_questions(questions=5, document_tokens=64, seed=3)
    assert all(prompt[:64] == documents[0][:64] for prompt in documents)
    with pytest.raises(ValueError, match="shots"):
        workloads.few_shot_prompts(examples=2, shots=3)


def test_reused_blocks_give_from_scratch_logits(classes):
    """A chat's later turns reuse the tree's blocks on the tiny Qwen3 and still match a fresh run."""
    import torch

    from paged_helpers.checkpoint import tiny_qwen3

    model = tiny_qwen3(0, device="cpu")
    config = model.config
    cache = classes["PagedKVCache"](
        layers=config.num_hidden_layers,
        num_blocks=24,
        block_size=4,
        kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
    )
    server = radix_demo.RadixServer(classes["RadixCache"], cache)
    chat = workloads.multi_turn_chats(1, 3, 8, (3, 6), (4, 8), config.vocab_size, seed=1).turns[0]
    reused_counts = []
    for turn, prompt in enumerate(chat):
        seq = f"turn{turn}"
        reused = server.start(seq, prompt)
        reused_counts.append(reused)
        cache.set_batch([seq])
        with torch.no_grad():
            last = model(torch.tensor([prompt[reused:]]), torch.arange(reused, len(prompt)), cache=cache)[0, -1]
        server.prefilled(seq, prompt)
        torch.testing.assert_close(last, model.logits_from_scratch([prompt])[0][-1], atol=1e-4, rtol=1e-4)
        server.finish(seq)
    assert reused_counts[0] == 0 and all(count >= 8 for count in reused_counts[1:])


@pytest.mark.parametrize("workload", ["few-shot", "document"])
def test_run_radix_on_single_turn_workloads(capsys, workload):
    argv = ["radix", "--workload", workload, "--conversations", "4", "--turns", "2", "--blocks", "40", "--no-model"]
    assert run.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["requests"] == 8 and result["workload"] in ("few_shot_prompts", "document_questions")
    assert result["radix_hit_rate"] > 0 and result["timed"] == "bookkeeping only"
