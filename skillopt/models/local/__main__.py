"""`python -m skillopt.models.local serve NAME [--port P]` (and `child`, the server process itself)."""

from __future__ import annotations

import signal
import sys
import threading

from skillopt.errors import BadInput
from skillopt.models.local.registry import DEFAULT_MODEL
from skillopt.models.local.server import LocalServer, _child

def main(argv: list[str] | None = None) -> int:
    """`serve NAME [--port P]`: serve in the foreground, print the base URL, stop on Ctrl-C."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m skillopt.models.local")
    sub = ap.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve a local model on 127.0.0.1 until Ctrl-C")
    serve.add_argument("name", nargs="?", default=DEFAULT_MODEL)
    for flag, what in (("--port", "0 picks a free port"), ("--slots", "parallel requests"),
                       ("--ctx", "context tokens per slot"), ("--threads", "CPU threads for generation"),
                       ("--reply-tokens", "reply length for requests that set no max tokens")):
        serve.add_argument(flag, type=int, default=0, help=what)
    child = sub.add_parser("child")  # internal: the server process itself
    child.add_argument("model")
    for flag in ("--port", "--slots", "--ctx", "--kv", "--parent", "--ready-fd", "--threads", "--batch-threads",
                 "--reply-tokens"):
        child.add_argument(flag, type=int, default=0)
    child.add_argument("--alias", required=True)
    child.add_argument("--draft", default="")  # speculative decoding: the draft model's GGUF
    child.add_argument("--draft-max", type=int, default=0)  # tokens drafted per step (0: llama.cpp's default)
    child.add_argument("--lookup", action="store_true")  # speculative decoding from n-grams of the context
    child.add_argument("--verbosity", type=int, default=2)  # llama.cpp log level: 2 = warnings and errors
    args = ap.parse_args(argv)
    if args.cmd == "child":
        _child(args)
        return 0
    try:
        return _serve(args)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _serve(args) -> int:
    server = LocalServer(args.name, port=args.port or None, slots=args.slots or None,
                         ctx_per_slot=args.ctx or None, threads=args.threads or None,
                         reply_tokens=args.reply_tokens or None)
    done = threading.Event()
    try:
        server.start()  # Ctrl-C while loading raises KeyboardInterrupt; start() cleans up
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        if args.port and server.port != args.port:
            print(f"port {args.port} is in use: serving on {server.port}", file=sys.stderr)
        print(server.base_url, flush=True)
        print(f"serving {server.model.name} (pid {server.pid}): OpenAI {server.base_url}/v1, Anthropic "
              f"{server.base_url}; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not done.wait(1.0):
            if not server.alive():
                print(f"error: the server died; log {server.log_path}", file=sys.stderr)
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
