"""The fixed prompt each agent harness sends with every model call: its system prompt and tool
definitions, measured on the first request of one rollout of the real agent (Claude Code, Codex,
mini-swe-agent) against the scripted fake server (no model, no key), with a one-line skill and a
one-line task. Tokens are characters / 4 (`skill.CHARS_PER_TOKEN`, as the skill token cap counts
them), about right for English prose and JSON with common tokenizers.

`skillopt run --dry-run` prices one rollout from these numbers (`skillopt.engine.estimate`).

    python perf/agent_prompts.py      # writes perf/results/agent_prompts.json (~1 minute)
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import RESULTS, machine, write_json  # noqa: E402
from skillopt.benchmarks.base import Task  # noqa: E402
from skillopt.harness.base import Limits  # noqa: E402
from skillopt.harness.registry import HarnessContext, make_harness  # noqa: E402
from skillopt.harness.workspace import write_skill  # noqa: E402
from skillopt.models import Models, ProviderEnv  # noqa: E402
from skillopt.models.spec import parse_model_spec  # noqa: E402
from skillopt.skill import CHARS_PER_TOKEN, Skill  # noqa: E402
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest  # noqa: E402

SKILL = Skill.parse("---\nname: probe\ndescription: Use this skill for arithmetic.\n---\n# Probe\nAnswer briefly.\n")
TASK = Task(id="probe", prompt="What is 6*7?")
SPECS = {"claude-code": "anthropic:fake@{base}", "codex": "vllm:fake@{openai}",
         "mini-swe-agent": "openai-compatible:fake@{openai}"}


async def first_request(harness_name: str) -> FakeRequest:
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> FakeReply:
        if req.tools:
            seen.append(req)
        if harness_name == "mini-swe-agent":  # it ends only on its submit command
            from tests.fakes.agent_scripts import shell_call

            return FakeReply(text="Done.", tool_calls=(shell_call(req, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),))
        return FakeReply(text="Answer: 42")

    ctx: dict = {"models": Models(env=ProviderEnv()), "options": {"mode": "cli"} if harness_name != "mini-swe-agent" else {}}
    if harness_name == "mini-swe-agent":
        from skillopt.sandbox import Relay
        from skillopt.sandbox.bwrap import Bubblewrap, check_bwrap

        relay = Relay().__enter__()
        ctx.update(sandbox=Bubblewrap(check_bwrap()), relay=relay)
    harness = make_harness(harness_name, HarnessContext(**ctx))
    with tempfile.TemporaryDirectory() as tmp, FakeModelServer(script) as srv:
        ws = Path(tmp)
        write_skill(ws, SKILL, harness.skill_dir)
        target = parse_model_spec(SPECS[harness_name].format(base=srv.base_url, openai=srv.openai_url))
        r = await harness.run(TASK, SKILL, ws, target, Limits(timeout_s=120))
    if not seen:
        raise SystemExit(f"{harness_name}: no model request with tools ({r.error})")
    return seen[0]


def row(harness_name: str, req: FakeRequest) -> dict:
    tools = json.dumps(req.body.get("tools", []))
    messages = sum(len(m.text) for m in req.messages)
    total = len(json.dumps(req.body))
    return {"harness": harness_name, "system_chars": len(req.system), "tools": len(req.tools), "tools_chars": len(tools),
            "messages_chars": messages, "request_chars": total,
            # what every call of every rollout sends besides the task and the skill: the system prompt, the
            # tools, and the harness's own wrapping of the first user message (mini-swe-agent's instance template)
            "fixed_prompt_tokens": -(-(len(req.system) + len(tools) + messages - len(TASK.prompt)) // CHARS_PER_TOKEN)}


def main() -> None:
    rows = [row(h, asyncio.run(first_request(h))) for h in SPECS]
    write_json(RESULTS / "agent_prompts.json", {
        "what": "the fixed prompt (system prompt, tool definitions, the harness's wrapping of the task) of each "
                "agent harness's first model call, with a one-line skill and task; tokens = characters / 4",
        "command": "python perf/agent_prompts.py", "machine": machine(), "rows": rows})
    for r in rows:
        print(f"{r['harness']}: system {r['system_chars']} chars, {r['tools']} tools {r['tools_chars']} chars, "
              f"messages {r['messages_chars']} chars "
              f"-> ~{r['fixed_prompt_tokens']} tokens")


if __name__ == "__main__":
    main()
