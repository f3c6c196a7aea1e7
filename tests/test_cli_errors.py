"""Bad input: one clear line on stderr, exit code 2, no traceback, nothing half-written."""

from __future__ import annotations

import json

import pytest

from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import cli_env, run_cli, write_jsonl

FAKE = "openai-compatible:fake@http://127.0.0.1:9/v1"


def _assert_one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert lines and lines[-1].startswith("error:"), r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.fixture
def qa(tmp_path):
    return write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}
                                               for i in range(10)])


def test_unknown_benchmark(tmp_path):
    r = run_cli(["run", "--benchmark", "nope", "--target_model", FAKE, "--optimizer_model", FAKE],
                tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "nope", "gsm8k")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/config.yaml"))


def test_malformed_jsonl_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": \n')
    r = run_cli(["run", "--benchmark", str(bad), "--target_model", FAKE, "--optimizer_model", FAKE],
                tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "bad.jsonl:2")


def test_unknown_model_spec(tmp_path, qa):
    r = run_cli(["run", "--benchmark", str(qa), "--target_model", "gpt-5", "--optimizer_model", FAKE],
                tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "gpt-5", "PROVIDER:MODEL")


def test_missing_api_key_names_the_variable(tmp_path, qa):
    r = run_cli(["run", "--benchmark", str(qa), "--target_model", "openai:gpt-5-mini", "--optimizer_model", FAKE],
                tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "OPENAI_API_KEY")
    r = run_cli(["run", "--benchmark", str(qa), "--target_model", FAKE, "--optimizer_model", "anthropic:claude-sonnet-4-5"],
                tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "ANTHROPIC_API_KEY")


def test_unreadable_skill_file(tmp_path, qa):
    r = run_cli(["run", "--benchmark", str(qa), "--skill", str(tmp_path / "missing.md"),
                 "--target_model", FAKE, "--optimizer_model", FAKE], tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "missing.md")
    broken = tmp_path / "SKILL.md"
    broken.write_text("no front matter here\n")
    r = run_cli(["run", "--benchmark", str(qa), "--skill", str(broken),
                 "--target_model", FAKE, "--optimizer_model", FAKE], tmp_path, cli_env(tmp_path))
    _assert_one_line_error(r, "SKILL.md")


def test_resume_with_incompatible_config_is_refused(tmp_path, qa):
    env = cli_env(tmp_path)
    with FakeModelServer(lambda req: FakeReply(text=json.dumps({"analysis": "", "edits": []})
                                               if req.json_schema else "Answer: 1")) as srv:
        url = srv.openai_url
        base = ["run", "--benchmark", str(qa), "--target_model", f"openai-compatible:t@{url}",
                "--optimizer_model", f"openai-compatible:o@{url}", "--run-id", "r1", "--epochs", "1",
                "--train-size", "2", "--val-size", "2", "--test-size", "2", "--max-rollouts", "1"]
        assert run_cli(base, tmp_path, env).returncode == 3  # stopped by its budget
        before = (tmp_path / "runs" / "r1" / "state.json").read_text()
        r = run_cli(["run", "--resume", "r1", "--target_model", f"openai-compatible:other@{url}"], tmp_path, env)
        _assert_one_line_error(r, "cannot resume r1")
        assert (tmp_path / "runs" / "r1" / "state.json").read_text() == before
    r = run_cli(["run", "--resume", "nope"], tmp_path, env)
    _assert_one_line_error(r, "no run 'nope'")


def test_help_and_version(tmp_path):
    r = run_cli(["run", "--help"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0 and "--optimizer_model" in r.stdout and "--target_model" in r.stdout
    assert "Example:" in r.stdout
    r = run_cli(["--version"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("skillopt ")
