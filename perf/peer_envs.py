"""Virtual environments for the peer tools that perf/ compares skillopt with, one per tool, cached.

`peer_python("gepa")` creates (once) a venv under `~/.cache/skillopt/perf-peers/gepa-0.1.4/`, installs
the pinned release from PyPI into it (GEPA 0.1.4, DSPy 3.4.1, microsoft/SkillOpt 0.2.0), and returns
the venv's python. Nothing is installed into skillopt's own environment. `perf/peers.py` and `perf/quality.py` both use it.

Usage: python perf/peer_envs.py gepa skillopt      # prints each python path
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Peer:
    name: str  # our short name
    requirement: str  # what pip installs
    module: str  # imported to check the install

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1].split(";")[0]


PEERS = {
    "skillopt": Peer("skillopt", "skillopt==0.2.0", "skillopt"),  # microsoft/SkillOpt
    "gepa": Peer("gepa", "gepa[full]==0.1.4", "gepa"),  # litellm comes with the `full` extra
    "dspy": Peer("dspy", "dspy[optuna]==3.4.1", "dspy"),  # MIPROv2 needs optuna (perf/dspy_runner.py)
}


def cache_root() -> Path:
    base = os.environ.get("SKILLOPT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "skillopt")
    return Path(base) / "perf-peers"


def peer_python(name: str, quiet: bool = True) -> Path:
    """The python of `name`'s own venv, created and installed on first use (needs PyPI once)."""
    peer = PEERS[name]
    root = cache_root() / f"{peer.name}-{peer.version}"
    python = root / "venv" / "bin" / "python"
    done = root / "installed.ok"
    if done.is_file() and python.is_file():
        return python
    root.mkdir(parents=True, exist_ok=True)
    if not python.is_file():
        venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    out = subprocess.DEVNULL if quiet else None
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", peer.requirement],
                   check=True, stdout=out)
    subprocess.run([str(python), "-c", f"import {peer.module}"], check=True)
    done.write_text(peer.requirement + "\n")
    return python


if __name__ == "__main__":
    for n in sys.argv[1:] or list(PEERS):
        print(n, peer_python(n, quiet=False))
