"""Shared by the perf scripts: the machine description written into every result, running a
command with its own wall time, CPU time and peak memory, writing a result file, and the quick
preset's tasks and seed skill."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "perf" / "results"
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # servers we start: never through a proxy


def stop_runs_on_sigterm() -> None:
    """`kill PID` of a perf script stops the run it started too: SIGTERM becomes KeyboardInterrupt,
    on which `subprocess.run` kills its child (whose llama.cpp server follows its parent). Without
    it a stopped script left its `skillopt run` and that run's server busy on the CPUs."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def machine() -> dict:
    """What the figures were measured on, and how busy it was (other users share this CPU)."""
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            mem_gib = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": mem_gib, "platform": platform.platform(),
            "python": platform.python_version(), "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


@dataclass(frozen=True)
class Measured:
    rc: int
    wall_s: float
    cpu_s: float  # user + system of the process and its children it waited for
    peak_rss_mib: float
    started_at: float  # time.time() at the start and at the exit, to line up with the server's clock
    ended_at: float
    stdout: str
    stderr: str

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("stdout", "stderr", "started_at", "ended_at"):
            d.pop(k)
        return d


def measure(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 3600) -> Measured:
    """Run `argv`; its own wall time, CPU time and peak RSS (os.wait4 on its pid)."""
    started, t0 = time.time(), time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = _communicate(proc, timeout)
    wall = time.perf_counter() - t0
    ru = proc._rusage  # type: ignore[attr-defined]
    return Measured(proc.returncode, round(wall, 3), round(ru.ru_utime + ru.ru_stime, 3),
                    round(ru.ru_maxrss / 1024, 1), started, started + wall, out, err)


def _communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    import threading

    chunks: dict[str, list[str]] = {"out": [], "err": []}

    def pump(stream, key):
        for line in stream:
            chunks[key].append(line)

    threads = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc._rusage = ru  # type: ignore[attr-defined]
    for t in threads:
        t.join(5)
    return "".join(chunks["out"]), "".join(chunks["err"])


def dir_size(path: Path) -> dict:
    files = nbytes = blocks = 0
    for root, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(root, n))
            files += 1
            nbytes += st.st_size
            blocks += st.st_blocks * 512
    return {"files": files, "bytes": nbytes, "disk_bytes": blocks}


def skillopt(*args: str) -> list[str]:
    return [sys.executable, "-m", "skillopt", *args]


def asks_afresh(code: Path = REPO, caches: tuple[str, ...] = ("seed_cache", "replay")) -> list[str]:
    """The settings that turn these caches off, at a commit that has them: an earlier run's kept rollouts
    and replies (engine/rollout_cache.py, models/replay.py) make a repeat of the same job instant, and
    its wall time would time nothing."""
    config = (code / "skillopt" / "config.py").read_text()
    return [x for name in caches if f"    {name}: bool" in config for x in ("--set", f"train.{name}=false")]


def uptime() -> str:
    """`uptime`'s line: the load the figures beside it were measured at."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def commit(code: Path = REPO, paths: tuple[str, ...] = ()) -> tuple[str, bool]:
    """The checkout's HEAD and whether it is clean (only `paths` when given, untracked files in them included)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=code, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths],
                           cwd=code, capture_output=True, text=True).stdout.strip()
    return head, not dirty


def write_json(path: Path, doc: dict) -> None:
    """Write a result file whole or not at all (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def write_result(name: str, doc: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


class InstantServer:
    """`perf/instant_server.py` in a child process (its own CPU, not this process's GIL)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> "InstantServer":
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, str(REPO / "perf" / "instant_server.py")], env=env,
                                     stdout=subprocess.PIPE, text=True)
        self.base_url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.base_url.startswith("http"):
            raise RuntimeError("the instant server did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()  # the server we started, by its handle
            self.proc.wait(10)

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    def _call(self, method: str, path: str) -> dict:
        req = urllib.request.Request(self.base_url + path, method=method, data=b"" if method == "POST" else None)
        with LOOPBACK.open(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def reset(self) -> None:
        self._call("POST", "/reset")

    def stats(self) -> dict:
        """{"calls", "by_model", "first_call_at", "last_call_at"} since the last reset."""
        return self._call("GET", "/stats")


def quick_preset_tasks(split: str) -> list:
    """The `split` tasks of the quick preset's benchmark, with its split sizes and seed."""
    from skillopt.benchmarks.base import SplitSizes
    from skillopt.benchmarks.registry import get_benchmark
    from skillopt.config import PRESETS

    preset = PRESETS["quick"]
    return list(get_benchmark(preset["benchmark"], SplitSizes(**preset["splits"])).tasks(split))


def quick_seed_skill():
    """The quick preset's seed skill (its benchmark's shipped SKILL.md)."""
    from skillopt.config import PRESETS
    from skillopt.skill import Skill

    return Skill.load(REPO / "skills" / PRESETS["quick"]["benchmark"] / "SKILL.md")


def stored_run(run: Path, optimizer: str):
    """A finished run's store, its settings with `optimizer` as the optimizer model, its train tasks by
    id, and models that can call that optimizer (its embedded server sized for one caller): what the
    probes that replay one proposer on a stored run start from."""
    from types import SimpleNamespace

    from skillopt.benchmarks import get_benchmark
    from skillopt.config import RunConfig
    from skillopt.engine.setup import Specs, make_models, size_local_models
    from skillopt.models import Budget, Meter, ProviderEnv
    from skillopt.models.spec import parse_model_spec
    from skillopt.store.run_store import RunStore

    store = RunStore(run)
    layer = {k: v for k, v in store.read_config().layer().items() if k in RunConfig.model_fields}  # an eval run's too
    cfg = RunConfig.model_validate({**layer, "optimizer_model": optimizer})
    tasks = {t.id: t for t in get_benchmark(cfg.benchmark, cfg.splits).tasks("train")}
    spec = parse_model_spec(optimizer)
    size_local_models(Specs(spec, spec), 1)
    return SimpleNamespace(store=store, cfg=cfg, tasks=tasks, spec=spec,
                           models=make_models(cfg, ProviderEnv(), Meter(Budget()), None))
