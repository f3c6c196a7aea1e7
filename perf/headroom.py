"""How far a skill's text can move the quick preset's target at all: the headroom the optimizer has.

The quick job (`skillopt run --preset quick`) trains a GSM8K skill for the embedded
qwen2.5-coder-0.5b. This script asks the target the preset's validation tasks, at temperature 0
as gate rollouts run, under:

- `seed`: the shipped seed skill, as the chat harness sends it (system prompt, then the task);
- `working-first`: a hand-written skill that tells the model to work in numbered steps before the
  answer line (what the optimizer would have to discover), same placement;
- the same two skills placed in the user turn, before the task or after it, instead of the system prompt;
- `task says show working`: the seed skill, with the task's own answer-format line changed to
  "Show your working, then end ..." (not something a skill can do: the benchmark owns that line).

It writes perf/results/headroom.json: per variant, tasks solved of n, the mean generated tokens and
the wall time. Usage: python perf/headroom.py [--tasks 40]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import machine, quick_preset_tasks, quick_seed_skill  # noqa: E402
from skillopt.benchmarks.qa import ANSWER_FORMAT, score_text  # noqa: E402
from skillopt.config import PRESETS  # noqa: E402
from skillopt.prompts import chat_system as system_of  # noqa: E402
from skillopt.models.local import LocalServer  # noqa: E402
from skillopt.skill import Skill  # noqa: E402

WORKING_FIRST = """---
name: grade-school-math
description: Solve grade-school math word problems step by step and give one final number.
---

# Solving math word problems

Never answer at once. First write numbered steps:
1. List each quantity given in the problem.
2. Compute one new quantity per step, writing the arithmetic out (for example `3 x 4 = 12`).
3. Check that the last quantity is what the question asks for.

## Answer format
End your reply with a last line of the form `Answer: <number>` holding only the final number.
"""
SHOW_WORKING = "Show your working, then end your reply with a line 'Answer: <number>' (the number only, no units)."


def variants(seed: Skill, working: Skill) -> dict[str, callable]:
    def in_system(skill: Skill):
        return lambda prompt: [("system", system_of(skill)), ("user", prompt)]

    def in_user(skill: Skill):
        return lambda prompt: [("user", f"{system_of(skill)}\n\n# Task\n\n{prompt}")]

    def after_task(skill: Skill):
        return lambda prompt: [("user", f"{prompt}\n\n{system_of(skill)}")]

    return {
        "seed skill (system prompt, as deployed)": in_system(seed),
        "working-first skill (system prompt)": in_system(working),
        "seed skill in the user turn": in_user(seed),
        "working-first skill in the user turn": in_user(working),
        "seed skill after the task": after_task(seed),
        "working-first skill after the task": after_task(working),
        "seed skill; the task says show working": lambda p: in_system(seed)(p.replace(ANSWER_FORMAT["numeric"], SHOW_WORKING)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=40, help="validation tasks of the quick preset's split")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="the embedded model asked (the quick job's target)")
    ap.add_argument("--variants", nargs="+", type=int, help="only these variants, by position (0 = the seed skill)")
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "headroom.json"))
    args = ap.parse_args()
    preset = PRESETS["quick"]
    tasks = quick_preset_tasks("val")[: args.tasks]
    seed = quick_seed_skill()
    working = Skill.parse(WORKING_FIRST)
    concurrency, max_tokens = preset["train"]["concurrency"], preset["limits"]["max_tokens"]
    server = LocalServer(args.model, slots=concurrency)
    server.start()
    results = []
    try:
        with httpx.Client(timeout=900) as client:
            chosen = list(variants(seed, working).items())
            for name, build in [chosen[i] for i in args.variants] if args.variants else chosen:
                def one(task):
                    messages = [{"role": r, "content": c} for r, c in build(task.prompt)]
                    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 0}
                    reply = client.post(f"{server.base_url}/v1/chat/completions", json=body)
                    reply.raise_for_status()
                    data = reply.json()
                    text = data["choices"][0]["message"]["content"]
                    return score_text(task, text).hard, data["usage"]["completion_tokens"], text

                t0 = time.perf_counter()
                with ThreadPoolExecutor(concurrency) as pool:
                    outs = list(pool.map(one, tasks))
                row = {"variant": name, "solved": int(sum(o[0] for o in outs)), "n": len(outs),
                       "generated_tokens_mean": round(sum(o[1] for o in outs) / len(outs), 1),
                       "wall_s": round(time.perf_counter() - t0, 1), "first_reply": outs[0][2][:300]}
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    doc = {"machine": machine(), "command": "python perf/headroom.py " + " ".join(sys.argv[1:]),
           "target": f"local:{args.model}", "split": f"val of the quick preset (seed {preset['splits']['seed']})",
           "max_tokens": max_tokens, "concurrency": concurrency, "load_avg_1m_after": round(os.getloadavg()[0], 2),
           "results": results}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
