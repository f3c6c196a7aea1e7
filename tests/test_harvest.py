"""`skillopt harvest` on transcripts the real Claude Code and Codex binaries wrote (fixtures made by
tests/fixtures/harvest/make_fixtures.py, and one session made live), the harvested set as the
`harvest:OUT` benchmark, and `skillopt adopt`."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pytest

from skillopt.benchmarks import SplitSizes, get_benchmark
from skillopt.benchmarks.base import RolloutOutput
from skillopt.errors import BadInput
from skillopt.benchmarks.harvested import verify_check
from skillopt.harvest import HarvestOptions
from skillopt.harvest import harvest as run_harvest
from skillopt.report.adopt import adopt
from skillopt.io.redact import scrub
from skillopt.store.refs import resolve_skill_ref
from tests.fakes.agent_scripts import run_command
from tests.fakes.server import FakeModelServer
from skillopt.harvest.sessions import read_codex
from tests.fakes.script import ToolCall
from tests.harvest_agents import CALC, TEST, TEST_CMD, Step, claude_edit, repo, run_session, shell
from tests.helpers import REPO, cli_env, run_cli

FIXTURES = REPO / "tests" / "fixtures" / "harvest"
PLACE_HOME = "/home/user"
# the planted key is stored in the fixtures as a placeholder and spelled here in two parts, so the
# repository tracks no key-shaped string; user_home puts it back before anything is harvested
SENTINELS = ("sk-ant-" + "api03-SENTINELkey0123456789abcdef", "jane.sentinel@example.com", "/private/sentinel-notes.txt")
KEY_PLACEHOLDER = "@@SENTINEL_KEY@@"
AGENT_DIRS = {"claude-code": ".claude", "codex": ".codex"}


def user_home(tmp_path: Path) -> Path:
    """A home folder holding both agents' fixture transcripts (their /home/user now this home) and
    the project they ran in, rebuilt at the same commit."""
    home = tmp_path / "home"
    for harness, sub in AGENT_DIRS.items():
        for src in (FIXTURES / harness).rglob("*.jsonl"):
            dest = home / sub / src.relative_to(FIXTURES / harness)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(src.read_text().replace(PLACE_HOME, str(home)).replace(KEY_PLACEHOLDER, SENTINELS[0]))
    repo(home / "proj")
    return home


def harvest(home: Path, harness: str, *args: str, out: str | None = "out"):
    env = cli_env(home)
    argv = ["harvest", "--from", harness, *(["-o", str(home.parent / out)] if out else []), *args]
    return run_cli(argv, cwd=home.parent, env=env)


def tasks_of(out: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    return {r["request"].split()[0] + ("-" + r["check"]["kind"]): r for r in rows}


@pytest.fixture
def home(tmp_path) -> Path:
    return user_home(tmp_path)


def test_claude_code_sessions_become_tasks_with_checks_and_failure_signals(home):
    r = harvest(home, "claude-code")  # the default place: ~/.claude
    assert r.returncode == 0, r.stderr + r.stdout
    rows = [json.loads(line) for line in (home.parent / "out" / "tasks.jsonl").read_text().splitlines()]
    by = {row["check"]["kind"] + ":" + row["outcome"]: row for row in rows}
    assert set(by) == {"test_command:success", "test_command:failure", "file_state:unknown"}
    fixed, failed, notes = by["test_command:success"], by["test_command:failure"], by["file_state:unknown"]
    assert fixed["check"] == {**fixed["check"], "command": TEST_CMD, "confidence": "high"}
    assert fixed["scored"] and fixed["skills_used"] == ["fixer"] and fixed["start"]["recovered"]
    assert fixed["start"]["cwd"] == "~/proj" and fixed["start"]["how"].startswith("the git status Claude Code")
    assert [s["kind"] for s in fixed["signals"]] == ["test_failed"]  # it failed once, then passed
    assert failed["check"]["confidence"] == "medium" and failed["scored"]
    kinds = {s["kind"] for s in failed["signals"]}
    assert kinds == {"test_failed", "tool_error", "user_correction", "reverted_edit"}
    assert failed["request"] == "Make add in calc.py correct." and failed["follow_ups"] == []
    assert notes["check"]["files"] == {"NOTES.md": ["# Notes", "Run the tests with: python3 -m unittest -q"]}
    assert notes["scored"] and notes["check"]["confidence"] == "low"
    assert all(row["session"]["harness"] == "claude-code" and row["session"]["file"].startswith("~/.claude/projects/")
               for row in rows)
    report = json.loads((home.parent / "out" / "harvest.json").read_text())
    assert report["files_read"] == 3 and report["kept"] == 3 and report["scored"] == 3 and report["dropped"] == []
    assert (report["with_test_run"], report["with_test_run_scored"]) == (2, 2)
    assert "3 sessions read: 3 kept (3 scored" in r.stdout


def test_codex_sessions_become_tasks_and_a_question_gets_a_rubric(home):
    r = harvest(home, "codex", "--path", str(home / ".codex" / "sessions"))
    assert r.returncode == 0, r.stderr + r.stdout
    rows = [json.loads(line) for line in (home.parent / "out" / "tasks.jsonl").read_text().splitlines()]
    by = {row["check"]["kind"] + ":" + row["outcome"]: row for row in rows}
    assert set(by) == {"test_command:success", "test_command:failure", "rubric:unknown"}
    fixed = by["test_command:success"]
    assert fixed["check"]["confidence"] == "high" and fixed["skills_used"] == ["fixer"]
    assert fixed["start"]["how"] == "the git commit Codex recorded at the start" and fixed["scored"]
    assert by["test_command:failure"]["signals"][0] == {"kind": "test_failed", "detail": f"{TEST_CMD} -> exit 1"}
    question = by["rubric:unknown"]
    assert not question["scored"] and question["final_answer"] == "It returns a - b."
    assert "What does add in calc.py return?" in question["check"]["rubric"]
    report = json.loads((home.parent / "out" / "harvest.json").read_text())
    assert report["by_check"] == {"test_command": 2, "rubric": 1} and report["with_test_run_scored"] == 2
    assert "scored only with a judge model" in report["unscored_why"][question["id"]]


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_nothing_written_holds_a_sentinel_secret_email_or_home_path(home, harness):
    r = harvest(home, harness)
    assert r.returncode == 0, r.stderr
    written = b"".join(p.read_bytes() for p in (home.parent / "out").iterdir())
    assert b"SENTINEL" not in written and b"sentinel@" not in written and str(home).encode() not in written
    assert all(s.encode() not in written for s in SENTINELS[:2])
    lines = (home.parent / "out" / "tasks.jsonl").read_text().splitlines()
    request = next(json.loads(line)["request"] for line in lines if "Mail me" in line)
    assert "Mail me at <email>" in request and "my key is ***" in request
    assert "~/private/sentinel-notes.txt" in request


def test_scrub_masks_token_shapes_keyed_values_emails_and_the_home_folder():
    text = ("OPENAI_API_KEY=abcdefgh12345 Authorization: Bearer xyzxyzxyz123 ghp_abcdefghijklmnopqrstuvwxyz01 "
            "{\"api_key\": \"abcdefghijk\"} a@b.io /home/jane/x /home/janet/y")
    assert scrub(text, "/home/jane") == ("OPENAI_API_KEY=*** Authorization: Bearer *** *** {\"api_key\": \"***\"} "
                                         "<email> ~/x /home/janet/y")
    plain = "the token processing budget, a password reset flow, user@host config"
    assert scrub(plain, "/home/jane") == plain


def test_dry_run_writes_nothing_and_filters_say_why_they_dropped(home):
    r = harvest(home, "claude-code", "--dry-run", "--used-skill", "fixer", out=None)
    assert r.returncode == 0, r.stderr
    assert not (home.parent / "out").exists() and "(dry run: nothing written)" in r.stdout
    assert r.stdout.count("scored claude-code-") == 1 and r.stdout.count("did not use skill 'fixer'") == 2
    r = harvest(home, "codex", "--dry-run", "--since", "yesterday", out=None)
    assert r.returncode == 2 and "--since 'yesterday' is not a date" in r.stderr
    cases = {"unused_skill": ("fixer", "filtered out: used skill 'fixer'", 1),
             "since": (date(2999, 1, 1), "filtered out: started before 2999-01-01", 3),
             "until": (date(2000, 1, 1), "filtered out: started after 2000-01-01", 3),
             "project": ("elsewhere", "filtered out: project is not 'elsewhere'", 3)}
    for option, (value, why, n) in cases.items():
        opts = HarvestOptions("codex", home / ".codex", dry_run=True, home=str(home), **{option: value})
        report = run_harvest(opts).report
        assert [d.why for d in report.dropped] == [why] * n and report.kept == 3 - n
    assert run_harvest(HarvestOptions("codex", home / ".codex", dry_run=True, project="proj")).report.kept == 3


MORE_TESTS = ("import unittest\nfrom calc import add\n\n\nclass M(unittest.TestCase):\n"
              "    def test_more(self):\n        self.assertEqual(add(1, 1), 2)\n")


async def test_the_harvested_set_is_a_benchmark_scored_by_each_task_check(home, tmp_path, monkeypatch):
    (home / "proj" / "test_more.py").write_text(MORE_TESTS)  # a test the session wrote, still in the repository
    assert harvest(home, "claude-code").returncode == 0
    monkeypatch.setenv("HOME", str(home))  # `~` in the harvested paths is this home
    bench = get_benchmark(f"harvest:{home.parent / 'out'}", SplitSizes(train=1, val=1, test=None))
    tasks = {t.metadata["check"] + ":" + t.metadata["confidence"]: t for t in bench.tasks("all")}
    assert set(tasks) == {"test_command:high", "test_command:medium", "file_state:low"}
    assert sum(len(bench.tasks(s)) for s in ("train", "val", "test")) == 3
    test_task = tasks["test_command:high"]
    assert test_task.kind == "code" and "***" in test_task.prompt and "SENTINEL" not in test_task.prompt
    assert test_task.hidden["check"]["test_files"] == {"test_more.py": MORE_TESTS}
    for fix, want in (("a - b", 0), ("a + b", 1), ("5 if a == 2 else a - b", 0)):
        ws = tmp_path / f"ws-{want}-{len(fix)}"
        ws.mkdir()
        bench.prepare(test_task, ws)
        assert (ws / "calc.py").read_text() == CALC and not (ws / ".git").exists()
        assert not (ws / "test_more.py").exists()  # not at the start commit: the check brings it
        (ws / "calc.py").write_text(CALC.replace("a - b", fix))
        (ws / "test_more.py").write_text("")  # an agent's own version is replaced by the session's
        score = await bench.score(test_task, RolloutOutput(text="done"), ws)
        assert score.hard == want, score.feedback
        assert (ws / "test_more.py").read_text() == MORE_TESTS
    ws = tmp_path / "ws-notes"
    ws.mkdir()
    bench.prepare(tasks["file_state:low"], ws)
    assert (await bench.score(tasks["file_state:low"], RolloutOutput(), ws)).hard == 0
    (ws / "NOTES.md").write_text("# Notes\nRun the tests with: python3 -m unittest -q\n")
    assert (await bench.score(tasks["file_state:low"], RolloutOutput(), ws)).hard == 1


def test_a_lost_repository_is_no_scored_task_and_a_missing_folder_is_one_line(home, tmp_path):
    shutil.rmtree(home / "proj")
    r = harvest(home, "claude-code")
    report = json.loads((home.parent / "out" / "harvest.json").read_text())
    assert report["scored"] == 0 and report["with_test_run_scored"] == 0
    assert all("not recovered" in why for why in report["unscored_why"].values())
    with pytest.raises(BadInput, match="no harvested task can be scored"):
        get_benchmark(f"harvest:{home.parent / 'out'}")
    with pytest.raises(BadInput, match="no harvested tasks at"):
        get_benchmark(f"harvest:{tmp_path / 'nowhere'}")


def test_adopt_installs_the_accepted_skill_with_a_backup_of_the_old_one(tmp_path):
    shutil.copytree(REPO / "tests" / "fixtures" / "run_v1" / "runs-dir", tmp_path / "runs")
    project = tmp_path / "proj"
    old = project / ".claude" / "skills"
    env = cli_env(tmp_path)
    r = run_cli(["adopt", "legacy", "--project", str(project)], cwd=tmp_path, env=env)
    assert r.returncode == 2 and "pass --harness claude-code or codex" in r.stderr, r.stderr
    r = run_cli(["adopt", "legacy", "--project", str(project), "--harness", "claude-code"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    installed = [p for p in old.iterdir()]
    assert len(installed) == 1 and (installed[0] / "SKILL.md").is_file()
    prov = json.loads((installed[0] / "provenance.json").read_text())
    assert prov["run_id"] == "legacy" and prov["version"] == 3 and "adopted legacy:v003" in r.stdout
    (installed[0] / "SKILL.md").write_text((installed[0] / "SKILL.md").read_text() + "\nmy local change\n")
    r = run_cli(["adopt", "legacy", "--project", str(project), "--harness", "claude-code"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    backups = list((project / ".skillopt" / "backups").iterdir())
    assert len(backups) == 1 and "my local change" in (backups[0] / "SKILL.md").read_text()
    assert "my local change" not in (installed[0] / "SKILL.md").read_text() and "the old one is in" in r.stdout
    assert [p.name for p in old.iterdir()] == [installed[0].name]  # the backup is not a second skill
    done = adopt(resolve_skill_ref("legacy", tmp_path / "runs"), project, "codex")
    assert done.path == project / ".agents" / "skills" / installed[0].name and done.backup is None
    assert (done.path / "SKILL.md").read_text() == (installed[0] / "SKILL.md").read_text()
    with pytest.raises(BadInput, match="accepted no edit"):
        adopt(resolve_skill_ref("legacy:v0", tmp_path / "runs"), project, "codex")


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_a_session_made_now_by_the_real_binary_is_harvested(harness, tmp_path):
    """Catches a change in the binary's transcript format: a fresh session, harvested at once."""
    home = tmp_path / "home"
    ws = home / "proj"
    repo(ws)
    edit = claude_edit("calc.py", "a - b", "a + b") if harness == "claude-code" else \
        [shell("sed -i 's/a - b/a + b/' calc.py")]
    steps = [shell(TEST_CMD), *edit, shell(TEST_CMD)]
    path = run_session(harness, ws, "Fix add; mail ops@example.org", steps, "Fixed.")
    r = harvest(home, harness, "--path", str(path.parent))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (home.parent / "out" / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 1, rows
    t = rows[0]
    assert t["request"] == "Fix add; mail <email>" and t["outcome"] == "success" and t["scored"]
    assert t["check"]["command"] == TEST_CMD and t["check"]["confidence"] == "high"
    assert t["start"]["recovered"] and t["start"]["cwd"] == "~/proj"


@pytest.mark.slow
def test_a_codex_test_run_that_outlasts_its_wait_is_judged_by_the_poll_that_saw_it_end(tmp_path):
    """Codex's exec_command returns after a wait with the command still running; its exit code comes
    with a later write_stdin poll. Neither the running state nor the -1 of a command cut off is a verdict."""
    home = tmp_path / "home"
    ws = home / "proj"
    repo(ws)
    slow = "sleep 2; " + TEST_CMD
    waited = Step(tool=lambda req, ws: ToolCall("exec_command", {"cmd": slow, "yield_time_ms": 300}))
    steps = [waited, shell("sed -i 's/a - b/a + b/' calc.py"), waited]
    path = run_session("codex", ws, "Fix add", steps, "Fixed.")
    assert "Process running with session ID" in path.read_text()  # the wait did end first
    assert harvest(home, "codex", "--path", str(path.parent)).returncode == 0
    t = json.loads((home.parent / "out" / "tasks.jsonl").read_text().splitlines()[0])
    assert t["outcome"] == "success" and t["check"]["command"] == slow and t["check"]["confidence"] == "high"
    kinds = [(x["kind"], x["detail"].split(" -> ")[0]) for x in t["signals"]]
    assert kinds == [("test_failed", slow)], kinds  # the poll that saw the failing run end is not a second failure
    cut = [shell(TEST_CMD), Step(tool=lambda req, ws: ToolCall("exec_command", {"cmd": "sleep 30; " + TEST_CMD,
                                                                                 "yield_time_ms": 300}))]
    ws2 = tmp_path / "home2" / "proj"
    repo(ws2)
    s = read_codex(run_session("codex", ws2, "Fix add", cut, "Stopped waiting.", poll=False))
    assert [(c.exit_code, bool(c.running)) for c in s.calls] == [(1, False), (None, True)]


@pytest.mark.slow
def test_eval_on_the_harvested_set_runs_claude_code_in_the_rebuilt_workspaces(home, tmp_path):
    assert harvest(home, "claude-code").returncode == 0
    fix = "sed -i 's/a - b/a + b/' calc.py; printf '# Notes\\nRun the tests with: python3 -m unittest -q\\n' >NOTES.md"
    with FakeModelServer(run_command(fix, "Done.")) as srv:
        r = run_cli(["eval", "--skill", str(FIXTURES / "SKILL.md"), "--benchmark", f"harvest:{home.parent / 'out'}",
                     "--split", "all", "--harness", "claude-code", "--set", "harness_options.mode=cli",
                     "--target_model", f"anthropic:fake@{srv.base_url}"], cwd=tmp_path, env=cli_env(home))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "hard 1.000 (n=3), soft 1.000 (" in r.stdout


def test_codex_rollouts_of_older_releases_without_the_envelope_are_read(tmp_path):
    """Before Codex wrapped its records in `{type, payload}` (2025), a rollout held bare items;
    this one is written by hand in that shape (no binary here writes it any more)."""
    from skillopt.harvest.mine import mine
    from skillopt.harvest.sessions import read_codex

    rows = [{"id": "abc123", "timestamp": "2025-05-01T10:00:00Z", "git": {"commit_hash": "deadbeef"}},
            {"record_type": "state"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the parser"}]},
            {"type": "function_call", "name": "shell", "call_id": "c1",
             "arguments": json.dumps({"command": ["bash", "-lc", "pytest -q"]})},
            {"type": "function_call_output", "call_id": "c1",
             "output": json.dumps({"output": "1 failed", "metadata": {"exit_code": 1}})},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Still failing."}]}]
    path = tmp_path / "rollout-2025-05-01T10-00-00-abc123.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = mine(read_codex(path))
    assert (task.request, task.check.command, task.outcome) == ("Fix the parser", "pytest -q", "failure")
    assert task.session.started == "2025-05-01T10:00:00Z" and task.start.commit == "deadbeef"
    assert not task.scored and task.start.how == "not recovered: not a git repository"


def test_verify_runs_each_test_check_on_its_start_state(home):
    (home / "proj" / "test_more.py").write_text(MORE_TESTS)  # fails on the start state: add is broken there
    r = harvest(home, "claude-code", "--verify")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (home.parent / "out" / "tasks.jsonl").read_text().splitlines()]
    tests = [row["check"] for row in rows if row["check"]["kind"] == "test_command"]
    assert sorted(c["confidence"] for c in tests) == ["high", "medium"]
    assert all(c["why"].endswith("verified: it fails on the start state") for c in tests)
    # the session's tests, as the repository holds them now, pass with the start state's code
    (home / "proj" / "test_more.py").unlink()
    (home / "proj" / "test_calc.py").write_text(TEST.replace("add(2, 3), 5", "add(3, 3), 0"))
    result = run_harvest(HarvestOptions("claude-code", home / ".claude", dry_run=True, home=str(home), verify=True,
                                         verifier=verify_check))
    tests = [t.check for t in result.tasks if t.check.kind == "test_command"]
    assert [c.confidence for c in tests] == ["low", "low"]
    assert all(c.why.endswith("verified: it passes on the start state unchanged") for c in tests)


def test_a_test_command_is_known_with_the_interpreters_options_before_its_module():
    from skillopt.harvest.mine import is_test_command

    assert all(is_test_command(c) for c in ("python3 -B -m unittest -q", "python -X dev -m pytest -q",
                                           "python -W error -B -m pytest tests", "python3.11 -m pytest"))
    assert not any(is_test_command(c) for c in ("python3 -c 'import calc'", "python3 -B calc.py"))
