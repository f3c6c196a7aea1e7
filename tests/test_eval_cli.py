"""`skillopt eval` scores one skill on one split, reusing rollouts its source run already paid for."""

from __future__ import annotations

import json

from tests.fakes.server import FakeModelServer
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, Scripted, _run_args, code_tasks


def test_eval_skill_file_and_run_version_reuses_cache(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    env = cli_env(tmp_path)
    script = Scripted()
    with FakeModelServer(script) as srv:
        assert run_cli(_run_args(data, srv.openai_url, "codes"), tmp_path, env).returncode == 0
        target = f"openai-compatible:fake-target@{srv.openai_url}"
        before = len(script.target_calls)
        r = run_cli(["eval", "--skill", "codes:best", "--split", "test"], tmp_path, env)
        assert r.returncode == 0, r.stderr
        assert "hard 1.000" in r.stdout and "4 cached" in r.stdout
        assert len(script.target_calls) == before  # the run already scored best on test: no call
        skill = tmp_path / "SKILL.md"
        skill.write_text((tmp_path / "runs" / "codes" / "skills" / "v000.md").read_text())
        r = run_cli(["eval", "--skill", str(skill), "--benchmark", str(data), "--split", "all",
                     "--target_model", target, "--harness", "chat"], tmp_path, env)
        assert r.returncode == 0, r.stderr
        assert "hard 0.000" in r.stdout and "(n=16" in r.stdout
        assert len(script.target_calls) == before + 16
        ruled = tmp_path / "ruled.md"
        ruled.write_text((tmp_path / "runs" / "codes" / "best_skill.md").read_text())
        assert RULE in ruled.read_text()
    eval_runs = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("eval-")]
    assert len(eval_runs) == 2
    summaries = [json.loads((p / "summary.json").read_text()) for p in eval_runs]
    assert sorted(s["scores"]["seed"][k]["n"] for s in summaries for k in s["scores"]["seed"]) == [4, 16]
    # the evaluation run holds every rollout it scored, reused ones included, with their traces
    reused = next(p for p in eval_runs if "test" in json.loads((p / "summary.json").read_text())["scores"]["seed"])
    rows = [json.loads(line) for line in (reused / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["version"] for r in rows} == {0} and {r["split"] for r in rows} == {"test"}
    assert all((reused / r["trace_file"]).is_file() for r in rows)
    r = run_cli(["eval", "--skill", "codes:v99"], tmp_path, env)
    assert r.returncode == 2 and "no version v099" in r.stderr
