"""The learner view (issue 24): checks on one side of a process boundary, the learner's code on the other.

* ``wire``: values round-trip as plain data (views of one storage stay views of one storage) and a
  malformed message is refused, never half-read;
* ``peer``: what the checking side lends (a model, a callback) can be called, not explored;
* the learner's view of the package holds no check, reference, demo or answer table;
* every check of the course passes the instructor's solutions across the boundary, for random
  31-bit seeds, with the learner's code in a process of its own (``learner_view.host``);
* wrong work still fails there, with the same message.
"""

from __future__ import annotations

import inspect
import random
import subprocess
import sys

import pytest
import torch

from paged_helpers import checks
from paged_helpers.learner_view import package_view, wire
from paged_helpers.learner_view.connection import LearnerProcess
from paged_helpers.learner_view.peer import Peer
from paged_helpers.learner_view.remote import Remote, plain
from paged_helpers.running.learner_kernel import LearnerKernel

from conftest import NOTEBOOKS, ROOT

# --------------------------------------------------------------------------- the wire


def _round_trip(value):
    encoder = wire.Encoder(lambda v: pytest.fail(f"not plain: {v!r}"))
    message = wire.loads(wire.dumps({"value": encoder(value), "storages": encoder.storages}))
    storages = wire.read_storages(message, lambda flat, device: flat)
    return wire.decode(message["value"], storages, lambda d: pytest.fail("no objects here"))


def test_plain_values_and_tensors_round_trip_with_their_views():
    import collections

    buffer = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    value = {
        "ints": [1, 2, 3],
        (1, "a"): {1, 2},
        "queue": collections.deque([4, 5]),
        "range": range(2, 9, 3),
        "slice": slice(1, None),
        "nan": float("nan"),
        "dtype": torch.bfloat16,
        "tensors": (buffer, buffer[1:, 2:4], torch.ones(3, dtype=torch.bfloat16), torch.zeros(0, 2)),
    }
    got = _round_trip(value)
    assert got["ints"] == [1, 2, 3] and got[(1, "a")] == {1, 2} and got["queue"] == collections.deque([4, 5])
    assert got["range"] == range(2, 9, 3) and got["slice"] == slice(1, None) and got["dtype"] is torch.bfloat16
    whole, view, bf16, empty = got["tensors"]
    assert torch.equal(whole, buffer) and torch.equal(view, buffer[1:, 2:4]) and bf16.dtype == torch.bfloat16
    assert view.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr()  # one storage, as sent
    assert empty.shape == (0, 2)


@pytest.mark.parametrize(
    "value",
    [
        {"tensor": {"storage": 0, "dtype": "float32", "offset": 0, "size": [5], "stride": [1]}},  # past the end
        {"tensor": {"storage": 0, "dtype": "complex64", "offset": 0, "size": [1], "stride": [1]}},
        {"tensor": {"storage": 3, "dtype": "float32", "offset": 0, "size": [1], "stride": [1]}},
        {"tensor": {"storage": 0, "dtype": "float32", "offset": -1, "size": [1], "stride": [1]}},
        {"pickle": "gASVAAAAAAAAAAA="},
        {"dict": [[1]]},
        {"set": [[1, 2]]},
    ],
)
def test_a_malformed_value_is_refused(value):
    storages = wire.read_storages({"storages": [{"bytes": "AAAAAAAAAAAAAAAA", "device": "cpu"}]}, lambda f, d: f)
    with pytest.raises(wire.Malformed):
        wire.decode(value, storages, lambda d: None)


def test_a_message_that_is_not_json_or_too_deep_is_refused():
    with pytest.raises(wire.Malformed):
        wire.loads(b"{not json")
    with pytest.raises(wire.Malformed):
        wire.loads(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(wire.Malformed):
        wire.read_storages({"storages": [{"bytes": "!!", "device": "cpu"}]}, lambda f, d: f)


# --------------------------------------------------------------------------- what the checking side lends


class _Lent:
    lent_names = ("visible",)
    visible = 3
    secret = "the expected answer"

    def __call__(self, x):
        return x + 1

    def mutate(self):
        self.visible = 0


def test_the_checking_side_lends_calls_and_listed_names_only():
    peer = Peer(0, 1, serves="calls", make_proxy=Remote)
    lent = _Lent()
    perform = peer._perform
    assert perform("call", {"target": lent, "name": None, "args": [1], "kwargs": {}, "value": None}) == 2
    assert perform("getattr", {"target": lent, "name": "visible", "args": None, "kwargs": None, "value": None}) == 3
    for op, name in (("getattr", "secret"), ("getattr", "__dict__"), ("method", "mutate"), ("setattr", "visible")):
        with pytest.raises(PermissionError):
            perform(op, {"target": lent, "name": name, "args": [], "kwargs": {}, "value": 0})
    with pytest.raises(PermissionError):
        perform("global", {"target": None, "name": "CHECKS", "args": [], "kwargs": {}, "value": None})
    model_names = __import__("paged_helpers.model", fromlist=["Qwen3"]).Qwen3.lent_names
    assert "load_state_dict" not in model_names and "forward" not in model_names  # a call runs forward


# --------------------------------------------------------------------------- the learner's view of the package


def test_the_learners_package_view_has_no_check_reference_or_answer(tmp_path):
    view = package_view.build(tmp_path / "paged_helpers")
    for withheld in package_view.WITHHELD:
        for module in (view / withheld).rglob("*.py"):
            assert "Not in the learner's process while grading" in module.read_text(), module
    every_source = "\n".join(path.read_text() for path in view.rglob("*.py"))
    for answer in ("def decode_as", "ORDER_CASES", "def paged_decode_reference", "def check_block_allocator"):
        assert answer not in every_source, answer
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import paged_helpers, paged_helpers.checks as c, paged_helpers.checks.kernels.bugs as bugs\n"
        "from paged_helpers.reference import paged_decode_reference\n"
        "from paged_helpers.demos.paged import utilization_figures\n"
        "assert paged_helpers.__file__.startswith(sys.argv[1]), paged_helpers.__file__\n"
        "for f in (c.check_block_allocator, bugs.decode_as, paged_decode_reference, utilization_figures):\n"
        "    try: f()\n"
        "    except RuntimeError as e: assert 'does not run in the learner' in str(e)\n"
        "    else: raise SystemExit('ran')\n"
        "print('withheld')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.strip() == "withheld", done.stderr


# --------------------------------------------------------------------------- checks across the boundary

# (notebook, check, the learner's names it takes), one row per check of the course.
ACROSS = [
    ("01_block_tables", "check_physical_slot", ["physical_slot"]),
    ("01_block_tables", "check_utilization_sweep", ["utilization_sweep"]),
    ("02_block_allocator", "check_block_allocator", ["BlockAllocator"]),
    ("03_paged_kv_cache", "check_paged_kv_cache", ["PagedKVCache"]),
    ("04_fork_and_copy_on_write", "check_copy_on_write", ["PagedKVCache"]),
    ("04_fork_and_copy_on_write", "check_fork_logits", ["PagedKVCache"]),
    ("05_prefix_caching", "check_prefix_cache", ["PrefixCache", "PagedKVCache"]),
    ("06_triton_warmup", "check_scale_kernel", ["scale_kernel"]),
    ("06_triton_warmup", "check_row_max_kernel", ["row_max_kernel"]),
    ("06_triton_warmup", "check_gather_rows_kernel", ["gather_rows_kernel"]),
    ("06_triton_warmup", "check_softmax_kernel", ["softmax_kernel"]),
    ("06_triton_warmup", "check_load_block_kernel", ["load_block_kernel"]),
    ("06_triton_warmup", "check_block_scores_kernel", ["block_scores_kernel"]),
    ("06_triton_warmup", "check_online_attention_kernel", ["online_attention_kernel"]),
    ("06_triton_warmup", "check_causal_scores_kernel", ["causal_scores_kernel"]),
    ("07_paged_decode_kernel", "check_paged_decode_kernel", ["paged_decode_kernel"]),
    ("07_paged_decode_kernel", "check_paged_decode", ["paged_decode_attention"]),
    ("07_paged_decode_kernel", "check_split_k_decode", ["split_k_decode_attention"]),
    ("08_continuous_batching", "check_engine_admission", ["EngineAdmission", "PagedKVCache", "PrefixCache"]),
    ("08_continuous_batching", "check_engine_plan", ["EnginePlanner", "PagedKVCache", "PrefixCache"]),
    ("08_continuous_batching", "check_engine_reserve", ["EngineScheduler", "PagedKVCache", "PrefixCache"]),
    ("08_continuous_batching", "check_engine_fork", ["ContinuousBatchingEngine", "PagedKVCache", "PrefixCache"]),
    ("08_continuous_batching", "check_engine_advance", ["ContinuousBatchingEngine", "PagedKVCache", "PrefixCache"]),
    ("08_continuous_batching", "check_engine", ["ContinuousBatchingEngine", "PagedKVCache", "PrefixCache"]),
    ("09_paged_prefill_kernel", "check_paged_prefill_kernel", ["paged_prefill_kernel"]),
    ("09_paged_prefill_kernel", "check_paged_prefill", ["paged_prefill_attention"]),
    (
        "09_paged_prefill_kernel",
        "check_kernel_fork_logits",
        ["paged_prefill_attention", "paged_decode_attention", "PagedKVCache"],
    ),
    ("10_radix_cache", "check_radix_cache", ["RadixCache", "BlockAllocator"]),
    ("10_radix_cache", "check_cache_aware_order", ["cache_aware_order"]),
    ("10_radix_cache", "check_radix_logits", ["RadixCache", "PagedKVCache"]),
    ("11_cache_tiers_and_routing", "check_tiered_cache", ["TieredRadixCache", "PagedKVCache"]),
    ("11_cache_tiers_and_routing", "check_kv_router", ["CacheAwareRouter"]),
    ("11_cache_tiers_and_routing", "check_tier_aware_router", ["TierAwareRouter"]),
]


def test_every_check_is_in_the_table():
    assert sorted(name for _, name, _ in ACROSS) == sorted(checks.REGISTRY)


def _learner(notebook) -> LearnerProcess:
    host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(notebook)]
    return LearnerProcess(host, time_limit=600, cwd=str(ROOT))


def _run_across(notebook, check: str, names: list[str], **kwargs) -> list[str]:
    function = checks.REGISTRY[check].function
    if "seed" in inspect.signature(function).parameters:
        kwargs.setdefault("seed", random.getrandbits(31))
    if checks.REGISTRY[check].kernel:  # judged from the notebook's text, as the clean run does: no learner process
        function(*[LearnerKernel.from_notebook(notebook, name) for name in names], **kwargs)
        return []
    with _learner(notebook) as learner:
        function(*[learner.name(name) for name in names], **kwargs)
        return learner.flags


@pytest.mark.parametrize(("notebook", "check", "names"), ACROSS, ids=[row[1] for row in ACROSS])
def test_the_solution_passes_every_check_from_another_process(notebook, check, names):
    assert _run_across(NOTEBOOKS / f"{notebook}.ipynb", check, names) == []


_LEAKY_ALLOCATOR = """
from collections import deque

class BlockAllocator:
    def __init__(self, num_blocks):
        self.free = deque(range(num_blocks))
        self.refs = [0] * num_blocks

    def allocate(self):
        if not self.free:
            raise MemoryError("pool exhausted")
        block = self.free.popleft()
        self.refs[block] = 1
        return block

    def share(self, block):
        self.refs[block] += 1

    def release(self, block):
        self.refs[block] -= 1  # the bug: the last release never returns the block to the free list

    @property
    def num_free(self):
        return len(self.free)
"""


def _notebook_of(tmp_path, source: str, name: str = "submission.ipynb"):
    import nbformat

    path = tmp_path / name
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


def test_wrong_work_fails_across_the_boundary_with_the_same_message(tmp_path):
    """An allocator that never frees: the message of one process, word for word, from the other."""
    path = _notebook_of(tmp_path, _LEAKY_ALLOCATOR)
    with pytest.raises(checks.CheckFailed) as across:
        _run_across(path, "check_block_allocator", ["BlockAllocator"], seed=11)
    from paged_helpers.notebook_loader import load_definitions

    with pytest.raises(checks.CheckFailed) as here:
        checks.check_block_allocator(load_definitions(path).BlockAllocator, seed=11)
    assert str(across.value) == str(here.value)
    assert "free" in str(here.value)


def test_a_learner_value_that_lies_when_compared_is_refused_across_the_boundary(tmp_path):
    """An int subclass whose == is always true arrives as an object, never as an int."""
    source = (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
        "def physical_slot(table, position, block_size):\n    return Liar(0)\n"
    )
    with pytest.raises(checks.CheckFailed) as failure:
        _run_across(_notebook_of(tmp_path, source), "check_physical_slot", ["physical_slot"])
    assert "Liar" in str(failure.value), str(failure.value)


# --------------------------------------------------------------------------- wrong work, read ahead

# The checks that fetch the learner's bookkeeping ahead (learner_view.prefetch), with their tests'
# wrong implementations: each family is one notebook of classes ``Wrong_<bug>`` built from the check
# tests' own bugs, graded in one process and across the boundary, with the same message.
# family -> (check, the test module with its WRONG table, the class each bug changes, partners)
_FAMILIES = {
    "allocator": ("check_block_allocator", "test_checks_allocator", ("02_block_allocator", "BlockAllocator"), ()),
    "paged_cache": ("check_paged_kv_cache", "test_checks_paged_cache", ("03_paged_kv_cache", "PagedKVCache"), ()),
    "radix": ("check_radix_cache", "test_checks_radix", ("10_radix_cache", "RadixCache"), ("BlockAllocator",)),
}


def _family_notebook(tmp_path, family: str) -> tuple[str, list[str]]:
    """The notebook of ``family``'s wrong classes (a bug is a function making the class, or a dict
    of the methods it replaces), and their names."""
    _, module, (notebook, name), _ = _FAMILIES[family]
    lines = ["from conftest import solution", f"from {module} import WRONG"]
    for partner in _FAMILIES[family][3]:
        lines.append(f"class {partner}(solution('02_block_allocator', {partner!r})):\n    pass")
    names = []
    for bug in __import__(module).WRONG:
        right = f"solution({notebook!r}, {name!r})"
        if callable(bug):
            lines.append(f"from {module} import {bug.__name__}")
            lines.append(f"class Wrong_{bug.__name__}({bug.__name__}({right})):\n    pass")
            names.append(f"Wrong_{bug.__name__}")
        else:
            lines.append(f"class Wrong_{bug}({right}):\n    vars().update(WRONG[{bug!r}])")
            names.append(f"Wrong_{bug}")
    return _notebook_of(tmp_path, "\n".join(lines) + "\n", f"{family}.ipynb"), names


@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_wrong_work_read_ahead_fails_with_the_same_words_across_the_boundary(tmp_path, family):
    """Every bug of the check's own tests: one process and across the wire, word for word (the reads
    fetched ahead answer exactly what the reads one by one did)."""
    import os

    from paged_helpers.checks.speaking.failure import HINT_TIERS
    from paged_helpers.notebook_loader import load_definitions

    path, names = _family_notebook(tmp_path, family)
    check, partners = checks.REGISTRY[_FAMILIES[family][0]].function, _FAMILIES[family][3]
    here = load_definitions(path, module_name=f"wrong_{family}")

    def message(*learner_classes) -> str:
        HINT_TIERS.forget()
        with pytest.raises(checks.CheckFailed) as failure:
            check(*learner_classes, seed=7)
        return str(failure.value)

    host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    with LearnerProcess(host, time_limit=600, cwd=str(ROOT), env=env) as learner:
        for name in names:
            across = message(learner.name(name), *[learner.name(partner) for partner in partners])
            local = message(getattr(here, name), *[getattr(here, partner) for partner in partners])
            assert across == local, name
        assert learner.flags == []


_TREE = """
class Node:
    def __init__(self, tokens, parent=None):
        self.tokens, self.children, self.parent = list(tokens), {}, parent
        if parent is not None:
            parent.children[tokens[0]] = self

    @property
    def size(self):
        return len(self.tokens)

    @property
    def broken(self):
        raise ValueError("broken on purpose")


def tree():
    root = Node([0])
    left = Node([1, 2], root)
    Node([3], left)
    Node([4, 5, 6], root)
    return root


def grow(node):
    node.tokens.append(99)
"""


def _walk(root) -> list:
    from paged_helpers.checks.reading.strict import learner_dict, learner_int, learner_int_list

    seen, stack = [], [root]
    while stack:
        node = stack.pop()
        seen.append((learner_int_list(node.tokens, "tokens"), learner_int(node.size, "size"), node.parent is None))
        stack += learner_dict(node.children, "children", "", lambda child, _w, _s: child).values()
    return seen


def test_a_tree_read_ahead_answers_every_read_without_a_request_until_the_learner_runs_again(tmp_path):
    from paged_helpers.learner_view.prefetch import prefetch
    from paged_helpers.notebook_loader import load_definitions

    path = _notebook_of(tmp_path, _TREE)
    here = load_definitions(path, module_name="tree_here")
    with _learner(path) as learner:
        peer, root = learner.peer, learner.name("tree")()
        prefetch(root, names=("tokens", "children", "size", "broken", "parent"), follow=("children",))
        before = peer.next_id
        assert _walk(root) == _walk(here.tree())  # read as a property, a list, a dict: as in one process
        assert peer.next_id == before  # all of it answered by the one prefetch
        with pytest.raises(ValueError, match="broken on purpose"):  # a read that raised: asked, and raises
            root.broken  # noqa: B018 - the read is the test
        assert peer.next_id == before + 1
        left = list(root.children.values())[0]
        learner.name("grow")(left)  # the learner's code runs: nothing read before holds any more
        assert plain(left.tokens) == [1, 2, 99] and left.size == 3
        # a list read by reference brings its contents: reading them asks nothing more
        tokens = left.tokens
        count = peer.next_id
        assert plain(tokens) == [1, 2, 99] and len(tokens) == 3 and 99 in tokens and list(tokens) == [1, 2, 99]
        assert tokens[2] == 99 and peer.next_id == count
        tokens.append(7)  # by reference still: the write reaches the learner's list
        assert plain(left.tokens) == [1, 2, 99, 7]


def test_a_read_ahead_keeps_no_tensor_and_stops_at_its_limit():
    import torch

    from paged_helpers.learner_view.prefetch import read_here

    class Node:
        def __init__(self, depth):
            self.pool = torch.zeros(3)
            self.children = [Node(depth - 1)] if depth else []

    records = read_here([Node(10)], ["pool", "children"], ["children"], 4)
    assert {record[1] for record in records} == {"children"}  # the tensor is left to its own read
    assert len({id(record[0]) for record in records}) == 4  # four nodes read, the rest left out


_FORGED_READER = """
import torch
import paged_helpers.learner_view.peer as _peer
from paged_helpers.learner_view import crossing


class _Forger:  # a class body runs when the definitions load: it replaces its own process's reader
    def _forged(obj, names, follow, limit, more):
        return [
            [obj, "size", "value", [1, 2]],  # a list by value, where a read brings a list by reference
            [obj, "parent", "ref", 5],  # a reference to what is not a container
            [obj, "tokens", "ref", crossing.ByReference(obj.tokens), torch.zeros(2)],  # a tensor as its contents
            "not a record",
        ]

    _peer.SPECIALS["prefetch"] = _forged
"""


def test_what_a_forged_reader_sends_that_no_read_could_is_ignored(tmp_path):
    """The learner's process may answer for its own objects as it likes, as any read lets it; what no
    read could bring (a container by value, a reference to a number, a tensor kept as contents) is
    not kept, and the reads ask the learner's objects themselves."""
    from paged_helpers.learner_view.prefetch import prefetch

    with _learner(_notebook_of(tmp_path, _TREE + _FORGED_READER)) as learner:
        root = learner.name("tree")()
        prefetch(root, names=("tokens", "size", "parent"))
        assert learner.peer.known.prefetched, "the forged reader did not answer (it raised in the learner's process)"
        before = learner.peer.next_id
        assert root.size == 1 and root.parent is None and plain(root.tokens) == [0]
        assert learner.peer.next_id == before + 3  # size, parent and the list's contents: each asked


def test_wrong_engine_stages_read_ahead_fail_with_the_same_words_across_the_boundary(tmp_path):
    """The engine checks read each phase's state ahead (``engine_rules.read_engine_ahead``): every
    wrong stage of ``test_checks_engine_stages`` fails with the same message across the wire."""
    import os

    from test_checks_engine_stages import NOTEBOOK, STAGES, WRONG

    from paged_helpers.checks.speaking.failure import HINT_TIERS
    from paged_helpers.notebook_loader import load_definitions

    lines = [
        "from conftest import solution",
        "from test_checks_engine_stages import WRONG",
        "class PagedKVCache(solution('04_fork_and_copy_on_write', 'PagedKVCache')):\n    pass",
        "class PrefixCache(solution('05_prefix_caching', 'PrefixCache')):\n    pass",
    ]
    for bug, (stage, _) in WRONG.items():
        right = f"solution({NOTEBOOK!r}, {STAGES[stage][1]!r})"
        lines.append(f"class Wrong_{bug}({right}):\n    vars().update(WRONG[{bug!r}][1])")
    path = _notebook_of(tmp_path, "\n".join(lines) + "\n", "engine_stages.ipynb")
    here = load_definitions(path, module_name="wrong_engine_stages")

    def message(check, *classes) -> str:
        HINT_TIERS.forget()
        with pytest.raises(checks.CheckFailed) as failure:
            check(*classes)
        return str(failure.value)

    host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    with LearnerProcess(host, time_limit=600, cwd=str(ROOT), env=env) as learner:
        parts = ("PagedKVCache", "PrefixCache")
        for bug, (stage, _) in WRONG.items():
            check = STAGES[stage][0]
            across = message(check, learner.name(f"Wrong_{bug}"), *map(learner.name, parts))
            local = message(check, getattr(here, f"Wrong_{bug}"), *(getattr(here, part) for part in parts))
            assert across == local, bug
        assert learner.flags == []
