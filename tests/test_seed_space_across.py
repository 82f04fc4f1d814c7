"""Every hidden call passes the solutions at a random seed as the clean run makes it: across the wire.

``test_seed_space.py`` sweeps the checks with the solutions in the same process. The grader's clean
run puts them apart: the checks in the checker, on ``Remote`` stand-ins of the learner's objects,
and the learner's definitions in another process, every read and call a message in plain data. A
check that read differently across that wire could fail right work only when graded. Here each
hidden call of the instructor notebooks' test cells, parsed as the clean run parses it, runs with a
seed drawn from the operating system (printed, and named in any failure with the command that
replays it), one learner process per call. One seed per call keeps the module near a minute on a
2-core CPU; ``tools/sweep_across.py --seeds N`` sweeps many.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.seeded_checks import draw_seeds
from tools.sweep_across import hidden_calls, sweep_call

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CALLS = [
    (path, grade_id, call)
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for grade_id, call in hidden_calls(path)
]


def test_every_notebook_with_a_hidden_seeded_call_is_here():
    assert {path.stem for path, _, _ in CALLS} == {path.stem for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}


@pytest.mark.parametrize(("path", "grade_id", "call"), CALLS, ids=[f"{p.stem}-{g}" for p, g, _ in CALLS])
def test_hidden_call_passes_the_solutions_across_the_wire_at_a_random_seed(path, grade_id, call):
    seeds = draw_seeds(1)
    print(f"{path.stem} {grade_id} {call['check']}: seed {seeds[0]}")
    failures = sweep_call(path, call, seeds)
    assert not failures, "\n".join(
        f"{call['check']} ({path.stem}, cell {grade_id}) failed the solutions across the wire at seed {seed}: "
        f"{message}\n  replay: .venv/bin/python tools/sweep_across.py {path.stem} --seed {seed}"
        for seed, message in failures.items()
    )
