"""`skillopt compare` and the statistics behind it, checked against hand computations.

The statistics are pure functions tested on textbook values. The comparison is tested on two
runs built record by record (so every number is known), and end to end on a run that
`skillopt run` produced against the scripted fake server.
"""

from __future__ import annotations

import atexit
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skillopt.cli.commands  # noqa: F401  (registers the command groups)
import skillopt.cli.compare  # noqa: F401
from skillopt.cli.app import app
from skillopt.stats import (
    mcnemar_exact,
    paired_bootstrap,
    paired_outcomes,
    paired_test,
    t_critical,
    t_interval,
    wilson_interval,
)
from skillopt.skill import Skill
from skillopt.store.schema import RolloutRecord, RunState, RunSummary, SplitScore
from skillopt.store.run_store import RunStore
from skillopt.config import StoredConfig
from tests.fakes.server import FakeModelServer
from tests.helpers import cli_env, run_cli, write_jsonl

SEED = """---
name: task-solver
description: Solve the task and give the final answer.
---

# Solving tasks

Read the task, then answer.
"""


def cli(*args: str, runs_dir: Path):
    return CliRunner().invoke(app, ["--runs-dir", str(runs_dir), *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


# statistics ----------------------------------------------------------------------------------------
def test_wilson_interval_matches_textbook_values():
    i = wilson_interval(8, 10)  # 0.8 +- : (0.490, 0.943)
    assert (round(i.lo, 3), round(i.hi, 3), i.mean, i.method) == (0.490, 0.943, 0.8, "wilson")
    i = wilson_interval(0, 4)  # z^2/(n+z^2) = 3.8415/7.8415 = 0.4899
    assert (i.lo, round(i.hi, 4)) == (0.0, 0.4899)
    i = wilson_interval(4, 4)
    assert (round(i.lo, 4), i.hi) == (0.5101, 1.0)
    assert wilson_interval(0, 0).method == "none"


def test_t_critical_values_match_the_t_table():
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 9: 2.262, 10: 2.228, 30: 2.042, 120: 1.980, 1000: 1.962}
    for df, t in table.items():
        assert round(t_critical(df), 3) == t, df


def test_t_interval_by_hand():
    # mean 0.5, sd = sqrt(0.2 / 3) = 0.258199, se = 0.129099, t(3) = 3.182446, half width 0.410852
    i = t_interval([0.2, 0.4, 0.6, 0.8])
    assert i.method == "t" and i.mean == pytest.approx(0.5)
    assert i.lo == pytest.approx(0.089148, abs=1e-5) and i.hi == pytest.approx(0.910852, abs=1e-5)
    assert t_interval([0.9, 1.0, 1.0]).hi == 1.0  # clipped to the score range
    assert t_interval([0.3]).method == "none"


def test_mcnemar_exact_by_hand():
    assert mcnemar_exact(1, 6) == pytest.approx(2 * (1 + 7) / 128)  # 0.125
    assert mcnemar_exact(1, 4) == pytest.approx(2 * (1 + 5) / 32)  # 0.375
    assert mcnemar_exact(0, 4) == pytest.approx(2 / 16)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0


def test_paired_outcomes_and_test_choice():
    a = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 1.0, "only-a": 1.0}
    b = {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0, "only-b": 0.0}
    o = paired_outcomes(a, b)
    assert (o.wins, o.losses, o.ties, o.n) == (2, 1, 1, 4) and o.delta == pytest.approx(0.25)
    hard = paired_test(a, b, "hard")
    assert hard.test == "mcnemar-exact" and hard.p_value == pytest.approx(mcnemar_exact(1, 2)) and hard.n == 4
    assert paired_test(a, b, "soft").test == "paired-bootstrap"
    fractional = paired_test({"t1": 0.5, "t2": 0.0}, {"t1": 1.0, "t2": 0.5}, "hard")  # several trials
    assert fractional.test in ("paired-bootstrap", "sign-flip-exact")
    assert paired_test({"x": 1.0}, {"y": 1.0}).test == "none"


def test_paired_bootstrap_is_seeded_and_matches_the_exact_distribution():
    # d = (1, 0): resampled means are 1, 0.5, 0.5, 0 (each pair equally likely); centred on 0.5,
    # |m - 0.5| >= 0.5 in half the cases, so p = 0.5.
    r = paired_bootstrap([0.0, 0.0], [1.0, 0.0], n_boot=20000, seed=1)
    assert r.delta == 0.5 and r.p_value == pytest.approx(0.5, abs=0.02) and (r.delta_lo, r.delta_hi) == (0.0, 1.0)
    a, b = [0.1, 0.5, 0.3, 0.9, 0.4, 0.2], [0.3, 0.5, 0.6, 0.8, 0.9, 0.4]
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)
    assert paired_bootstrap([0.2, 0.4], [0.2, 0.4]).p_value == 1.0
    same = paired_bootstrap([0.1, 0.2, 0.3], [0.4, 0.5, 0.6])  # every difference +0.3: exact sign-flip
    assert same.test == "sign-flip-exact" and same.p_value == pytest.approx(0.25)


# two runs built by hand ------------------------------------------------------------------------------
A_HARD = [1, 1, 0, 0, 0, 1, 0, 0, 1, 0]  # 4/10
B_HARD = [1, 1, 1, 1, 0, 1, 1, 0, 0, 1]  # 7/10: wins t2 t3 t6 t9, loss t8, ties t0 t1 t4 t5 t7
A_SOFT = [0.9, 0.8, 0.2, 0.1, 0.0, 1.0, 0.3, 0.0, 0.7, 0.4]
B_SOFT = [1.0, 0.8, 0.6, 0.9, 0.0, 1.0, 0.8, 0.2, 0.5, 0.9]


def build_run(runs_dir: Path, run_id: str, texts: list[str], scores: dict[tuple[int, str], list[tuple[float, float]]],
              target: str = "openai:gpt-5-mini", status: str = "finished", data: Path | None = None,
              data_hash: str = "", cost: float | None = 0.001, tokens: tuple[int, int] = (100, 10)) -> RunStore:
    """A run directory written record by record: versions `texts` (v0 the seed, each next one a child),
    rollouts `scores[(version, split)] = [(hard, soft) per task t0, t1, ...]`."""
    store = RunStore.create(runs_dir, run_id)
    store.write_config(StoredConfig.model_validate({"benchmark": str(data or "hand.jsonl"), "harness": "chat", "target_model": target,
                                                    "optimizer_model": "openai:gpt-5",
                                                    "splits": {"seed": 0, "train": 0, "val": 10, "test": 10}}))
    for i, text in enumerate(texts):
        store.add_version(Skill.parse(text), parent=None if i == 0 else i - 1, origin="seed" if i == 0 else f"step {i}",
                          status="seed" if i == 0 else "accepted", step=None if i == 0 else i)
    for (version, split), rows in scores.items():
        sha = store.version(version).sha
        for k, (hard, soft) in enumerate(rows):
            store.append_rollout(RolloutRecord(
                key=f"{run_id}-{version}-{split}-{k}", task_id=f"t{k}", split=split, version=version, skill_sha=sha,
                harness="chat", model=target, hard=hard, soft=soft, input_tokens=tokens[0], output_tokens=tokens[1],
                cost_usd=cost))
    last = len(texts) - 1
    store.write_state(RunState(run_id=run_id, status=status, fingerprint="x", step=last, incumbent=last, best=last))  # type: ignore[arg-type]
    if status == "finished":
        store.write_summary(RunSummary(run_id=run_id, status=status, benchmark=str(data or "hand.jsonl"), harness="chat",
                                       target_model=target, optimizer_model="openai:gpt-5", data_hash=data_hash,
                                       versions={"seed": 0, "best": last, "final": last},
                                       scores={"best": {"val": SplitScore(hard=0, soft=0, n=0)}}))
    return store


def hand_runs(tmp_path: Path, **b_options) -> Path:
    runs = tmp_path / "runs"
    build_run(runs, "ra", [SEED], {(0, "val"): list(zip(A_HARD, A_SOFT)), (0, "test"): [(1, 1), (0, 0)]})
    build_run(runs, "rb", [SEED, SEED.replace("then answer.", "then answer.\n\nCheck units.")],
              {(1, "val"): list(zip(B_HARD, B_SOFT))}, tokens=(120, 12),
              cost=None, **b_options)
    return runs


def test_compare_two_recorded_runs_against_hand_computation(tmp_path):
    runs = hand_runs(tmp_path)
    r = cli("compare", "ra", "rb:best", "--format", "json", "--diff", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    cmp = json.loads(r.stdout)
    assert [e["label"] for e in cmp["entries"]] == ["ra:v000", "rb:v001"]
    scores = {(s["split"], s["label"]): s for s in cmp["scores"]}
    a, b = scores[("val", "ra:v000")], scores[("val", "rb:v001")]
    assert (a["rollouts"], a["tasks"], b["rollouts"]) == (10, 10, 10)
    # Wilson 95%: 4/10 -> (0.1682, 0.6873); 7/10 -> (0.3968, 0.8922)
    assert a["hard"]["mean"] == 0.4 and a["hard"]["lo"] == pytest.approx(0.1682, abs=5e-4)
    assert a["hard"]["hi"] == pytest.approx(0.6873, abs=5e-4) and a["hard"]["method"] == "wilson"
    assert b["hard"]["mean"] == 0.7 and b["hard"]["lo"] == pytest.approx(0.3968, abs=5e-4)
    assert b["hard"]["hi"] == pytest.approx(0.8922, abs=5e-4)
    # soft of A: mean 0.44, sum of squared deviations 1.304, sd = sqrt(1.304 / 9) = 0.380643,
    # t(9) = 2.262157: half width 2.262157 * 0.380643 / sqrt(10) = 0.272296
    assert a["soft"]["method"] == "t" and a["soft"]["mean"] == pytest.approx(0.44)
    assert a["soft"]["lo"] == pytest.approx(0.167704, abs=1e-5) and a["soft"]["hi"] == pytest.approx(0.712296, abs=1e-5)
    paired = {(p["split"], p["metric"]): p for p in cmp["paired"]}
    hard = paired[("val", "hard")]
    lift = hard["lift"]
    assert (lift["wins"], lift["losses"], lift["ties"]) == (4, 1, 5)
    # Agresti-Min: half a count in each cell: only B 4.5, only A 1.5, m = 12; centre 3/12 = 0.25,
    # se = sqrt(6 - 3^2/12) / 12 = 0.190941, half width 1.959964 * 0.190941 = 0.374237
    i = lift["interval"]
    assert i["method"] == "agresti-min" and i["n"] == 10 and i["mean"] == pytest.approx(0.3)
    assert i["lo"] == pytest.approx(-0.124237, abs=1e-5) and i["hi"] == pytest.approx(0.624237, abs=1e-5)
    soft = paired[("val", "soft")]
    assert (soft["lift"]["wins"], soft["lift"]["losses"], soft["lift"]["ties"]) == (6, 1, 3)
    diffs = [b - a for a, b in zip(A_SOFT, B_SOFT)]
    expect = t_interval(diffs, bounds=(-1.0, 1.0))
    assert soft["lift"]["interval"]["method"] == "t" and soft["lift"]["interval"]["mean"] == pytest.approx(0.23)
    assert (soft["lift"]["interval"]["lo"], soft["lift"]["interval"]["hi"]) == pytest.approx((expect.lo, expect.hi))
    usage = {u["label"]: u for u in cmp["usage"]}
    assert usage["ra:v000"] == {**usage["ra:v000"], "rollouts": 12, "input_tokens": 1200, "output_tokens": 120,
                                "cost_usd": pytest.approx(0.012)}
    assert usage["rb:v001"]["input_tokens"] == 1200 and usage["rb:v001"]["cost_usd"] is None  # no price known
    assert "+Check units." in cmp["diffs"]["rb:v001"]
    assert any("rb:v001 has no rollouts on test" in n for n in cmp["notes"])
    assert cmp["warnings"] == []
    # the same comparison as a table and as Markdown
    r = cli("compare", "ra", "rb:best", "--split", "val", runs_dir=runs)
    assert r.exit_code == 0 and "no significant difference" in r.stdout and "4/1/5" in r.stdout
    assert "McNemar" not in r.stdout  # one paired test everywhere: the interval and its verdict
    r = cli("compare", "ra", "rb:best", "--split", "val", "--format", "markdown", runs_dir=runs)
    assert r.exit_code == 0
    assert "| val | rb:v001 | 10 | 4/1/5 | +0.300 [-0.124, +0.624] | no significant difference |" in r.stdout


def test_compare_flags_other_targets_runs_in_progress_and_changed_data(tmp_path):
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": f"t{i}", "question": f"q{i}?", "answer": str(i)} for i in range(20)])
    runs = hand_runs(tmp_path, target="anthropic:claude-haiku-4-5", status="running")
    build_run(runs, "rc", [SEED], {(0, "val"): list(zip(A_HARD, A_SOFT))}, data=data, data_hash="0000000000000000")
    r = cli("compare", "ra", "rb", "rc", "--split", "val", "--format", "json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    warnings = "\n".join(json.loads(r.stdout)["warnings"])
    assert "run rb is running" in warnings and "comparing the rollouts it has so far" in warnings
    assert "rb:v001 was scored with target model 'anthropic:claude-haiku-4-5', ra:v000 with 'openai:gpt-5-mini'" in warnings
    assert "the benchmark data of rc:v000 changed since it was scored (data hash 0000000000000000 then" in warnings


@pytest.mark.parametrize("args, message", [
    (["nope", "ra"], "no run 'nope'"),
    (["ra", "ra:v7"], "run ra has no version v007"),
    (["ra", "ra:latest"], "bad skill reference"),
    (["ra"], "at least two skills"),
    (["ra", "ra", "--split", "dev"], "unknown split 'dev'"),
    (["ra", "ra", "--format", "html"], "unknown format 'html'"),
    (["ra", "missing/SKILL.md"], "cannot read skill file"),
])
def test_compare_bad_input_is_one_line_and_exit_code_2(tmp_path, args, message):
    runs = hand_runs(tmp_path)
    r = cli("compare", *args, runs_dir=runs)
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# a real run --------------------------------------------------------------------------------------------
_TRAINED: dict[str, Path] = {}


def trained_run(tmp_path_factory) -> Path:
    """A folder with `runs/codes`, produced once per test session by `skillopt run` against the fake
    server, which stays up (its URL is in the run's config) so new rollouts can be scored later.
    Copy the folder before changing anything in it."""
    if "root" not in _TRAINED:
        from tests.test_train_e2e import Scripted, _run_args, code_tasks

        root = tmp_path_factory.mktemp("trained")
        data = write_jsonl(root / "codes.jsonl", code_tasks(16))
        srv = FakeModelServer(Scripted()).start()
        atexit.register(srv.stop)
        r = run_cli(_run_args(data, srv.openai_url, "codes"), cwd=root, env=cli_env(root))
        assert r.returncode == 0, r.stderr + r.stdout
        _TRAINED["root"] = root
    return _TRAINED["root"]


def copy_runs(tmp_path_factory, tmp_path: Path) -> Path:
    shutil.copytree(trained_run(tmp_path_factory) / "runs", tmp_path / "runs")
    return tmp_path / "runs"


def test_compare_seed_and_best_of_a_real_run(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    r = cli("compare", "codes:seed", "codes", "--format", "json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    cmp = json.loads(r.stdout)
    best = cmp["entries"][1]
    assert best["label"].startswith("codes:v") and best["origin"] == "step 2" and best["run_status"] == "finished"
    for split, n, hi in (("val", 8, 0.3244), ("test", 4, 0.4899)):
        s = {x["label"]: x for x in cmp["scores"] if x["split"] == split}
        assert s["codes:v000"]["hard"]["mean"] == 0.0 and s[best["label"]]["hard"]["mean"] == 1.0
        assert s["codes:v000"]["hard"]["hi"] == pytest.approx(hi, abs=1e-4)  # Wilson 0/n
        p = next(x for x in cmp["paired"] if x["split"] == split and x["metric"] == "hard")
        assert p["lift"]["wins"] == n and p["lift"]["interval"]["method"] == "agresti-min"
    assert cmp["warnings"] == [] and all(u["run_tokens"] > 0 for u in cmp["usage"])
    # one paired test: compare's test lift is the run summary's, with the same n, interval and words
    summary = json.loads((runs / "codes" / "summary.json").read_text())
    test = next(x for x in cmp["paired"] if x["split"] == "test" and x["metric"] == "hard")
    assert test["lift"]["interval"] == summary["test_delta"]  # 4 won, 0 lost: +0.168 to +1.000
    assert (test["lift"]["wins"], test["lift"]["losses"]) == (summary["test_wins"], summary["test_losses"]) == (4, 0)
    r = cli("compare", "codes:seed", "codes", "--split", "test", runs_dir=runs)
    assert r.exit_code == 0 and "+1.000 [+0.168, +1.000]" in r.stdout and "better" in r.stdout


def test_compare_scores_skill_files_reusing_cached_rollouts(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    same = tmp_path / "best.md"
    same.write_text((runs / "codes" / "best_skill.md").read_text())
    r = cli("compare", "codes:seed", str(same), "--format", "json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    e = json.loads(r.stdout)["entries"][1]
    assert (e["kind"], e["scored_new"], e["scored_cached"]) == ("file", 0, 12)  # val (8) + test (4), all reused
    edited = tmp_path / "edited.md"
    edited.write_text((runs / "codes" / "skills" / "v000.md").read_text() + "\nThink step by step.\n")
    r = cli("compare", "codes:best", str(edited), "--format", "json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    cmp = json.loads(r.stdout)
    assert cmp["entries"][1]["scored_new"] == 12  # scored now on val and test (an eval run per split)
    hard = {x["split"]: x for x in cmp["paired"] if x["metric"] == "hard"}
    assert hard["val"]["lift"]["losses"] == 8 and hard["test"]["lift"]["losses"] == 4
    r = cli("compare", "codes:best", str(edited), "--format", "json", runs_dir=runs)
    assert json.loads(r.stdout)["entries"][1]["scored_cached"] == 12  # the second time, nothing is paid
    r = cli("compare", str(same), str(edited), runs_dir=runs)
    assert r.exit_code == 2 and "pass --benchmark" in r.stderr


def test_eval_and_compare_score_a_skill_file_alike_from_the_same_rollouts(tmp_path_factory, tmp_path):
    """One scoring service: the rollouts `eval` paid for are the ones `compare` finds, by the same cache
    key (no new rollout), and both read the same n, score and interval from them."""
    import yaml

    runs = copy_runs(tmp_path_factory, tmp_path)
    cfg = yaml.safe_load((runs / "codes" / "config.yaml").read_text())
    edited = tmp_path / "edited.md"
    edited.write_text((runs / "codes" / "skills" / "v000.md").read_text() + "\nCheck the answer twice.\n")
    r = cli("eval", "--skill", str(edited), "--split", "test", "--benchmark", cfg["benchmark"], "--harness", "chat",
            "--target_model", cfg["target_model"], "--progress", "none", "--set", "splits.train=4",
            "--set", "splits.val=8", "--set", "splits.test=4", "--set", "models.retry_base_delay_s=0.01", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    assert "(0 cached" in r.stdout  # a skill file is scored afresh by eval
    (ev_run,) = [p for p in runs.iterdir() if p.name.startswith("eval-")]
    ev = json.loads((ev_run / "summary.json").read_text())["scores"]["seed"]["test"]
    assert f"hard {ev['hard']:.3f} (n={ev['n']})" in r.stdout and ev["n"] == 4
    r = cli("compare", "codes:seed", str(edited), "--split", "test", "--format", "json", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    cmp = json.loads(r.stdout)
    e = cmp["entries"][1]
    assert (e["scored_new"], e["scored_cached"]) == (0, 4)  # eval's rollouts, found by the run's cache key
    assert [p.name for p in runs.iterdir() if p.name.startswith("eval-")] == [ev_run.name]  # no new evaluation run
    row = next(s for s in cmp["scores"] if s["label"] == e["label"])
    assert (row["rollouts"], row["errors"], row["hard"]["mean"]) == (ev["n"], ev["errors"], ev["hard"])
    assert row["hard"] == wilson_interval(ev["hard"] * ev["n"], ev["n"]).model_dump()
    assert row["soft"]["mean"] == pytest.approx(ev["soft"])


def test_evaluate_reuses_a_train_result_kept_under_another_runs_folder(tmp_path_factory, tmp_path):
    """The Python API scores through the same service: a run version reuses its own run's rollouts (and
    their traces) by the cache key, wherever that run's folder is."""
    import skillopt

    runs = copy_runs(tmp_path_factory, tmp_path)
    summary = RunSummary.model_validate_json((runs / "codes" / "summary.json").read_text())
    run = skillopt.TrainResult("codes", runs / "codes", summary.status, summary,
                               Skill.load(runs / "codes" / "best_skill.md"))
    ev = skillopt.evaluate(run, split="test", runs_dir=tmp_path / "elsewhere", env={})
    assert (ev.cached, ev.score.n, ev.score.hard) == (4, 4, 1.0)
    assert ev.run_dir is not None and ev.run_dir.parent == (tmp_path / "elsewhere").resolve()
    assert all((ev.run_dir / r.trace_file).is_file() for r in ev.records if r.trace_file)
