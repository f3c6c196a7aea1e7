"""llama.cpp's own HTTP server (the `xllamacpp` wheel, no compiler) for one local model, in a child
process on 127.0.0.1: its own session, so `stop()` kills the whole group; it exits by itself when the
parent dies (its stdin pipe closes, and it also polls its parent pid). The server speaks OpenAI chat
completions (with `response_format` JSON schemas and logprobs), completions, Anthropic Messages and
the Responses API, with prompt-prefix caching and continuous batching over parallel slots.

Slots: one per request a run has in flight (its concurrency, `ensure_server(name, slots=N)`), all
sharing one KV cache (`kv_unified`): on a CPU, llama.cpp decodes several sequences per step for
nearly the cost of one, and memory does not grow with the slots. Prompt-prefix reuse is kept (each
slot caches its prompt; a new request goes to the slot whose cached prefix matches best).

`ensure_server(name)` is the one shared server per (process, model), started lazily and restarted
after a crash.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import MissingExtra
from skillopt.models.local.registry import (
    DEFAULT_MODEL, HOST, MAX_SLOTS, LocalServerError, cpu_threads, default_cache_dir, get_model,
)
from skillopt.models.local.weights import weights_path

# -- the server ----------------------------------------------------------------------------------

_RUNNING: set[LocalServer] = set()
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an HTTP proxy


class LocalServer:
    """llama.cpp's HTTP server for one model, in a child process on 127.0.0.1.

    `start()` returns once the server answers `/health`; `base_url` is `http://127.0.0.1:PORT`
    (OpenAI clients add `/v1`). A busy `port` is replaced by a free one. `stop()` kills the whole
    process group; it also runs at exit. The child exits by itself when this process dies.
    """

    def __init__(self, name: str = DEFAULT_MODEL, port: int | None = None, slots: int | None = None,
                 ctx_per_slot: int | None = None, threads: int | None = None, reply_tokens: int | None = None,
                 cache_dir: Path | None = None, startup_timeout_s: float = 180.0, draft: str | None = None,
                 draft_max: int = 0, lookup: bool = False):
        self.model = get_model(name)
        self.port = port or 0
        self.slots = min(MAX_SLOTS, slots or self.model.slots)
        self.ctx_per_slot = ctx_per_slot or self.model.ctx_per_slot
        self.reply_tokens = reply_tokens or self.model.reply_tokens
        self._threads_asked = threads  # None: the CPUs free at each start (`registry.threads_for`)
        self.threads = self._prompt_threads = 0  # set by `_spawn`
        self.cache_dir = cache_dir or default_cache_dir()
        self.startup_timeout_s = startup_timeout_s
        # speculative decoding (perf/local_model.py measures it): a smaller model of the same tokenizer drafts
        # `draft_max` tokens the model checks in one step, or (`lookup`) drafts come from n-grams of the context
        self.draft, self.draft_max, self.lookup = (get_model(draft).name if draft else None), draft_max, lookup
        self.owner_pid = os.getpid()
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._lock = threading.RLock()

    @property
    def base_url(self) -> str:
        if not self.port or self._proc is None:
            raise LocalServerError(f"the local server for {self.model.name} is not running: call start()")
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path:
        return self.cache_dir / "logs" / f"{self.model.name}.log"

    @property
    def batch_threads(self) -> int:
        """Threads for batches of more than one token. With several slots, llama.cpp decodes their
        tokens together as such a batch at every step: it then gets the generation threads (the CPUs
        free when the server started, `registry.threads_for`), since threads that meet at a barrier
        per op stall when another process takes a core. One slot: every CPU for prompts."""
        return self.threads if self.slots > 1 else self._prompt_threads

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when the server process is up and `/health` answers 200."""
        if not self.alive():
            return False
        try:
            with _LOOPBACK.open(f"{self.base_url}/health", timeout=timeout_s) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, LocalServerError):
            return False

    def start(self) -> LocalServer:
        """Start the server (no-op when running); raise `LocalServerError` with its log when it fails."""
        with self._lock:
            if self.alive():
                return self
            if importlib.util.find_spec("xllamacpp") is None:
                raise MissingExtra("the local model", "local", "xllamacpp")
            gguf = weights_path(self.model.name, cache_dir=self.cache_dir)
            try:
                self._spawn(gguf)
                self._wait_healthy()
            except BaseException:  # Ctrl-C or a failed start: leave no child behind
                self.stop()
                raise
            _RUNNING.add(self)
            return self

    def _spawn(self, gguf: Path) -> None:
        generation, prompt = cpu_threads()
        self.threads = self._threads_asked or generation
        self._prompt_threads = max(self.threads, prompt)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_path.is_file() and self.log_path.stat().st_size > 20_000_000:
            os.replace(self.log_path, self.log_path.with_suffix(".log.1"))
        cmd = [sys.executable, "-m", "skillopt.models.local", "child", str(gguf), "--alias", self.model.name,
               "--port", str(self.port), "--slots", str(self.slots), "--ctx", str(self.ctx_per_slot),
               "--kv", str(max(self.model.kv_tokens, self.ctx_per_slot)),
               "--parent", str(os.getpid()), "--threads", str(self.threads),
               "--batch-threads", str(self.batch_threads), "--reply-tokens", str(self.reply_tokens)]
        if self.draft:
            cmd += ["--draft", str(weights_path(self.draft, cache_dir=self.cache_dir)), "--draft-max", str(self.draft_max)]
        if self.lookup:
            cmd += ["--lookup"]
        ready_r, ready_w = os.pipe()
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start {self.model.name}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    cmd + ["--ready-fd", str(ready_w)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(ready_w,), start_new_session=True, close_fds=True)
            finally:
                os.close(ready_w)
        try:
            self.port = self._read_ready(ready_r)
        finally:
            os.close(ready_r)

    def _read_ready(self, fd: int) -> int:
        """The child writes one JSON line `{"port": N}` once the model is loaded and the port bound."""
        deadline, buf = time.monotonic() + self.startup_timeout_s, b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                buf += chunk
                if b"\n" in buf or not chunk:
                    break
            elif self._proc.poll() is not None:
                break
        try:
            return int(json.loads(buf.decode().splitlines()[0])["port"])
        except (ValueError, IndexError, KeyError):
            raise self._failure("did not start") from None

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.healthy():
                return
            if not self.alive():
                break
            time.sleep(0.1)
        raise self._failure("started but never answered /health")

    def _failure(self, what: str) -> LocalServerError:
        code = self._proc.poll() if self._proc else None
        try:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        detail = f" (exit code {code})" if code is not None else ""
        last = f": {' | '.join(tail)}" if tail else ""
        return LocalServerError(f"the local llama.cpp server for {self.model.name} {what}{detail}; "
                                f"log {self.log_path}{last}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the child and its process group; safe to call twice, from atexit, or after a crash."""
        with self._lock:
            proc, self._proc = self._proc, None
            _RUNNING.discard(self)
            if proc is None:
                return
            if proc.stdin:
                try:
                    proc.stdin.close()  # the child exits on EOF
                except OSError:
                    pass
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is not None:
                    break
                try:
                    os.killpg(proc.pid, sig)  # its own session: the group id is its pid
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    continue
            if proc.poll() is None:
                proc.wait()

    def restart(self) -> LocalServer:
        """Stop and start again, on the same port when it is still free (clients keep their URL)."""
        with self._lock:
            self.stop()
            self.restarts += 1
            return self.start()

    def at_work(self) -> bool:
        """Whether a slot is reading a prompt or generating now (True when `/slots` does not answer)."""
        try:
            with _LOOPBACK.open(f"{self.base_url}/slots", timeout=10) as r:
                slots = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError, LocalServerError):
            return True
        return not isinstance(slots, list) or any(isinstance(s, dict) and s.get("is_processing") for s in slots)

    def retune(self) -> tuple[int, int] | None:
        """Follow the machine: when the CPUs free now call for another thread count than the server
        runs with (`registry.threads_for`), and no slot is at work, restart it with that many (same
        port; the prompt cache is lost). Returns (old, new) threads when it restarted, else None.
        A server started with `threads=` keeps them."""
        with self._lock:
            if self._threads_asked or not self.alive():
                return None
            generation, _ = cpu_threads()
            if generation == self.threads or self.at_work():
                return None
            old = self.threads
            self.restart()
            return old, self.threads

    def ensure_running(self) -> LocalServer:
        """Start if never started; restart if the child died (crash recovery)."""
        with self._lock:
            if self._proc is not None and not self.alive():
                return self.restart()
            return self.start()

    def __enter__(self) -> LocalServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} on port {self.port}" if self.alive() else "stopped"
        return f"LocalServer({self.model.name!r}, {state})"


_SERVERS: dict[str, LocalServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server_entry(name: str) -> LocalServer:
    model = get_model(name)
    server = _SERVERS.get(model.name)
    if server is None or server.owner_pid != os.getpid():  # a forked child starts its own
        server = _SERVERS[model.name] = LocalServer(model.name)
    return server


@dataclass(frozen=True)
class ServedElsewhere:
    """A model this process reaches at `base_url` and another process serves (`serve_elsewhere`)."""

    base_url: str


_ELSEWHERE: dict[str, Callable[[int | None], str]] = {}


def serve_elsewhere(name: str, locate: Callable[[int | None], str]) -> None:
    """From now on, `ensure_server(name)` in this process is the server `locate(reply_tokens)` names
    (asked at every call: it starts that server, or restarts it after a crash), not one of this
    process's own. A Ray worker uses its node's server this way (engine/ray_worker.py)."""
    _ELSEWHERE[get_model(name).name] = locate


def ensure_server(name: str = DEFAULT_MODEL, reply_tokens: int | None = None) -> LocalServer | ServedElsewhere:
    """The one server of this process for `name`: started on first use, restarted if it died.

    `reply_tokens` sets the reply length of requests without a cap when this call starts the server
    (Codex's `max_output_tokens`: it sends none); a running server keeps its own.
    """
    locate = _ELSEWHERE.get(get_model(name).name)
    if locate is not None:
        return ServedElsewhere(locate(reply_tokens))
    with _SERVERS_LOCK:
        server = _server_entry(name)
        if reply_tokens and not server.alive():
            server.reply_tokens = reply_tokens
        return server.ensure_running()


def reserve_slots(name: str, slots: int) -> None:
    """Size the server of `name` for `slots` requests in flight (a run's concurrency), before it
    starts; a running server with fewer slots is restarted with that many, one with more is kept.
    Nothing starts here: the first `ensure_server` does, with its own reply length."""
    with _SERVERS_LOCK:
        server = _server_entry(name)
        wanted = max(1, min(slots, MAX_SLOTS))
        if wanted > server.slots:
            server.slots = wanted
            if server.alive():
                server.restart()


def retune_all() -> list[str]:
    """`LocalServer.retune` for every server this process started; a line for each one that changed."""
    lines = []
    for server in list(_RUNNING):
        if server.owner_pid == os.getpid() and (change := server.retune()) is not None:
            lines.append(f"local model {server.model.name}: {change[0]} -> {change[1]} thread(s), "
                         f"the CPUs free now")
    return lines


def stop_all() -> None:
    """Stop every server this process started (runs at exit)."""
    for server in list(_RUNNING):
        if server.owner_pid == os.getpid():
            server.stop()


atexit.register(stop_all)


# -- the child process and `python -m skillopt.models.local` -------------------------------------

def _watch_parent(parent: int) -> None:
    """Exit when the parent dies: its end of our stdin closes (EOF), or our parent pid changes."""
    def on_eof() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    def on_poll() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=on_eof, daemon=True).start()
    threading.Thread(target=on_poll, daemon=True).start()


def _child(args) -> None:
    """Run llama.cpp's server in this process until told to stop or orphaned."""
    _watch_parent(args.parent)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: os._exit(0))
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.n_parallel = args.slots
    params.cont_batching = True  # one decode step serves every slot that has work
    params.kv_unified = True  # one KV cache shared by the slots: memory independent of their number
    params.n_ctx = args.kv or 2 * args.ctx
    params.use_jinja = True  # the GGUF's own chat template; needed for tools and response_format
    params.cache_prompt = True
    params.cache_ram_mib = 1024  # bound the host-memory prompt cache
    if args.reply_tokens:
        params.n_predict = args.reply_tokens  # llama.cpp: the default of requests without a cap, not a ceiling
    params.n_threads_http = max(32, 4 * args.slots)  # idle keep-alive connections each hold one
    params.verbosity = args.verbosity
    if args.threads:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = max(args.threads, args.batch_threads)
    params.hostnames = [HOST]
    from skillopt.models.local.speculative import configure

    configure(params, args)
    server = None
    for port in dict.fromkeys([args.port, 0]):  # a busy port: let the OS pick a free one
        params.port = port
        try:
            server = xllamacpp.Server(params)
            break
        except RuntimeError as e:
            print(f"skillopt: llama.cpp server did not start on port {port}: {e}", file=sys.stderr, flush=True)
    if server is None:
        os._exit(3)
    port = int(server.listening_address.rsplit(":", 1)[1])
    os.write(args.ready_fd, (json.dumps({"port": port, "pid": os.getpid()}) + "\n").encode())
    os.close(args.ready_fd)
    threading.Event().wait()


