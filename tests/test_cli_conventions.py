"""CLI conventions, through the real CLI: global options before or after the subcommand and
SKILLOPT_RUNS_DIR, `-h`, whole run ids in `runs list` (and `--json`), `config show` equal to what a run
writes, every `run` setting with a default and a line of help, distinct exit codes, the spelling
aliases, case-insensitive names, suggestions for mistyped settings, models defaulted out loud."""

from __future__ import annotations

import json
import re

import typer
from typer.core import TyperOption
import yaml

from skillopt.cli import commands  # noqa: F401  (registers every command)
from skillopt.cli.app import app
from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import Scripted, code_tasks


def _args(url: str, data, run_id: str, *extra: str) -> list[str]:
    return ["run", "--benchmark", str(data), "--target-model", f"openai-compatible:t@{url}",
            "--optimizer-model", f"openai-compatible:o@{url}", "--run-id", run_id, "--epochs", "1",
            "--train-size", "4", "--val-size", "4", "--test-size", "2", "--batch-size", "4", *extra]


def test_global_options_anywhere_env_runs_dir_whole_ids_and_exit_codes(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    long_id = "a-run-id-long-enough-that-a-narrow-table-would-cut-it-" + "x" * 40
    elsewhere = tmp_path / "elsewhere"
    env = {**cli_env(tmp_path), "COLUMNS": "80"}
    with FakeModelServer(Scripted()) as srv:
        # finished: 0; the run folder and the next commands are printed
        r = run_cli([*_args(srv.openai_url, data, long_id), "--runs-dir", str(elsewhere)], tmp_path, env)
        assert r.returncode == 0, r.stderr
        # progress: step k/N, rollouts so far, errors, cost (no price for these fake models: unknown, not $0)
        assert re.search(r"step 1/1 \(epoch 1\): train .*; \d+ rollouts, cost unknown", r.stderr), r.stderr
        assert f"run folder: {elsewhere / long_id}" in r.stdout
        assert f"skillopt report {long_id} --runs-dir {elsewhere}" in r.stdout
        assert f"skillopt compare {long_id}:seed {long_id}:best --diff --runs-dir {elsewhere}" in r.stdout
        # stopped by a budget: 3, resumable; --runs-dir after the subcommand, again
        r = run_cli([*_args(srv.openai_url, data, "budget", "--max-rollouts", "2"), "--runs-dir", str(elsewhere)],
                    tmp_path, env)
        assert r.returncode == 3, r.stderr
        assert f"skillopt run --resume budget --runs-dir {elsewhere}" in r.stdout
        r = run_cli(["run", "--resume", "budget", "--max-rollouts", "1000", "--runs-dir", str(elsewhere)], tmp_path, env)
        assert r.returncode == 0, r.stderr
    # failed: 1 (every baseline rollout errored)
    with FakeModelServer(lambda req: FakeReply(status=503, text="down")) as srv:
        r = run_cli([*_args(srv.openai_url, data, "down", "--set", "models.retries=0"), "--runs-dir", str(elsewhere)],
                    tmp_path, env)
        assert r.returncode == 1 and "every rollout of the baseline errored" in r.stderr
    # bad input: 2, one line
    r = run_cli(["run", "--benchmark", "nope", "--runs-dir", str(elsewhere)], tmp_path, env)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "unknown benchmark 'nope'" in errors[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
    # SKILLOPT_RUNS_DIR, and --runs-dir before the subcommand, find the same runs
    listed = run_cli(["runs", "list", "--json"], tmp_path, {**env, "SKILLOPT_RUNS_DIR": str(elsewhere)})
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {x["run_id"] for x in rows} == {long_id, "budget", "down"}
    by_id = {x["run_id"]: x for x in rows}
    assert by_id["budget"]["status"] == "finished" and by_id["down"]["status"] == "failed"
    assert by_id[long_id]["path"] == str(elsewhere / long_id) and by_id[long_id]["seed_val"] == 0.0
    (tmp_path / ".env").write_text(f"SKILLOPT_RUNS_DIR={elsewhere}\n")  # a .env in the working folder counts too
    from_dotenv = run_cli(["runs", "list", "--json"], tmp_path, env)
    (tmp_path / ".env").unlink()
    assert {x["run_id"] for x in json.loads(from_dotenv.stdout)} == {long_id, "budget", "down"}
    table = run_cli(["--runs-dir", str(elsewhere), "runs", "list"], tmp_path, env)  # piped, 80 columns
    assert long_id in table.stdout
    shown = run_cli(["runs", "show", long_id, "-v", "--runs-dir", str(elsewhere)], tmp_path, env)
    assert shown.returncode == 0 and f"run {long_id}:" in shown.stdout


def test_config_show_is_what_the_run_writes(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    with FakeModelServer(Scripted()) as srv:
        cfg = tmp_path / "my.yaml"
        cfg.write_text(yaml.safe_dump({"benchmark": str(data), "target_model": f"openai-compatible:t@{srv.openai_url}",
                                       "train": {"epochs": 1, "batch_size": 4},
                                       "splits": {"train": 4, "val": 4, "test": 2}}))
        common = ["--config", str(cfg), "--set", "gate.alpha=0.1", "--set", "harness_options.max_turns=5"]
        shown = run_cli(["config", "show", *common], tmp_path, cli_env(tmp_path))
        assert shown.returncode == 0, shown.stderr
        # the optimizer was not given: defaulted to the target's model, said in one line
        assert "no --optimizer-model given: using openai-compatible:t@" in shown.stderr
        r = run_cli(["run", *common], tmp_path, cli_env(tmp_path))
        assert r.returncode == 0, r.stderr
    run = next((tmp_path / "runs").glob("*/config.yaml"))
    assert yaml.safe_load(shown.stdout) == yaml.safe_load(run.read_text())
    assert shown.stdout == run.read_text()
    assert "gate:\n" in shown.stdout and "alpha: 0.1" in shown.stdout and "trigger_weight" in shown.stdout
    j = run_cli(["config", "show", "--preset", "quick", "--json"], tmp_path, cli_env(tmp_path))
    assert json.loads(j.stdout)["splits"]["train"] == 8


def test_help_defaults_aliases_names_and_suggestions(tmp_path):
    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    options = [p for p in run.params if isinstance(p, TyperOption) and p.name != "help"]
    assert len(options) >= 25  # every setting run takes
    for p in options:
        assert p.help and p.help.strip(), f"{p.opts} has no help"
        assert p.show_default not in (None, False), f"{p.opts} shows no default"
    text = run_cli(["run", "-h"], tmp_path, cli_env(tmp_path)).stdout
    assert "[default: (2)]" in re.sub(r"\s+", " ", text.split("--epochs", 1)[1])[:120]
    assert "--target-model, --target_model" in text and "Exit codes: 0 finished, 1 failed, 2 bad input, 3 stopped" in text
    for sub in (["report", "-h"], ["export", "-h"], ["compare", "-h"], ["runs", "list", "-h"], ["-h"]):
        r = run_cli(sub, tmp_path, cli_env(tmp_path))
        assert r.returncode == 0 and "Usage:" in r.stdout, sub
    for sub in (["export", "-h"], ["report", "-h"], ["traces", "export", "-h"], ["benchmarks", "make-swe", "-h"]):
        assert "-o, --output, --out" in run_cli(sub, tmp_path, cli_env(tmp_path)).stdout, sub
    # a subcommand's own --version is its option, not the root's `--version`
    r = run_cli(["traces", "show", "nope", "t1", "--version", "1"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 2 and "no run 'nope'" in r.stderr, r.stderr
    # names are case-insensitive; mistyped settings get the nearest valid one
    r = run_cli(["config", "show", "--benchmark", "GSM8K", "--harness", "Chat"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0 and "benchmark: gsm8k" in r.stdout and "harness: chat" in r.stdout
    r = run_cli(["config", "show", "--set", "train.epoks=3"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 2 and "did you mean train.epochs?" in r.stderr
    r = run_cli(["config", "show", "--set", "gaet.alpha=3"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 2 and "did you mean gate.alpha?" in r.stderr


def test_a_bad_setting_names_the_layer_that_gave_it(tmp_path):
    """One line, exit code 2, and where the bad value came from: the --set item, the YAML file, or every
    layer that gave a value to settings that disagree with each other."""
    env = cli_env(tmp_path)
    (tmp_path / "unknown.yaml").write_text("gate:\n  alfa: 0.1\n")
    (tmp_path / "interim.yaml").write_text("gate:\n  interim_alpha: 0.5\n")
    for args, where in ((["--set", "train.epochs=abc"], "bad setting train.epochs in --set train.epochs=abc: "),
                        (["--config", "unknown.yaml"], "unknown setting gate.alfa in config file unknown.yaml; "),
                        (["--set", "gate.alfa=0.1"], "unknown setting gate.alfa in --set gate.alfa=0.1; "),
                        (["--set", "gate.alpha=0.01", "--config", "interim.yaml"],
                         "bad setting gate in config file interim.yaml and --set gate.alpha=0.01: ")):
        r = run_cli(["config", "show", *args], tmp_path, env)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and where in r.stderr, (args, r.stderr)


def test_models_are_never_chosen_silently(tmp_path):
    env = cli_env(tmp_path)
    r = run_cli(["config", "show", "--target-model", "local:qwen2.5-coder-0.5b"], tmp_path, env)
    assert "no --optimizer-model given: using local:qwen2.5-coder-1.5b as the optimizer (the local default)" in r.stderr
    r = run_cli(["config", "show", "--optimizer-model", "openai:gpt-5"], tmp_path, {**env, "OPENAI_API_KEY": "sk-x"})
    assert "no --target-model given: using openai:gpt-5 as the target (the same model as the optimizer)" in r.stderr
    assert "target_model: openai:gpt-5\n" in r.stdout
    r = run_cli(["config", "show"], tmp_path, {**env, "ANTHROPIC_API_KEY": "sk-ant-x"})
    assert "ANTHROPIC_API_KEY is set: using anthropic:claude-haiku-4-5 (target) and anthropic:claude-sonnet-4-5" in r.stderr
    assert "paid models" in r.stderr
    r = run_cli(["config", "show"], tmp_path, env)
    assert "no API key set: using the embedded local models" in r.stderr
