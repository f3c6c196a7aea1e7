"""A scripted fake model server speaking real HTTP on 127.0.0.1.

It answers OpenAI chat completions, Anthropic Messages and the OpenAI Responses API, streaming
(SSE) and not, in their official wire formats, so the real SDKs and the real Claude Code and
Codex binaries can talk to it. What it answers is decided by a script, a callable
``(FakeRequest) -> FakeReply | str`` (see ``tests.fakes.script``)::

    with FakeModelServer(rule_based(RULE, "Answer: 42", "Answer: ?")) as srv:
        client = OpenAI(base_url=srv.openai_url, api_key="x")
        ...
        assert srv.requests[0].path == "/v1/chat/completions"

Paths work with and without the ``/v1`` prefix. Standalone, for subprocess tests::

    python -m tests.fakes.server --port 0 --script MODULE:NAME   # first stdout line: the URL
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import signal
import socket
import sys
import threading
import time
import traceback
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, Self

from tests.fakes import wire_chat, wire_messages, wire_responses
from tests.fakes.parse import parse_request
from tests.fakes.script import (
    FakeReply,
    FakeRequest,
    Message,
    Script,
    ScriptFn,
    Tool,
    ToolCall,
    Usage,
    always,
    estimate_input_tokens,
    resolve,
    rule_based,
    sequence,
    system_contains,
    user_contains,
)
from tests.fakes.sse import new_id

__all__ = ["FakeModelServer", "FakeReply", "FakeRequest", "Message", "RecordedRequest", "Script", "ScriptError",
           "Tool", "ToolCall", "Usage", "always", "rule_based", "sequence", "system_contains", "user_contains"]

WIRES: dict[str, ModuleType] = {"chat": wire_chat, "messages": wire_messages, "responses": wire_responses}
MODEL_ROUTES = {"/chat/completions": "chat", "/messages": "messages", "/responses": "responses"}


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as received. ``path`` keeps the ``/v1`` prefix the client used;
    ``body`` is the parsed JSON (None when empty or not JSON); ``headers`` have lower-case
    names; ``api`` is "chat", "messages", "responses", "count_tokens", "models", "health" or
    None (unknown route); ``fake`` is what the script was given, for model calls."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    api: str | None
    fake: FakeRequest | None = None


class ScriptError(AssertionError):
    """Raised when leaving the server if the script raised while answering (it answered 500)."""


class FakeModelServer:
    """The fake server; a context manager that serves from a background thread.

    ``script`` may be replaced while serving (``srv.script = ...``). With ``check_errors``,
    leaving the ``with`` block raises ``ScriptError`` if the script raised. ``log_path``, when
    set, gets one JSON line per request received.
    """

    def __init__(self, script: ScriptFn | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 models: Iterable[str] = ("fake-model",), log_path: str | Path | None = None,
                 check_errors: bool = True):
        self.script: ScriptFn = script if script is not None else always("ok")
        self.models = list(models)
        self.log_path = Path(log_path) if log_path else None
        self.check_errors = check_errors
        self._address = (host, port)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> Self:
        self._httpd = _HTTPServer(self._address, _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"fake-model-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # idle keep-alive connections would otherwise linger
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.stop()
        if exc_type is None and self.check_errors and self._errors:
            raise ScriptError(f"the fake script raised {len(self._errors)} time(s); first: "
                              f"{self._errors[0]!r}") from self._errors[0]

    # addresses
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake server is not running")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``; also what the Anthropic SDK and Claude Code take."""
        return f"http://{self._address[0]}:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    # what happened
    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> list[FakeRequest]:
        """The model calls the script was asked to answer, in arrival order."""
        return [r.fake for r in self.requests if r.fake is not None]

    @property
    def errors(self) -> list[BaseException]:
        with self._lock:
            return list(self._errors)

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()
            self._errors.clear()

    # used by the handler threads
    def _record(self, rec: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(rec)
            if self.log_path is not None:
                line = {"method": rec.method, "path": rec.path, "query": rec.query, "api": rec.api,
                        "headers": rec.headers, "body": rec.body}
                with self.log_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(line) + "\n")

    def _answer(self, req: FakeRequest) -> FakeReply:
        try:
            return resolve(self.script, req)
        except Exception as e:  # noqa: BLE001 - reported on exit, answered as a server error
            traceback.print_exc(file=sys.stderr)
            with self._lock:
                self._errors.append(e)
            return FakeReply(text=f"fake script raised {e!r}", status=500)

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    owner: FakeModelServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else every small write waits ~40 ms for a delayed ACK
    server_version = "FakeModelServer/1.0"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, False)

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_HEAD = do_PUT = do_DELETE = do_GET

    # routing
    def _dispatch(self) -> None:
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def _route(self) -> None:
        owner = self.server.owner
        path, _, query = self.path.partition("?")
        route = path.rstrip("/")
        route = route[3:] if route.startswith("/v1/") else route
        headers = {k.lower(): v for k, v in self.headers.items()}
        raw = self._read_body(headers)
        body = _json_or_none(raw)
        post = self.command == "POST"
        api = MODEL_ROUTES.get(route) if post else None
        if post and route == "/messages/count_tokens":
            api = "count_tokens"
        elif not post and (route == "/models" or route.startswith("/models/")):
            api = "models"
        elif not post and route in ("/health", "/v1", ""):
            api = "health"
        fake = parse_request(api, body, headers, path) if api in WIRES and isinstance(body, dict) else None
        owner._record(RecordedRequest(self.command, path, query, headers, body, api, fake))
        if api in WIRES:
            return self._model_call(WIRES[api], fake)
        if api == "count_tokens" and isinstance(body, dict):
            return self._send_json(200, {"input_tokens": estimate_input_tokens(parse_request("messages", body))})
        if api == "models":
            return self._send_json(200, _models(owner.models, route))
        if api == "health":
            return self._send_json(200, {"status": "ok"})
        wire = wire_messages if "anthropic-version" in headers else wire_chat
        status = 400 if api == "count_tokens" else 404
        return self._send_json(status, wire.error_body(status, f"fake server: no route {self.command} {path}"))

    def _model_call(self, wire: ModuleType, req: FakeRequest | None) -> None:
        if req is None:
            return self._send_json(400, wire.error_body(400, "fake server: the request body is not a JSON object"))
        reply = self.server.owner._answer(req)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status >= 400:
            return self._send_json(reply.status, wire.error_body(reply.status, reply.error_message), reply.headers)
        if reply.raw is not None:
            return self._send_raw(reply.raw.encode())
        usage = reply.usage_for(req)
        if req.stream:
            return self._send_events(wire.events(req, reply, usage), reply.headers)
        return self._send_json(reply.status, wire.body(req, reply, usage), reply.headers)

    # HTTP plumbing
    def _read_body(self, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raw = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
        else:
            raw = self.rfile.read(int(headers.get("content-length") or 0))
        encoding = headers.get("content-encoding", "").lower()
        if encoding == "gzip":
            return gzip.decompress(raw)
        if encoding == "deflate":
            return zlib.decompress(raw)
        if encoding == "zstd":
            import zstandard  # only when a client compresses with zstd; pip install zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        return raw

    def _head(self, status: int, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        request_id = new_id("req_")
        self.send_header("x-request-id", request_id)
        self.send_header("request-id", request_id)
        for name, value in headers.items():
            self.send_header(name, value)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self._head(status, "application/json", headers or {})
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_raw(self, data: bytes) -> None:
        self._head(200, "application/json", {})
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: Iterable[bytes], headers: dict[str, str]) -> None:
        self._head(200, "text/event-stream; charset=utf-8", {"Cache-Control": "no-cache", **headers})
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return None


def _models(models: list[str], route: str) -> dict[str, Any]:
    """A model list (or one model) readable as both the OpenAI and the Anthropic shape."""
    def entry(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "fake", "type": "model",
                "display_name": name, "created_at": "2025-01-01T00:00:00Z"}

    if route.startswith("/models/"):
        return entry(route.removeprefix("/models/"))
    data = [entry(m) for m in models]
    return {"object": "list", "data": data, "has_more": False,
            "first_id": models[0] if models else None, "last_id": models[-1] if models else None}


def load_script(spec: str) -> ScriptFn:
    """``MODULE:NAME``: NAME is a script, or a class whose no-argument instance is one."""
    module_name, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--script wants MODULE:NAME, got {spec!r}")
    obj = getattr(importlib.import_module(module_name), name)
    return obj() if isinstance(obj, type) else obj


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="MODULE:NAME of a script (default: always answer --text)")
    parser.add_argument("--text", default="ok", help="the fixed answer when no --script is given")
    parser.add_argument("--log", help="append one JSON line per request received to this file")
    args = parser.parse_args(argv)
    script = load_script(args.script) if args.script else always(args.text)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with FakeModelServer(script, host=args.host, port=args.port, log_path=args.log, check_errors=False) as srv:
        print(srv.base_url, flush=True)
        while not stop.wait(0.5):
            pass


if __name__ == "__main__":
    main()
