"""Reflect: one optimizer call over a minibatch of scored rollouts -> proposed edits."""

from __future__ import annotations

from collections.abc import Sequence

from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.types import Reflection, ReflectionReply, ScoredRollout
from skillopt.prompts import render
from skillopt.skill import Skill


def make_minibatches(scored: Sequence[ScoredRollout], size: int, successes_per_batch: int,
                     max_batches: int) -> list[tuple[list[ScoredRollout], list[ScoredRollout]]]:
    """Group failures into minibatches of `size`, each with a few successes for contrast."""
    failures = [r for r in scored if r.failed]
    wins = [r for r in scored if not r.failed]
    batches = []
    for i in range(0, len(failures), max(1, size)):
        chunk = failures[i : i + size]
        j = len(batches) * successes_per_batch
        batches.append((chunk, wins[j : j + successes_per_batch]))
        if len(batches) >= max_batches:
            break
    return batches


async def reflect(models: Models, spec: ModelSpec, skill: Skill, failures: list[ScoredRollout],
                  successes: list[ScoredRollout], rejected: Sequence[Edit], max_edits: int,
                  max_tokens: int | None = None, temperature: float | None = None) -> Reflection:
    prompt = render("reflect.md.j2", skill_text=skill.render(), failures=failures, successes=successes,
                    rejected=list(rejected)[-10:], max_edits=max_edits)
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ReflectionReply,
                                   role="optimizer", max_tokens=max_tokens, temperature=temperature)
    ids = [r.task_id for r in failures + successes]
    if isinstance(reply, StructuredFailure):
        return Reflection(minibatch=ids, error=reply.error)
    edits = [e.to_edit() for e in reply.edits if e.op == "delete" or e.text.strip()]
    return Reflection(minibatch=ids, edits=edits[: max(1, max_edits)], analysis=reply.analysis)
