"""The fixed prompt each agent harness sends with every model call: its system prompt and tool
definitions, measured on the first request of one rollout of the real agent (Claude Code, Codex,
mini-swe-agent) against the scripted fake server (no model, no key), with a one-line skill and a
one-line task. Tokens are characters / 4 (`skill.CHARS_PER_TOKEN`, as the skill token cap counts
them), about right for English prose and JSON with common tokenizers.

`skillopt run --dry-run` prices one rollout from these numbers (`skillopt.engine.estimate`).

`--reuse MODEL` also measures what the embedded server's prompt cache saves on them: per harness, the
requests of two rollouts are captured against the scripted server (rollout A's first two calls, the
second carrying a tool result; rollout B's first call, another task in another workspace, as two
rollouts of a run are, in the same folder: a run's lanes keep their paths), and B's first call once more
in another folder, then sent in that order to the embedded model's server (one slot, replies of one
token): the first pays the whole prompt; A's second call shows the reuse across turns, B's the reuse
across rollouts of one lane, and B's in another folder what is reused when the path differs. Each says
its prompt tokens, how many the server took from its cache (llama.cpp's `timings`) and its wall.

    python perf/agent_prompts.py                                   # ~1 minute
    python perf/agent_prompts.py --reuse qwen2.5-coder-1.5b        # + about 6 minutes per harness on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.common import LOOPBACK, RESULTS, machine, write_json  # noqa: E402
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
OTHER = Task(id="probe-2", prompt="What is 9*8?")
SPECS = {"claude-code": "anthropic:fake@{base}", "codex": "vllm:fake@{openai}",
         "mini-swe-agent": "openai-compatible:fake@{openai}"}


async def requests_of(harness_name: str, task: Task = TASK, turns: int = 1, ws: Path | None = None) -> list[FakeRequest]:
    """The first `turns` main-loop requests (those offering tools) of one rollout of the real agent on
    `task`, in the empty folder `ws` (default: a fresh temporary one); before the last one, each is
    answered with a shell call."""
    from tests.fakes.agent_scripts import shell_call

    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> FakeReply:
        if req.tools:
            seen.append(req)
            if len(seen) < turns:
                return FakeReply(text="Let me look.", tool_calls=(shell_call(req, "ls"),))
        if harness_name == "mini-swe-agent":  # it ends only on its submit command
            return FakeReply(text="Done.", tool_calls=(shell_call(req, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),))
        return FakeReply(text="Answer: 42")

    ctx: dict = {"models": Models(env=ProviderEnv()), "options": {"mode": "cli"} if harness_name != "mini-swe-agent" else {}}
    with contextlib.ExitStack() as stack:
        if harness_name == "mini-swe-agent":
            from skillopt.sandbox import Relay
            from skillopt.sandbox.bwrap import Bubblewrap, check_bwrap

            ctx.update(sandbox=Bubblewrap(check_bwrap()), relay=stack.enter_context(Relay()))
        harness = make_harness(harness_name, HarnessContext(**ctx))
        srv = stack.enter_context(FakeModelServer(script))
        ws = ws or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        write_skill(ws, SKILL, harness.skill_dir)
        target = parse_model_spec(SPECS[harness_name].format(base=srv.base_url, openai=srv.openai_url))
        r = await harness.run(task, SKILL, ws, target, Limits(timeout_s=120))
    if len(seen) < turns:
        raise SystemExit(f"{harness_name}: {len(seen)} model requests with tools, not {turns} ({r.error})")
    return seen[:turns]


async def first_request(harness_name: str) -> FakeRequest:
    return (await requests_of(harness_name))[0]


def replayed(base_url: str, req: FakeRequest) -> dict:
    """Send a captured request to the embedded server as it came (its own API), for a reply of one token;
    its prompt tokens, the ones taken from the server's cache, and the wall."""
    body = {**req.body, "stream": False}
    body.pop("stream_options", None)
    body["max_output_tokens" if req.path.endswith("/responses") else "max_tokens"] = 1
    body.pop("max_completion_tokens", None)
    r = urllib.request.Request(base_url.rstrip("/").removesuffix("/v1") + req.path, data=json.dumps(body).encode(),
                               headers={"content-type": "application/json", "x-api-key": "x",
                                        "authorization": "Bearer x"})
    t0 = time.perf_counter()
    with LOOPBACK.open(r, timeout=3600) as resp:
        reply = json.loads(resp.read())
    wall = time.perf_counter() - t0
    timings, usage = reply.get("timings") or {}, reply.get("usage") or {}
    if "prompt_n" in timings:  # llama.cpp's own account: tokens read now and taken from the cache
        fresh, cached = timings["prompt_n"], timings.get("cache_n", 0)
    elif req.path.endswith("/messages"):  # Anthropic's usage: input_tokens leaves the cached ones out
        fresh, cached = usage.get("input_tokens", 0), usage.get("cache_read_input_tokens", 0)
    else:  # OpenAI's usage: input (prompt) tokens include the cached ones
        total = usage.get("input_tokens", usage.get("prompt_tokens", 0))
        cached = (usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        fresh = total - cached
    return {"prompt_tokens": fresh + cached, "cached_tokens": cached, "wall_s": round(wall, 2)}


def reuse(model: str) -> list[dict]:
    """Per harness: rollout A's first call (cold), its second (the next turn), rollout B's first in A's
    folder (the next rollout of a lane) and in another folder, sent in that order to a fresh one-slot
    embedded server."""
    import shutil

    from skillopt.models.local.server import LocalServer

    rows = []
    for h in SPECS:
        with tempfile.TemporaryDirectory() as tmp:
            lane = Path(tmp) / "lane-0"
            lane.mkdir()
            a1, a2 = asyncio.run(requests_of(h, TASK, turns=2, ws=lane))
            shutil.rmtree(lane)
            lane.mkdir()
            (b1,) = asyncio.run(requests_of(h, OTHER, ws=lane))
        (b1_elsewhere,) = asyncio.run(requests_of(h, OTHER))
        with LocalServer(model, slots=1) as server:
            calls = {name: replayed(server.base_url, req) for name, req in
                     (("first call", a1), ("next turn", a2), ("next rollout, same folder", b1),
                      ("next rollout, other folder", b1_elsewhere))}
        rows.append({"harness": h, "model": model, **calls})
        print(h, json.dumps(calls), flush=True)
    return rows


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reuse", metavar="MODEL", help="also measure the embedded server's prompt reuse on the "
                   "captured requests with this local model (e.g. qwen2.5-coder-1.5b)")
    a = p.parse_args()
    out = RESULTS / "agent_prompts.json"
    rows = [row(h, asyncio.run(first_request(h))) for h in SPECS]
    for r in rows:
        print(f"{r['harness']}: system {r['system_chars']} chars, {r['tools']} tools {r['tools_chars']} chars, "
              f"messages {r['messages_chars']} chars "
              f"-> ~{r['fixed_prompt_tokens']} tokens")
    doc = {"what": "the fixed prompt (system prompt, tool definitions, the harness's wrapping of the task) of each "
                   "agent harness's first model call, with a one-line skill and task; tokens = characters / 4",
           "command": "python perf/agent_prompts.py", "machine": machine(), "rows": rows}
    old = json.loads(out.read_text()) if out.is_file() else {}
    if a.reuse:
        doc["reuse"] = {"what": "the embedded server's prompt cache on each harness's captured requests (one slot, "
                                "one-token replies): rollout A's first call, its next turn, rollout B's first call "
                                "(another task and workspace)",
                        "command": f"python perf/agent_prompts.py --reuse {a.reuse}", "machine": machine(),
                        "rows": reuse(a.reuse)}
    elif "reuse" in old:
        doc["reuse"] = old["reuse"]
    write_json(out, doc)


if __name__ == "__main__":
    main()
