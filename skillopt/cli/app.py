"""The root Typer app. User mistakes become one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from skillopt import __version__
from skillopt.errors import BadInput, SkilloptError

console = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


class _Group(TyperGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BadInput as e:
            console.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, highlight=False)
            raise typer.Exit(2) from None
        except SkilloptError as e:
            console.print(f"[bold red]error:[/] {escape(str(e))}")
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            console.print("interrupted")
            raise typer.Exit(130) from None


def new_app(help: str) -> typer.Typer:
    return typer.Typer(cls=_Group, help=help, no_args_is_help=True, add_completion=False,
                       rich_markup_mode=None, pretty_exceptions_enable=False)


app = new_app("skillopt: train agent skills (SKILL.md) with rollouts, reflection and gated edits.")


class Globals:
    runs_dir: Path = Path("runs")
    config: Path | None = None
    verbose: bool = False


def _version(value: bool) -> None:
    if value:
        typer.echo(f"skillopt {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Folder holding runs and skillopt.db."),
    config: Path = typer.Option(None, "--config", help="YAML config file (for run and eval)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="More output."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    if runs_dir.exists() and not runs_dir.is_dir():
        raise BadInput(f"--runs-dir {runs_dir} is a file, not a folder: pick a folder (it is made when missing)")
    Globals.runs_dir, Globals.config, Globals.verbose = runs_dir, config, verbose


def load_env() -> dict[str, str]:
    """The CLI edge reads the environment (and a .env file in the working folder) once. Every
    key-like value it holds is registered for redaction: it never reaches a file skillopt writes."""
    import os

    from dotenv import dotenv_values

    from skillopt.store.redact import register_secrets, secrets_in_environ

    values = {k: v for k, v in dotenv_values(".env").items() if v is not None} if Path(".env").exists() else {}
    environ = {**values, **os.environ}
    register_secrets(*secrets_in_environ(environ))
    return environ


def protect(cfg):
    """Register the secrets a resolved configuration holds (options under key-like names, `env`
    values, URL credentials) for redaction; returns `cfg`."""
    from skillopt.store.redact import register_secrets, secrets_in

    register_secrets(*secrets_in(cfg.model_dump(mode="json")))
    return cfg


def fail(message: str) -> None:
    raise BadInput(message)


# command -> the module that registers it; a known command imports only its own module (an
# evaluation need not import the report, compare and export code: ~0.4 s of a CLI start)
COMMAND_MODULES = {"run": "run", "eval": "run", "compare": "compare", "export": "export", "report": "report",
                   "runs": "runs", "traces": "traces", "models": "models", "benchmarks": "benchmarks"}
_VALUED = {"--runs-dir", "--config"}  # root options that take a value


def _command(argv: list[str]) -> str | None:
    it = iter(argv)
    for arg in it:
        if arg in _VALUED:
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


def register_commands(argv: list[str]) -> None:
    """Import the module of the command in `argv`, or every command module (help, unknown names)."""
    import importlib

    if "--version" in argv:  # answered by the root callback: no command needed
        return
    module = COMMAND_MODULES.get(_command(argv) or "")
    if module is not None:
        importlib.import_module(f"skillopt.cli.{module}")
    else:
        from skillopt.cli import commands  # noqa: F401  (registers every command group)


def main() -> None:
    register_commands(sys.argv[1:])
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
