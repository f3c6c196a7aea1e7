"""Folder skills: SKILL.md plus small supporting files it points to, read, versioned, edited (a
supporting file is an edit target like a section), exported as a unit and written into the agent's
workspace, where the real Claude Code and Codex binaries find and run them. A single-file skill is
unchanged (same sha, no files)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from skillopt.edits import Edit, apply_edits
from skillopt.errors import BadInput
from skillopt.harness.workspace import write_skill
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, code_tasks

DOC = ("---\nname: fixer\ndescription: Use this skill to answer questions about secret codes.\n---\n\n"
       "# Fixer\n\nBefore answering, run `bash scripts/check.sh` from this skill's folder.\n\n## Answer format\n\n"
       "End with 'Answer: <code>'.\n")
CHECK = "#!/bin/sh\necho 'check ok: codes are looked up, not guessed'\n"


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "fixer"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(DOC)
    (root / "scripts" / "check.sh").write_text(CHECK)
    (root / "reference.md").write_text("# Codes\nA code is ZETA-<n>.\n")
    (root / ".hidden").write_text("not part of the skill")
    return root


def test_a_folder_is_read_versioned_and_edited_as_a_unit(tmp_path):
    root = folder(tmp_path)
    skill = Skill.load(root)
    assert skill.files == {"reference.md": "# Codes\nA code is ZETA-<n>.\n", "scripts/check.sh": CHECK}
    single = Skill.load(root / "SKILL.md")
    assert single.files == {} and single.sha == hashlib.sha256(single.render().encode()).hexdigest()
    assert skill.sha != single.sha and skill.render() == single.render()
    # a supporting file is an edit target: add, replace whole, delete; with a body edit in the same apply
    edits = [Edit(op="add", part="file", path="scripts/list.sh", text="ls"),
             Edit(op="replace", part="file", path="reference.md", text="# Codes\nZETA-<n>, n the item number."),
             Edit(op="add", anchor="Fixer", text="Read reference.md first.")]
    r = apply_edits(skill, edits)
    assert [x.status for x in r.reports] == ["applied"] * 3
    assert r.skill.files == {"reference.md": "# Codes\nZETA-<n>, n the item number.\n", "scripts/check.sh": CHECK,
                             "scripts/list.sh": "ls\n"}
    assert "Read reference.md first." in r.skill.body
    bad = apply_edits(skill, [Edit(op="add", part="file", path="reference.md", text="x"),
                              Edit(op="replace", part="file", path="nope.md", text="x"),
                              Edit(op="add", part="file", path="../escape.sh", text="x"),
                              Edit(op="delete", part="file", path="scripts/check.sh")])
    assert [x.status for x in bad.reports] == ["conflict", "anchor_not_found", "invalid", "applied"]
    assert list(bad.skill.files) == ["reference.md"]
    (root / "big.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInput, match="not UTF-8 text"):
        Skill.load(root)
    # into a workspace: SKILL.md and its files; a file a later version deleted does not stay
    ws = tmp_path / "ws"
    write_skill(ws, r.skill, ".claude/skills")
    assert (ws / ".claude/skills/fixer/scripts/list.sh").read_text() == "ls\n"
    write_skill(ws, bad.skill, ".claude/skills")
    assert sorted(p.name for p in (ws / ".claude/skills/fixer").rglob("*") if p.is_file()) == ["SKILL.md", "reference.md"]


def chat_and_optimizer(req: FakeRequest) -> FakeReply:
    """The optimizer adds the rule to the body and a note file; the chat target knows codes with the rule."""
    if "You improve a skill" in req.last_user_text:
        return FakeReply(text=json.dumps({"analysis": "codes follow a pattern", "edits": [
            {"op": "add", "anchor": "Answer format", "text": RULE, "evidence": []},
            {"op": "add", "file": "notes/pattern.md", "text": "Codes: ZETA- and the item number.", "evidence": []}]}))
    import re

    m = re.search(r"item (\d+)", req.last_user_text)
    known = RULE in req.system and m
    return FakeReply(text=f"Answer: ZETA-{m.group(1)}" if known else "Answer: unknown")


def test_a_run_whose_seed_is_a_folder_keeps_its_files_through_versions_and_export(tmp_path):
    root = folder(tmp_path)
    (root / ".hidden").unlink()
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(8))
    with FakeModelServer(chat_and_optimizer) as srv:
        r = run_cli(["run", "--benchmark", str(data), "--harness", "chat", "--skill", str(root),
                     "--target_model", f"openai-compatible:fake-target@{srv.openai_url}",
                     "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                     "--run-id", "folder", "--epochs", "1", "--batch-size", "2", "--train-size", "2", "--val-size", "4",
                     "--test-size", "2", "--concurrency", "2", "--set", "train.consolidate=false",
                     "--set", "train.rules_per_step=0", "--set", "train.demonstrations=false",
                     "--set", "train.max_reflections_per_step=1", "--set", "gate.alpha=0.1"], tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "folder"
    assert (run / "skills" / "v000.files" / "scripts" / "check.sh").read_text() == CHECK
    index = {v["version"]: v for v in map(json.loads, (run / "skills" / "index.jsonl").read_text().splitlines())}
    assert index[1]["status"] == "accepted" and index[1]["parent"] == 0
    v1 = run / "skills" / "v001.files"
    assert (v1 / "scripts" / "check.sh").read_text() == CHECK and (v1 / "reference.md").is_file()
    assert (v1 / "notes" / "pattern.md").read_text() == "Codes: ZETA- and the item number.\n"
    assert (run / "best_skill.files" / "scripts" / "check.sh").read_text() == CHECK
    # the chat harness keeps its own proposers: no trajectory ones
    origins = {c["origin"] for c in json.loads((run / "steps" / "0001" / "candidates.json").read_text())}
    assert origins == {"reflection"}
    out = tmp_path / "export"
    e = run_cli(["export", "folder:best", "--format", "claude-skill", "--out", str(out)], tmp_path, cli_env(tmp_path))
    assert e.returncode == 0, e.stderr
    got = sorted(p.relative_to(out / "fixer").as_posix() for p in (out / "fixer").rglob("*") if p.is_file())
    assert got == ["SKILL.md", "notes/pattern.md", "provenance.json", "reference.md", "scripts/check.sh"]
    assert RULE in (out / "fixer" / "SKILL.md").read_text()
    # the exported folder is a seed again, files and all
    assert Skill.load(out / "fixer").files == Skill.load(run / "skills" / "v001.md").model_copy(
        update={"files": {"notes/pattern.md": "Codes: ZETA- and the item number.\n",
                          "reference.md": "# Codes\nA code is ZETA-<n>.\n", "scripts/check.sh": CHECK}}).files


AGENTS = {"claude-code": ("claude_agent_sdk", "anthropic:fake-model@{base}"),
          "codex": ("openai_codex", "vllm:fake-model@{openai}")}


@pytest.mark.slow  # the real Claude Code / Codex binaries
@pytest.mark.parametrize("harness_name", list(AGENTS))
async def test_agents_discover_the_skill_and_run_its_supporting_script_natively(tmp_path, harness_name):
    from skillopt.benchmarks.base import Task
    from skillopt.harness.base import Limits
    from skillopt.harness.registry import HarnessContext, make_harness
    from skillopt.models import Models, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.traces.events import SkillUsedEvent, ToolResultEvent
    from tests.fakes.agent_scripts import skill_then_command

    package, spec = AGENTS[harness_name]
    pytest.importorskip(package)
    skill = Skill.load(folder(tmp_path))
    harness = make_harness(harness_name, HarnessContext(models=Models(env=ProviderEnv()), options={"mode": "cli"}))
    ws = tmp_path / "ws"
    ws.mkdir()
    write_skill(ws, skill, harness.skill_dir)
    here = f"{harness.skill_dir}/fixer"
    script = skill_then_command("fixer", f"bash {here}/scripts/check.sh && ls {here} {here}/scripts", "Answer: ZETA-1")
    seen: list[FakeRequest] = []

    def recording(req: FakeRequest) -> FakeReply:
        seen.append(req)
        return script(req)

    with FakeModelServer(recording) as srv:
        target = parse_model_spec(spec.format(base=srv.base_url, openai=srv.openai_url))
        r = await harness.run(Task(id="codes", prompt="What is the code of item 1?"), skill, ws, target,
                              Limits(timeout_s=90))
    assert r.error is None, r.error
    assert any(isinstance(e, SkillUsedEvent) for e in r.trace), "the agent did not load the skill natively"
    outputs = "\n".join(e.output for e in r.trace if isinstance(e, ToolResultEvent))
    assert "check ok: codes are looked up, not guessed" in outputs  # the supporting script ran
    assert "reference.md" in outputs and "check.sh" in outputs  # and the folder lists its files
    # what the model saw: the skill listed by its description, its SKILL.md (naming the script) once loaded
    everything = "\n".join(json.dumps(q.body) for q in seen)
    assert "answer questions about secret codes" in everything and "run `bash scripts/check.sh`" in everything
