"""Bad input never reaches a traceback nor half-writes anything: one line on stderr, exit code 2, and the
runs folder (and its skillopt.db) exactly as before. Driven through the real CLI (Typer's CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skillopt.cli import commands  # noqa: F401  (registers every command)
from skillopt.cli.app import app
from skillopt.errors import BadInput
from skillopt.harness.workspace import check_task_paths
from skillopt.benchmarks.base import Task
from skillopt.io.names import safe_name
from skillopt.store.run_store import RunStore
from skillopt.config import StoredConfig
from tests.helpers import write_jsonl

FAKE = "openai-compatible:fake@http://127.0.0.1:9/v1"
SKILL = "---\nname: solver\ndescription: Solve the task.\n---\n# Solver\nThink, then answer.\n"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder with a QA file, a skill, a finished run and a plain file."""
    monkeypatch.chdir(tmp_path)
    for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(k, raising=False)
    write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(12)])
    (tmp_path / "SKILL.md").write_text(SKILL)
    (tmp_path / "a-file.txt").write_text("not a folder\n")
    store = RunStore.create(tmp_path / "runs", "done")
    store.write_config(StoredConfig.model_validate({"benchmark": str(tmp_path / "qa.jsonl"), "harness": "chat", "target_model": FAKE}))
    from skillopt.skill import Skill

    store.add_version(Skill.parse(SKILL), parent=None, origin="seed", status="seed")
    return tmp_path


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _run(*args: str) -> list[str]:
    return ["run", "--benchmark", "qa.jsonl", "--target_model", FAKE, "--optimizer_model", FAKE,
            "--train-size", "4", "--val-size", "4", "--test-size", "2", *args]


CASES = {
    "latin-1 jsonl": (["run", "--benchmark", "latin1.jsonl", "--target_model", FAKE, "--optimizer_model", FAKE],
                      "not UTF-8"),
    "binary jsonl": (["run", "--benchmark", "binary.jsonl", "--target_model", FAKE, "--optimizer_model", FAKE],
                     "not UTF-8"),
    "nul jsonl": (["run", "--benchmark", "nul.jsonl", "--target_model", FAKE, "--optimizer_model", FAKE],
                  "binary data"),
    "bad yaml in --set": (_run("--set", "train.epochs=[1"), "not valid YAML"),
    "--set without a key": (_run("--set", "=3"), "bad override"),
    "export under /proc": (["export", "SKILL.md", "--format", "claude-skill", "--out", "/proc/skillopt-x"], "cannot write"),
    "export under a file": (["export", "SKILL.md", "--format", "claude-skill", "--out", "a-file.txt/out"],
                            "cannot write"),
    "report under /proc": (["report", "done", "-o", "/proc/skillopt-report.html"], "cannot write"),
    "report under a file": (["report", "done", "-o", "a-file.txt/report.html"], "cannot write"),
    "runs dir is a file": (["--runs-dir", "a-file.txt", "runs", "list"], "is a file"),
    "zero epochs": (_run("--epochs", "0"), "train.epochs"),
    "zero batch size": (_run("--batch-size", "0"), "train.batch_size"),
    "zero concurrency": (_run("--concurrency", "0"), "train.concurrency"),
    "zero trials": (_run("--trials", "0"), "train.trials"),
    "zero learning rate": (_run("--learning-rate", "0"), "learning_rate"),
    "negative train size": (_run("--train-size", "-1"), "splits.train"),
    "zero minibatch": (_run("--set", "train.minibatch_size=0"), "train.minibatch_size"),
    "zero timeout": (_run("--set", "limits.timeout_s=0"), "limits.timeout_s"),
    "negative reply tokens": (_run("--set", "limits.max_tokens=-5"), "limits.max_tokens"),
    "zero model timeout": (_run("--set", "models.timeout_s=0"), "models.timeout_s"),
    "zero rollout budget": (_run("--max-rollouts", "0"), "budget.max_rollouts"),
    "negative cost budget": (_run("--max-cost-usd", "-1"), "budget.max_cost_usd"),
    "zero token budget": (_run("--max-tokens", "0"), "budget.max_tokens"),
    "zero benchmark option": (_run("--set", "benchmark_options.max_answer_tokens=0"), "max_answer_tokens"),
    "zero agent turns": (_run("--harness", "claude-code", "--target_model", "anthropic:m@http://127.0.0.1:9",
                              "--set", "harness_options.max_turns=0", "--no-sandbox"), "max_turns"),
    "empty val split": (_run("--val-size", "0"), "val split"),
    "empty train split": (_run("--train-size", "0"), "train split"),
    "seed over the token cap": (_run("--skill", "SKILL.md", "--set", "train.skill_token_cap=5"), "skill_token_cap"),
    "unsafe skill name": (_run("--skill", "evil.md"), "bad skill name"),
    "run id with ..": (_run("--run-id", "../escaped"), "bad run id"),
    "absolute run id": (_run("--run-id", "/tmp/escaped"), "bad run id"),
    "resume outside": (["run", "--resume", "../other"], "bad run id"),
    "eval ref outside": (["eval", "--skill", "../done:v0", "--target_model", FAKE], "bad run id"),
    "cost budget without a price": (_run("--max-cost-usd", "1"), "models.prices"),
    "eval zero trials": (["eval", "--skill", "SKILL.md", "--benchmark", "qa.jsonl", "--target_model", FAKE,
                          "--trials", "0"], "gate.trials"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(place, case):
    (place / "latin1.jsonl").write_bytes('{"id": "a", "question": "café?", "answer": "1"}\n'.encode("latin-1"))
    (place / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (place / "nul.jsonl").write_bytes(b'{"id": "a"}\x00\x00\x01\n')
    (place / "evil.md").write_text(SKILL.replace("name: solver", "name: ../evil"))
    args, needle = CASES[case]
    before = _tree(place)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output
    assert _tree(place) == before  # nothing half-written: no run folder, no skillopt.db, no export
    assert not (place / "runs" / "skillopt.db").exists() and not (place / "escaped").exists()


def test_paths_from_data_cannot_leave_their_folder(tmp_path):
    assert safe_name("..") != ".." and safe_name(".") != "." and "/" not in safe_name("../../etc/passwd")
    store = RunStore.create(tmp_path / "runs", "r")
    rel = store.write_trace("..", "k" * 64, [], None)
    assert (store.root / rel).resolve().is_relative_to(store.root / "traces")
    for bad in ("../x.py", "/etc/passwd", "a/../../b", ".."):
        with pytest.raises(BadInput, match="outside its workspace"):
            check_task_paths([Task(id="t", prompt="p", files={bad: "x"})])
    check_task_paths([Task(id="t", prompt="p", files={"pkg/mod.py": "x"})])
    assert json.loads(json.dumps(safe_name("ok-name_1.2"))) == "ok-name_1.2"
