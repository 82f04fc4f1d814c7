"""The parts that keep honest students from losing silently, without running nbgrader (fast).

The whole pipeline with real nbgrader is in test_grading_class.py; these pin each rule down:
student ids, the choice among several copies, matching pasted cells to the release, marker
comments, and the size limits on feedback.
"""

from __future__ import annotations

import os
import time
import zipfile

import nbformat
import pytest
from nbformat.notebooknode import NotebookNode

from autograde_helpers import (
    NOTEBOOKS,
    collect,
    feedback_files,
    gradebook,
    instructor,
    outputs,
    sanitize,
    write_config,
)

A2 = "02_block_allocator"


def test_names_in_any_script_keep_their_letters():
    assert collect.student_id("Zoë Šimková") == "Zoë_Šimková"
    assert collect.student_id("李雷") == "李雷"
    assert collect.student_id("韩梅梅") == "韩梅梅"
    assert collect.student_id("Zoe\u0308") == collect.student_id("Zoë")  # NFC: same name, same id


def test_names_with_nothing_usable_left_are_still_distinct():
    first, second = collect.student_id("🙂🙂"), collect.student_id("!!!")
    assert first != second and first.startswith("student-") and "unknown" not in first


def test_two_names_that_clean_up_the_same_get_two_ids():
    roster = collect.Roster()
    first, second = roster.id_for("Anna Lee"), roster.id_for("Anna_Lee")
    assert first == "Anna_Lee" and second.startswith("Anna_Lee-") and first != second
    assert roster.id_for("Anna Lee") == first  # the same name keeps its id
    assert roster.renamed() == {"Anna Lee": "Anna_Lee", "Anna_Lee": second}


def test_a_name_that_already_is_an_id_keeps_it(tmp_path):
    for name in ("Anna Lee", "Anna_Lee"):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / f"{A2}.ipynb").write_text(_notebook(f"# {name}"))
    result = collect.collect_folders(tmp_path / "class", tmp_path / "submitted", {A2})
    assert result.renamed["Anna Lee"].startswith("Anna_Lee-") and "Anna_Lee" not in result.renamed
    assert "# Anna_Lee" in (tmp_path / "submitted" / "Anna_Lee" / A2 / f"{A2}.ipynb").read_text()


def _notebook(text: str) -> str:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(text)]
    return nbformat.writes(notebook)


def test_the_newest_copy_is_graded_and_the_choice_reported(tmp_path):
    source = tmp_path / "class"
    (source / "jdoe" / "backup").mkdir(parents=True)
    (source / "jdoe" / f"{A2}.ipynb").write_text(_notebook("final = True"))
    (source / "jdoe" / "backup" / f"{A2}.ipynb").write_text(_notebook("draft = True"))
    old = time.time() - 3600
    os.utime(source / "jdoe" / "backup" / f"{A2}.ipynb", (old, old))
    result = collect.collect_folders(source, tmp_path / "submitted", {A2})
    assert result.placed == [("jdoe", A2)]
    assert "final = True" in (tmp_path / "submitted" / "jdoe" / A2 / f"{A2}.ipynb").read_text()
    [choice] = result.choices
    assert "backup" in choice.ignored[0].where and "not graded" in choice.describe()


def test_a_newer_draft_wins_by_the_visible_rule_and_ties_go_to_the_shallowest(tmp_path):
    source = tmp_path / "class"
    (source / "jdoe" / "backup").mkdir(parents=True)
    (source / "jdoe" / f"{A2}.ipynb").write_text(_notebook("top = True"))
    (source / "jdoe" / "backup" / f"{A2}.ipynb").write_text(_notebook("deep = True"))
    same = time.time() - 60
    for path in source.rglob("*.ipynb"):
        os.utime(path, (same, same))
    collect.collect_folders(source, tmp_path / "submitted", {A2})
    assert "top = True" in (tmp_path / "submitted" / "jdoe" / A2 / f"{A2}.ipynb").read_text()
    assert "newest modification time" in collect.CHOICE_RULE and "shallowest" in collect.CHOICE_RULE


def test_canvas_resubmissions_take_the_newest_entry(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(zipfile.ZipInfo("jdoe_12_34_02_block_allocator.ipynb", (2026, 1, 1, 10, 0, 0)), _notebook("v1"))
        zf.writestr(
            zipfile.ZipInfo("jdoe_LATE_12_35_02_block_allocator-1.ipynb", (2026, 1, 2, 10, 0, 0)), _notebook("v2")
        )
        zf.writestr(zipfile.ZipInfo("李雷_12_36_02_block_allocator.ipynb", (2026, 1, 1, 10, 0, 0)), _notebook("li"))
    result = collect.collect_zip(archive, tmp_path / "submitted", {A2})
    assert sorted(result.placed) == [("jdoe", A2), ("李雷", A2)]
    assert "v2" in (tmp_path / "submitted" / "jdoe" / A2 / f"{A2}.ipynb").read_text()
    assert len(result.choices) == 1


def _without_metadata(notebook):
    new = nbformat.v4.new_notebook()
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    new.cells = [make[c.cell_type](c.source) for c in notebook.cells if c.cell_type in make]
    return new


def test_pasted_cells_match_the_release_cells_they_came_from():
    release = instructor(A2)
    pasted = _without_metadata(release)
    pasted.cells.insert(2, nbformat.v4.new_code_cell("print('a note of mine')"))
    matched = sanitize.match_cells(release.cells, pasted.cells)
    for r, s in matched.items():
        assert pasted.cells[s].source == release.cells[r].source
    wanted = [i for i, c in enumerate(release.cells) if c.metadata.get("nbgrader", {}).get("grade_id")]
    assert sorted(matched) == wanted


def test_a_solution_cell_is_found_by_the_names_it_defines():
    release = instructor(A2)
    pasted = _without_metadata(release)
    solution = next(i for i, c in enumerate(release.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    index = next(i for i, c in enumerate(pasted.cells) if c.source == release.cells[solution].source)
    pasted.cells.insert(index, nbformat.v4.new_code_cell("scratch = [1, 2, 3]"))
    matched = sanitize.match_cells(release.cells, pasted.cells)
    assert "class BlockAllocator" in pasted.cells[matched[solution]].source


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_only_ordinary_cells_are_tagged_skip_autograde(path):
    for cell in nbformat.read(path, as_version=4).cells:
        if sanitize.SKIP_TAG in cell.metadata.get("tags", []):
            meta = cell.metadata.get("nbgrader", {})
            assert cell.cell_type == "code" and not (meta.get("grade") or meta.get("solution")), cell.source[:80]


def test_a_notebook_unlike_the_release_matches_nothing():
    unrelated = [nbformat.v4.new_code_cell("print('my allocator is in another file')")]
    assert sanitize.match_cells(instructor(A2).cells, unrelated) == {}


def test_marker_words_in_a_students_cell_are_defused_not_in_test_cells():
    student = nbformat.v4.new_code_cell("x = 1  # ### BEGIN HIDDEN TESTS")
    test = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\ncheck()\n### END HIDDEN TESTS")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 1}
    defuse = outputs.DefuseMarkers()
    defuse.preprocess_cell(student, {}, 0)
    defuse.preprocess_cell(test, {}, 1)
    assert "HIDDEN TESTS" not in student.source and "HIDDEN\u00a0TESTS" in student.source
    assert test.source.startswith("### BEGIN HIDDEN TESTS")


def test_outputs_over_the_limit_are_replaced_by_their_size():
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(big)")
    cell.outputs = [
        NotebookNode(output_type="stream", name="stdout", text="y" * (3 * 2**20)),
        NotebookNode(output_type="stream", name="stdout", text="small"),
    ]
    notebook.cells = [cell]
    limit = outputs.LimitOutputs()
    limit.preprocess(notebook, {})
    assert "left out of this feedback page" in cell.outputs[0].text and "3.00 MiB" in cell.outputs[0].text
    assert cell.outputs[1].text == "small"


def test_files_over_the_limit_leave_feedback_with_a_note(tmp_path):
    folder = tmp_path / "feedback" / "jdoe" / A2
    folder.mkdir(parents=True)
    with open(folder / "big.bin", "wb") as handle:
        handle.truncate(feedback_files.MAX_FILE_BYTES + 1)
    (folder / "small.txt").write_text("ok")
    problems = feedback_files.enforce_limits(tmp_path / "feedback")
    assert not (folder / "big.bin").exists() and (folder / "small.txt").exists()
    assert (folder / f"big.bin{feedback_files.NOTE_SUFFIX}").exists()
    assert len(problems) == 1 and "big.bin" in problems[0]


@pytest.mark.parametrize("configured", [None, "postgresql+psycopg2://grader@/gradebook?host=/tmp/pg"])
def test_the_gradebook_url_comes_from_the_course_config(tmp_path, configured):
    root = tmp_path / "course"
    write_config(root, **({"CourseDirectory.db_url": configured} if configured else {}))
    url = gradebook.db_url(root)
    assert url == (configured or f"sqlite:///{root / 'gradebook.db'}")
    assert gradebook.allows_concurrent_writers(url) == bool(configured)
