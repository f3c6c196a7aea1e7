"""What the instant model server (perf/instant_server.py) answers, for every tool compared.

The target (model name containing "target") always answers `Answer: 1 <answer>1</answer>`. The optimizer
(model name containing "opt") answers in the format each tool asks for: skillopt sends a JSON schema
(its edits), GEPA reads the text between ``` fences as the new instruction, microsoft/SkillOpt reads a
JSON object with a `patch` (reflection) or `edits` (merge). Each optimizer reply adds a new rule, so
candidates differ from their parent.
"""

from __future__ import annotations

import itertools
import json
import threading

TARGET_REPLY = "The sum is 1.\nAnswer: 1\n<answer>1</answer>"


_counter = itertools.count(1)
_lock = threading.Lock()


def reply_text(model: str, wants_schema: bool) -> str:
    """The answer to a request for `model`; `wants_schema`: the request asked for a JSON schema."""
    if "opt" not in model:
        return TARGET_REPLY
    with _lock:
        n = next(_counter)
    rule = f"Rule {n}: restate the question, then give the final number on its own line."
    if wants_schema:  # skillopt: structured edits
        return json.dumps({"analysis": "the answers ignore the question", "edits": [
            {"op": "add", "anchor": "", "text": rule, "rationale": "answers ignore the question", "evidence": []}]})
    edit = {"op": "append", "content": rule, "target": ""}
    body = {"reasoning": "the answers ignore the question", "patch": {"reasoning": "r", "edits": [edit]},
            "edits": [edit]}
    return "```\n" + json.dumps(body) + "\n```"

