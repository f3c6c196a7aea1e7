"""Description tuning: propose a new front-matter description when the agent did not load the skill.

For Claude Code and Codex the description decides whether the agent loads the skill at all (the way
Anthropic's skill-creator tunes descriptions for triggering). When `train.description` is on, each
step whose train rollouts include some where the agent did not load the skill makes one optimizer
call: it sees the description, the start of the body, and the prompts of the tasks where the agent
loaded the skill and where it did not, and writes a new description. The candidate is one edit
(`Edit(part="description")`) and goes through the same leakage check, screen and gate as any
other; the gate may count loading alongside the score (`gate.trigger_weight`).
"""

from __future__ import annotations

from pydantic import BaseModel

from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.prompts import render
from skillopt.record import Candidate, Reflection
from skillopt.skill import DESCRIPTION_MAX

MAX_SHOWN = 6  # tasks of each kind shown to the optimizer


class DescriptionReply(BaseModel):
    analysis: str = ""
    description: str


class DescriptionProposer:
    name = "description"

    def __init__(self, models: Models, spec: ModelSpec, max_tokens: int | None = None,
                 temperature: float | None = None):
        self.models, self.spec, self.max_tokens, self.temperature = models, spec, max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        missed = [r for r in state.scored if r.skill_used is False][:MAX_SHOWN]
        loaded = [r for r in state.scored if r.skill_used is True][:MAX_SHOWN]
        if not missed:  # every rollout loaded it (or the skill is always in the prompt): nothing to fix
            return Proposal()
        self.models.meter.check()
        skill = state.skill
        prompt = render("describe.md.j2", skill_name=skill.name, description=skill.description, body=skill.body[:1500],
                        missed=missed, loaded=loaded, max_chars=min(500, DESCRIPTION_MAX))
        schema = DescriptionReply.model_json_schema()
        schema["properties"]["description"]["maxLength"] = min(500, DESCRIPTION_MAX)
        schema["properties"]["analysis"]["maxLength"] = 300
        reply = await self.models.chat_json(self.spec, [Message(role="user", content=prompt)], DescriptionReply,
                                            role="optimizer", max_tokens=self.max_tokens,
                                            temperature=self.temperature, json_schema=schema)
        ids = [r.task_id for r in missed + loaded]
        if isinstance(reply, StructuredFailure):
            return Proposal(reflections=[Reflection(minibatch=ids, error=f"description: {reply.error}",
                                                    transient=reply.transient)])
        text = " ".join(reply.description.split())
        if not text or text == skill.description:
            return Proposal()
        edit = Edit(op="replace", part="description", text=text, rationale=reply.analysis[:200],
                    evidence=[r.task_id for r in missed])
        return Proposal([Candidate(id="", step=state.step, origin="description", parent=state.version, edits=[edit],
                                   rationale=reply.analysis, sources=ids)])
