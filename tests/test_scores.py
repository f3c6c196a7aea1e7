"""Numbers a user can trust: one definition of a version's score in every view, one paired test.

An errored rollout (the model server failed: `error_kind="infra"`) is counted apart and never shown
as a 0; a version with no scored rollout shows no score. Checked on run folders the real CLI made
against the scripted fake server (a target that answers HTTP 500 gives errored rollouts), through
every view: the run's printed summary, `runs list` / `runs show` (and `--json`), `compare`, the
report, the DataFrames and the SQLite index.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest

from skillopt.store.index import MIGRATIONS, RunIndex
from skillopt.store.schema import RunSummary
from skillopt.store.scores import SplitScore
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_compare import cli, copy_runs
from tests.test_train_e2e import _run_args, code_tasks

_DEAD: dict[tuple[str, ...], Path] = {}
SEED_SKILL = """---
name: task-solver
description: Solve the task and give the final answer.
---

# Solving tasks

Read the task, then answer.
"""


def dead_run(tmp_path_factory, *extra: str) -> Path:
    """`runs/dead`: every target call answered HTTP 500 (no retry), so all 8 baseline rollouts errored."""
    if extra not in _DEAD:
        root = tmp_path_factory.mktemp("dead")
        data = write_jsonl(root / "codes.jsonl", code_tasks(16))

        def script(req: FakeRequest) -> FakeReply:
            return FakeReply(text="server down", status=500)

        with FakeModelServer(script) as srv:
            args = _run_args(data, srv.openai_url, "dead", epochs="1", set="models.retries=0")
            r = run_cli(args + list(extra), cwd=root, env=cli_env(root))
        assert r.returncode == 1 and "every rollout of the baseline errored" in r.stderr, r.stderr + r.stdout
        (root / "stdout.txt").write_text(r.stdout)
        _DEAD[extra] = root
    return _DEAD[extra]


def test_errored_rollouts_are_no_score_in_any_view(tmp_path_factory):
    root = dead_run(tmp_path_factory)
    runs = root / "runs"
    # the run's printed summary
    printed = (root / "stdout.txt").read_text()
    assert "- (n=0, 8 errored)" in printed and "0.000" not in printed
    # summary.json: no score, 8 errors
    summary = RunSummary.model_validate_json((runs / "dead" / "summary.json").read_text())
    assert summary.scores["seed"]["val"] == SplitScore(hard=None, soft=None, n=0, errors=8)
    # the index holds the error kind, so views that read it alone agree with the file
    index = RunIndex(runs / "skillopt.db")
    assert index.answers_for("dead", runs / "dead" / "rollouts.jsonl")
    assert {r.error_kind for r in index.rollout_rows(["dead"])} == {"infra"}
    index.close()
    # runs list (table and --json)
    r = cli("runs", "list", runs_dir=runs)
    assert r.exit_code == 0 and "0.000" not in r.stdout
    row = json.loads(cli("runs", "list", "--json", runs_dir=runs).stdout)[0]
    assert (row["seed_val"], row["best_val"], row["best_test"]) == (None, None, None)
    # runs show (text and --json)
    r = cli("runs", "show", "dead", runs_dir=runs)
    assert "v000 [seed] seed: val - (n=0, 8 errored)" in r.stdout and "0.000" not in r.stdout
    node = json.loads(cli("runs", "show", "dead", "--json", runs_dir=runs).stdout)["nodes"][0]
    assert node["scores"]["val"] == {"hard": None, "soft": None, "n": 0, "errors": 8}
    # compare
    cmp = json.loads(cli("compare", "dead:seed", "dead:best", "--split", "val", "--json", runs_dir=runs).stdout)
    assert [(s["rollouts"], s["errors"], s["hard"]) for s in cmp["scores"]] == [(0, 8, None), (0, 8, None)]
    assert cmp["paired"] == [] and any("has no score on val" in n for n in cmp["notes"])
    assert len(cmp["warnings"]) == 1  # the failed run, said once though it is compared with itself
    r = cli("compare", "dead:seed", "dead:best", "--split", "val", runs_dir=runs)
    assert r.exit_code == 0 and "0.000" not in r.stdout
    # one rollout's trace
    task = json.loads((runs / "dead" / "rollouts.jsonl").read_text().splitlines()[0])["task_id"]
    r = cli("traces", "show", "dead:seed", task, runs_dir=runs)
    assert r.exit_code == 0 and "errored (infrastructure, not a score)" in r.stdout and "hard=" not in r.stdout
    # the report
    md = cli("report", "dead", "--format", "markdown", runs_dir=runs).stdout
    assert "| baseline (seed) | v000 | - | 0 | 8 | - | 0 | 0 |" in md and "0.000" not in md
    # the DataFrames
    pd = pytest.importorskip("pandas")
    import skillopt

    df = skillopt.rollouts_df("dead", runs_dir=runs)
    assert len(df) >= 8 and set(df.error_kind) == {"infra"} and df.hard.isna().all() and df.soft.isna().all()
    v = skillopt.versions_df("dead", runs_dir=runs).iloc[0]
    assert pd.isna(v.val_hard) and (v.val_n, v.val_errors) == (0, 8)
    assert pd.isna(skillopt.runs_df(runs).iloc[0].seed_val)


@pytest.mark.slow  # MLflow's SQLite store takes its time to set up
def test_mlflow_gets_the_errors_and_no_score(tmp_path_factory, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    db = tmp_path / "mlflow.db"
    dead_run(tmp_path_factory, "--track", "mlflow", "--tracking-uri", f"sqlite:///{db}")
    mlflow.set_tracking_uri(f"sqlite:///{db}")
    (run,) = mlflow.search_runs(experiment_names=["skillopt"], output_format="list")
    assert run.data.metrics["seed_val_errors"] == 8 and "seed_val_hard" not in run.data.metrics


def test_split_score_and_old_summaries():
    class R:
        def __init__(self, task: str, hard: float, kind: str | None = None, trial: int = 0):
            self.task_id, self.trial, self.hard, self.soft, self.error_kind = task, trial, hard, hard, kind

        @property
        def errored(self) -> bool:
            return self.error_kind == "infra"

    s = SplitScore.of([R("a", 1.0), R("b", 0.0), R("c", 0.0, "infra"), R("d", 0.0, "agent")])
    assert (s.hard, s.n, s.errors, s.text()) == (0.333333, 3, 1, "0.333 (n=3, 1 errored)")  # an agent's failure is a 0
    assert SplitScore.of([R("a", 0.0, "infra")]).text(interval=True) == "- (n=0, 1 errored)"
    # a summary written before this rule (0.0 with n=0) opens with no score
    assert SplitScore.model_validate({"hard": 0.0, "soft": 0.0, "n": 0, "errors": 8}).hard is None
    from skillopt.store.scores import latest_per_trial

    kept = latest_per_trial([R("a", 1.0), R("a", 0.0, "infra"), R("b", 0.0, "infra"), R("b", 1.0)])
    assert [(r.task_id, r.hard, r.errored) for r in kept] == [("a", 1.0, False), ("b", 1.0, False)]


def test_index_migration_drops_rows_that_cannot_tell_errors_from_scores(tmp_path):
    db = tmp_path / "skillopt.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    for name, fn in MIGRATIONS[:4]:  # an index written before error kinds were kept
        fn(con)
        con.execute("INSERT INTO _migrations VALUES (?, 0)", (name,))
    con.execute("INSERT INTO runs (run_id, status, rollouts_bytes) VALUES ('old', 'finished', 10), "
                "('clean', 'finished', 20)")
    cols = "run_id, key, task_id, split, version, skill_sha, harness, model, trial, hard, soft, error"
    con.execute(f"INSERT INTO rollouts ({cols}) VALUES ('old', 'k1', 't1', 'val', 0, 's', 'chat', 'm', 0, 0, 0, "
                "'HTTP 500'), ('old', 'k2', 't2', 'val', 0, 's', 'chat', 'm', 0, 1, 1, NULL), "
                "('clean', 'k3', 't1', 'val', 0, 's', 'chat', 'm', 0, 1, 1, NULL)")
    con.commit()
    con.close()
    index = RunIndex(db)
    assert [r.key for r in index.rollout_rows(["old", "clean"])] == ["k2", "k3"]
    bytes_ = dict(index.db.execute("SELECT run_id, rollouts_bytes FROM runs").fetchall())
    assert bytes_ == {"old": None, "clean": 20}  # "old" is read from its rollouts.jsonl until indexed again
    index.close()


def test_compare_reuses_what_eval_scored_and_its_hint_works(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    # v001 was screened out on train: it has no test rollout in its run
    r = cli("compare", "codes:seed", "codes:v1", "--split", "test", "--json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    note = next(n for n in json.loads(r.stdout)["notes"] if "codes:v001 has no rollouts on test" in n)
    hint = re.search(r"score it with: (skillopt .+)\)", note).group(1)
    assert hint == f"skillopt eval --skill codes:v1 --split test --runs-dir {runs}"
    # the hint, run as printed, stores the rollouts in an evaluation run of its own ...
    done = run_cli(shlex.split(hint)[1:], cwd=tmp_path, env=cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    # ... and compare finds them there
    cmp = json.loads(cli("compare", "codes:seed", "codes:v1", "--split", "test", "--json", runs_dir=runs).stdout)
    scores = {s["label"]: s for s in cmp["scores"]}
    assert scores["codes:v001"]["rollouts"] == 4 and not any("no rollouts" in n for n in cmp["notes"])
    hard = next(p for p in cmp["paired"] if p["metric"] == "hard")
    assert hard["lift"]["n"] == 4
    # the evaluation run records the data it scored, so compare can tell rollouts of changed data apart
    ev = next(p for p in runs.iterdir() if p.name.startswith("eval-"))
    hashes = {json.loads((runs / x / "summary.json").read_text())["data_hash"] for x in ("codes", ev.name)}
    assert len(hashes) == 1 and "" not in hashes


def test_runs_list_never_wraps_words(tmp_path_factory, tmp_path):
    runs = dead_run(tmp_path_factory) / "runs"
    r = cli("runs", "list", runs_dir=runs)  # not a terminal: plain columns, one line per run
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split()[:2] == ["run", "status"]
    assert lines[1].split()[:4] == ["dead", "train:failed", "codes.jsonl", "chat"]
    assert "openai-compatible:fake-target" in lines[1] and "http://" not in lines[1]  # a base URL is left out
    # a terminal 80 columns wide: the columns that fit, each line within 80
    env = cli_env(tmp_path, FORCE_COLOR="1", COLUMNS="80")
    t = run_cli(["--runs-dir", str(runs), "runs", "list"], cwd=tmp_path, env=env)
    lines = [x for x in t.stdout.splitlines() if x.strip()]
    assert t.returncode == 0 and len(lines) == 2 and all(len(x) <= 80 for x in lines), t.stdout
    assert lines[1].split()[:2] == ["dead", "train:failed"]
    # one damaged run is listed as such (and warned about); the others are still listed
    (runs / "broken").mkdir()
    (runs / "broken" / "config.yaml").write_text("benchmark: [\n")
    r = cli("runs", "list", runs_dir=runs)
    lines = r.stdout.splitlines()
    assert r.exit_code == 0 and [x.split()[:2] for x in lines[1:]] == [["dead", "train:failed"], ["broken", "?:damaged"]]
    assert "warning: run broken is damaged:" in r.stderr and "not valid YAML" in r.stderr
    rows = json.loads(cli("runs", "list", "--json", runs_dir=runs).stdout)
    assert [x["status"] for x in rows] == ["failed", "damaged"] and "not valid YAML" in rows[1]["problem"]
    from skillopt.cli.runs import short_spec

    assert short_spec("vllm:Qwen/Qwen2.5-Coder-32B-Instruct@http://gpu-17.example.com:8000/v1", 36) \
        == "vllm:Qwen/Qwen2.5-Coder-32B-Instruct"
    assert short_spec("anthropic:claude-sonnet-4-5", 18) == "claude-sonnet-4-5"
    assert len(short_spec("vllm:Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4", 18)) == 18


def test_views_name_things_once_and_say_what_each_number_is(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    from skillopt.store.run_store import RunStore

    # a candidate that passed its screen but was not gated, as a run before this fix recorded it
    store = RunStore.open(runs, "codes")
    cands = store.read_candidates(1)
    c = next(x for x in cands if x.status == "screened-out")
    cands = [x if x is not c else c.model_copy(update={
        "status": "not-gated", "screen": None, "note": "passed the screen; another candidate was gated first"})
        for x in cands]
    store.write_candidates(1, cands)
    store.update_version(c.version, status="candidate")
    label = f"v{c.version:03d}"
    r = cli("runs", "show", "codes", runs_dir=runs)
    assert f"{label} [not-gated] step 1" in r.stdout and "[candidate]" not in r.stdout
    assert "mean over the 8 gate pair(s): v000 0.000 vs v003 1.000" in r.stdout  # the gate's numbers, said as such
    nodes = json.loads(cli("runs", "show", "codes", "--json", runs_dir=runs).stdout)["nodes"]
    assert next(n for n in nodes if n["version"] == c.version)["status"] == "not-gated"
    r = cli("runs", "show", f"codes:v{c.version}", runs_dir=runs)
    assert "[not-gated]" in r.stdout and "gate: not gated" in r.stdout
    md = cli("report", "codes", "--format", "markdown", runs_dir=runs).stdout
    line = next(x for x in md.splitlines() if f"**{c.id}**" in x)
    assert line.count("gated first") == 1, line
    assert f"| {label} | v000 | step 1 | not-gated |" in md
    # an applied edit reads "(applied)", not "(applied: )"
    r = cli("runs", "show", "codes:best", runs_dir=runs)
    assert "edit add at 'Answer format' (applied);" in r.stdout and "(applied: )" not in r.stdout
    # exporting the seed of a run that accepted an edit says so
    r = cli("export", "codes:seed", "--format", "agents-md", "-o", str(tmp_path / "out"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    said = r.stdout + r.stderr
    assert "the run's best is v003 (codes:best)" in said and "no edit was accepted" not in said


def test_the_python_api_shows_train_and_a_short_result(tmp_path_factory):
    import skillopt
    from skillopt.api import TrainResult
    from skillopt.skill import Skill
    from tests.test_compare import trained_run

    assert {"train", "evaluate", "compare", "rollouts_df"} <= set(dir(skillopt))
    run = trained_run(tmp_path_factory) / "runs" / "codes"
    summary = RunSummary.model_validate_json((run / "summary.json").read_text())
    result = TrainResult("codes", run, summary.status, summary, Skill.parse((run / "best_skill.md").read_text()))
    text = repr(result)
    assert "\n" not in text and len(text) < 300, text
    assert text.startswith("TrainResult(run_id='codes', status='finished', best=v003, test seed 0.000 (n=4) -> "
                           "best 1.000 (n=4), lift +1.000 (95% CI +0.168 to +1.000, paired agresti-min, n=4): better")


def test_html_report_opens_with_settings_and_the_sealed_test_lift(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    r = cli("report", "codes", "-o", str(tmp_path / "r.html"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    html = (tmp_path / "r.html").read_text()
    order = [html.index(x) for x in ('id="settings"', "<th>wall time</th>", 'id="test-lift-text"', 'id="final-table"')]
    assert order == sorted(order)
    lift = html.split('id="test-lift-text">')[1].split("<")[0]
    assert lift.startswith("+1.000 (95% CI +0.168 to +1.000, paired agresti-min, n=4; 4 won, 0 lost") \
        and lift.endswith(": better")
    assert "<th>tasks per split</th><td>train 4, val 8, test 4 (split seed 0)</td>" in html


class _Flaky:
    """The target fails (HTTP 500) on items 1, 5, 9, 13, solves the even ones and misses the rest."""

    def __init__(self):
        from tests.test_train_e2e import Scripted

        self.optimizer = Scripted()

    def __call__(self, req: FakeRequest) -> FakeReply:
        m = re.search(r"item (\d+)\?", req.last_user_text)
        if req.model != "fake-target" or m is None:
            return self.optimizer(req)
        i = int(m.group(1))
        if i % 4 == 1:
            return FakeReply(text="overloaded", status=500)
        return FakeReply(text=f"Answer: ZETA-{i}" if i % 2 == 0 else "Answer: unknown")


def test_partly_errored_run_has_one_score_in_every_view(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(_Flaky()) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "flaky", epochs="1", set="models.retries=0"), cwd=tmp_path,
                    env=cli_env(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    runs = tmp_path / "runs"
    recs = [json.loads(x) for x in (runs / "flaky" / "rollouts.jsonl").read_text().splitlines()]
    seed_val = [x for x in recs if x["version"] == 0 and x["split"] == "val"]
    errored = {x["task_id"] for x in seed_val if x["error_kind"] == "infra"}
    scored = {x["task_id"]: x["hard"] for x in seed_val if x["error_kind"] != "infra"}
    assert errored and scored and not errored & set(scored)
    hard, n, errors = round(sum(scored.values()) / len(scored), 6), len(scored), len(errored)
    text = f"{hard:.3f} (n={n}, {errors} errored)"
    summary = json.loads((runs / "flaky" / "summary.json").read_text())["scores"]["seed"]["val"]
    assert (summary["hard"], summary["n"]) == (hard, n) and summary["errors"] >= errors  # retries are counted too
    assert f"{hard:.3f} [" in r.stdout and f"(n={n}, " in r.stdout
    shown = cli("runs", "show", "flaky", runs_dir=runs).stdout
    assert f"v000 [seed] seed: val {text}" in shown
    cmp = json.loads(cli("compare", "flaky:seed", "flaky:best", "--split", "val", "--json", runs_dir=runs).stdout)
    row = cmp["scores"][0]
    assert (row["hard"]["mean"], row["rollouts"], row["errors"]) == (pytest.approx(hard), n, errors)
    md = cli("report", "flaky", "--format", "markdown", runs_dir=runs).stdout
    final = next(x for x in md.splitlines() if x.startswith("| baseline (seed) | v000 |"))
    assert final.startswith(f"| baseline (seed) | v000 | {hard:.3f} [") and f"| {n} | {errors} |" in final


def test_compare_counts_errored_rollouts_of_skill_files_apart(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(8))
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(SEED_SKILL)
    b.write_text(SEED_SKILL + "\nCheck the item number.\n")

    def script(req: FakeRequest) -> FakeReply:
        return FakeReply(text="server down", status=500)

    with FakeModelServer(script) as srv:
        r = cli("compare", str(a), str(b), "--split", "val", "--json", "--benchmark", str(data), "--harness", "chat",
                "--target-model", f"openai-compatible:fake-target@{srv.openai_url}", "--set", "models.retries=0",
                "--set", "splits.val=4", "--set", "splits.train=2", runs_dir=tmp_path / "runs")
    assert r.exit_code == 0, r.stderr
    cmp = json.loads(r.stdout)
    assert [(s["rollouts"], s["errors"], s["hard"]) for s in cmp["scores"]] == [(0, 4, None), (0, 4, None)]
    assert sum("has no score on val" in n for n in cmp["notes"]) == 2 and cmp["paired"] == []


def test_runs_list_shows_the_scores_a_run_in_progress_has(tmp_path):
    from tests.test_compare import A_HARD, A_SOFT, SEED, build_run

    runs = tmp_path / "runs"
    build_run(runs, "live", [SEED], {(0, "val"): list(zip(A_HARD, A_SOFT))}, status="running")
    row = json.loads(cli("runs", "list", "--json", runs_dir=runs).stdout)[0]
    assert (row["status"], row["seed_val"], row["best_val"], row["best_test"]) == ("running", 0.4, 0.4, None)
    assert "0.400 -> 0.400" in cli("runs", "list", runs_dir=runs).stdout
