"""A run written by an earlier release opens, reports, compares and resumes with this one.

tests/fixtures/run_v1/ holds a run made by skillopt as of 0e03b28 (run schema 1; with only the fix
that lets `openai:` specs follow OPENAI_BASE_URL, so the fake server can stand in), before the run
schema was typed end to end: `make_fixture.py` beside it is how it was made (two epochs over the
scripted fake of test_train_e2e, stopped by a rollout budget during the second consolidation). It
has a screened-out candidate, an accepted one with its gate.json, a rejected consolidation, step and
consolidation lines in metrics.jsonl, a summary and a state to resume from. Never regenerate it:
it stands for the runs users already have on disk.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.fakes.server import FakeModelServer
from tests.helpers import cli_env, run_cli
from tests.test_train_e2e import RULE, Scripted

FIXTURE = Path(__file__).parent / "fixtures" / "run_v1"


DATA = Path("/tmp/skillopt-fixture-run-v1/codes.jsonl")  # where the run's data was: it names the benchmark


def _copy(tmp_path: Path) -> Path:
    """The run under tmp_path/runs; its data back where the run expects it (written atomically: the
    same bytes every time, so tests running at once do not disturb each other)."""
    DATA.parent.mkdir(parents=True, exist_ok=True)
    tmp = DATA.with_name(f".codes.{os.getpid()}.tmp")
    shutil.copy(FIXTURE / "codes.jsonl", tmp)
    os.replace(tmp, DATA)
    shutil.copytree(FIXTURE / "runs-dir", tmp_path / "runs")
    return tmp_path / "runs" / "legacy"


def test_an_earlier_run_opens_and_reports(tmp_path):
    _copy(tmp_path)
    env = cli_env(tmp_path)
    r = run_cli(["runs", "show", "legacy"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "v003" in r.stdout and "accept" in r.stdout
    r = run_cli(["runs", "list"], cwd=tmp_path, env=env)
    assert r.returncode == 0 and "legacy" in r.stdout, r.stderr
    r = run_cli(["report", "legacy", "-o", str(tmp_path / "report.md")], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    text = (tmp_path / "report.md").read_text()
    assert "s002-c1" in text and "screened-out" in text
    r = run_cli(["compare", "legacy:seed", "legacy:best", "--split", "val", "--json"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    entries = json.loads(r.stdout)["entries"]
    assert [e["label"] for e in entries][:2] and len(entries) == 2


def test_an_earlier_run_resumes_to_the_end(tmp_path):
    run = _copy(tmp_path)
    with FakeModelServer(Scripted()) as srv:
        env = cli_env(tmp_path, OPENAI_API_KEY="sk-fake", OPENAI_BASE_URL=srv.openai_url)
        r = run_cli(["run", "--resume", "legacy", "--max-rollouts", "1000"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert summary["scores"]["best"]["test"]["hard"] == 1.0
    assert RULE in (run / "best_skill.md").read_text()
    assert (run / "consolidation" / "epoch-002.json").exists()


def test_an_earlier_runs_config_reads_as_the_model_and_gives_back_its_layer(tmp_path):
    import yaml

    from skillopt.config import StoredConfig
    from skillopt.errors import BadInput
    from skillopt.store.run_store import RunStore

    run = _copy(tmp_path)
    cfg = RunStore.open(run.parent, run.name).read_config()
    assert isinstance(cfg, StoredConfig) and cfg.mode == "train" and cfg.harness == "chat"
    assert cfg.layer() == yaml.safe_load((run / "config.yaml").read_text())  # a resume's layer, key for key
    (run / "config.yaml").write_text("benchmark: b\nnot_a_setting: 1\n")
    with pytest.raises(BadInput, match="not_a_setting"):
        RunStore(run).read_config()
