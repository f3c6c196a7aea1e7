"""Consolidate: rewrite the skill for concision within its token cap (gated like any candidate)."""

from __future__ import annotations

from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.types import ConsolidateReply
from skillopt.prompts import render
from skillopt.skill import Skill


async def consolidate(models: Models, spec: ModelSpec, skill: Skill, token_cap: int,
                      max_tokens: int | None = None) -> tuple[Skill | None, str]:
    """Return (candidate, note). None when the rewrite failed or broke a protected region."""
    protected = [skill.body[a:b] for a, b in skill.protected_spans()]
    prompt = render("consolidate.md.j2", body=skill.body, token_cap=token_cap, protected=protected)
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ConsolidateReply,
                                   role="optimizer", max_tokens=max_tokens)
    if isinstance(reply, StructuredFailure):
        return None, f"consolidation reply unreadable: {reply.error}"
    body = reply.body.strip()
    if not body:
        return None, "consolidation returned an empty body"
    missing = [p for p in protected if p.strip() not in body]
    if missing:
        return None, f"consolidation dropped {len(missing)} protected passage(s); discarded"
    candidate = skill.with_body(body)
    if candidate.sha == skill.sha:
        return None, "consolidation changed nothing"
    if candidate.tokens() >= skill.tokens() and skill.tokens() <= token_cap:
        return None, f"consolidation is not shorter ({skill.tokens()} -> {candidate.tokens()} tokens); discarded"
    return candidate, f"rewritten: {skill.tokens()} -> {candidate.tokens()} tokens"
