"""`skillopt export`: every format re-read by the skill parser, markers stripped, names checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skillopt.cli.commands  # noqa: F401  (registers the command groups)
import skillopt.cli.export  # noqa: F401
from skillopt.cli.app import app
from skillopt.report.export import demote_headings, strip_internal
from skillopt.skill import Skill
from tests.test_compare import build_run, copy_runs

TRAINED = """---
name: unit-checker
description: Solve physics word problems and check the units of the answer.
license: MIT
---

# Solving

Read the problem.
<!-- skillopt:learned step=3 -->
Convert every quantity to SI units first.
<!-- /skillopt:learned -->

## Answer format
<!-- skillopt:protected -->
End with `Answer: <number> <unit>`.
<!-- /skillopt:protected -->

```text
# not a heading: inside a code block
```
"""


def cli(*args: str, runs_dir: Path):
    return CliRunner().invoke(app, ["--runs-dir", str(runs_dir), *args], env={"COLUMNS": "200"})


@pytest.fixture
def runs(tmp_path) -> Path:
    runs = tmp_path / "runs"
    seed = TRAINED.split("<!-- skillopt:learned")[0] + "\n## Answer format\nEnd with `Answer: <number>`.\n"
    build_run(runs, "phys", [seed, TRAINED], {(1, "val"): [(1, 1), (1, 1), (0, 0.5)], (1, "test"): [(1, 1)],
                                              (0, "val"): [(0, 0), (1, 1), (0, 0)]})
    return runs


def read_provenance(folder: Path) -> dict:
    return json.loads((folder / "provenance.json").read_text())


@pytest.mark.parametrize("fmt", ["claude-skill", "codex-skill"])
def test_skill_folder_formats_reparse_without_markers(runs, tmp_path, fmt):
    out = tmp_path / "out"
    r = cli("export", "phys", "--format", fmt, "--out", str(out), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    folder = out / "unit-checker"
    assert sorted(p.name for p in folder.iterdir()) == ["SKILL.md", "provenance.json"]
    skill = Skill.load(folder / "SKILL.md")
    assert skill.name == folder.name == "unit-checker" and skill.problems() == []
    assert skill.description == "Solve physics word problems and check the units of the answer."
    assert skill.extra == {"license": "MIT"}
    text = (folder / "SKILL.md").read_text()
    assert "skillopt" not in text and "<!--" not in text
    assert "Convert every quantity to SI units first." in text and "End with `Answer: <number> <unit>`." in text
    assert skill.protected_spans() == []
    prov = read_provenance(folder)
    assert (prov["run_id"], prov["version"], prov["origin"], prov["format"]) == ("phys", 1, "step 1", fmt)
    assert prov["target_model"] == "openai:gpt-5-mini" and prov["benchmark"] == "hand.jsonl"
    assert prov["scores"]["val"]["v001"] == {"hard": pytest.approx(2 / 3), "soft": pytest.approx(2.5 / 3), "n": 3,
                                                 "errors": 0}
    assert prov["scores"]["val"]["seed"]["hard"] == pytest.approx(1 / 3) and prov["scores"]["test"]["v001"]["n"] == 1
    target = ".claude/skills/" if fmt == "claude-skill" else ".agents/skills/"
    assert target in r.stdout


def test_agents_md_is_a_section_with_demoted_headings(runs, tmp_path):
    r = cli("export", "phys:v1", "--format", "agents-md", "--out", str(tmp_path / "out"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "out" / "unit-checker" / "AGENTS.md").read_text()
    first, rest = text.split("\n", 1)
    assert first.startswith("<!-- skillopt export: unit-checker from run phys v001;") and first.endswith("-->")
    assert rest.startswith("## unit-checker\n\n_When to use: Solve physics word problems")
    assert "\n### Solving\n" in rest and "\n#### Answer format\n" in rest
    assert "# not a heading: inside a code block" in rest and "protected" not in rest and "learned" not in rest


def test_plugin_layout_and_manifest(runs, tmp_path):
    r = cli("export", "phys", "--format", "plugin", "--out", str(tmp_path / "out"), "--plugin-name", "physics-tools",
            "--license", "MIT", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    root = tmp_path / "out" / "physics-tools"
    manifest = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "physics-tools" and manifest["version"] == "0.1.1" and manifest["license"] == "MIT"
    market = json.loads((root / ".claude-plugin" / "marketplace.json").read_text())
    assert market["plugins"] == [{"name": "physics-tools", "source": "./", "description": manifest["description"],
                                  "version": "0.1.1"}]
    skill = Skill.load(root / "skills" / "unit-checker" / "SKILL.md")
    assert skill.name == "unit-checker" and "<!--" not in skill.render()
    assert read_provenance(root / "skills" / "unit-checker")["run_id"] == "phys"
    assert "claude plugin install physics-tools@physics-tools-local" in (root / "README.md").read_text()
    codex = json.loads((root / ".codex-plugin" / "plugin.json").read_text())
    assert codex["name"] == "physics-tools" and codex["skills"] == "./skills/" and codex["license"] == "MIT"
    codex_market = json.loads((root / ".agents" / "plugins" / "marketplace.json").read_text())
    assert codex_market["plugins"][0]["source"] == {"source": "local", "path": "./"}
    assert "codex plugin add physics-tools@physics-tools-local" in (root / "README.md").read_text()
    # no --license: the skill's own (MIT in its front matter); a skill without one says UNLICENSED
    r = cli("export", "phys:v0", "--format", "plugin", "--out", str(tmp_path / "seed"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "phys:v000 is the untrained seed" in warnings[0]
    seed_manifest = json.loads((tmp_path / "seed" / "unit-checker" / ".codex-plugin" / "plugin.json").read_text())
    assert seed_manifest["license"] == "MIT"
    r = cli("export", "phys", "--format", "claude-skill", "--out", str(tmp_path / "trained"), runs_dir=runs)
    assert r.exit_code == 0 and "warning" not in r.stderr


def test_names_and_descriptions_are_checked(runs, tmp_path):
    out = str(tmp_path / "out")
    r = cli("export", "phys", "--format", "claude-skill", "--out", out, "--name", "Unit_Checker", runs_dir=runs)
    assert r.exit_code == 2 and "name may hold only lowercase letters, digits and hyphens (use --name)" in r.stderr
    r = cli("export", "phys", "--format", "codex-skill", "--out", out, "--name", "x" * 65, runs_dir=runs)
    assert r.exit_code == 2 and "at most 64" in r.stderr
    r = cli("export", "phys", "--format", "claude-skill", "--out", out, "--description", "Use <b>me</b>", runs_dir=runs)
    assert r.exit_code == 2 and "XML tags" in r.stderr
    r = cli("export", "phys", "--format", "claude-skill", "--out", out, "--description", "y" * 1025, runs_dir=runs)
    assert r.exit_code == 2 and "at most 1024" in r.stderr
    r = cli("export", "phys", "--format", "codex-skill", "--out", out, "--name", "units", "--description",
            "Check\n  units   always.", runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    skill = Skill.load(tmp_path / "out" / "units" / "SKILL.md")
    assert (skill.name, skill.description) == ("units", "Check units always.")  # one line, for Codex
    r = cli("export", "phys", "--format", "codex-skill", "--out", out, "--name", "units", runs_dir=runs)
    assert r.exit_code == 2 and "--force" in r.stderr
    assert cli("export", "phys", "--format", "codex-skill", "--out", out, "--name", "units", "--force",
               runs_dir=runs).exit_code == 0
    for args, message in ((["nope"], "no run 'nope'"), (["phys:v9"], "no version v009")):
        r = cli("export", *args, "--format", "plugin", "--out", out, runs_dir=runs)
        assert r.exit_code == 2 and message in r.stderr
    r = cli("export", "phys", "--format", "zip", "--out", out, runs_dir=runs)
    assert r.exit_code == 2 and "unknown export format 'zip'" in r.stderr


def test_strip_internal_and_demote_headings():
    skill = Skill.parse(TRAINED)
    bare = strip_internal(skill)
    assert "<!--" not in bare.body and bare.body.count("\n\n") >= 2
    body = "# Top\ntext\n## Sub\n```\n# code\n```\n   ### Indented\n"
    assert demote_headings(body, 3) == "### Top\ntext\n#### Sub\n```\n# code\n```\n##### Indented"
    assert demote_headings("## Two\n", 2) == "## Two"


def test_export_of_a_real_run(tmp_path_factory, tmp_path):
    runs = copy_runs(tmp_path_factory, tmp_path)
    for fmt in ("claude-skill", "codex-skill", "agents-md", "plugin"):
        r = cli("export", "codes", "--format", fmt, "--out", str(tmp_path / fmt), runs_dir=runs)
        assert r.exit_code == 0, r.stderr
    skill = Skill.load(tmp_path / "claude-skill" / "task-solver" / "SKILL.md")
    assert "Secret codes are ZETA-" in skill.body and "skillopt" not in skill.render()
    prov = read_provenance(tmp_path / "claude-skill" / "task-solver")
    assert prov["scores"]["test"]["seed"]["hard"] == 0.0 and prov["scores"]["val"][f"v{prov['version']:03d}"]["hard"] == 1.0


def _claude_binary() -> str | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return str(path) if path.exists() else shutil.which("claude")


@pytest.mark.slow
def test_plugin_validates_and_installs_with_claude_code(runs, tmp_path):
    claude = _claude_binary()
    if claude is None:
        pytest.skip("the Claude Code binary (claude-agent-sdk extra) is not installed")
    r = cli("export", "phys", "--format", "plugin", "--out", str(tmp_path / "out"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env.update({"HOME": str(home), "DISABLE_AUTOUPDATER": "1", "CLAUDE_CONFIG_DIR": str(home / ".claude")})

    def claude_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([claude, *args], cwd=tmp_path / "out", env=env, capture_output=True, text=True, timeout=120)

    v = claude_cli("plugin", "validate", "./unit-checker")
    assert v.returncode == 0 and "Validation passed" in v.stdout + v.stderr, v.stdout + v.stderr
    assert "unit-checker:unit-checker" in v.stdout
    add = claude_cli("plugin", "marketplace", "add", "./unit-checker")
    assert add.returncode == 0, add.stdout + add.stderr
    inst = claude_cli("plugin", "install", "unit-checker@unit-checker-local")
    assert inst.returncode == 0, inst.stdout + inst.stderr
    listed = claude_cli("plugin", "list")
    assert "unit-checker@unit-checker-local" in listed.stdout and "enabled" in listed.stdout


@pytest.mark.slow
def test_exported_claude_skill_is_discovered_and_used_by_claude_code(runs, tmp_path):
    """`--out .claude/skills` in a project: the real Claude Code lists the skill at start-up and
    loads it through its Skill tool (model: the scripted fake server)."""
    from tests.fakes.agent_scripts import skill_then_command
    from tests.fakes.server import FakeModelServer

    claude = _claude_binary()
    if claude is None:
        pytest.skip("the Claude Code binary (claude-agent-sdk extra) is not installed")
    project = tmp_path / "project"
    r = cli("export", "phys", "--format", "claude-skill", "--out", str(project / ".claude" / "skills"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    with FakeModelServer(skill_then_command("unit-checker", "echo checked", "Answer: 3 m")) as srv:
        env.update({"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), "IS_SANDBOX": "1",
                    "ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": "test-key",
                    "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
        p = subprocess.run([claude, "-p", "--output-format", "stream-json", "--verbose", "--model", "fake",
                            "--permission-mode", "bypassPermissions", "--", "How long is the rod?"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert "unit-checker" in init["skills"], p.stderr[-2000:]
    calls = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]
             if b.get("type") == "tool_use"]
    assert calls and calls[0]["name"] == "Skill"
    loaded = json.dumps([e for e in events if e.get("type") == "user"])
    assert "Convert every quantity to SI units first." in loaded and "skillopt:" not in loaded
    assert events[-1]["type"] == "result" and "Answer: 3 m" in events[-1]["result"]


def _codex_binary() -> str | None:
    try:
        from skillopt.harness.codex import _bundled_codex

        return _bundled_codex()[0] or shutil.which("codex")
    except ImportError:
        return shutil.which("codex")


@pytest.mark.slow
def test_plugin_installs_with_codex(runs, tmp_path):
    codex = _codex_binary()
    if codex is None:
        pytest.skip("the Codex binary (codex extra) is not installed")
    r = cli("export", "phys", "--format", "plugin", "--out", str(tmp_path / "out"), runs_dir=runs)
    assert r.exit_code == 0, r.stderr
    home = tmp_path / "codex-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEX"))}
    env.update({"HOME": str(home), "CODEX_HOME": str(home)})

    def codex_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([codex, *args], cwd=tmp_path / "out", env=env, capture_output=True, text=True, timeout=120)

    add = codex_cli("plugin", "marketplace", "add", "./unit-checker")
    assert add.returncode == 0, add.stdout + add.stderr
    inst = codex_cli("plugin", "add", "unit-checker@unit-checker-local")
    assert inst.returncode == 0, inst.stdout + inst.stderr
    listed = codex_cli("plugin", "list")
    assert re.search(r"unit-checker@unit-checker-local\s+installed, enabled", listed.stdout), listed.stdout
    cached = next((home / "plugins" / "cache" / "unit-checker-local" / "unit-checker").iterdir())
    assert Skill.load(cached / "skills" / "unit-checker" / "SKILL.md").name == "unit-checker"
