"""What the instant fake model server answers in perf/peers.py, for every tool compared.

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

from tests.fakes.script import FakeReply, FakeRequest

TARGET_REPLY = "The sum is 1.\nAnswer: 1\n<answer>1</answer>"


class PeerReplies:
    def __init__(self) -> None:
        self._n = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        if "opt" not in req.model:
            return FakeReply(text=TARGET_REPLY)
        with self._lock:
            n = next(self._n)
        rule = f"Rule {n}: restate the question, then give the final number on its own line."
        if req.json_schema is not None:  # skillopt: structured edits
            return FakeReply(text=json.dumps({"analysis": "the answers ignore the question", "edits": [
                {"op": "add", "anchor": "", "text": rule, "rationale": "answers ignore the question",
                 "evidence": []}]}))
        edit = {"op": "append", "content": rule, "target": ""}
        body = {"reasoning": "the answers ignore the question", "patch": {"reasoning": "r", "edits": [edit]},
                "edits": [edit]}
        return FakeReply(text="```\n" + json.dumps(body) + "\n```")
