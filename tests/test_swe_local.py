"""swe-local: the shipped tasks (gold resolves, empty does not), the workspace (nothing hidden leaks),
grading of bad input (patch that does not apply, hang, missing repository), and the generator."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import skillopt.benchmarks as bm
from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.benchmarks.make_swe.mutate import find_mutations
from skillopt.benchmarks.make_swe.selection import _find_def, hide_tests, locate_test
from skillopt.benchmarks.make_swe.write import write_rows
from skillopt.benchmarks.swe_grading import (
    SweInstance,
    instance_of,
    load_instances,
    swe_task,
)
from skillopt.git import diff as workspace_diff
from skillopt.git import git
from skillopt.benchmarks.swe_local import (
    SHIPPED_TASKS,
    SweLocalBenchmark,
    resolve_source,
)
from skillopt.errors import BadInput, MissingExtra
from tests.helpers import REPO, cli_env, run_cli

pytest.importorskip("swebench", reason="the swe extra (swebench) is not installed: pip install 'skillopt[swe]'")


@pytest.fixture(scope="module")
def shipped() -> SweLocalBenchmark:
    return bm.get_benchmark("swe-local")


def _agent_edits(ws: Path, patch: str) -> None:
    """What an agent does: change the files (the patch applied to the working tree, not committed)."""
    (ws / "fix.diff").write_text(patch)
    subprocess.run(["git", "apply", "fix.diff"], cwd=ws, check=True)
    (ws / "fix.diff").unlink()


# ---------------------------------------------------------------- the shipped task set


def test_shipped_tasks_are_real_code_from_two_packages_with_their_licences(shipped):
    rows = [json.loads(line) for line in SHIPPED_TASKS.read_text().splitlines() if line.strip()]
    assert len(rows) >= 20
    packages = {(r["package"], r["package_version"], r["license"]) for r in rows}
    assert len({p for p, _, _ in packages}) >= 2
    for r in rows:
        assert isinstance(r["FAIL_TO_PASS"], str) and json.loads(r["FAIL_TO_PASS"])  # the hub's JSON strings
        assert (SHIPPED_TASKS.parent / r["source"]).is_file()
        assert r["license"] and r["problem_statement"].strip()
    size = sum(p.stat().st_size for p in SHIPPED_TASKS.parent.iterdir())
    assert size < 4_000_000
    assert len(shipped.tasks("all")) == len(rows)
    assert all(t.kind == "swe" and "patch" not in t.metadata for t in shipped.tasks("all"))


def test_every_shipped_task_gold_resolves_and_empty_does_not(shipped):
    """The CI check of the task set, graded exactly as a rollout is (fresh clone, swebench grading)."""
    tasks = shipped.tasks("all")

    def check(task: Task) -> tuple[str, bool, bool, str]:
        gold = shipped.grade(task, instance_of(task).patch)
        empty = shipped.grade(task, "", run_empty=True)
        return task.id, gold.resolved, empty.resolved, f"{gold.score.feedback} | {empty.score.feedback}"

    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(check, tasks))
    bad = [r for r in results if not (r[1] and not r[2])]
    assert not bad, bad


def test_the_workspace_holds_the_buggy_state_and_nothing_hidden(shipped, tmp_path):
    for task in shipped.tasks("all"):
        inst = instance_of(task)
        ws = tmp_path / task.id
        ws.mkdir()
        shipped.prepare(task, ws)
        # one fresh commit, the task's base commit itself, and no other object in the repository
        assert git(ws, "rev-parse", "HEAD").stdout.strip() == inst.base_commit
        assert git(ws, "rev-list", "--all", "--count").stdout.strip() == "1"
        objects = {line.split()[0] for line in git(ws, "rev-list", "--all", "--objects").stdout.splitlines()}
        tree = {line.split()[2] for line in git(ws, "ls-tree", "-r", "-t", "HEAD").stdout.splitlines()}
        root = git(ws, "rev-parse", "HEAD^{tree}").stdout.strip()
        assert objects == tree | {inst.base_commit, root}
        stored = dict(line.split(": ") for line in git(ws, "count-objects", "-v").stdout.splitlines())
        assert int(stored["count"]) + int(stored["in-pack"]) == len(objects)  # nothing unreachable either
        assert git(ws, "status", "--porcelain").stdout == ""
        # the gold patch is not applied (it applies forward) and the hidden tests are absent
        (tmp_path / "gold.diff").write_text(inst.patch)
        assert git(ws, "apply", "--check", str(tmp_path / "gold.diff"), check=False).returncode == 0
        (tmp_path / "tests.diff").write_text(inst.test_patch)  # the hidden tests are not there yet either
        assert git(ws, "apply", "--check", str(tmp_path / "tests.diff"), check=False).returncode == 0
        for tid in inst.FAIL_TO_PASS:  # each failing test's function is gone from its own file
            path, names = locate_test(tid)
            tree = ast.parse((ws / path).read_text()) if (ws / path).is_file() else ast.Module(body=[])
            assert _find_def(tree.body, names) is None, (task.id, tid)
        assert inst.patch not in task.prompt and inst.test_patch not in task.prompt


async def test_an_agent_that_fixes_the_bug_scores_one_from_the_workspace_diff(shipped, tmp_path):
    task = shipped.tasks("all")[0]
    shipped.prepare(task, tmp_path)
    _agent_edits(tmp_path, instance_of(task).patch)
    (tmp_path / "NOTES.md").write_text("a new file the agent added\n")
    assert "NOTES.md" in workspace_diff(tmp_path)  # untracked files are in the diff
    score = await shipped.score(task, RolloutOutput(text="Fixed it."), tmp_path)  # patch None: ws diff
    assert (score.hard, score.soft) == (1, 1), score.feedback
    assert "resolved" in score.feedback
    logs = list((tmp_path.parent / "swe-logs" / task.id).rglob("report.json"))
    assert logs and json.loads(logs[0].read_text())["resolved"] is True


async def test_no_change_and_a_test_only_change_are_never_resolved(shipped, tmp_path):
    task = shipped.tasks("all")[1]
    inst = instance_of(task)
    shipped.prepare(task, tmp_path)
    empty = await shipped.score(task, RolloutOutput(text="I could not find it."), tmp_path)
    assert empty.hard == 0 and "empty" in empty.feedback
    # the agent "fixes" the tests instead of the code: test files are reset before grading
    test_file = next(p for p in (tmp_path / f for f in inst.directives) if p.is_file())
    test_file.write_text(test_file.read_text() + "\n\ndef test_extra():\n    assert True\n")
    cheat = await shipped.score(task, RolloutOutput(), tmp_path)
    assert cheat.hard == 0 and "FAIL_TO_PASS 0/" in cheat.feedback


# ---------------------------------------------------------------- bad input: scored failures


def test_a_patch_that_does_not_apply_is_a_scored_failure(shipped):
    task = shipped.tasks("all")[0]
    bad = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n"
    report = shipped.grade(task, bad)
    assert not report.resolved and "does not apply" in report.error
    assert report.score.hard == 0 and "not resolved" in report.score.feedback
    garbage = shipped.grade(task, "this is not a patch at all\n")
    assert not garbage.resolved and garbage.error


def test_a_test_run_that_hangs_times_out_as_a_failure(shipped):
    task = shipped.tasks("all")[0]
    inst = instance_of(task)
    bench = SweLocalBenchmark([inst], SHIPPED_TASKS.parent, test_timeout_s=3)
    hang = ("diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
            "@@ -0,0 +1,2 @@\n+import time\n+time.sleep(60)\n")
    report = bench.grade(bench.tasks("all")[0], hang)
    assert report.timed_out and not report.resolved and "timed out" in report.score.feedback
    assert report.duration_s < 30


def test_a_test_command_that_cannot_start_is_a_scored_failure(shipped):
    inst = instance_of(shipped.tasks("all")[0])
    bench = SweLocalBenchmark([inst], SHIPPED_TASKS.parent, python="/nonexistent/python")
    report = bench.grade(bench.tasks("all")[0], inst.patch)
    assert not report.resolved and "no usable test results" in report.error and "cannot run /nonexistent/python" in report.error


async def test_a_repository_that_cannot_be_cloned_is_a_scored_failure(tmp_path):
    inst = SweInstance(instance_id="ghost-1", repo="nobody/ghost", base_commit="0" * 40, problem_statement="Fix it.",
                       test_patch="", FAIL_TO_PASS=["t.py::test_a"], PASS_TO_PASS=[], source="missing.bundle")
    bench = SweLocalBenchmark([inst], tmp_path)
    task = bench.tasks("all")[0]
    ws = tmp_path / "ws"
    ws.mkdir()
    bench.prepare(task, ws)  # never raises
    score = await bench.score(task, RolloutOutput(text="done"), ws)
    assert score.hard == 0 and "setup failed" in score.feedback and "not found" in score.feedback
    assert bench.grade(task, "diff --git a/x b/x\n").error


def test_resolve_source_defaults_to_github_and_is_relative_to_the_task_file(tmp_path):
    inst = SweInstance(instance_id="a__b-1", repo="astropy/astropy", base_commit="abc", problem_statement="p",
                       test_patch="x", FAIL_TO_PASS=["t"], PASS_TO_PASS=[])
    assert resolve_source(inst, tmp_path) == "https://github.com/astropy/astropy.git"
    local = inst.model_copy(update={"source": "repo.bundle"})
    assert resolve_source(local, tmp_path) == str(tmp_path / "repo.bundle")


def test_bad_task_files_and_options_are_one_line_errors(tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text(json.dumps({"instance_id": "x", "repo": "a/b"}) + "\n")
    with pytest.raises(BadInput, match=r"tasks.jsonl:1: missing base_commit, problem_statement, test_patch"):
        bm.get_benchmark("swe-local", tasks=str(bad))
    with pytest.raises(BadInput, match="has no instance nope"):
        bm.get_benchmark("swe-local", instance_ids="nope")


def test_a_missing_swe_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "swebench.harness.grading", None)
    with pytest.raises(MissingExtra) as e:
        bm.get_benchmark("swe-local")
    assert "'swe' extra" in str(e.value) and 'pip install "skillopt[swe]"' in str(e.value)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- the generator

TINY = '''\
def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def count_vowels(text):
    n = 0
    for ch in text.lower():
        if ch in "aeiou":
            n += 1
    return n


def is_even(n):
    return n % 2 == 0
'''
TINY_TESTS = '''\
import pytest

from tinycalc import clamp, count_vowels, is_even


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(12, 0, 10) == 10


@pytest.mark.parametrize("text,n", [("hello", 2), ("AEIOU", 5), ("xyz", 0)])
def test_count_vowels(text, n):
    assert count_vowels(text) == n


class TestEven:
    def test_even(self):
        assert is_even(4)

    def test_odd(self):
        assert not is_even(3)
'''


@pytest.fixture(scope="module")
def tiny_sdist(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sdist")
    src = root / "tinycalc-0.1"
    (src / "tinycalc").mkdir(parents=True)
    (src / "tests").mkdir()
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tinycalc\nVersion: 0.1\nLicense-Expression: MIT\n"
                                  "Home-page: https://github.com/example/tinycalc\n")
    (src / "LICENSE").write_text("MIT License\n")
    (src / "tinycalc" / "__init__.py").write_text(TINY)
    (src / "tests" / "test_tinycalc.py").write_text(TINY_TESTS)
    sdist = root / "tinycalc-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src, arcname="tinycalc-0.1")
    return sdist


@pytest.fixture(scope="module")
def tiny_run(tiny_sdist, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One run of the real CLI: `skillopt benchmarks make-swe` on the tiny package."""
    out = tmp_path_factory.mktemp("tasks")
    res = run_cli(["benchmarks", "make-swe", "--package", "tinycalc", "--sdist", str(tiny_sdist), "--out", str(out),
                   "--count", "3", "--jobs", "2", "--seed", "1"], cwd=REPO, env=cli_env(out))
    return out / "tasks.jsonl", res


def test_cli_make_swe_writes_checked_rows_and_a_bundle(tiny_run):
    tiny_tasks, res = tiny_run
    assert res.returncode == 0, res.stderr
    assert "tinycalc 0.1 (MIT, example/tinycalc)" in res.stdout and "tasks: tinycalc-0.1-001" in res.stdout
    rows = [json.loads(line) for line in tiny_tasks.read_text().splitlines()]
    assert 1 <= len(rows) <= 3
    for r in rows:
        assert r["repo"] == "example/tinycalc" and r["license"] == "MIT" and r["version"] == "0.1"
        assert r["source"] == "tinycalc-0.1.bundle" and (tiny_tasks.parent / r["source"]).is_file()
        assert r["patch"].startswith("diff --git a/tinycalc/__init__.py")
        assert r["test_patch"].startswith("diff --git a/tests/test_tinycalc.py")
        assert json.loads(r["FAIL_TO_PASS"]) and r["mutation"]["operator"]
        assert "tinycalc 0.1" in r["problem_statement"] and "```" in r["problem_statement"]
    bench = bm.get_benchmark("swe-local", tasks=str(tiny_tasks))
    for task in bench.tasks("all"):
        assert bench.grade(task, instance_of(task).patch).resolved
        assert not bench.grade(task, "", run_empty=True).resolved


def test_cli_make_swe_bad_sdist_is_one_line(tmp_path):
    bad = run_cli(["benchmarks", "make-swe", "--package", "tinycalc", "--sdist", str(tmp_path / "nope.tar.gz")],
                  cwd=REPO, env=cli_env(tmp_path))
    assert bad.returncode == 2 and "error:" in bad.stderr and "Traceback" not in bad.stderr


def test_write_rows_replaces_only_its_own_package_version(tiny_run, tmp_path):
    tiny_tasks, _ = tiny_run
    other = {"instance_id": "zzz-1", "package": "other", "package_version": "1"}
    target = tmp_path / "tasks.jsonl"
    target.write_text(tiny_tasks.read_text() + json.dumps(other) + "\n")
    insts = load_instances(tiny_tasks)[:1]
    write_rows(target, insts, "tinycalc", "0.1")
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == [insts[0].instance_id, "zzz-1"]
    assert isinstance(rows[0]["FAIL_TO_PASS"], str)


def test_find_mutations_are_minimal_edits_inside_functions():
    source = "LIMIT = 3\n\n" + TINY
    muts = find_mutations("tinycalc/__init__.py", source)
    ops = {m.operator for m in muts}
    assert {"flip-comparison", "off-by-one", "drop-statement", "negate-condition"} <= ops
    for m in muts:
        new = m.apply(source)
        changed = [(a, b) for a, b in zip(source.splitlines(), new.splitlines(), strict=False) if a != b]
        assert len(changed) <= 1 or m.operator.startswith("drop")
        assert new.startswith("LIMIT = 3\n")  # module-level code is never mutated
        assert m.function in ("clamp", "count_vowels", "is_even")


def test_hide_tests_removes_functions_methods_and_parametrized_tests(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_t.py").write_text(TINY_TESTS)
    hidden = hide_tests(tmp_path, {"tests/test_t.py::test_count_vowels[hello-2]", "tests/test_t.py::TestEven::test_odd",
                                   "tests/test_t.py::TestEven::test_even"})
    text = hidden["tests/test_t.py"]
    assert "def test_count_vowels" not in text and "parametrize" not in text
    assert "class TestEven:\n    pass" in text and "def test_clamp_low" in text
    compile(text, "test_t.py", "exec")
    assert hide_tests(tmp_path, {"tests/test_t.py::test_inherited"}) is None


def test_swe_task_prompt_has_the_statement_and_no_graded_data():
    inst = SweInstance(instance_id="o__r-1", repo="o/r", base_commit="abc", problem_statement="It breaks on empty input.",
                       patch="diff --git a/x.py b/x.py\n+gold", test_patch="diff --git a/t.py b/t.py\n+hidden",
                       FAIL_TO_PASS=["t.py::test_a"], PASS_TO_PASS=[], version="1.0")
    task = swe_task(inst)
    assert "It breaks on empty input." in task.prompt and "o/r (version 1.0)" in task.prompt
    assert "+gold" not in task.prompt and "+hidden" not in task.prompt and "test_a" not in task.prompt
    assert task.metadata == {"repo": "o/r", "version": "1.0"}
    assert textwrap.dedent(task.hidden["instance"]["patch"]).endswith("+gold")
