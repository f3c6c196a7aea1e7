"""A second look at an edit its screen turned down (optimizer/revise.py, `train.revisions_per_step`):
the optimizer reads the target's replies under the edit beside its replies without it and writes the
edit again, as a candidate of its own, through the real CLI against the scripted fake server."""

from __future__ import annotations

import json
import re
import threading

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.test_lessons import run_on_codes

VAGUE = "Always write the code in the right format."  # the target reads it and replies as before
REVISED = "Every code is the word ZETA in capitals, a dash, then the number the item is called by."


class SecondLook:
    """Reflections write VAGUE, which changes no reply, so the screen turns it down; asked to revise it,
    the optimizer writes `revision` (by default the convention the target needs)."""

    def __init__(self, revision: str = REVISED):
        self.revision = revision
        self.lock = threading.Lock()
        self.revise_prompts: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply:
        user = req.last_user_text
        if "You revise an edit of a skill" in user:
            with self.lock:
                self.revise_prompts.append(user)
            return _edit("the agent ignored the edit: its codes are lower case", self.revision)
        if "You improve a skill" in user:
            return _edit("the codes were wrong", VAGUE)
        m = re.search(r"item (\d+)", user)
        number = m.group(1) if m else "0"
        if "the word ZETA in capitals" in req.system:
            return FakeReply(text=f"Answer: ZETA-{number}")
        return FakeReply(text=f"Answer: zeta {number}")


def _edit(analysis: str, text: str) -> FakeReply:
    return FakeReply(text=json.dumps({"analysis": analysis, "edits": [
        {"op": "add", "anchor": "", "text": text, "rationale": "format", "evidence": []}]}))


def test_an_edit_the_screen_turned_down_is_written_again_from_the_replies_under_it_and_kept(tmp_path):
    """The reflection's edit changes no reply, so its screen turns it down. Shown each reply under the
    edit beside the reply without it and the expected answer, the optimizer writes the convention; the
    revision is screened on the same tasks, gated and kept, and the test split improves."""
    script = SecondLook()
    run, cands = run_on_codes(tmp_path, script, "revise", "--set", "train.revisions_per_step=1")
    tried = next(c for c in cands if c["origin"] == "reflection")
    assert tried["status"] == "screened-out", tried
    assert len(script.revise_prompts) == 1
    prompt = script.revise_prompts[0]
    assert VAGUE in prompt.split("# The edit that was tried")[1].split("# The tasks")[0]
    task = prompt.split("# The tasks it was tried on")[1]
    assert "(4; solved 0 with the edit, 0 without)" in task
    # the replies did not change: said by code, and each shown once
    assert "the same reply as without it on all 4 tasks: it did not act on the edit" in task
    assert re.search(r"Output with the edit \(the same as without it\):\n```\nAnswer: zeta (\d+)\n```\n"
                     r"Expected answer: ZETA-\1", task), task[:800]
    assert "Output without the edit" not in task
    revision = next(c for c in cands if c["origin"] == "revision")
    assert revision["id"] == f"{tried['id']}-r1" and revision["rationale"].startswith(f"revises {tried['id']}: ")
    assert revision["sources"] == tried["screen"]["tasks"]  # screened on the same tasks
    assert revision["screen"]["candidate"] == [1.0] * 4 and revision["status"] == "accepted", revision
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["seed"]["test"]["hard"] == 0.0 and summary["scores"]["best"]["test"]["hard"] == 1.0


def test_a_revision_that_says_the_tried_edit_again_is_drawn_once_more_never_tried_and_none_is_asked_by_default(
        tmp_path):
    script = SecondLook(revision=VAGUE)
    run, cands = run_on_codes(tmp_path, script, "again", "--set", "train.revisions_per_step=1")
    assert len(script.revise_prompts) == 2  # the first draw was not fit to try: one more, then no more
    revisions = [c for c in cands if c["origin"] == "revision"]
    assert [c["id"][-3:] for c in revisions] == ["-r1", "-r2"]
    for revision in revisions:
        assert revision["status"] == "duplicate" and "tried and rejected" in revision["note"], revision
        assert revision["version"] is None  # no skill version, no rollout
    calls = json.loads((run / "steps" / "0001" / "reflections.json").read_text())
    assert sum("the agent ignored the edit" in c["analysis"] for c in calls) == 2  # both draws recorded

    off = SecondLook()
    _, cands = run_on_codes(tmp_path, off, "off")  # train.revisions_per_step defaults to 0
    assert not off.revise_prompts and all(c["origin"] != "revision" for c in cands)


async def test_a_rule_is_shown_as_tried_without_the_answers_it_quoted_and_the_reply_is_read_as_edits():
    """On Jeopardy (development split seed 2) the 1.5B, shown a tried rule with its quoted answers
    ("For example: 'Pakistan & India', not ..."), wrote them into its revision, which the leakage check
    then dropped. The tasks show those answers already; the tried rule is shown by its own words."""
    from skillopt.edits import Edit
    from skillopt.models import Meter, Models, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.optimizer.revise import revise
    from skillopt.optimizer.types import ScoredRollout
    from skillopt.skill import Skill

    seen: list[str] = []

    def script(req: FakeRequest) -> FakeReply:
        seen.append(req.last_user_text)
        return _edit("it kept the order of the question", "Name the place before the person.")

    skill = Skill.parse("---\nname: qa\ndescription: Answer.\n---\n\nRead the task, then answer.\n")
    rule = Edit(op="add", text="## Rules\n\n- Name two answers in the order they happened. For example: "
                               "'Pakistan & India', not 'India & Pakistan'.")
    solved = ScoredRollout(task_id="t2", prompt="Who?", reference="Ann", output="Answer: Ann", hard=1, soft=1,
                           feedback="correct", summary="")
    failed = ScoredRollout(task_id="t1", prompt="Which two?", reference="Pakistan & India",
                           output="Answer: India & Pakistan", hard=0, soft=0, feedback="wrong", summary="")
    changed = failed.model_copy(update={"output": "Answer: India, then Pakistan"})
    with FakeModelServer(script) as srv:
        models = Models(env=ProviderEnv(), meter=Meter())
        out = await revise(models, parse_model_spec(f"openai-compatible:opt@{srv.openai_url}"), skill, [rule],
                           [(changed, failed), (solved, solved)], [False, True], rejected=[], max_edits=1)
    (prompt,) = seen
    tried = prompt.split("# The edit that was tried (it did not help)")[1].split("Compare the outputs")[0]
    assert "Name two answers in the order they happened." in tried and "Pakistan" not in tried
    assert "(2; solved 1 with the edit, 1 without)" in prompt and "Expected answer: Pakistan & India" in prompt
    assert ("the agent's reply changed on 1 of 2 tasks: 0 became right, 0 became wrong, 1 scored as before. "
            "The agent acted on the edit, and what it asked for is not what") in prompt
    assert "Output with the edit:\n```\nAnswer: India, then Pakistan\n```\nOutput without the edit:" in prompt
    assert out.error is None and [e.text for e in out.edits] == ["Name the place before the person."]


async def test_an_agent_whose_last_words_stayed_and_whose_patch_changed_acted_on_the_edit():
    """The screen decides whether a reply changed (an agent's patch when it has one); the revision's
    verdict reads the screen's decision. Deciding again on the last words alone said "it did not act on
    the edit" of an agent that wrote another patch and ended with the same "Done."."""
    from skillopt.engine.gating import Side, screen
    from skillopt.optimizer.revise import verdict
    from skillopt.optimizer.types import ScoredRollout
    from skillopt.skill import Skill
    from skillopt.store.schema import RolloutRecord

    def record(task: str, patch: str, hard: float) -> RolloutRecord:
        return RolloutRecord(key=f"{task}-{patch}", task_id=task, split="train", version=0, skill_sha="x",
                             harness="mini-swe-agent", model="m", hard=hard, output="Done.", patch=patch)

    class Ran:  # the candidate's rollouts, as the runner returns them: the agent ran elsewhere
        executed = 0

        async def run_many(self, skill, version, tasks, split, trials, first_trial=0):
            return [record(t.id, "+fixed" if t.id == "t1" else "+same", 0.0) for t in tasks]

    from skillopt.benchmarks.base import Task
    tasks = [Task(id=t, prompt="Fix it.") for t in ("t1", "t2")]
    incumbent = {t: record(t, "+same", 0.0) for t in ("t1", "t2")}
    done = await screen(Ran(), Side(1, Skill.parse("---\nname: s\ndescription: d\n---\n\nx\n")), tasks,
                        incumbent, "hard")
    assert done.same == [False, True] and done.result.changed == 1
    scored = [(ScoredRollout(task_id=b.task_id, prompt="Fix it.", reference="", output=b.output, hard=0, soft=0,
                             feedback="", summary=""),) * 2 for _, b in done.pairs]
    assert verdict(scored, done.same).startswith("With the edit the agent's reply changed on 1 of 2 tasks")


def test_an_agent_s_reply_is_shown_with_its_last_tool_calls_each_cut():
    from skillopt.optimizer.revise import COMMAND_CHARS, STEPS, shown
    from skillopt.optimizer.types import ScoredRollout
    from skillopt.prompts import render
    from skillopt.traces.trajectory import Trajectory, TrajectoryStep

    steps = [TrajectoryStep(index=i, command=f"cat file{i}.py " + "x" * 300, exit=0) for i in range(1, 21)]
    agent = ScoredRollout(task_id="t1", prompt="Fix it.", reference="", output="Done.", hard=0, soft=0,
                          feedback="2 tests failed", summary="", trajectory=Trajectory(steps=steps, calls=20,
                                                                                       stop="said done"))
    cut = shown(agent)
    assert [s.index for s in cut.trajectory.steps] == list(range(21 - STEPS, 21))
    assert all(len(s.command) == COMMAND_CHARS for s in cut.trajectory.steps)
    prompt = render("revise.md.j2", skill_text="x", tried=[], pairs=[(cut, cut, False)], verdict="", solved_with=0,
                    solved_without=0, rejected=[], max_edits=1, labels=[], anchors=[""], editable=[])
    assert f"What the agent did with the edit: {21 - STEPS}. cat file{21 - STEPS}.py" in prompt
    assert "(exit 0). Stop: said done" in prompt and "What the agent did without it: " in prompt
