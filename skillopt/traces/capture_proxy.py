"""The child process of token capture: a LightningStore server and agentlightning's LLMProxy.

`TokenCapture` (skillopt.traces.tokens) starts it as `python -m skillopt.traces.capture_proxy serve
CONFIG_JSON`; it prints one JSON ready line with its two ports and ends when its stdin closes. Only
this process imports agentlightning / LiteLLM. The ASGI middlewares here count each rollout's model
calls and send streamed calls to the server unstreamed (LiteLLM drops token ids from streams),
replaying the finished answer to the client as the SSE events of its API, text and tool input
unchanged. See skillopt.traces.tokens for the whole picture.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

HOST = "127.0.0.1"
MODEL_ROUTES = ("/chat/completions", "/messages", "/responses")
SPAN_MEMORY_BYTES = 2 << 30


def url_host(host: str) -> str:
    """The address a client dials for a server bound to `host` (a wildcard bind is dialled locally)."""
    return HOST if host in ("0.0.0.0", "::", "") else host


_ROLLOUT = re.compile(r"^/rollout/([^/]+)/attempt/[^/]+(/.*)?$")


class _Plumbing:
    """Outermost ASGI middleware of the proxy: asks for plain (not gzip) bodies, so the stream
    replay can read them; counts each rollout's model calls; serves `GET /skillopt/calls/<id>`."""

    calls: ClassVar[dict[str, list[int]]] = {}  # rollout id -> [started, done], in the proxy's process

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path.startswith("/skillopt/calls/"):
            started, done = self.calls.get(path.rsplit("/", 1)[-1], [0, 0])
            return await _send_json(send, 200, {"started": started, "done": done})
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}
        match = _ROLLOUT.match(path)
        if not (match and scope["method"] == "POST" and path.endswith(MODEL_ROUTES)):
            return await self.app(scope, receive, send)
        counts = self.calls.setdefault(match.group(1), [0, 0])
        counts[0] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            counts[1] += 1


async def read_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request (it may come in several messages)."""
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return raw


class _Unstreamed:
    """Streamed model calls reach LiteLLM unstreamed (it drops token ids from streams); the finished
    answer goes back to the client as the SSE events of its API, text and tool input unchanged."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        api = next((a for a, route in _APIS.items() if scope.get("path", "").endswith(route)), None)
        if scope["type"] != "http" or scope["method"] != "POST" or api is None:
            return await self.app(scope, receive, send)
        raw = await read_body(receive)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        streamed = isinstance(body, dict) and bool(body.get("stream"))
        usage = streamed and bool((body.get("stream_options") or {}).get("include_usage"))
        if streamed:
            raw = json.dumps({k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}).encode()
            headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-length", b"accept")]
            scope = {**scope, "headers": headers + [(b"content-length", str(len(raw)).encode()),
                                                    (b"accept", b"application/json")]}
        done = False

        async def replay() -> dict:
            nonlocal done
            if done:
                return {"type": "http.disconnect"}
            done = True
            return {"type": "http.request", "body": raw, "more_body": False}

        if not streamed:
            return await self.app(scope, replay, send)
        head: dict = {}
        chunks: list[bytes] = []

        async def hold(message: dict) -> None:
            if message["type"] == "http.response.start":
                head.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, replay, hold)
        data = b"".join(chunks)
        try:
            answer = json.loads(data) if head.get("status") == 200 else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            await send(head)
            return await send({"type": "http.response.body", "body": data})
        keep = [(k, v) for k, v in head.get("headers", []) if k.lower() not in _NOT_COPIED]
        await send({"type": "http.response.start", "status": 200, "headers": keep + [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]})
        for event in _REPLAY[api](answer, usage):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


_APIS = {"chat": "/chat/completions", "messages": "/messages", "responses": "/responses"}
_NOT_COPIED = (b"content-length", b"content-type", b"content-encoding", b"transfer-encoding")


def _sse(data: Any, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def chat_events(answer: dict[str, Any], usage: bool = False) -> Iterator[bytes]:
    """A chat completion as `chat.completion.chunk` events: text and each tool call in one delta."""
    head = {k: answer.get(k) for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}
    for choice in answer.get("choices") or []:
        i, msg = choice.get("index", 0), choice.get("message") or {}
        deltas = [{"role": "assistant", "content": ""}]
        if msg.get("reasoning_content"):
            deltas.append({"reasoning_content": msg["reasoning_content"]})
        if msg.get("content"):
            deltas.append({"content": msg["content"]})
        deltas += [{"tool_calls": [{"index": n, **call}]} for n, call in enumerate(msg.get("tool_calls") or [])]
        for delta in deltas:
            yield _sse({**head, "choices": [{"index": i, "delta": delta, "finish_reason": None}]})
        yield _sse({**head, "choices": [{"index": i, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if usage:
        yield _sse({**head, "choices": [], "usage": answer.get("usage")})
    yield _sse("[DONE]")


def messages_events(answer: dict[str, Any], usage: bool = False) -> Iterator[bytes]:
    """An Anthropic message as its named SSE events: each block's text or input in one delta."""
    start = {**answer, "content": [], "stop_reason": None, "stop_sequence": None}
    yield _sse({"type": "message_start", "message": start}, "message_start")
    for i, block in enumerate(answer.get("content") or []):
        kind = block.get("type")
        empty = {"text": {"text": ""}, "thinking": {"thinking": ""}, "tool_use": {"input": {}}}.get(kind, {})
        yield _sse({"type": "content_block_start", "index": i, "content_block": {**block, **empty}},
                   "content_block_start")
        deltas = {"text": [{"type": "text_delta", "text": block.get("text", "")}],
                  "thinking": [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                               {"type": "signature_delta", "signature": block.get("signature", "")}],
                  "tool_use": [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}],
                  }.get(kind, [])
        for delta in deltas:
            yield _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": i}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": answer.get("stop_reason"),
                                                   "stop_sequence": answer.get("stop_sequence")},
                "usage": answer.get("usage") or {}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def responses_events(answer: dict[str, Any], usage: bool = False) -> Iterator[bytes]:
    """A finished Responses API object as the SSE events a streaming client expects."""
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    started = {**answer, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(answer.get("output") or []):
        at = {"item_id": item.get("id", ""), "output_index": index}
        if item.get("type") == "message":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            for ci, part in enumerate(item.get("content") or []):
                yield event("response.content_part.added", **at, content_index=ci, part={**part, "text": ""})
                if part.get("type") == "output_text":
                    yield event("response.output_text.delta", **at, content_index=ci, delta=part.get("text", ""),
                                logprobs=[])
                    yield event("response.output_text.done", **at, content_index=ci, text=part.get("text", ""),
                                logprobs=[])
                yield event("response.content_part.done", **at, content_index=ci, part=part)
        elif item.get("type") == "function_call":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
            yield event("response.function_call_arguments.delta", **at, delta=item.get("arguments", ""))
            yield event("response.function_call_arguments.done", **at, name=item.get("name", ""),
                        arguments=item.get("arguments", ""))
        else:
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    status = answer.get("status") or "completed"
    yield event(f"response.{status}", response={**answer, "status": status})


_REPLAY = {"chat": chat_events, "messages": messages_events, "responses": responses_events}


async def _send_json(send: Any, status: int, obj: Any) -> None:
    body = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve(config: dict[str, Any]) -> None:
    """The child: a store server and the proxy; prints one JSON ready line; ends when stdin closes."""
    host = config.get("host") or HOST
    store_port, proxy_port = _free_port(host), _free_port(host)
    # The child is its own process edge: these settings are for LiteLLM / OpenTelemetry only.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://{url_host(host)}:{store_port}/v1/traces"
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    from agentlightning import InMemoryLightningStore, LightningStoreServer, LLMProxy

    async def run() -> None:
        store = LightningStoreServer(
            InMemoryLightningStore(thread_safe=True, eviction_memory_threshold=SPAN_MEMORY_BYTES),
            host=host, port=store_port)
        await store.start()
        shim = await _start_shim(config["llamacpp"]) if config.get("llamacpp") else None
        if shim is not None:  # LiteLLM asks the shim, which asks llama.cpp and adds the token ids
            for model in config["model_list"]:
                model["litellm_params"]["api_base"] = f"http://{HOST}:{shim.config.port}/v1"
        proxy = LLMProxy(
            port=proxy_port, host=host, store=store, model_list=config["model_list"], launch_mode="mp",
            litellm_config={"general_settings": {"dangerously_permit_weak_or_unset_master_key": True}},
            middlewares=["rollout_attempt", _Unstreamed, _Plumbing],
            callbacks=["return_token_ids", "logprobs", "opentelemetry"],
        )
        await proxy.start()
        print(json.dumps({"ready": True, "store_port": store_port, "proxy_port": proxy_port}), flush=True)
        await asyncio.to_thread(_wait_for_parent)
        await proxy.stop()
        await store.stop()
        if shim is not None:
            shim.should_exit = True

    asyncio.run(run())


async def _start_shim(upstream: str) -> Any:
    """`TokenShim` in front of the llama.cpp server at `upstream`, on 127.0.0.1 (only LiteLLM, in
    this child, dials it); returns the running uvicorn server."""
    import uvicorn

    from skillopt.traces.llamacpp_tokens import TokenShim

    server = uvicorn.Server(uvicorn.Config(TokenShim(upstream), host=HOST, port=_free_port(HOST),
                                           log_level="warning", lifespan="off"))
    asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    return server


def _wait_for_parent() -> None:
    """Return when the parent closes our stdin (it stopped us, or it died)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "serve":
        raise SystemExit("usage: python -m skillopt.traces.capture_proxy serve CONFIG_JSON")
    serve(json.loads(args[1]))


if __name__ == "__main__":
    main()
