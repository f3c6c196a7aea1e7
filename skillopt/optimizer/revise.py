"""A second look at an edit its screen turned down: the optimizer reads what the target wrote under it.

The screen (engine/gating.py) tries a candidate on the train tasks it was written for. When it scores
no more there, the edit is usually dropped for good. But the rollouts the screen paid for say why:
the target ignored the edit (its reply did not change), followed it and still missed (the edit asked
for the wrong thing), or followed half of it. A proposer writing from the failures alone never sees
that; here the optimizer is shown the edit, and for each of its tasks the reply with the edit beside
the reply without it, the expected answer and the scorer's feedback, and writes the edit again.

The revision is a candidate like any other (origin `revision`): it must say something in words and
something new (not the tried edit again, `engine.candidates.something_new`), pass the leakage check,
then the screen on the same tasks, then the gate. GEPA's reflective mutation reads a candidate's
minibatch outcomes the same way; the difference here is that it is asked only of an edit that was
screened out, with the failed attempt beside the one before it.
"""

from __future__ import annotations

from collections.abc import Sequence

from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.reflect import anchor_choices, reply_schema
from skillopt.optimizer.rules import split_quotes
from skillopt.optimizer.types import ReflectionReply, ScoredRollout
from skillopt.prompts import render
from skillopt.record import Reflection
from skillopt.skill import Skill

# origins whose edits are the optimizer's own words, and so worth a second draw from their screen
REVISABLE = ("reflection", "rules", "lesson", "trajectory-reflection")
PROMPT_CHARS = 800  # a task's head, as shown: the pairs are twice the replies of a reflection's minibatch
OUTPUT_CHARS = 700  # each reply's tail
STEPS, COMMAND_CHARS = 12, 120  # an agent's last tool calls shown, and each one's command
# draws of one revision at most: a draw that is not fit to try (the tried edit again, a task's text copied,
# no edit that applies) is drawn again, warmer and with another seed, as the rules proposer does
REVISION_DRAWS = 2


def shown(r: ScoredRollout) -> ScoredRollout:
    """`r` cut to what the revision prompt shows of it: an agent's rollout with its last tool calls, each
    command cut, so the prompt says whether the agent acted on the edit, not only what it said last."""
    update: dict = {"prompt": r.prompt[:PROMPT_CHARS], "output": r.output[-OUTPUT_CHARS:]}
    if r.trajectory is not None:
        steps = [s.model_copy(update={"command": s.command[:COMMAND_CHARS]}) for s in r.trajectory.steps[-STEPS:]]
        update["trajectory"] = r.trajectory.model_copy(update={"steps": steps})
    return r.model_copy(update=update)


def verdict(pairs: Sequence[tuple[ScoredRollout, ScoredRollout]], same: Sequence[bool]) -> str:
    """What the screen showed, counted by code: whether the agent acted on the edit at all, and what
    became of the replies it changed. The 1.5B, asked to read that off the replies, wrote that the
    agent "provided correct answers with the edit" of tasks it failed on both sides (Natural Questions,
    development split seed 2)."""
    n, changed = len(pairs), [p for p, s in zip(pairs, same) if not s]
    if not changed:
        return (f"With the edit the agent wrote the same reply as without it on all {n} tasks: it did not act on "
                "the edit. Say what it must do so that it cannot be missed, or ask for something else.")
    fixed = sum(a.hard > b.hard for a, b in changed)
    broke = sum(a.hard < b.hard for a, b in changed)
    return (f"With the edit the agent's reply changed on {len(changed)} of {n} tasks: {fixed} became right, "
            f"{broke} became wrong, {len(changed) - fixed - broke} scored as before. "
            + ("The agent acted on the edit, and what it asked for is not what the expected answers need."
               if not fixed else "The edit helped some tasks and not enough of them."))


async def revise(models: Models, spec: ModelSpec, skill: Skill, tried: Sequence[Edit],
                 pairs: Sequence[tuple[ScoredRollout, ScoredRollout]], same: Sequence[bool], rejected: Sequence[str],
                 max_edits: int, max_tokens: int | None = None, temperature: float | None = None,
                 labels: Sequence[str] = (), retries: int = 2, seed: int | None = None) -> Reflection:
    """One optimizer call: the `tried` edits of `skill` (the incumbent, without them), and for each
    task of their screen the reply (with the edits, without them); `same`: of each pair, whether the
    screen found the reply unchanged (it compares an agent's patch, not only its last words). A call that failed for
    infrastructure reasons is tried again (up to `retries` times), a reply that could not be read
    is not. `rejected`: texts of edits tried and turned down (the run's ledger); `seed`: another draw."""
    # a rule as tried, without the answers it quoted: the tasks show them, and quoted again they were copied
    tried = [e.model_copy(update={"text": split_quotes(e.text)[0].strip()}) for e in tried]
    prompt = render("revise.md.j2", skill_text=skill.render(), tried=tried,
                    pairs=[(shown(a), shown(b), s) for (a, b), s in zip(pairs, same)], verdict=verdict(pairs, same),
                    solved_with=sum(not a.failed for a, _ in pairs), solved_without=sum(not b.failed for _, b in pairs),
                    rejected=list(rejected)[-8:], max_edits=max_edits, labels=list(labels),
                    anchors=anchor_choices(skill), editable=anchor_choices(skill, editable=True))
    ids = [a.task_id for a, _ in pairs]
    for _ in range(retries + 1):
        reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ReflectionReply,
                                       role="optimizer", max_tokens=max_tokens, temperature=temperature,
                                       json_schema=reply_schema(skill, max_edits), seed=seed)
        if not (isinstance(reply, StructuredFailure) and reply.transient):
            break
    if isinstance(reply, StructuredFailure):
        return Reflection(minibatch=ids, error=reply.error, transient=reply.transient)
    edits = [e.to_edit() for e in reply.edits if e.op == "delete" or e.text.strip()]
    return Reflection(minibatch=ids, edits=edits[: max(1, max_edits)], analysis=reply.analysis)
