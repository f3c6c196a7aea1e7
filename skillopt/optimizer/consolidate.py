"""Consolidate: rewrite the skill for concision within its token cap (gated like any candidate).

The optimizer never copies a protected passage: each is shown as a one-line placeholder
(`<<KEEP n>>`) and put back by code after the rewrite, where the placeholder stands, or where the
passage stood (the start or the end of the body) when the rewrite dropped it. Asked to copy the
passages themselves, the embedded 1.5B dropped the seed skill's answer-format block in every
epoch of a 3-epoch RTE run, so no consolidation ever reached its gate."""

from __future__ import annotations

import re

from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.types import ConsolidateReply
from skillopt.prompts import render
from skillopt.skill import Skill

KEEP = "<<KEEP {}>>"
KEEP_RE = re.compile(r"<<\s*KEEP\s*(\d+)\s*>>", re.IGNORECASE)


def hide_protected(skill: Skill) -> tuple[str, list[str]]:
    """The body with each protected passage (markers included) replaced by its placeholder, and the
    passages in order."""
    body, passages, at = "", [], 0
    for start, end in skill.protected_spans():
        passages.append(skill.body[start:end])
        body += skill.body[at:start] + KEEP.format(len(passages))
        at = end
    return body + skill.body[at:], passages


def restore_protected(text: str, passages: list[str], first: bool) -> str:
    """`text` with each placeholder replaced by its passage; a passage the rewrite dropped goes back at
    the end of the body (the first one at the start when `first`: it opened the body). A passage the
    rewrite copied whole stays once, its placeholder removed."""
    for n, passage in enumerate(passages, 1):
        mark = next((m for m in KEEP_RE.finditer(text) if int(m.group(1)) == n), None)
        if mark and passage.strip() not in text:
            text = text[: mark.start()] + passage + text[mark.end():]
    text = KEEP_RE.sub("", text)  # placeholders used, repeated or made up stand for nothing more
    for n, passage in enumerate(passages, 1):
        if passage.strip() not in text:
            text = f"{passage}\n\n{text.lstrip()}" if first and n == 1 else f"{text.rstrip()}\n\n{passage}\n"
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


async def consolidate(models: Models, spec: ModelSpec, skill: Skill, token_cap: int,
                      max_tokens: int | None = None) -> tuple[Skill | None, str]:
    """Return (candidate, note). None when the rewrite failed, changed nothing or is not shorter."""
    shown, passages = hide_protected(skill)
    prompt = render("consolidate.md.j2", body=shown, token_cap=token_cap,
                    keeps=[KEEP.format(n) for n in range(1, len(passages) + 1)])
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ConsolidateReply,
                                   role="optimizer", max_tokens=max_tokens)
    if isinstance(reply, StructuredFailure):
        return None, f"consolidation reply unreadable: {reply.error}"
    body = reply.body.strip()
    if not KEEP_RE.sub("", body).strip():
        return None, "consolidation returned an empty body"
    first = shown.lstrip().startswith(KEEP.format(1))  # the body opened with its first passage
    body = restore_protected(body, passages, first)
    if any(p not in body for p in passages):  # restore_protected puts every one back: a bug if not
        return None, "consolidation lost a protected passage; discarded"
    candidate = skill.with_body(body)
    if candidate.body.split() == skill.body.split():  # the same words: at most its spacing changed
        return None, "consolidation changed nothing"
    if candidate.tokens() >= skill.tokens() and skill.tokens() <= token_cap:
        return None, f"consolidation is not shorter ({skill.tokens()} -> {candidate.tokens()} tokens); discarded"
    return candidate, f"rewritten: {skill.tokens()} -> {candidate.tokens()} tokens"
