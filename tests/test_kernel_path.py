"""The model's kernel path (model.PagedAttention + the cache's ``paged``) and its check, notebook 09's last one.

The model tests compare the kernel path's logits with the gather path's, step by step, on two
copies of notebook 04's PagedKVCache driven alike (scrambled free lists, a fork, decode batches
at different lengths, prefill chunks from different starts). The instructor's kernels from
notebooks 07 and 09 run in Triton's interpreter, so the shapes are the tiny model's and the
stories short; the refusals run on the reference functions (no interpreter time).

The check tests feed check_kernel_fork_logits kernels that pass their own checks' kind of
synthetic cases but go wrong in a model, and assert the message names the bug.
"""

from __future__ import annotations

import random

import pytest
import torch

import paged_helpers as ph
from paged_helpers.baselines import StaticKVCache
from paged_helpers.checks import NotImplementedYet, check_kernel_fork_logits
from paged_helpers.checks.kernels import model_path as kernel_path
from paged_helpers.model import PagedAttention, random_qwen3, tiny_config
from paged_helpers.reference import paged_decode_reference, paged_prefill_reference

from conftest import solution

BLOCK = 8  # few blocks per sequence: few loop steps of the kernels in the interpreter


@pytest.fixture(scope="module")
def cache_class():
    return solution("04_fork_and_copy_on_write", "PagedKVCache")


@pytest.fixture(scope="module")
def kernels():
    return PagedAttention(
        decode=solution("07_paged_decode_kernel", "paged_decode_attention"),
        prefill=solution("09_paged_prefill_kernel", "paged_prefill_attention"),
    )


def _new_cache(cache_class, model, num_blocks=12):
    config = model.config
    return cache_class(config.num_hidden_layers, num_blocks, BLOCK, config.num_key_value_heads, config.head_dim)


def _scramble(cache, num_blocks):
    """Two sequences take turns for every block, then one is freed: later tables skip every other block."""
    for seq in ("kept", "freed"):
        cache.create(seq)
    for blocks in range(1, num_blocks // 2 + 1):
        for seq in ("freed", "kept"):
            cache.reserve(seq, blocks * BLOCK)
    cache.free("freed")


def _step(model, cache, new_tokens, attention):
    seqs = list(new_tokens)
    for seq in seqs:
        cache.reserve(seq, len(new_tokens[seq]))
    cache.set_batch(seqs)
    steps = len(new_tokens[seqs[0]])
    positions = torch.tensor([[cache.lengths[s] + t for t in range(steps)] for s in seqs])  # [B, T]
    with torch.no_grad():
        return model(torch.tensor([new_tokens[s] for s in seqs]), positions, cache=cache, attention=attention)


class _Lockstep:
    """Two copies of one cache, one on the gather path, one on the kernel path: every step compared."""

    def __init__(self, cache_class, model, attention, num_blocks=12):
        self.model, self.attention = model, attention
        self.caches = [_new_cache(cache_class, model, num_blocks) for _ in range(2)]
        for cache in self.caches:
            _scramble(cache, num_blocks)
        self.gaps = []

    def create(self, seq):
        for cache in self.caches:
            cache.create(seq)

    def fork(self, parent, child):
        for cache in self.caches:
            cache.fork(parent, child)

    def step(self, new_tokens):
        gathered = _step(self.model, self.caches[0], new_tokens, None)
        paged = _step(self.model, self.caches[1], new_tokens, self.attention)
        self.gaps.append(float((gathered - paged).abs().max()))
        assert self.caches[0].tables == self.caches[1].tables
        return paged


def test_kernel_path_equals_the_gather_path_through_a_fork(cache_class, kernels):
    """Tiny Qwen3 (4 query heads on 2 KV heads): prefill, fork, decode at uneven lengths, chunks from two starts."""
    model = ph.tiny_qwen3()
    run = _Lockstep(cache_class, model, kernels)
    run.create("parent")
    run.step({"parent": [3, 14, 15, 92, 65, 35]})  # prefill: 6 tokens, the block partly full
    run.fork("parent", "child")
    run.step({"parent": [8], "child": [9]})  # decode, copy-on-write of the shared block
    run.step({"child": [2, 7]})  # a chunk from position 7 into a new block
    run.step({"parent": [1], "child": [4]})  # decode at lengths 8 and 10: the parent's row is padded
    run.step({"child": [5, 6], "parent": [7, 8]})  # one batch of chunks from starts 10 and 8
    tables = run.caches[1].tables
    assert tables["parent"] == [2, 6] and tables["child"] == [0, 4]  # every other block: scrambled
    assert max(run.gaps) < 1e-4, run.gaps


def test_kernel_path_with_a_group_of_four_query_heads_per_kv_head(cache_class, kernels):
    model = random_qwen3(seed=3, config=tiny_config(num_hidden_layers=1, num_key_value_heads=1))
    run = _Lockstep(cache_class, model, kernels, num_blocks=8)
    run.create("a")
    run.step({"a": [10, 11, 12, 13, 14]})
    run.step({"a": [15]})
    assert max(run.gaps) < 1e-4, run.gaps


def test_reference_functions_plug_in_as_kernels(cache_class):
    """The protocol is the learner's signatures: the references (same signatures) plug in, and agree."""
    model = ph.tiny_qwen3()
    run = _Lockstep(cache_class, model, PagedAttention(decode=paged_decode_reference, prefill=paged_prefill_reference))
    for seq, prompt in (("a", [1, 2, 3]), ("b", [4, 5, 6, 7, 8, 9, 10])):
        run.create(seq)
        run.step({seq: prompt})
    run.step({"a": [11], "b": [12]})
    run.step({"b": [13, 14, 15], "a": [16, 17, 18]})
    assert max(run.gaps) < 1e-4, run.gaps


def test_the_kernels_get_what_the_docstring_promises(cache_class):
    seen = []

    def decode(q, k_pool, v_pool, block_tables, lengths, block_size):
        seen.append(("decode", q.shape, q.is_contiguous(), lengths.dtype, lengths.tolist(), k_pool.data_ptr()))
        return paged_decode_reference(q, k_pool, v_pool, block_tables, lengths, block_size)

    def prefill(q, k_pool, v_pool, block_table, start, block_size):
        seen.append(("prefill", q.shape, q.is_contiguous(), type(start), start, k_pool.data_ptr()))
        return paged_prefill_reference(q, k_pool, v_pool, block_table, start, block_size)

    model = ph.tiny_qwen3()
    cache = _new_cache(cache_class, model)
    cache.create("a")
    _step(model, cache, {"a": [1, 2, 3]}, PagedAttention(decode=decode, prefill=prefill))
    _step(model, cache, {"a": [4]}, PagedAttention(decode=decode, prefill=prefill))
    pools = [pool.data_ptr() for pool in cache.k_pool]
    assert seen == [
        ("prefill", torch.Size([3, 4, 16]), True, int, 0, pools[0]),
        ("prefill", torch.Size([3, 4, 16]), True, int, 0, pools[1]),
        ("decode", torch.Size([1, 4, 16]), True, torch.int32, [4], pools[0]),
        ("decode", torch.Size([1, 4, 16]), True, torch.int32, [4], pools[1]),
    ]


def test_the_kernel_path_refuses_what_it_cannot_run(cache_class):
    model = ph.tiny_qwen3()
    attention = PagedAttention(decode=paged_decode_reference, prefill=paged_prefill_reference)
    tokens = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="pass cache= as well"):
        model(tokens, torch.tensor([0, 1]), attention=attention)
    static = StaticKVCache(layers=2, slots=1, capacity=8, kv_heads=2, head_dim=16)
    with pytest.raises(TypeError, match="StaticKVCache has no paged"):
        model(tokens, torch.tensor([0, 1]), cache=static, attention=attention)
    with pytest.raises(TypeError, match="attention must be PagedAttention"):
        model(tokens, torch.tensor([0, 1]), cache=_new_cache(cache_class, model), attention=paged_decode_reference)
    with pytest.raises(TypeError, match=r"PagedAttention\(prefill=...\)"):
        PagedAttention(decode=paged_decode_reference, prefill=None)
    cache = _new_cache(cache_class, model)
    cache.create("a")
    cache.reserve("a", 4)
    cache.set_batch(["a"])
    with pytest.raises(ValueError, match="consecutive"):
        model(tokens, torch.tensor([[0, 2]]), cache=cache, attention=attention)


def test_a_kernel_returning_the_wrong_shape_is_named(cache_class):
    model = ph.tiny_qwen3()
    cache = _new_cache(cache_class, model)
    cache.create("a")
    wrong = PagedAttention(decode=paged_decode_reference, prefill=lambda q, *rest: q[:1])
    with pytest.raises(ValueError, match=r"prefill function returned \(1, 4, 16\).*layer 0.*\[3, 4, 16\]"):
        _step(model, cache, {"a": [1, 2, 3]}, wrong)


def test_the_gather_path_is_unchanged_without_attention(cache_class):
    model = ph.tiny_qwen3()
    cache = _new_cache(cache_class, model)
    cache.create("a")
    logits = _step(model, cache, {"a": [5, 6, 7, 8, 9]}, None)
    assert float((logits[0] - model.logits_from_scratch([[5, 6, 7, 8, 9]])[0]).abs().max()) < 1e-4


# -- the check ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def right():
    return (
        solution("09_paged_prefill_kernel", "paged_prefill_attention"),
        solution("07_paged_decode_kernel", "paged_decode_attention"),
        solution("04_fork_and_copy_on_write", "PagedKVCache"),
    )


def test_the_check_passes_the_instructors_kernels(right, capsys):
    """The visible story and, with the grader's seed, the hidden kind that seed picks (whole blocks)."""
    check_kernel_fork_logits(*right, seed=2026, hidden=True)
    out = capsys.readouterr().out
    assert out.startswith("check_kernel_fork_logits (hidden test") and " scenarios passed " in out, out


def test_the_other_hidden_kind_passes_the_instructors_kernels(right):
    prefill, decode, cache = right
    kernel_path._hidden_fork_of_a_fork(cache, decode, prefill, random.Random(7))


def _decode_keeping_the_first_pool(decode):
    """Keeps the pools of the first call per shape (to skip 'preparing' them again): fine on the kernel check's
    synthetic pools, one per case, but in the model both layers' pools have one shape."""
    kept = {}

    def paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size):
        k_pool, v_pool = kept.setdefault(tuple(k_pool.shape), (k_pool, v_pool))
        return decode(q, k_pool, v_pool, block_tables, lengths, block_size)

    return paged_decode_attention


def _decode_to_the_longest(decode):
    def paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size):
        return decode(q, k_pool, v_pool, block_tables, torch.full_like(lengths, int(lengths.max())), block_size)

    return paged_decode_attention


def _decode_to_the_table_end(decode):
    def paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size):
        every_slot = torch.full_like(lengths, block_tables.shape[1] * block_size)
        return decode(q, k_pool, v_pool, block_tables, every_slot, block_size)

    return paged_decode_attention


def _decode_without_the_new_token(decode):
    def paged_decode_attention(q, k_pool, v_pool, block_tables, lengths, block_size):
        return decode(q, k_pool, v_pool, block_tables, (lengths - 1).clamp(min=1), block_size)

    return paged_decode_attention


def _prefill_ignoring_start(prefill):
    def paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size):
        return prefill(q, k_pool, v_pool, block_table, 0, block_size)

    return paged_prefill_attention


@pytest.mark.parametrize(
    "which, wrong, named",
    [
        ("decode", _decode_keeping_the_first_pool, ["layer 1", "read layer 0's pool in layer 1", "one pool per layer"]),
        ("decode", _decode_to_the_longest, ["read to the batch's longest length 10", "padding", "lengths[seq]"]),
        ("decode", _decode_to_the_table_end, ["to the end of its padded table row", "lengths [7, 7]"]),
        ("decode", _decode_without_the_new_token, ["one token short", "the new token attends to itself"]),
        ("prefill", _prefill_ignoring_start, ["ignoring start = 7", "positions start .. start + T - 1"]),
    ],
)
def test_the_check_names_kernels_wrong_only_in_the_model(right, failing_message, which, wrong, named):
    prefill, decode, cache = right
    if which == "decode":
        decode = wrong(decode)
    else:
        prefill = wrong(prefill)
    message = failing_message(check_kernel_fork_logits, prefill, decode, cache)
    for words in named:
        assert words in message, message


def test_the_check_blames_the_cache_when_every_kernel_call_was_right(right, failing_message):
    prefill, decode, cache_class = right

    class FirstLayerEverywhere(cache_class):
        def paged(self, layer, k, v, positions):
            self.write(layer, k, v, positions)
            return ph.model.PagedKV(self.k_pool[0], self.v_pool[0], self.table_tensor, self.block_size)

    message = failing_message(check_kernel_fork_logits, prefill, decode, FirstLayerEverywhere)
    assert "prefill of a" in message and "the cache's write" in message, message


def test_the_check_refuses_the_reference_as_a_kernel(right, failing_message):
    _, decode, cache = right
    message = failing_message(check_kernel_fork_logits, paged_prefill_reference, decode, cache)
    assert "gather-then-attend reference" in message and "paged_prefill_attention in the model" in message, message


def test_the_check_says_not_implemented_yet(right, capsys):
    _, decode, cache = right

    def paged_prefill_attention(q, k_pool, v_pool, block_table, start, block_size):
        raise NotImplementedError()

    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_kernel_fork_logits(paged_prefill_attention, decode, cache)
    check_kernel_fork_logits(paged_prefill_attention, decode, cache, unfinished="note")
    assert "not implemented yet" in capsys.readouterr().out


def test_the_kernel_path_asks_for_the_models_dtype(cache_class):
    model = ph.tiny_qwen3()
    config = model.config
    cache = cache_class(
        config.num_hidden_layers, 8, BLOCK, config.num_key_value_heads, config.head_dim, dtype=torch.float16
    )
    cache.create("a")
    attention = PagedAttention(decode=paged_decode_reference, prefill=paged_prefill_reference)
    with pytest.raises(TypeError, match=r"holds float16 keys and values, but the model computes in float32"):
        _step(model, cache, {"a": [1, 2]}, attention)
