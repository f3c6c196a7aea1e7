"""`skillopt config show`: the configuration a run would use, resolved exactly as `run` resolves it."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from skillopt.cli.app import Globals, app, console, load_env, new_app
from skillopt.config import PRESETS

config_app = new_app("Show the resolved configuration.")
app.add_typer(config_app, name="config")


@config_app.command("show", help=f"""Print the configuration `skillopt run` would use with these options, as it writes
it to the run's config.yaml (secrets masked): defaults < --preset < --config < --set < flags, and the
models chosen when none is given. Every setting is listed; `--set section.key=value` changes any.

Example: skillopt config show --preset quick --set train.epochs=3   (presets: {', '.join(PRESETS)})""")
def show(
    preset: str = typer.Option(None, "--preset", show_default="none", help=f"Settings preset: {', '.join(PRESETS)}."),
    config: Path = typer.Option(None, "--config", show_default="none", help="YAML config file."),
    overrides: list[str] = typer.Option(None, "--set", show_default="none", help="Dotted override, repeatable."),
    benchmark: str = typer.Option(None, "--benchmark", "-b", show_default="gsm8k", help="Benchmark name or .jsonl path."),
    harness: str = typer.Option(None, "--harness", show_default="chat", help="chat | claude-code | codex | mini-swe-agent"),
    target_model: str = typer.Option(None, "--target-model", "--target_model", show_default="see run --help",
                                     help="Model spec of the agent."),
    optimizer_model: str = typer.Option(None, "--optimizer-model", "--optimizer_model", show_default="see run --help",
                                        help="Model spec of the optimizer."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    from skillopt.api import resolved_config
    notes: list[str] = []
    data = resolved_config(benchmark, config=config or Globals.config, preset=preset, set=list(overrides or []),
                           env=load_env(), harness=harness, target_model=target_model,
                           optimizer_model=optimizer_model, notes=notes)
    for n in notes:
        console.print(f"note: {n}", markup=False)
    if as_json:
        import json

        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
