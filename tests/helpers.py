"""Shared test helpers: run the real CLI, build small QA data sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """An isolated environment: no provider keys from the developer's shell, own home and cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.endswith(("_API_KEY", "_AUTH_TOKEN")) and not k.endswith("_BASE_URL")}
    env.update({"HOME": str(home), "SKILLOPT_CACHE_DIR": os.environ.get("SKILLOPT_CACHE_DIR", str(home / ".cache")),
                "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "NO_COLOR": "1"})
    env.update(extra)
    return env


def run_cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillopt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
