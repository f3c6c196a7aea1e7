"""Whether a protected region of the skill makes the target fail (engine/protected.py), through the
real CLI against the scripted fake server: the run says so, and never edits the region."""

from __future__ import annotations

import json

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import load, run_args, useless_reflection
from tests.test_train_e2e import code_tasks

MISLEADING = "Reply with the name of the file only."
SKILL = f"""---
name: task-solver
description: Find the code of an item.
---

# Solving tasks

Read the task, then give the code.

## Reply
<!-- skillopt:protected -->
{MISLEADING}
<!-- /skillopt:protected -->

## Answer format
<!-- skillopt:protected -->
End your reply with a last line of the form `Answer: <answer>`.
<!-- /skillopt:protected -->
"""


def target(req: FakeRequest) -> FakeReply:
    """The target follows MISLEADING when it reads it, and answers right without it; reflections are useless."""
    if "You improve a skill" in req.last_user_text:
        return useless_reflection()
    number = req.last_user_text.split("item ")[-1].split("?")[0]
    if MISLEADING in req.system:
        return FakeReply(text="Answer: solution.txt")
    return FakeReply(text=f"Answer: ZETA-{number}")


def _run(tmp_path, name: str, *more: str):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    (tmp_path / "SKILL.md").write_text(SKILL)
    with FakeModelServer(target) as srv:
        r = run_cli(run_args(data, srv.openai_url, name, "--skill", str(tmp_path / "SKILL.md"), "--set",
                             "train.consolidate=false", "--set", "train.demonstrations=false", "--set",
                             "train.rules_per_step=0", *more, epochs=1), tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    return r, tmp_path / "runs" / name


def test_a_protected_region_that_makes_the_target_fail_is_named_and_never_edited(tmp_path):
    r, run = _run(tmp_path, "named", "--set", "train.check_protected=true")
    summary = json.loads((run / "summary.json").read_text())
    misleading, answer_format = summary["protected"]
    assert misleading == {"step": 1, "text": MISLEADING, "tasks": 4, "failed": 4, "solved_without": 4,
                          "lost_without": 0, "likely_cause": True, "rollouts": 4}
    # the answer format is needed: without it the target still reads MISLEADING and fails as before
    assert answer_format["text"] == "End your reply with a last line of the form `Answer: <answer>`."
    assert answer_format["solved_without"] == 0 and not answer_format["likely_cause"]
    said = " ".join(r.stdout.split())
    assert (f'protected: without the protected text "{MISLEADING}" the target solved 4 of the 4 failed train '
            "tasks of step 1 and lost 0 of the 0 it solved: it may be what makes the target fail") in said
    assert "no sign that it makes the target fail" in said
    versions = load(run, "skills/index.jsonl")
    tried = [v for v in versions if v["status"] == "diagnostic"]
    assert [v["origin"] for v in tried] == ["step 1 protected check"] * 2
    assert MISLEADING in (run / "best_skill.md").read_text()  # the user's region, never edited
    # the views read a run with a diagnostic version; the report says what the check found
    for view in (["runs", "show", "named"], ["report", "named", "-o", str(tmp_path / "named.md")],
                 ["report", "named", "-o", str(tmp_path / "named.html")]):
        shown = run_cli(view, tmp_path, cli_env(tmp_path))
        assert shown.returncode == 0, shown.stderr
    assert "diagnostic" in run_cli(["runs", "show", "named"], tmp_path, cli_env(tmp_path)).stdout
    for report in ("named.md", "named.html"):
        text = " ".join((tmp_path / report).read_text().split())
        assert "What the run found besides its scores" in text, report
        assert f'without the protected text "{MISLEADING}" the target solved 4 of the 4 failed' in text.replace(
            "&#34;", '"').replace("&quot;", '"'), report


def test_no_region_is_tried_when_the_check_is_off_and_it_is_on_by_default(tmp_path):
    from skillopt.config import TrainConfig

    assert TrainConfig().check_protected
    _, run = _run(tmp_path, "off", "--set", "train.check_protected=false")
    assert json.loads((run / "summary.json").read_text())["protected"] == []
    assert all(v["status"] != "diagnostic" for v in load(run, "skills/index.jsonl"))
