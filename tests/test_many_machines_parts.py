"""The parts of grading on many machines that need no queue, no worker and no grading (issue 38).

The whole path, with procrastinate on PostgreSQL and worker processes, is
tests/test_grading_many_machines.py; these pin down what every job and result must satisfy
before anything acts on it: MACs over every byte, names that never leave their folder, a course
bundle named by its content, given seeds that are the course key's and nothing else, and the
status file that ``course.py status`` prints.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from paged_grading.clean_run import secret_seeds
from paged_grading.many_machines import course_bundle, fencing, grading_status, result, roster, signing, submission_job


def test_a_mac_covers_every_byte_and_the_boundaries_between_parts(tmp_path):
    key = signing.read_key(signing.course_key_file(tmp_path))
    assert stat.S_IMODE((tmp_path / signing.KEY_FILE).stat().st_mode) == 0o600
    mac = signing.sign(key, b"job", b"payload")
    assert signing.verify(key, mac, b"job", b"payload")
    assert not signing.verify(key, mac, b"job", b"payloaD")
    assert not signing.verify(key, mac, b"jobp", b"ayload")  # parts are length-prefixed
    assert not signing.verify(b"another key of 32 characters or more", mac, b"job", b"payload")


def test_a_worker_key_others_can_read_is_refused(tmp_path):
    path = tmp_path / "key"
    path.write_text("k" * 64)
    os.chmod(path, 0o644)
    with pytest.raises(SystemExit, match="chmod 600"):
        signing.read_key(path)
    with pytest.raises(SystemExit, match="copy the coordinator's"):
        signing.read_key(tmp_path / "missing")


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "", "a/b/.."])
def test_no_name_in_a_job_or_result_leaves_its_folder(name):
    with pytest.raises(ValueError):
        submission_job.safe_relative(name)


def _payload(files):
    return submission_job.Payload(
        run_id="r", job_key="k", course_id="c", student="ada", assignments=["01_a"], files=files,
        seeds={"seeds": {}, "families": {}}, ledger={}, bundle="b", fingerprint="f", try_no=1,
    )  # fmt: skip


def test_a_payload_round_trips_and_refuses_a_path_out_of_its_folder():
    payload = _payload({"01_a": {"01_a.ipynb": b"{}", "data/x.bin": b"\0\1"}})
    assert submission_job.decode(submission_job.encode(payload)) == payload
    evil = _payload({"01_a": {"../../gradebook.db": b"x"}})
    with pytest.raises(ValueError, match="refused path"):
        submission_job.decode(submission_job.encode(evil))
    student = _payload({"01_a": {"01_a.ipynb": b"{}"}})
    student.student = "../ada"
    with pytest.raises(ValueError, match="refused"):
        submission_job.decode(submission_job.encode(student))


def test_a_result_names_only_graded_folders():
    good = result.Result(
        "k", "ada", "w1", result.GRADED, graded=["01_a"], files={"feedback/01_a/01_a.html": (0o644, b"x")}
    )
    assert result.decode(result.encode(good)).files == good.files
    for name in ("autograded/02_b/02_b.ipynb", "reports/integrity.log", "feedback/01_a/../../x"):
        bad = result.Result("k", "ada", "w1", result.GRADED, graded=["01_a"], files={name: (0o644, b"x")})
        with pytest.raises(ValueError):
            result.decode(result.encode(bad))
    odd_log = result.Result("k", "ada", "w1", result.GRADED, reports={"../gradebook.db": "x"})
    with pytest.raises(ValueError, match="refused report logs"):
        result.decode(result.encode(odd_log))


def test_the_bundle_is_named_by_its_content(tmp_path):
    for assignment in ("01_a", "02_b"):
        (tmp_path / "source" / assignment).mkdir(parents=True)
        (tmp_path / "source" / assignment / f"{assignment}.ipynb").write_text(f"notebook {assignment}")
    first = course_bundle.pack(tmp_path, ["02_b", "01_a"])
    os.utime(tmp_path / "source" / "01_a" / "01_a.ipynb", (0, 0))
    assert course_bundle.pack(tmp_path, ["01_a", "02_b"]) == first  # order and times do not matter
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "01_a.ipynb").write_text("solution")
    digest, data = course_bundle.pack(tmp_path, ["01_a", "02_b"])
    assert digest != first[0]
    with pytest.raises(ValueError, match="not the one the coordinator signed"):
        course_bundle.install(tmp_path / "worker", first[0], data, release=None)


def test_given_seeds_are_the_course_key_s_and_a_missing_one_is_an_error(tmp_path):
    coordinator, worker = tmp_path / "coordinator", tmp_path / "worker"
    coordinator.mkdir()
    worker.mkdir()
    submission = ("ada", "02_b", "02_b", "0" * 64)
    given = secret_seeds.seeds_for(coordinator, submission, ["test_one", "test_two"])
    (worker / secret_seeds.GIVEN_SEEDS_FILE).write_text(json.dumps(given))
    for cell in ("test_one", "test_two"):
        assert secret_seeds.secret_seed(worker, *submission, cell) == secret_seeds.secret_seed(
            coordinator, *submission, cell
        )
    assert secret_seeds.seed_family(worker, *submission) == secret_seeds.seed_family(coordinator, *submission)
    with pytest.raises(secret_seeds.SeedNotGiven, match="differs from the coordinator"):
        secret_seeds.secret_seed(worker, "bob", "02_b", "02_b", "0" * 64, "test_one")
    secret_seeds.ensure_course_key(worker)
    assert not (worker / secret_seeds.SECRET_KEY_FILE).exists()  # a worker never holds the course key


def test_status_lists_every_student(tmp_path):
    board = grading_status.Board(tmp_path, ["ada", "bob"], show_bar=False)
    board.set("ada", state=grading_status.DONE, tries=2, worker="w3", seconds=12.5, reason="try 1 on w1: stopped")
    board.set("bob", state=grading_status.NOT_GRADED, tries=3, reason="nbgrader could not grade it")
    board.close()
    lines = grading_status.status_lines(tmp_path)
    assert any(line.startswith("ada") and "w3" in line and "try 1 on w1" in line for line in lines), lines
    assert any(line.startswith("bob") and "NOT GRADED" in line for line in lines), lines
    assert "1 NOT GRADED, 1 graded" in lines[-1], lines
    assert "no grading on workers recorded" in grading_status.status_lines(tmp_path / "elsewhere")[0]


def _judged(student, attempt, outcome, *, key=b"k" * 32, job_id=None, mac_key=None, max_tries=3):
    """``fencing.judge`` on a result row carrying ``outcome``, signed with ``mac_key`` (the worker key by default)."""
    blob = result.encode(outcome)
    job_id = attempt.job_id if job_id is None else job_id
    mac = signing.sign(mac_key or key, attempt.job_key.encode(), str(job_id).encode(), blob)
    row = {"job_key": attempt.job_key, "job_id": job_id, "worker": "w1", "result": blob, "mac": mac}
    return fencing.judge(row, attempt, student, key=key, max_tries=max_tries)


def test_only_the_current_tries_signed_result_for_the_bytes_sent_counts(tmp_path):
    """The fencing rules as data: each way a result can be refused, and the one way it counts."""
    board = grading_status.Board(tmp_path, ["ada"], show_bar=False)
    ros = roster.Roster({"ada": ["01_a"]}, board, 3, roster.Gradebook(tmp_path, "", "c"))
    ada = ros.students["ada"]
    first = ros.add_try(ada, "key1", 11, {"01_a": "sha-a"})
    graded = result.Result("key1", "ada", "w1", result.GRADED, graded=["01_a"], digests={"01_a": "sha-a"})
    assert _judged(ada, first, graded, mac_key=b"x" * 32).verdict.startswith("refused: not signed")
    assert _judged(ada, first, graded, job_id=12).verdict.startswith("refused: not signed")
    other = result.Result("key1", "bob", "w1", result.GRADED)
    assert _judged(ada, first, other).verdict == "refused: a result for another job"
    changed = result.Result("key1", "ada", "w1", result.GRADED, graded=["01_a"], digests={"01_a": "sha-b"})
    judgement = _judged(ada, first, changed)
    assert judgement.verdict == "refused: graded other bytes than were sent" and judgement.outcome is None
    assert "graded other bytes" in judgement.failed
    incomplete = result.Result("key1", "ada", "w1", result.INCOMPLETE, reason="gave up")
    assert _judged(ada, first, incomplete).failed == "try 1 on w1: gave up"
    assert _judged(ada, first, incomplete, max_tries=1).verdict == "accepted"  # the last try's best
    accepted = _judged(ada, first, graded)
    assert accepted.verdict == "accepted" and accepted.outcome == graded and not accepted.failed

    ros.try_failed(ada, first, "try 1 on w1: the worker stopped answering")
    second = ros.add_try(ada, "key2", 22, {"01_a": "sha-a"})
    late = _judged(ada, first, graded)
    assert late.verdict == "refused: superseded by try 2" and "only the current try's result counts" in late.warning
    ros.try_failed(ada, first, "a late failure of the superseded try")  # changes nothing: try 2 stands
    assert ada.current is second and len(ada.reasons) == 1
    ada.done = True
    again = result.Result("key2", "ada", "w1", result.GRADED, graded=["01_a"], digests={"01_a": "sha-a"})
    assert _judged(ada, second, again).verdict == "refused: ada was already graded in this run"
