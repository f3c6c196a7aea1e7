"""An instant OpenAI-compatible model server for the perf scripts: its own process, asyncio (uvloop when
installed), HTTP/1.1 keep-alive, about 0.1 ms per request, so what is measured is the client's cost.

It answers `POST .../chat/completions` with `perf.peer_replies.reply_text` (the target and optimizer
answers every compared tool understands), counts the calls per model and keeps the times of the first
and the last one. `GET /stats` returns them; `POST /reset` clears them. The tests' scripted server
(tests/fakes/server.py) is the behavioural fake; this one only has to be fast.

    python perf/instant_server.py [--port 0]     # first stdout line: the base URL (`.../v1` for clients)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.peer_replies import reply_text  # noqa: E402

HOST = "127.0.0.1"


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.by_model: dict[str, int] = {}
        self.first: float | None = None
        self.last: float | None = None

    def count(self, model: str) -> None:
        now = time.time()
        self.by_model[model] = self.by_model.get(model, 0) + 1
        self.first = self.first or now
        self.last = now

    def as_dict(self) -> dict:
        return {"calls": sum(self.by_model.values()), "by_model": self.by_model, "first_call_at": self.first,
                "last_call_at": self.last}


def completion(body: dict, text: str) -> bytes:
    words = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4 + 1
    return json.dumps({
        "id": "chatcmpl-instant", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": words, "completion_tokens": len(text) // 4 + 1,
                  "total_tokens": words + len(text) // 4 + 1},
    }).encode()


class Http(asyncio.Protocol):
    def __init__(self, stats: Stats) -> None:
        self.stats, self.buf, self.transport = stats, b"", None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            raw = self.buf[head_end + 4: head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length:]
            method, path = head.split(" ", 2)[:2]
            self.respond(method, path, raw)

    def respond(self, method: str, path: str, raw: bytes) -> None:
        status, out = 200, b"{}"
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            body = json.loads(raw or b"{}")
            model = str(body.get("model", ""))
            self.stats.count(model)
            schema = (body.get("response_format") or {}).get("json_schema")
            out = completion(body, reply_text(model, schema is not None))
        elif path.startswith("/stats"):
            out = json.dumps(self.stats.as_dict()).encode()
        elif path.startswith("/reset"):
            self.stats.reset()
        else:
            status, out = 404, b'{"error": {"message": "no such route"}}'
        reason = "OK" if status == 200 else "Not Found"
        self.transport.write(  # type: ignore[union-attr]
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(out)}\r\n"
            f"Connection: keep-alive\r\n\r\n".encode() + out)


async def serve(port: int) -> None:
    stats = Stats()
    server = await asyncio.get_running_loop().create_server(lambda: Http(stats), HOST, port, backlog=1024)
    print(f"http://{HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    try:
        import uvloop  # type: ignore

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
