"""Lessons from a contrast (optimizer/lessons.py): the optimizer reads a failed train reply beside the
teacher's reply that solved the same task and writes what the failure missed, one rule per lesson,
screened and gated like any edit."""

from __future__ import annotations

import json
import re
import threading

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_search import run_args, useless_reflection
from tests.test_train_e2e import code_tasks

LESSON = "A code is the word ZETA, a dash, then the number the item is called by."
ECHO = "A lesson must never name this task's people, places, quantities or answer."


class Contrast:
    """The target answers "unknown" unless its skill carries the convention (LESSON); the teacher (the
    optimizer asked a task) solves it, working first; asked to compare, the optimizer writes `lesson`."""

    def __init__(self, lesson: str = LESSON):
        self.lesson = lesson
        self.lock = threading.Lock()
        self.lesson_prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You improve a skill" in user:
            return useless_reflection()
        if "Compare the two replies" in user:
            with self.lock:
                self.lesson_prompts.append(user)
            return FakeReply(text=json.dumps({"missed": "it did not know how codes are written",
                                              "lesson": self.lesson}))
        m = re.search(r"item (\d+)", user)
        if req.model == "fake-opt" and m:
            return FakeReply(text=f"Step 1: item {m.group(1)} is numbered {m.group(1)}.\nAnswer: ZETA-{m.group(1)}")
        if "the word ZETA, a dash" in req.system and m:
            return FakeReply(text=f"Answer: ZETA-{m.group(1)}")
        return FakeReply(text="Answer: unknown")


def run_on_codes(tmp_path, script, name: str, *more: str):
    """A one-epoch run on 16 coded tasks with no rules and no worked example: (its folder, step 1's candidates)."""
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(16))
    with FakeModelServer(script) as srv:
        r = run_cli(run_args(data, srv.openai_url, name, "--set", "train.consolidate=false", "--set",
                             "train.rules_per_step=0", "--set", "train.demonstrations=false", *more, epochs=1),
                    tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / name
    return run, json.loads((run / "steps" / "0001" / "candidates.json").read_text())


def test_a_lesson_written_from_a_failure_beside_its_solution_is_gated_and_kept(tmp_path):
    """No worked example: the lesson alone carries the convention, and the target that reads it
    solves val and test, so the gate keeps it; the prompt held the failed reply, the scorer's
    feedback and the teacher's reply that the scorer accepted."""
    script = Contrast()
    run, cands = run_on_codes(tmp_path, script, "lesson", "--set", "train.lessons_per_step=2")
    assert len(script.lesson_prompts) == 2  # one per solved failed task, at most lessons_per_step
    prompt = script.lesson_prompts[0]
    failed = prompt.split("# The failed reply (end)")[1].split("# A reply that was accepted")[0]
    assert "Answer: unknown" in failed and "Scorer: expected 'ZETA-" in failed
    assert re.search(r"# A reply that was accepted\nStep 1: item (\d+) is numbered \1\.\nAnswer: ZETA-\1", prompt)
    lessons = [c for c in cands if c["origin"] == "lesson"]
    assert lessons and lessons[0]["edits"][0]["text"] == f"## Rules\n\n- {LESSON}"
    assert lessons[0]["sources"][0] in lessons[0]["rationale"]  # screened first on the task it came from
    assert any(c["status"] == "accepted" for c in lessons), lessons
    # the same lesson twice in a step is one candidate
    assert len(lessons) == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0
    assert LESSON in (run / "best_skill.md").read_text()


def test_a_lesson_that_echoes_its_prompt_is_not_proposed_and_none_are_asked_by_default(tmp_path):
    script = Contrast(lesson=ECHO)
    run, cands = run_on_codes(tmp_path, script, "echo", "--set", "train.lessons_per_step=1")
    assert len(script.lesson_prompts) == 1
    assert all(c["origin"] != "lesson" for c in cands)
    notes = json.loads((run / "steps" / "0001" / "reflections.json").read_text())
    assert any("restates the prompt's own instructions" in (n["error"] or "") for n in notes), notes

    off = Contrast()
    _, cands = run_on_codes(tmp_path, off, "off")  # train.lessons_per_step defaults to 0
    assert not off.lesson_prompts and all(c["origin"] != "lesson" for c in cands)


def test_a_lesson_keeps_the_sentences_that_hold_for_other_tasks():
    """The 1.5B's first lesson on GSM8K: a general method, then the same said of its own task."""
    from skillopt.optimizer.lessons import general_sentences

    task = "Anthony walks 12 miles a day. Mia walks 3 miles an hour. How far does Anthony walk in 5 days?"
    written = ("Always convert all quantities to the same unit before combining them. In this case, convert 12 "
               "miles a day to miles an hour. Anthony walks less than Mia. When a range runs from a to b, count "
               "b - a + 1 numbers.")
    assert general_sentences(written, task) == ("Always convert all quantities to the same unit before combining "
                                                "them. When a range runs from a to b, count b - a + 1 numbers.")
    assert general_sentences(ECHO, task) == ""
    # the 1.5B on MATH prealgebra: a platitude, then the task retold; then one cut by the length cap
    assert general_sentences("When answering math word problems, read the problem carefully. In this case, the "
                             "problem states that the witches shake hands with each of the sorcerers.", task) == \
        "When answering math word problems, read the problem carefully."
    assert general_sentences("To solve this problem, the failed reply should have divided the distance by the "
                             "speed.", task) == ""
    assert general_sentences("To solve this problem, you need to divide the total distance by the speed. The failed "
                             "reply divided by the days.", task) == "You need to divide the total distance by the speed."
    assert general_sentences("Count the terms as (last - first) / step, plus one. This formula is crucial for the "
                             "tot", task) == "Count the terms as (last - first) / step, plus one."
