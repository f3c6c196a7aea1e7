"""The bad-input probe: 150+ bad inputs and damaged run folders, through the real CLI (Typer's CliRunner,
in-process). Each must end in one line on stderr starting `error:`, exit code 2, no traceback, and the
working folder (runs folder, its index, every run in it) exactly as before. Every case fails before any
model call: the model endpoint named below does not listen."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from skillopt.cli import commands  # noqa: F401  (registers every command)
from skillopt.cli.app import app
from skillopt.config import RunConfig, StoredConfig
from skillopt.skill import Skill
from skillopt.store.run_store import RunStore
from skillopt.store.schema import RolloutRecord, RunState
from tests.helpers import write_jsonl

FAKE = "openai-compatible:fake@http://127.0.0.1:9/v1"
OTHER = "openai-compatible:other@http://127.0.0.1:9/v1"
SKILL = "---\nname: solver\ndescription: Solve the task.\n---\n# Solver\nThink, then answer.\n"


def _run(*args: str) -> list[str]:
    return ["run", "--benchmark", "qa.jsonl", "--target-model", FAKE, "--optimizer-model", FAKE,
            "--train-size", "4", "--val-size", "4", "--test-size", "2", *args]


def _eval(*args: str) -> list[str]:
    return ["eval", "--skill", "SKILL.md", "--benchmark", "qa.jsonl", "--target-model", FAKE, *args]


# (setting, bad value) -> needle in the error. Each is probed as `--set` alone, and (the first per
# setting with a flag) hidden behind the flag that sets the same key.
BAD_SETTINGS: list[tuple[str, str, str]] = [
    ("gate.alpha", v, "gate.alpha") for v in ("0", "-0.1", "2", "0.51", ".nan", ".inf", "abc", "true", "[0.1]")
] + [
    ("gate.interim_alpha", v, "interim_alpha") for v in ("5", "-1", "0.2", ".nan", "abc")
] + [
    ("gate.min_effect", v, "gate.min_effect") for v in ("0", "2", "-1", ".nan")
] + [
    ("gate.futility", v, "gate.futility") for v in ("1", "-0.1", ".inf")
] + [
    ("gate.noninferiority_margin", v, "noninferiority_margin") for v in ("-0.1", "1")
] + [
    ("gate.trials", v, "gate.trials") for v in ("0", "true", "1.5", "abc")
] + [
    ("gate.metric", "accuracy", "gate.metric"), ("gate.deterministic", "maybe", "gate.deterministic"),
    ("gate.per_step", "0", "gate.per_step"), ("gate.trigger_weight", "-1", "gate.trigger_weight"),
    ("gate.early_stop", "sometimes", "gate.early_stop"), ("gate.seed", "abc", "gate.seed"),
] + [
    ("train.epochs", v, "train.epochs") for v in ("abc", "1.5", "0", "-1", "true", "[1]", "{x: 1}")
] + [
    ("train.batch_size", v, "train.batch_size") for v in ("0", "abc", "true")
] + [
    ("train.minibatch_size", v, "train.minibatch_size") for v in ("true", "0", "abc", "false")
] + [
    ("train.concurrency", "0", "train.concurrency"), ("train.concurrency", "true", "train.concurrency"),
    ("train.trials", "0", "train.trials"), ("train.learning_rate.initial", "0", "learning_rate.initial"),
    ("train.learning_rate.final", "0", "learning_rate.final"),
    ("train.learning_rate.schedule", "exponential", "learning_rate.schedule"),
    ("train.skill_token_cap", "0", "skill_token_cap"), ("train.include_successes", "-1", "include_successes"),
    ("train.retry_errored", "-1", "retry_errored"), ("train.summary_tokens", "0", "summary_tokens"),
    ("train.max_reflections_per_step", "-1", "max_reflections_per_step"),
    ("train.ablations_per_step", "-1", "ablations_per_step"), ("train.consolidate", "maybe", "train.consolidate"),
    ("train.screen", "[1]", "train.screen"),
    ("limits.timeout_s", "0", "limits.timeout_s"), ("limits.timeout_s", "-1", "limits.timeout_s"),
    ("limits.timeout_s", ".nan", "limits.timeout_s"), ("limits.max_tokens", "0", "limits.max_tokens"),
    ("limits.max_turns", "0", "limits.max_turns"), ("limits.temperature", "-1", "limits.temperature"),
    ("limits.temperature", ".nan", "limits.temperature"), ("limits.temperature", "3", "limits.temperature"),
    ("models.optimizer_temperature", "2.5", "optimizer_temperature"), ("limits.max_tokens", "true", "limits.max_tokens"),
    ("models.timeout_s", "0", "models.timeout_s"), ("models.retries", "-1", "models.retries"),
    ("models.retries", "true", "models.retries"), ("models.retry_base_delay_s", "-1", "retry_base_delay_s"),
    ("models.optimizer_max_tokens", "0", "optimizer_max_tokens"),
    ("models.optimizer_temperature", "-1", "optimizer_temperature"), ("models.prices", "[1, 2]", "models.prices"),
    ("budget.max_cost_usd", "-1", "budget.max_cost_usd"), ("budget.max_cost_usd", "0", "budget.max_cost_usd"),
    ("budget.max_cost_usd", ".nan", "budget.max_cost_usd"), ("budget.max_rollouts", "0", "budget.max_rollouts"),
    ("budget.max_rollouts", "true", "budget.max_rollouts"), ("budget.max_tokens", "0", "budget.max_tokens"),
    # upper bounds: a value no run could mean (it would hang or exhaust the machine)
    ("train.concurrency", "100000", "train.concurrency"), ("train.epochs", "1000000", "train.epochs"),
    ("gate.trials", "1000", "gate.trials"), ("models.retries", "100000", "models.retries"),
    ("limits.timeout_s", "1e12", "limits.timeout_s"), ("models.timeout_s", "1e12", "models.timeout_s"),
    ("models.prices", "{m: [-1, 2]}", "models.prices"), ("train.retry_errored", "1000", "retry_errored"),
    ("splits.train", "-1", "splits.train"), ("splits.val", "-1", "splits.val"), ("splits.test", "-1", "splits.test"),
    ("splits.val", "abc", "splits.val"), ("splits.train", "true", "splits.train"),
    ("executor.kind", "k8s", "executor.kind"), ("executor.num_cpus", "-1", "executor.num_cpus"),
    ("executor.max_retries", "-1", "executor.max_retries"), ("sandbox", "maybe", "sandbox"),
]

# a flag that sets the same key: its valid value must not hide the invalid --set
FLAG_FOR = {"train.epochs": ("--epochs", "2"), "train.batch_size": ("--batch-size", "2"),
            "train.concurrency": ("--concurrency", "2"), "train.trials": ("--trials", "1"),
            "train.learning_rate.initial": ("--learning-rate", "2"), "splits.train": ("--train-size", "4"),
            "splits.val": ("--val-size", "4"), "splits.test": ("--test-size", "2"),
            "budget.max_rollouts": ("--max-rollouts", "5"), "budget.max_tokens": ("--max-tokens", "1000"),
            "train.learning_rate.schedule": ("--schedule", "constant"), "executor.kind": ("--executor", "local")}

CASES: dict[str, tuple[list[str], str]] = {}
for _key, _value, _needle in BAD_SETTINGS:
    CASES[f"--set {_key}={_value}"] = (_run("--set", f"{_key}={_value}"), _needle)
for _key, (_flag, _ok) in FLAG_FOR.items():
    _value = next(v for k, v, _ in BAD_SETTINGS if k == _key)
    CASES[f"--set {_key}={_value} hidden by {_flag}"] = (_run("--set", f"{_key}={_value}", _flag, _ok), _key)
CASES["--set train.epochs.x=1 hidden by --epochs"] = (_run("--set", "train.epochs.x=1", "--epochs", "2"), "train.epochs")
CASES["--set train.epochs=1.5 hidden by --epochs"] = (_run("--set", "train.epochs=1.5", "--epochs", "2"), "train.epochs")
CASES["config file value hidden by --epochs"] = (_run("--config", "epochs-abc.yaml", "--epochs", "2"), "train.epochs")
CASES["interim_alpha over alpha (two --set)"] = (_run("--set", "gate.alpha=0.1", "--set", "gate.interim_alpha=0.2"),
                                                 "interim_alpha")
CASES["interim_alpha over a lowered alpha"] = (_run("--set", "gate.alpha=0.001"), "interim_alpha")

CASES |= {
    # unknown settings and bad overrides
    "misspelt section": (_run("--set", "gaet.alpha=0.1"), "gaet.alpha"),
    "misspelt key": (_run("--set", "train.epoch=2"), "train.epoch"),
    "unknown top-level": (_run("--set", "foo=1"), "foo"),
    "override without =": (_run("--set", "train.epochs"), "bad override"),
    "override empty path part": (_run("--set", "train..epochs=2"), "bad override"),
    "override bad yaml": (_run("--set", "train.epochs={"), "not valid YAML"),
    # flags
    "epochs 0": (_run("--epochs", "0"), "train.epochs"), "epochs -1": (_run("--epochs", "-1"), "train.epochs"),
    "batch size -3": (_run("--batch-size", "-3"), "train.batch_size"),
    "trials -1": (_run("--trials", "-1"), "train.trials"),
    "concurrency -1": (_run("--concurrency", "-1"), "train.concurrency"),
    "val size -1": (_run("--val-size", "-1"), "splits.val"), "test size -2": (_run("--test-size", "-2"), "splits.test"),
    "max rollouts -1": (_run("--max-rollouts", "-1"), "budget.max_rollouts"),
    "max cost 0": (_run("--max-cost-usd", "0"), "budget.max_cost_usd"),
    "max cost nan": (_run("--max-cost-usd", "nan"), "budget.max_cost_usd"),
    "unknown schedule": (_run("--schedule", "step"), "schedule"),
    "unknown executor": (_run("--executor", "slurm"), "executor.kind"),
    "unknown harness": (_run("--harness", "cursor"), "cursor"),
    "unknown harness mode": (_run("--harness", "claude-code", "--target-model", "anthropic:m@http://127.0.0.1:9",
                                  "--harness-mode", "telepathy", "--no-sandbox"), "'mode'"),
    "unknown preset": (_run("--preset", "huge"), "huge"),
    "unknown progress": (_run("--progress", "fancy"), "fancy"),
    "eval unknown progress": (_eval("--progress", "bars"), "bars"),
    "empty target model": (_run("--target-model", ""), "target_model"),
    "blank target model": (_run("--target-model", "  "), "target_model"),
    "empty optimizer model": (_run("--optimizer-model", ""), "optimizer_model"),
    "empty benchmark": (_run("--benchmark", ""), "benchmark"),
    "empty harness": (_run("--harness", ""), "harness"),
    "empty skill": (_run("--skill", ""), "seed_skill"),
    "--set target_model empty": (_run("--set", "target_model="), "target_model"),
    # run ids
    "empty run id": (_run("--run-id", ""), "run_id"),
    "run id skillopt.db": (_run("--run-id", "skillopt.db"), "index"),
    "run id skillopt.db-wal": (_run("--run-id", "skillopt.db-wal"), "index"),
    "run id skillopt.db-shm": (_run("--run-id", "skillopt.db-shm"), "index"),
    "run id SKILLOPT.DB-journal": (_run("--run-id", "SKILLOPT.DB-journal"), "index"),
    "run id with a slash": (_run("--run-id", "a/b"), "bad run id"),
    "run id with a space": (_run("--run-id", "a b"), "bad run id"),
    "run id hidden": (_run("--run-id", ".hidden"), "bad run id"),
    "run id dot dot": (_run("--run-id", ".."), "bad run id"),
    "run id too long": (_run("--run-id", "r" * 200), "bad run id"),
    "run id already taken": (_run("--run-id", "done"), "already exists"),
    "resume empty": (["run", "--resume", ""], "bad run id"),
    "resume unknown": (["run", "--resume", "nope"], "no run 'nope'"),
    "resume index name": (["run", "--resume", "skillopt.db"], "index"),
    # model specs
    "spec without provider": (_run("--target-model", "gpt-5"), "PROVIDER:MODEL"),
    "spec empty model": (_run("--target-model", "openai:"), "openai:"),
    "spec empty provider": (_run("--target-model", ":gpt-5"), ":gpt-5"),
    "spec unknown provider": (_run("--target-model", "acme:m1"), "acme"),
    "spec missing openai key": (_run("--target-model", "openai:gpt-5-mini"), "OPENAI_API_KEY"),
    "spec missing anthropic key": (_run("--optimizer-model", "anthropic:claude-sonnet-4-5"), "ANTHROPIC_API_KEY"),
    "spec bad url": (_run("--target-model", "openai-compatible:m@not a url"), "not a url"),
    "vllm without url": (_run("--target-model", "vllm:m"), "vllm"),
    "harness cannot use the target": (_run("--harness", "claude-code", "--no-sandbox"), "claude-code"),
    # preflight: the endpoint does not listen (every other case fails before it is asked)
    "target endpoint unreachable": (_run(), "does not answer at http://127.0.0.1:9/v1/models"),
    "optimizer endpoint unreachable": (_run("--target-model", "local:qwen2.5-coder-1.5b"), "optimizer model"),
    "eval endpoint unreachable": (_eval("--split", "all"), "the target model"),
    # config files
    "config missing": (_run("--config", "nope.yaml"), "nope.yaml"),
    "config invalid yaml": (_run("--config", "broken.yaml"), "not valid YAML"),
    "config a list": (_run("--config", "list.yaml"), "mapping"),
    "config unknown key": (_run("--config", "unknown.yaml"), "trian"),
    "config bad value": (_run("--config", "alpha.yaml"), "gate.alpha"),
    "config latin-1": (_run("--config", "latin1.yaml"), "UTF-8"),
    # skills
    "skill with NUL": (_run("--skill", "nul.md"), "NUL"),
    "skill duplicate name key": (_run("--skill", "dup.md"), "twice"),
    "skill duplicate description key": (_run("--skill", "dup-desc.md"), "twice"),
    "skill no front matter": (_run("--skill", "plain.md"), "front matter"),
    "skill unclosed front matter": (_run("--skill", "unclosed.md"), "not closed"),
    "skill empty name": (_run("--skill", "noname.md"), "name"),
    "skill name a list": (_run("--skill", "listname.md"), "name"),
    "skill missing": (_run("--skill", "missing.md"), "missing.md"),
    "skill latin-1": (_run("--skill", "latin1.md"), "UTF-8"),
    "skill folder without SKILL.md": (_run("--skill", "emptydir"), "emptydir"),
    "skill unsafe name": (_run("--skill", "evil.md"), "bad skill name"),
    # benchmarks
    "benchmark unknown": (_run("--benchmark", "nope"), "nope"),
    "benchmark missing jsonl": (_run("--benchmark", "missing.jsonl"), "missing.jsonl"),
    "benchmark empty jsonl": (_run("--benchmark", "empty.jsonl"), "empty.jsonl"),
    "benchmark torn jsonl": (_run("--benchmark", "torn.jsonl"), "torn.jsonl:2"),
    "benchmark binary": (_run("--benchmark", "binary.jsonl"), "UTF-8"),
    "benchmark duplicate ids": (_run("--benchmark", "dupids.jsonl"), "q1"),
    "benchmark row a list": (_run("--benchmark", "listrow.jsonl"), "listrow.jsonl"),
    "val split empty (train took all)": (_run("--train-size", "20", "--val-size", "4"), "--train-size"),
    "val size 0": (_run("--val-size", "0"), "--val-size"),
    "train size 0": (_run("--train-size", "0"), "--train-size"),
    # the runs folder
    "runs dir is a file": (["--runs-dir", "a-file.txt", *_run()], "is a file"),
    "runs dir read-only": (["--runs-dir", "/proc/skillopt-probe-runs", *_run()], "runs folder"),
    # damaged runs on --resume
    "resume: config.yaml invalid YAML": (["run", "--resume", "badyaml"], "not valid YAML"),
    "resume: config.yaml a list": (["run", "--resume", "listyaml"], "mapping"),
    "resume: config.yaml bad value": (["run", "--resume", "badvalue"], "config.yaml"),
    "resume: state.json truncated": (["run", "--resume", "cutstate"], "state.json"),
    "resume: state.json empty": (["run", "--resume", "emptystate"], "state.json"),
    "resume: edited target_model": (["run", "--resume", "edited"], "target_model"),
    "resume with a bad --set": (["run", "--resume", "done", "--set", "gate.alpha=0"], "gate.alpha"),
    # eval
    "eval unknown split": (_eval("--split", "dev"), "dev"),
    "eval trials 0": (_eval("--trials", "0"), "gate.trials"),
    "eval concurrency 0": (_eval("--concurrency", "0"), "train.concurrency"),
    "eval bad --set": (_eval("--set", "gate.alpha=9"), "gate.alpha"),
    "eval empty target": (_eval("--target-model", ""), "target_model"),
    "eval test split empty": (_eval("--set", "splits.train=20"), "--set splits.train="),
    "eval skill missing": (["eval", "--skill", "missing.md", "--benchmark", "qa.jsonl", "--target-model", FAKE],
                           "missing.md"),
    "eval run version missing": (["eval", "--skill", "done:v7", "--target-model", FAKE], "v007"),
    "eval run ref garbage": (["eval", "--skill", "done:zzz", "--target-model", FAKE], "done:zzz"),
    "eval unknown run": (["eval", "--skill", "nope:v0", "--target-model", FAKE], "nope"),
    "eval skill with NUL": (["eval", "--skill", "nul.md", "--benchmark", "qa.jsonl", "--target-model", FAKE], "NUL"),
    # traces, compare, export, report, runs
    "traces show RUN:zzz": (["traces", "show", "done:zzz", "q1"], "done:zzz"),
    "traces show RUN:v9": (["traces", "show", "done:v9", "q1"], "v009"),
    "traces show RUN:v0 unknown task": (["traces", "show", "done:v0", "nope"], "nope"),
    "traces show RUN:v1 vs --version": (["traces", "show", "done:v0", "q1", "--version", "3"], "--version"),
    "traces show unknown run": (["traces", "show", "nope", "q1"], "nope"),
    "traces show run index name": (["traces", "show", "skillopt.db", "q1"], "index"),
    "compare one skill": (["compare", "done:seed"], "at least two"),
    "compare bad split": (["compare", "done:seed", "done:best", "--split", "dev"], "dev"),
    "compare unknown run": (["compare", "done:seed", "nope:best"], "nope"),
    "compare bad ref": (["compare", "done:seed", "done:zzz"], "done:zzz"),
    "export bad format": (["export", "done", "--format", "docx", "-o", "out"], "docx"),
    "export bad ref": (["export", "done:zzz", "--format", "claude-skill", "-o", "out"], "done:zzz"),
    "export missing run": (["export", "nope", "--format", "claude-skill", "-o", "out"], "nope"),
    "report missing run": (["report", "nope", "-o", "r.html"], "nope"),
    "runs show missing run": (["runs", "show", "nope"], "nope"),
}


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file (size, mtime) but the run lock, which holds only a pid and is not part of the record."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and p.name != ".lock"}


def _stored(root: Path, run_id: str, **cfg) -> RunStore:
    store = RunStore.create(root / "runs", run_id)
    store.write_config(StoredConfig.of(RunConfig.model_validate({
        "benchmark": str(root / "qa.jsonl"), "harness": "chat", "target_model": FAKE, "optimizer_model": FAKE,
        "splits": {"train": 4, "val": 4, "test": 2}, **cfg})))
    store.add_version(Skill.parse(SKILL), parent=None, origin="seed", status="seed")
    return store


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A working folder with data, skills and configs, good and bad, and runs, whole and damaged (made
    once: every case leaves it as it was, which each case checks)."""
    root = tmp_path_factory.mktemp("probe")
    write_jsonl(root / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(12)])
    files = {
        "SKILL.md": SKILL, "a-file.txt": "not a folder\n", "empty.jsonl": "",
        "torn.jsonl": '{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": \n',
        "dupids.jsonl": '{"id": "q1", "question": "a", "answer": "1"}\n{"id": "q1", "question": "b", "answer": "2"}\n',
        "listrow.jsonl": '[1, 2]\n',
        "epochs-abc.yaml": "train:\n  epochs: abc\n", "broken.yaml": "train: [epochs\n", "list.yaml": "- a\n- b\n",
        "unknown.yaml": "trian:\n  epochs: 2\n", "alpha.yaml": "gate:\n  alpha: 0\n",
        "nul.md": SKILL.replace("Think", "Th\x00ink"),
        "dup.md": SKILL.replace("name: solver\n", "name: solver\nname: other\n"),
        "dup-desc.md": SKILL.replace("description: Solve the task.\n", "description: a\ndescription: b\n"),
        "plain.md": "# Solver\nThink.\n", "unclosed.md": "---\nname: solver\ndescription: d\n# Solver\n",
        "noname.md": SKILL.replace("name: solver", "name: ''"), "listname.md": SKILL.replace("name: solver", "name: [a]"),
        "evil.md": SKILL.replace("name: solver", "name: ../evil"),
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "latin1.md").write_bytes(SKILL.replace("Think", "Pensé").encode("latin-1"))
    (root / "latin1.yaml").write_bytes("benchmark: café\n".encode("latin-1"))
    (root / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (root / "emptydir").mkdir()

    done = _stored(root, "done")
    done.write_state(RunState(run_id="done", fingerprint="0" * 16, status="finished"))
    done.append_rollout(RolloutRecord(key="k" * 64, task_id="q1", split="val", version=0,
                                      skill_sha=done.version(0).sha, harness="chat", model=FAKE))
    _stored(root, "badyaml").root.joinpath("config.yaml").write_text("benchmark: [qa\n")
    _stored(root, "listyaml").root.joinpath("config.yaml").write_text("- 1\n- 2\n")
    _stored(root, "badvalue").root.joinpath("config.yaml").write_text(
        yaml.safe_dump({"benchmark": "qa.jsonl", "target_model": FAKE, "train": {"epochs": "many"}}))
    cut = _stored(root, "cutstate")
    cut.write_state(RunState(run_id="cutstate", fingerprint="0" * 16))
    text = (cut.root / "state.json").read_text()
    (cut.root / "state.json").write_text(text[: len(text) // 2])
    _stored(root, "emptystate").root.joinpath("state.json").write_text("")
    edited = _stored(root, "edited", target_model=OTHER)  # config.yaml edited after the run made rollouts with FAKE
    edited.write_state(RunState(run_id="edited", fingerprint="0" * 16))
    edited.append_rollout(RolloutRecord(key="e" * 64, task_id="q1", split="val", version=0,
                                        skill_sha=edited.version(0).sha, harness="chat", model=FAKE))
    return root


def test_the_probe_has_150_cases():
    assert len(CASES) >= 150, len(CASES)


@pytest.mark.parametrize("case", list(CASES))
def test_probe_one_line_exit_2_nothing_written(place, case, monkeypatch):
    monkeypatch.chdir(place)
    for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "SKILLOPT_RUNS_DIR"):
        monkeypatch.delenv(k, raising=False)
    args, needle = CASES[case]
    before = _tree(place)
    res = CliRunner().invoke(app, args)
    assert "Traceback" not in res.output and not isinstance(res.exception, (AssertionError, TypeError)), res.output
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert needle.lower() in lines[0].lower(), (needle, lines[0])
    assert _tree(place) == before  # nothing half-written: no run folder, no index, no change to a run
    assert not (place / "runs" / "skillopt.db").exists()


def test_a_garbage_line_in_rollouts_is_named_not_skipped_silently(tmp_path):
    store = RunStore.create(tmp_path / "runs", "r")
    rec = RolloutRecord(key="k" * 64, task_id="q1", split="val", version=0, skill_sha="s", harness="chat", model=FAKE)
    store.append_rollout(rec)
    with open(store.root / "rollouts.jsonl", "a") as f:
        f.write("this is not a record\n")
    store.append_rollout(rec.model_copy(update={"key": "j" * 64}))
    with open(store.root / "rollouts.jsonl", "a") as f:
        f.write('{"key": "torn')  # a torn last line: what a crash leaves, not worth a warning
    assert [r.key[0] for r in store.rollouts()] == ["k", "j"]
    assert store.unreadable_rollout_lines == [2]


def test_stray_temp_files_are_removed_when_a_run_is_opened(tmp_path):
    store = _stored_plain(tmp_path)
    stray = [store.root / "steps" / "0001" / ".reflections.json.abc123.tmp", store.root / ".state.json.x.tmp",
             store.root / "traces" / "q1" / ".k.jsonl.tmp"]
    for p in stray:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{half")
    RunStore.open(tmp_path / "runs", "r", lock=True).unlock()
    assert not any(p.exists() for p in stray)
    assert (store.root / "config.yaml").exists()


def _stored_plain(tmp_path: Path) -> RunStore:
    store = RunStore.create(tmp_path / "runs", "r")
    store.write_config(StoredConfig.model_validate({"benchmark": "gsm8k", "target_model": FAKE}))
    return store


def test_a_run_id_never_names_the_index(tmp_path):
    from skillopt.errors import BadInput
    from skillopt.store.run_store import check_run_id

    for bad in ("skillopt.db", "skillopt.db-wal", "skillopt.db-shm", "skillopt.db-journal", ""):
        with pytest.raises(BadInput):
            check_run_id(bad)
    assert check_run_id("skillopt-db-run") == "skillopt-db-run"
    assert json.loads(json.dumps(check_run_id("r1.2_x-y"))) == "r1.2_x-y"


class _Refusing(BaseHTTPRequestHandler):
    status = 401

    def do_GET(self):  # noqa: N802
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "Incorrect API key provided: sk-abc...xyz"}}')

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_key_is_one_line_before_the_run_exists(place, monkeypatch, status):
    monkeypatch.chdir(place)
    handler = type("H", (_Refusing,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = f"openai-compatible:m@http://127.0.0.1:{server.server_address[1]}/v1"
        before = _tree(place)
        res = CliRunner().invoke(app, _run("--target-model", spec, "--optimizer-model", spec))
    finally:
        server.shutdown()
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert f"the target model {spec} refused the key" in lines[0] and f"HTTP {status}" in lines[0], lines
    assert _tree(place) == before


def test_a_model_a_vllm_server_does_not_serve_is_one_line_before_the_run_exists(place, monkeypatch):
    from tests.fakes.server import FakeModelServer, FakeReply

    monkeypatch.chdir(place)
    with FakeModelServer(lambda req: FakeReply(text="Answer: 1"), models=("Qwen/Qwen3-8B",)) as srv:
        good, bad = f"vllm:Qwen/Qwen3-8B@{srv.openai_url}", f"vllm:qwen3-8b@{srv.openai_url}"
        before = _tree(place)
        res = CliRunner().invoke(app, _run("--target-model", good, "--optimizer-model", bad))
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert f"the optimizer model {bad}" in lines[0] and "serves Qwen/Qwen3-8B, not 'qwen3-8b'" in lines[0], lines
    assert _tree(place) == before and len(srv.requests) == 1  # one listing for both roles


def test_traces_show_honours_the_version_of_a_run_reference(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = _stored_plain(tmp_path)
    seed = store.add_version(Skill.parse(SKILL), parent=None, origin="seed", status="seed")
    better = store.add_version(Skill.parse(SKILL + "Check the units.\n"), parent=0, origin="step 1", status="accepted")
    for v in (seed, better):
        store.append_rollout(RolloutRecord(key=f"{v.version}" * 64, task_id="q1", split="val", version=v.version,
                                           skill_sha=v.sha, harness="chat", model=FAKE, output=f"by v{v.version}"))
    store.write_state(RunState(run_id="r", fingerprint="0" * 16, best=1, incumbent=1))
    shown = {}
    for ref in ("r", "r:v0", "r:seed", "r:best", "r:1", "r:v1"):
        res = CliRunner().invoke(app, ["traces", "show", ref, "q1"])
        assert res.exit_code == 0, res.output
        shown[ref] = res.output.splitlines()[0]
    assert "v001" in shown["r"] and "v001" in shown["r:best"] and "v001" in shown["r:1"] and "v001" in shown["r:v1"]
    assert "v000" in shown["r:v0"] and "v000" in shown["r:seed"]
