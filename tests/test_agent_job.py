"""perf/agent_job.py: a skill's rollouts on chosen tasks with a finished agent run's own settings (what
GEPA's adapter calls to drive the same agent as our run). The real mini-swe-agent in bubblewrap; the
scripted fake server plays its model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.server import FakeModelServer, FakeRequest
from tests.helpers import cli_env, write_jsonl
from tests.test_agent_proposers import agent_and_optimizer
from tests.test_harness_mini_swe_agent import bwrap
from tests.test_train_e2e import code_tasks

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "perf" / "agent_job.py"


def job(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(JOB), *args], cwd=tmp_path, env=cli_env(tmp_path), capture_output=True,
                          text=True, timeout=600)


def finished_run(tmp_path: Path, url: str) -> Path:
    """A run's folder as agent_job reads it: its config.yaml (the settings it scored with)."""
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(6))
    run = tmp_path / "runs" / "mini"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"benchmark: {data}\nharness: mini-swe-agent\ntarget_model: openai-compatible:fake-agent@{url}\n"
        "optimizer_model: openai-compatible:fake-opt@" + url + "\nsplits: {seed: 0, train: 2, val: 1, test: 3}\n"
        "limits: {timeout_s: 90}\ntrain: {concurrency: 2, epochs: 1}\nharness_options: {}\n")
    return run


def test_the_run_s_split_and_a_skill_s_rollouts_on_chosen_tasks_come_back_with_their_trajectories(tmp_path):
    pytest.importorskip("minisweagent")
    bwrap()  # skips without bubblewrap
    seen: list[FakeRequest] = []
    with FakeModelServer(agent_and_optimizer(seen)) as srv:
        run = finished_run(tmp_path, srv.openai_url)
        r = job(tmp_path, str(run), "--splits", str(tmp_path / "ids.json"))
        assert r.returncode == 0, r.stderr[-2000:]
        ids = json.loads((tmp_path / "ids.json").read_text())
        # split seed 0 of six items: the same train batch as a training run of these settings has
        assert sorted(ids["train"]) == ["item-02", "item-04"] and len(ids["val"]) == 1 and len(ids["test"]) == 3
        skill = tmp_path / "SKILL.md"
        skill.write_text("---\nname: codes\ndescription: Find the secret code.\n---\n\nLook around first.\n")
        (tmp_path / "want.json").write_text(json.dumps(["item-04", "item-02"]))
        r = job(tmp_path, str(run), str(skill), str(tmp_path / "want.json"), str(tmp_path / "out.json"),
                "--runs", str(tmp_path / "job-runs"))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())
    assert [x["task_id"] for x in rows] == ["item-04", "item-02"], "in the order asked"
    fail, ok = rows
    assert (fail["hard"], ok["hard"]) == (0.0, 1.0) and not fail["errored"] and not ok["errored"]
    assert "What is the secret code of item 4?" in fail["prompt"]
    # the trajectory our proposers read: the commands with their exit codes, what the failed one printed
    assert "2. ls no-such-dir [exit 2] -> " in fail["trajectory"] and "No such file" in fail["trajectory"]
    assert "2. ls -a [exit 0]" in ok["trajectory"]
    assert "ls: cannot access 'no-such-dir'" in fail["summary"] and fail["feedback"].startswith("expected 'ZETA-4'")
    # scored with the run's settings, the skill given: the agent read it (its trace holds the file's text)
    (evaluation,) = (tmp_path / "job-runs").glob("eval-*")
    config = (evaluation / "config.yaml").read_text()
    assert "harness: mini-swe-agent" in config and "timeout_s: 90.0" in config
    traces = [p.read_text() for p in (evaluation / "traces").rglob("*.jsonl")]
    assert len(traces) == 2 and all("Look around first." in t for t in traces)


def test_a_gepa_rewrite_that_kept_one_protected_marker_is_still_the_skill_the_agent_reads():
    """GEPA 0.1.4's reflection with the 1.5B once returned a body that opened mid-section and kept only a
    closing protected marker; written as it was, the SKILL.md did not load and GEPA lost the iteration.
    The runner writes the text without our markers, which the agent never sees anyway."""
    from perf.gepa_agent_runner import skill_text
    from skillopt.errors import BadInput
    from skillopt.skill import Skill

    front = "---\nname: python-functions\ndescription: Write a Python function.\n---\n"
    half = "python block: the function the test calls.\n<!-- /skillopt:protected -->\n\n## Example 1\nstep one\n"
    with pytest.raises(BadInput, match="unpaired protected marker"):
        Skill.parse(front + half)
    skill = Skill.parse(skill_text(front, half))
    assert skill.body.strip() == "python block: the function the test calls.\n\n## Example 1\nstep one"
    whole = "Intro.\n\n## Format\n<!-- skillopt:protected -->\nOne block.\n<!-- /skillopt:protected -->\n"
    kept = Skill.parse(front + whole)
    assert Skill.parse(skill_text(front, whole)).body == kept.strip_markers().body
