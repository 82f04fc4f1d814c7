"""What ``course.py report`` prints: every line says what it counts (issue 25)."""

from __future__ import annotations

from autograde_helpers import class_report


def test_pass_rate_lines_say_what_they_count():
    rows = [
        class_report.CheckScore("ada", "02_block_allocator", "test_block_allocator", 3.0, 3.0),
        class_report.CheckScore("bob", "02_block_allocator", "test_block_allocator", 0.0, 3.0),
        class_report.CheckScore("cy", "02_block_allocator", "test_block_allocator", 1.5, 3.0),
    ]
    header, line = class_report.pass_rate_lines(class_report.pass_rates(rows))
    assert "submissions with full points / graded submissions" in header, header
    assert line.split()[:2] == ["02_block_allocator", "test_block_allocator"], line
    assert "1 of 3 passed (33%)" in line, line


def test_an_empty_gradebook_says_so():
    assert class_report.pass_rate_lines([]) == ["pass rates: no autograded test cell in the gradebook yet"]
