"""The root Typer app. User mistakes become one line on stderr and exit code 2, never a traceback.

Exit codes (the README lists them too): 0 finished, 1 failed (the work could not produce a result),
2 bad input (nothing was started), 3 stopped by a budget (resume it with `run --resume`),
130 interrupted (Ctrl-C; state saved), 143 terminated (SIGTERM: the same, from `timeout`, `docker stop`, ...).

Global options (`--runs-dir`, `--verbose`) are accepted before or after the subcommand;
`SKILLOPT_RUNS_DIR` sets the runs folder. `-h` is `--help` everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from skillopt import __version__
from skillopt.errors import BadInput, SkilloptError
from skillopt.progress.console import console  # stderr; the progress views print to it too

out = Console(highlight=False, soft_wrap=True)


EXIT_FINISHED, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
GLOBAL_VALUE_OPTIONS = ("--runs-dir",)  # global options that take a value
GLOBAL_FLAGS = ("--verbose", "-v")
HELP = {"help_option_names": ["-h", "--help"]}


def hoist_globals(args: list[str]) -> list[str]:
    """Move global options given after the subcommand to the front, where the root parses them:
    `skillopt run --resume ID --runs-dir D` == `skillopt --runs-dir D run --resume ID`."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        name = a.split("=", 1)[0]
        if name in GLOBAL_VALUE_OPTIONS:
            take = 1 if "=" in a else 2
            front += args[i:i + take]
            i += take
            continue
        if a in GLOBAL_FLAGS:
            front.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


class _Group(TyperGroup):
    def parse_args(self, ctx, args):
        if ctx.parent is None:  # the root: global options may come after the subcommand
            args = hoist_globals(list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BadInput as e:
            console.print(f"[bold red]error:[/] {escape(_masked(e))}", markup=True, highlight=False)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except SkilloptError as e:
            console.print(f"[bold red]error:[/] {escape(_masked(e))}")
            raise typer.Exit(EXIT_FAILED) from None
        except KeyboardInterrupt as e:
            from skillopt.cli.signals import interrupt_exit_code

            code = interrupt_exit_code()
            where = "" if Globals.runs_dir == Path("runs") else f" --runs-dir {Globals.runs_dir}"
            notes = [n + (where if "--resume" in n else "") for n in getattr(e, "__notes__", [])]
            console.print("; ".join(["interrupted" if code == EXIT_INTERRUPTED else "terminated (SIGTERM)", *notes]),
                          markup=False, highlight=False)
            raise typer.Exit(code) from None


def _masked(e: BaseException) -> str:
    """An error's message as stderr shows it: secrets masked, as on disk."""
    from skillopt.io.redact import redact

    return redact(str(e))


def new_app(help: str) -> typer.Typer:
    return typer.Typer(cls=_Group, help=help, no_args_is_help=True, add_completion=False,
                       rich_markup_mode=None, pretty_exceptions_enable=False, context_settings=HELP)


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
    ctx: typer.Context,
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", envvar="SKILLOPT_RUNS_DIR",
                                  help="Folder holding runs and skillopt.db (before or after the subcommand; "
                                       "env SKILLOPT_RUNS_DIR, also from .env)."),
    config: Path = typer.Option(None, "--config", help="YAML config file (for run, eval and config show)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="More output."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    source = ctx.get_parameter_source("runs_dir")
    if source is not None and source.name == "DEFAULT" and load_env().get("SKILLOPT_RUNS_DIR"):
        runs_dir = Path(load_env()["SKILLOPT_RUNS_DIR"])  # set in .env (the environment itself is read above)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise BadInput(f"--runs-dir {runs_dir} is a file, not a folder: pick a folder (it is made when missing)")
    Globals.runs_dir, Globals.config, Globals.verbose = runs_dir, config, verbose


def load_env() -> dict[str, str]:
    """The CLI edge reads the environment (and a .env file in the working folder) once. Every
    key-like value it holds is registered for redaction: it never reaches a file skillopt writes."""
    from skillopt.environ import read_environment

    return read_environment()


def fail(message: str) -> None:
    raise BadInput(message)


# command -> the module that registers it; a known command imports only its own module (an
# evaluation need not import the report, compare and export code: ~0.4 s of a CLI start)
COMMAND_MODULES = {"run": "run", "eval": "run", "compare": "compare", "export": "export", "report": "report",
                   "runs": "runs", "traces": "traces", "models": "models", "benchmarks": "benchmarks",
                   "config": "config_cmd", "harvest": "harvest", "adopt": "harvest"}
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

    command = _command(argv)
    module = COMMAND_MODULES.get(command or "")
    if module is not None:
        importlib.import_module(f"skillopt.cli.{module}")
    elif command is None and "--version" in argv:  # `skillopt --version`: the root answers, no command needed
        return
    else:
        from skillopt.cli import commands  # noqa: F401  (registers every command group)


def main() -> None:
    from skillopt.cli import signals

    signals.install()
    register_commands(sys.argv[1:])
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(signals.interrupt_exit_code())
