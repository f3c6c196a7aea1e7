"""`skillopt export RUN[:vN] --format F --out DIR`: the trained skill, ready to deploy."""

from __future__ import annotations

from pathlib import Path

import typer

from skillopt.cli.app import Globals, app, console, out
from skillopt.report.export import FORMATS


@app.command(help=f"""Export a skill for an agent: {', '.join(FORMATS)}.

claude-skill: DIR/<name>/SKILL.md, for .claude/skills/ or ~/.claude/skills/.

codex-skill: DIR/<name>/SKILL.md, for .agents/skills/.

agents-md: DIR/<name>/AGENTS.md, a section to paste into AGENTS.md or CLAUDE.md.

plugin: DIR/<plugin>/ with .claude-plugin/plugin.json (and marketplace.json), .codex-plugin/plugin.json (and
.agents/plugins/marketplace.json) and skills/<name>/SKILL.md: a Claude Code plugin and a Codex plugin, each
folder its own local marketplace. The manifests carry --license (else the skill's own, else UNLICENSED).

skillopt's markers are stripped, the name and description are checked against the agents' rules, and
provenance.json records the run, version, benchmark, target model and scores.

Example: skillopt export RUN --format claude-skill --out .claude/skills""")
def export(
    ref: str = typer.Argument(..., help="RUN (its best version), RUN:vN, RUN:best or a SKILL.md path."),
    fmt: str = typer.Option(..., "--format", "-f", help=" | ".join(FORMATS)),
    out_dir: Path = typer.Option(..., "-o", "--output", "--out", help="Folder to write into."),
    name: str = typer.Option(None, "--name", help="Skill name to export under (default: the skill's own)."),
    description: str = typer.Option(None, "--description", help="Replace the skill's description."),
    plugin_name: str = typer.Option(None, "--plugin-name", help="Plugin name (plugin format; default: the skill name)."),
    license: str = typer.Option(None, "--license", show_default="the skill's license, else UNLICENSED",
                                help="SPDX license id for the plugin manifests (plugin format)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing export."),
) -> None:
    from skillopt.report.export import export_skill, provenance_for
    from skillopt.store.refs import resolve_skill_ref

    if fmt not in FORMATS:
        from skillopt.errors import BadInput

        raise BadInput(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    r = resolve_skill_ref(ref, Globals.runs_dir)
    if r.run is not None:
        from skillopt.engine.settings import data_change

        state, summary = r.run.read_state(), r.run.read_summary()
        if state is not None and state.status != "finished":
            console.print(f"note: run {r.run.run_id} is {state.status}; exporting {r.label} as it is now", markup=False)
        if summary is not None and (note := data_change(r.run.read_config().layer(), summary.data_hash)):
            console.print(f"warning: {note}", markup=False)
    result = export_skill(r.skill, fmt, out_dir, provenance_for(r), name=name, description=description,
                          plugin_name=plugin_name, force=force, license=license)
    for w in result.warnings:
        console.print(f"warning: {w}", markup=False)
    out.print(f"exported {r.label} as {fmt} skill {result.skill_name!r} to {result.root}", markup=False)
    for f in result.files:
        out.print(f"  {f}", markup=False, highlight=False)
    out.print(f"install: {result.install}", markup=False, highlight=False)
