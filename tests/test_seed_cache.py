"""The seed's val / test rollouts are kept across runs (engine/rollout_cache.py): a repeated run makes no
target call for them and reports the same seed scores; another model is a miss; a corrupt entry is
ignored with one warning; `train.seed_cache=false` turns the cache off. Real CLI, scripted fake server."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl

RULE = "Codes are ZETA- followed by the item number."
NOISE = "Be concise."


def script(req: FakeRequest) -> FakeReply:
    if "You improve a skill" in req.last_user_text:
        edit = {"op": "add", "anchor": "", "text": NOISE, "rationale": "style", "evidence": []}
        return FakeReply(text=json.dumps({"analysis": "a look", "edits": [edit]}))
    if req.model == "fake-opt":
        return FakeReply(text="Answer: unknown")
    m = re.search(r"item (\d+)", req.last_user_text)
    odd = m is not None and int(m.group(1)) % 2 == 1  # the seed solves the odd items: a score between 0 and 1
    return FakeReply(text=f"Answer: ZETA-{m.group(1)}" if odd else "Answer: unknown")


def seed_calls(srv: FakeModelServer, questions: set[str], model: str = "fake-target") -> int:
    """Target calls with the seed skill (no edit in its system prompt) on these task questions."""
    return sum(1 for c in srv.calls if c.model == model and NOISE not in c.system 
               and any(q in c.last_user_text for q in questions))


def run(tmp: Path, srv: FakeModelServer, data: Path, run_id: str, target: str = "fake-target",
        *more: str) -> dict:
    args = ["run", "--benchmark", str(data), "--harness", "chat",
            "--target_model", f"openai-compatible:{target}@{srv.openai_url}",
            "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
            "--run-id", run_id, "--epochs", "1", "--batch-size", "2", "--train-size", "2",
            "--val-size", "6", "--test-size", "4", "--concurrency", "2",
            "--set", "models.retry_base_delay_s=0.01", "--set", "train.max_reflections_per_step=1",
            "--set", "train.demonstrations=false", "--set", "train.merge=false",
            "--set", "train.ablations_per_step=0", *more]
    r = run_cli(args, cwd=tmp, env=cli_env(tmp, SKILLOPT_CACHE_DIR=str(tmp / "cache")))
    assert r.returncode == 0, r.stderr + r.stdout
    folder = tmp / "runs" / run_id
    return {"summary": json.loads((folder / "summary.json").read_text()), "out": r.stdout + r.stderr,
            "rollouts": [json.loads(x) for x in (folder / "rollouts.jsonl").read_text().splitlines()]}


def test_a_repeated_run_reuses_the_seed_rollouts(tmp_path):
    tasks = [{"id": f"item-{i:02d}", "question": f"What is the code of item {i}?", "answer": f"ZETA-{i}"}
             for i in range(12)]
    data = write_jsonl(tmp_path / "codes.jsonl", tasks)
    question = {t["id"]: t["question"] for t in tasks}
    with FakeModelServer(script) as srv:
        first = run(tmp_path, srv, data, "first")
        seeded = [r for r in first["rollouts"] if r["version"] == 0 and r["split"] in ("val", "test")]
        assert len(seeded) == 10
        asked = {question[r["task_id"]] for r in seeded}
        assert seed_calls(srv, asked) == 10
        srv.clear()

        second = run(tmp_path, srv, data, "second")
        assert seed_calls(srv, asked) == 0  # no target call for the seed's val and test rollouts
        assert second["summary"]["scores"]["seed"] == first["summary"]["scores"]["seed"]
        assert 0 < first["summary"]["scores"]["seed"]["val"]["hard"] < 1
        again = [r for r in second["rollouts"] if r["version"] == 0 and r["split"] in ("val", "test")]
        assert len(again) == 10 and all(r["input_tokens"] == 0 for r in again)  # this run paid nothing for them
        assert all((tmp_path / "runs" / "second" / r["trace_file"]).is_file() for r in again)
        assert "10 rollouts reused from an earlier run" in second["out"] and "train.seed_cache=false" in second["out"]
        # a remote server's replies are never kept across runs (models/replay.py): the optimizer is asked again,
        # and only the seed's val / test rollouts are reused
        assert any(c.model == "fake-opt" for c in srv.calls)
        assert all(r["input_tokens"] > 0 for r in second["rollouts"] if (r["version"], r["split"]) != (0, "val")
                   and (r["version"], r["split"]) != (0, "test"))

        entries = sorted((tmp_path / "cache" / "rollouts").rglob("*.json"))
        assert len(entries) == 10
        entries[0].write_text('{"format": 1, "record": {"key": ')  # torn
        third = run(tmp_path, srv, data, "third")
        assert seed_calls(srv, asked) == 1  # only the unreadable entry ran again
        assert third["out"].count("warning: the rollout cache") == 1
        srv.clear()

        run(tmp_path, srv, data, "other-model", "fake-target-2")  # another target model: a miss
        assert seed_calls(srv, asked, "fake-target-2") == 10
        srv.clear()

        run(tmp_path, srv, data, "off", "fake-target", "--set", "train.seed_cache=false")
        assert seed_calls(srv, asked) == 10
