"""Export a trained skill for deployment.

| format        | layout under DIR                                        | for                              |
|---------------|---------------------------------------------------------|----------------------------------|
| claude-skill  | `<name>/SKILL.md`, `<name>/provenance.json`             | `.claude/skills/`, `~/.claude/skills/` |
| codex-skill   | `<name>/SKILL.md`, `<name>/provenance.json`             | `.agents/skills/`                |
| agents-md     | `<name>/AGENTS.md` (a section), `<name>/provenance.json` | pasting into AGENTS.md / CLAUDE.md |
| plugin        | `<plugin>/.claude-plugin/plugin.json`, `marketplace.json`, `.codex-plugin/plugin.json`, `.agents/plugins/marketplace.json`, `skills/<name>/SKILL.md`, README.md | Claude Code and Codex plugins |

A folder skill's supporting files (scripts, reference notes) are written beside its SKILL.md (or
AGENTS.md) in every format, at the paths the skill names them by.

skillopt's own markers (protected regions, any `<!-- skillopt:... -->` tag) are stripped; the
name and description are checked against the agents' rules; provenance (run, version,
benchmark, target model, scores) goes into `provenance.json` (and the plugin's README), never
into the skill text the agent reads, except for `agents-md`, which is a single paste-in text
and carries it as one HTML comment.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from skillopt import __version__
from skillopt.errors import BadInput
from skillopt.skill import (
    Skill,
    find_sections,
    normalize_body,
    validate_description,
    validate_name,
)
from skillopt.io.files import atomic_write_text, writable_output
from skillopt.store.schema import SplitScore, now
from skillopt.store.refs import SkillRef

Format = Literal["claude-skill", "codex-skill", "agents-md", "plugin"]
FORMATS: tuple[str, ...] = ("claude-skill", "codex-skill", "agents-md", "plugin")

_TAG_RE = re.compile(r"<!--\s*/?skillopt:[^>]*?-->")
_XML_RE = re.compile(r"<[^>]*>")
RESERVED_WORDS = ("anthropic", "claude")


class Provenance(BaseModel):
    skill: str
    sha: str
    run_id: str | None = None
    version: int | None = None
    origin: str | None = None
    benchmark: str | None = None
    harness: str | None = None
    target_model: str | None = None
    data_hash: str | None = None
    run_best: int | None = None  # the run's best version (its last accepted one) when it was exported
    scores: dict[str, dict[str, SplitScore]] = Field(default_factory=dict)  # split -> role/label -> score
    exported_at: float = Field(default_factory=now)
    exported_by: str = f"skillopt {__version__}"
    format: str = ""

    def line(self) -> str:
        """One line for humans: where the skill comes from and how it scored."""
        where = f"run {self.run_id} v{self.version:03d}" if self.run_id is not None and self.version is not None \
            else "a skill file"
        parts = [f"{self.skill} from {where}"]
        if self.benchmark:
            parts.append(f"benchmark {self.benchmark}")
        if self.target_model:
            parts.append(f"target {self.target_model}")
        for split, by in self.scores.items():
            for who, sc in by.items():
                parts.append(f"{split} {who} hard {sc.text()}")
        return "; ".join(parts)


class ExportResult(BaseModel):
    format: str
    root: Path  # the folder (or plugin) written
    files: list[Path]
    skill_name: str
    install: str  # how to install it, one line
    warnings: list[str] = Field(default_factory=list)


def strip_internal(skill: Skill) -> Skill:
    """The skill without skillopt's markers and tags, as agents should read it."""
    bare = skill.strip_markers()
    body = re.sub(r"^[ \t]*" + _TAG_RE.pattern + r"[ \t]*\n?", "", bare.body, flags=re.MULTILINE)
    return bare.with_body(_TAG_RE.sub("", body))


def prepare(skill: Skill, fmt: str, name: str | None = None, description: str | None = None) -> tuple[Skill, list[str]]:
    """The skill to export (markers stripped, name / description overridden) and warnings; `BadInput`
    when the name or description breaks the target agent's rules."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    out = strip_internal(skill)
    desc = " ".join((description if description is not None else out.description).split())  # one line (Codex)
    out = Skill(name=(name or out.name).strip(), description=desc, body=out.body, extra=dict(out.extra),
                files=dict(out.files))
    problems = [f"{p} (use --name)" for p in validate_name(out.name)]
    problems += [f"{p} (use --description)" for p in validate_description(out.description)]
    if fmt in ("claude-skill", "plugin") and _XML_RE.search(out.description):
        problems.append("description may not hold XML tags for Claude (use --description)")
    if problems:
        raise BadInput(f"cannot export skill {out.name!r} as {fmt}: {'; '.join(problems)}")
    warnings = []
    if fmt in ("claude-skill", "plugin") and any(w in out.name for w in RESERVED_WORDS):
        warnings.append(f"name {out.name!r} holds a word Anthropic reserves ({', '.join(RESERVED_WORDS)}): "
                        "fine for Claude Code, refused by the Claude API and claude.ai skill upload")
    return out, warnings


def export_skill(skill: Skill, fmt: str, out_dir: Path, provenance: Provenance, name: str | None = None,
                 description: str | None = None, plugin_name: str | None = None, force: bool = False,
                 license: str | None = None) -> ExportResult:
    """Write `skill` in format `fmt` under `out_dir`; refuses to overwrite unless `force`."""
    ready, warnings = prepare(skill, fmt, name, description)
    prov = provenance.model_copy(update={"skill": ready.name, "format": fmt})
    if prov.run_id is not None and prov.version == 0:
        trained = (f"the run's best is v{prov.run_best:03d} ({prov.run_id}:best)" if prov.run_best
                   else "no edit was accepted")
        warnings.append(f"{prov.run_id}:v000 is the untrained seed ({trained}): exporting it as it was given")
    if fmt == "plugin":
        result = _plugin(ready, out_dir, prov, plugin_name or ready.name, force, license)
    elif fmt == "agents-md":
        result = _agents_md(ready, out_dir, prov, force)
    else:
        result = _skill_folder(ready, fmt, out_dir, prov, force)
    result.warnings = warnings
    return result


def provenance_for(ref: SkillRef) -> Provenance:
    """Where a referenced skill comes from and how it (and its run's seed) scored on val and test."""
    from skillopt.report.data import RunView

    if ref.run is None or ref.version is None:
        return Provenance(skill=ref.skill.name, sha=ref.skill.sha, origin=f"file {ref.label}")
    view = RunView(ref.run)
    v = ref.run.version(ref.version)
    scores: dict[str, dict[str, SplitScore]] = {}
    for split in ("val", "test"):
        for who, n in [(v.label, v.version)] + ([("seed", 0)] if v.version != 0 else []):
            sc = view.split_score(n, split)
            if sc is not None:
                scores.setdefault(split, {})[who] = sc
    return Provenance(skill=ref.skill.name, sha=v.sha, run_id=view.run_id, version=v.version, origin=v.origin,
                      benchmark=view.benchmark, harness=view.harness, target_model=view.target_model,
                      data_hash=view.data_hash or None, run_best=view.role_version("best"), scores=scores)


# the formats ---------------------------------------------------------------------------------------
def _skill_folder(skill: Skill, fmt: str, out_dir: Path, prov: Provenance, force: bool) -> ExportResult:
    root = _fresh(out_dir / skill.name, force).resolve()
    files = [_write(root / "SKILL.md", skill.render()), *_supporting(root, skill),
             _write(root / "provenance.json", _json(prov))]
    where = ".claude/skills/ (project) or ~/.claude/skills/ (personal)" if fmt == "claude-skill" \
        else ".agents/skills/ (project) or ~/.agents/skills/ (personal)"
    return ExportResult(format=fmt, root=root, files=files, skill_name=skill.name,
                        install=f"copy the folder {root} into {where}")


def _agents_md(skill: Skill, out_dir: Path, prov: Provenance, force: bool) -> ExportResult:
    root = _fresh(out_dir / skill.name, force).resolve()
    text = agents_md_section(skill, prov)
    files = [_write(root / "AGENTS.md", text), *_supporting(root, skill), _write(root / "provenance.json", _json(prov))]
    return ExportResult(format="agents-md", root=root, files=files, skill_name=skill.name,
                        install=f"append {root / 'AGENTS.md'} to your AGENTS.md or CLAUDE.md "
                                f"(e.g. cat {root / 'AGENTS.md'} >> AGENTS.md)")


def agents_md_section(skill: Skill, prov: Provenance) -> str:
    """A `## <name>` section: when to use it, then the body with its headings moved below level 2."""
    body = demote_headings(skill.body, top=3)
    comment = "<!-- " + ("skillopt export: " + prov.line()).replace("--", "- -") + " -->"
    return f"{comment}\n## {skill.name}\n\n_When to use: {skill.description}_\n\n{body}\n"


def demote_headings(body: str, top: int) -> str:
    """Shift every heading (outside code fences) so the highest one is at level `top` (max 6).
    Returns the body normalized (as `Skill.body` is)."""
    body = normalize_body(body)
    sections = find_sections(body)
    if not sections:
        return body
    shift = top - min(s.level for s in sections)
    if shift <= 0:
        return body
    out, pos = [], 0
    for s in sorted(sections, key=lambda s: s.start):
        line = body[s.start:s.content_start]
        out.append(body[pos:s.start])
        out.append("#" * min(6, s.level + shift) + line.lstrip(" ").lstrip("#"))
        pos = s.content_start
    out.append(body[pos:])
    return "".join(out)


def _plugin(skill: Skill, out_dir: Path, prov: Provenance, plugin_name: str, force: bool,
            license: str | None = None) -> ExportResult:
    problems = validate_name(plugin_name)
    if problems:
        raise BadInput(f"bad plugin name {plugin_name!r}: {'; '.join(problems)} (use --plugin-name)")
    root = _fresh(out_dir / plugin_name, force).resolve()
    version = f"0.1.{prov.version or 0}"
    marketplace = f"{plugin_name}-local"
    license = license or str(skill.extra.get("license") or "") or "UNLICENSED"
    manifest = {"name": plugin_name, "version": version, "description": skill.description,
                "author": {"name": "skillopt"}, "keywords": ["skill", "skillopt"], "license": license}
    market = {"name": marketplace, "owner": {"name": "skillopt"},
              "metadata": {"description": f"Local marketplace holding the {plugin_name} plugin"},
              "plugins": [{"name": plugin_name, "source": "./", "description": skill.description, "version": version}]}
    # Codex (0.163+): .codex-plugin/plugin.json, and a marketplace in .agents/plugins/ (the same folder serves both)
    codex_manifest = {**manifest, "skills": "./skills/",
                      "interface": {"displayName": plugin_name, "shortDescription": skill.description[:120],
                                    "developerName": "skillopt", "category": "Productivity"}}
    codex_market = {"name": marketplace, "interface": {"displayName": f"{plugin_name} (local)"},
                    "plugins": [{"name": plugin_name, "source": {"source": "local", "path": "./"},
                                 "policy": {"installation": "AVAILABLE"}, "category": "Productivity"}]}
    readme = (f"# {plugin_name}\n\nA Claude Code plugin with one skill, `{skill.name}`: {skill.description}\n\n"
              f"It was trained with skillopt; where it comes from and how it scored:\n\n- {prov.line()}\n\n"
              f"## Install\n\nFrom the folder that holds this plugin, try it for one session:\n\n"
              f"```\nclaude --plugin-dir ./{plugin_name}\n```\n\nor install it (this folder is also a marketplace):\n\n"
              f"```\nclaude plugin marketplace add ./{plugin_name}\n"
              f"claude plugin install {plugin_name}@{marketplace}\n```\n\n"
              f"Claude Code then offers the skill as `{plugin_name}:{skill.name}`.\n\n"
              f"For Codex (the same folder is a Codex plugin and marketplace):\n\n"
              f"```\ncodex plugin marketplace add ./{plugin_name}\ncodex plugin add {plugin_name}@{marketplace}\n```\n\n"
              f"License: {license}.\n")
    skill_dir = root / "skills" / skill.name
    files = [_write(root / ".claude-plugin" / "plugin.json", json.dumps(manifest, indent=2) + "\n"),
             _write(root / ".claude-plugin" / "marketplace.json", json.dumps(market, indent=2) + "\n"),
             _write(root / ".codex-plugin" / "plugin.json", json.dumps(codex_manifest, indent=2) + "\n"),
             _write(root / ".agents" / "plugins" / "marketplace.json", json.dumps(codex_market, indent=2) + "\n"),
             _write(skill_dir / "SKILL.md", skill.render()), *_supporting(skill_dir, skill),
             _write(skill_dir / "provenance.json", _json(prov)),
             _write(root / "README.md", readme)]
    return ExportResult(format="plugin", root=root, files=files, skill_name=skill.name,
                        install=f"claude plugin marketplace add {root} && claude plugin install {plugin_name}@{marketplace}"
                                f"  (or try it: claude --plugin-dir {root}); Codex: codex plugin marketplace add {root} "
                                f"&& codex plugin add {plugin_name}@{marketplace}")


# helpers ----------------------------------------------------------------------------------------------
def _fresh(root: Path, force: bool) -> Path:
    if root.exists() and not root.is_dir():
        raise BadInput(f"{root} exists and is not a folder")
    if root.exists() and any(root.iterdir()) and not force:
        raise BadInput(f"{root} already exists and is not empty: pass --force to overwrite it, or pick another --out")
    writable_output(root / "provenance.json", "the export to")
    return root


def _supporting(folder: Path, skill: Skill) -> list[Path]:
    """A folder skill's supporting files, beside its SKILL.md (where its text points to them)."""
    return [_write(folder / rel, text) for rel, text in skill.files.items()]


def _write(path: Path, text: str) -> Path:
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise BadInput(f"cannot write {path}: {e.strerror or type(e).__name__}: pick another --out") from None
    return path


def _json(model: BaseModel) -> str:
    return model.model_dump_json(indent=2) + "\n"
