"""The model relay: agents reach their model through it, and never hold the provider key.

The relay is a small HTTP server on 127.0.0.1 in the skillopt process. Each rollout gets a lease:
a random token, worthless anywhere else, and the relay's URL for its upstream (the same path on
the relay's address). The agent sends the token where it would send a key (`x-api-key`,
`Authorization: Bearer`, `api-key`); the relay finds the lease, puts the real key in place of the
token, and forwards the request to the upstream's origin, streaming the answer back (SSE included).
The key is masked in whatever comes back (a provider that echoes it in an error body), so it never
reaches the agent. A lease ends with its rollout; its token is then refused.

    with Relay() as relay, relay.lease("https://api.anthropic.com", key) as ticket:
        env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"] = ticket.base_url, ticket.token

Requests only go to the lease's upstream origin, under its base path. On the vLLM path the
upstream is the token-capture proxy's per-rollout URL, so capture keeps working behind the relay.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlsplit

import httpx

HOST = "127.0.0.1"
MASK = "***"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "trailers", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
NOT_RETURNED = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Ticket:
    """What the agent gets: the relay's base URL for its upstream, and its token."""

    base_url: str
    token: str


@dataclass(frozen=True)
class _Lease:
    origin: str  # scheme://host[:port] of the upstream
    base_path: str  # requests must stay under it
    key: str


class Relay:
    """The relay of one run; a context manager (see the module docstring). Thread-safe.

    `lease` raises only for an upstream URL that is not http(s). Requests with an unknown token,
    or outside the lease's base path, are answered 401 / 403 and never forwarded.
    """

    def __init__(self, host: str = HOST, timeout_s: float = 600.0):
        self.host, self.timeout_s = host, timeout_s
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._client: httpx.Client | None = None
        self.forwarded = 0

    # lifecycle ------------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._server is not None:
            return self
        # trust_env: proxies and CA bundles as for every other model client (the agents' own were theirs)
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s, connect=30.0), follow_redirects=False,
                                    limits=httpx.Limits(max_keepalive_connections=32))
        server = _RelayServer((self.host, 0), _Handler, self)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="skillopt-relay",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        assert self._server is not None, "the relay is not running: call start()"
        return f"http://{self.host}:{self._server.server_address[1]}"

    # leases ---------------------------------------------------------------------------------------
    @contextmanager
    def lease(self, upstream: str, key: str) -> Iterator[Ticket]:
        """A token for `upstream` (a base URL) that the relay swaps for `key`, valid inside the block."""
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the relay needs an http(s) upstream URL, not {upstream!r}")
        netloc = parts.netloc.rsplit("@", 1)[-1]  # credentials in the URL stay out of the Host header
        base_path = parts.path.rstrip("/")
        token = "skr-" + secrets.token_urlsafe(24)
        with self._lock:
            self._leases[token] = _Lease(f"{parts.scheme}://{netloc}", base_path, key)
        try:
            yield Ticket(self.address + base_path, token)
        finally:
            with self._lock:
                self._leases.pop(token, None)

    def _find(self, headers: dict[str, str]) -> tuple[str, _Lease] | None:
        with self._lock:
            for value in headers.values():
                for token, lease in self._leases.items():
                    if token in value:
                        return token, lease
        return None


class _RelayServer(ThreadingHTTPServer):
    """The relay's HTTP server: its handlers reach the `Relay` through it."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], relay: Relay):
        super().__init__(address, handler)
        self.relay = relay


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "skillopt-relay"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._relay()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _relay(self) -> None:
        assert isinstance(self.server, _RelayServer)  # the only server this handler serves
        relay = self.server.relay
        body = self._body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        found = relay._find(headers)
        if found is None:
            return self._refuse(401, "skillopt relay: unknown or expired token")
        token, lease = found
        path = self.path if self.path.startswith("/") else "/" + self.path
        if lease.base_path and not (path == lease.base_path or path.startswith(lease.base_path + "/")
                                    or path.startswith(lease.base_path + "?")):
            return self._refuse(403, f"skillopt relay: only paths under {lease.base_path} are forwarded")
        out = {k: v.replace(token, lease.key) for k, v in headers.items() if k not in HOP_BY_HOP}
        out["accept-encoding"] = "identity"  # plain bodies, so the key can be masked in them
        assert relay._client is not None
        relay.forwarded += 1
        try:
            try:
                with relay._client.stream(self.command, lease.origin + path, headers=out, content=body) as resp:
                    self._answer(resp, lease.key)
            except httpx.HTTPError as e:
                if not self._started:
                    self._refuse(502, f"skillopt relay: upstream unreachable: {type(e).__name__}")
        except (BrokenPipeError, ConnectionResetError):  # the agent is gone (a stopped run): nothing to tell it
            self.close_connection = True

    _started = False

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, resp: httpx.Response, key: str) -> None:
        self._started = True
        self.send_response_only(resp.status_code)
        for k, v in resp.headers.multi_items():
            if k.lower() not in NOT_RETURNED:
                self.send_header(k, v.replace(key, MASK) if key else v)
        body = self.command != "HEAD" and resp.status_code not in (204, 304)
        if body:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if not body:
            return
        mask = _Masker(key)
        for chunk in resp.iter_raw():
            self._chunk(mask.feed(chunk))
        self._chunk(mask.flush())
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def _refuse(self, status: int, message: str) -> None:
        data = ('{"type": "error", "error": {"type": "relay_error", "message": "%s"}}' % message).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class _Masker:
    """Replaces `key` in a byte stream, holding back just enough to catch a key split across chunks."""

    def __init__(self, key: str):
        self.key = key.encode() if len(key) >= 8 else b""
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.key:
            return chunk
        data = (self.held + chunk).replace(self.key, MASK.encode())
        keep = next((k for k in range(min(len(self.key) - 1, len(data)), 0, -1) if data.endswith(self.key[:k])), 0)
        self.held = data[len(data) - keep:]
        return data[:len(data) - keep]

    def flush(self) -> bytes:
        out, self.held = self.held, b""
        return out
