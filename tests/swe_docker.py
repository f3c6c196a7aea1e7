"""What the tests with a real Docker engine share: whether one answers, and the instance images.

`.ci/run` starts an engine and builds the images first (`skillopt benchmarks build-images`); here
`images()` builds whatever is missing (cached by content, so after CI's build it costs a second).
Tests that need the engine carry `needs_docker`, which skips them with the reason when none answers.
"""

from __future__ import annotations

import json
import subprocess
from functools import lru_cache

import pytest

from skillopt.benchmarks.swe_local import SHIPPED_TASKS

# The shipped swe-local tasks the container tests use, one per package.
IDS = ("toolz-1.2.0-001", "cachetools-8.0.1-002", "inflection-0.5.1-001")
DATASET = "swe-local"  # benchmark_options.dataset: the shipped tasks in the locally built images


@lru_cache(maxsize=1)
def engine_reason() -> str | None:
    """None when a Docker engine answers here, else why the container tests skip."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'skillopt[swe]')"
    try:
        docker.from_env(timeout=10).ping()
    except Exception as e:
        return (f"no Docker engine answers here ({type(e).__name__}); `.ci/run` starts one where it can "
                "(root, docker.io installed)")
    return None


needs_docker = pytest.mark.skipif(engine_reason() is not None, reason=engine_reason() or "")


@lru_cache(maxsize=None)
def images(ids: tuple[str, ...] = IDS) -> tuple[str, ...]:
    """The images of `ids` (built when missing); their names."""
    from skillopt.benchmarks.swe_grading import load_instances
    from skillopt.benchmarks.swe_images import build_images

    instances = [i for i in load_instances(SHIPPED_TASKS) if i.instance_id in ids]
    return tuple(b.image for b in build_images(instances, SHIPPED_TASKS.parent))


def gold(instance_id: str) -> str:
    for line in SHIPPED_TASKS.read_text().splitlines():
        row = json.loads(line)
        if row["instance_id"] == instance_id:
            return row["patch"]
    raise KeyError(instance_id)


def containers(*labels: str) -> list[str]:
    """Names of the containers (any state) that carry all these labels (`key=value`)."""
    args = ["docker", "ps", "-a", "--format", "{{.Names}}"] + [x for lb in labels for x in ("--filter", f"label={lb}")]
    return [n for n in subprocess.run(args, capture_output=True, text=True, check=True).stdout.split() if n]


def owned_by(pid: int) -> list[str]:
    """Names of the skillopt containers (any state) started by process `pid` on this host."""
    import docker
    import socket

    prefix = f"{socket.gethostname()}:{pid}:"
    found = docker.from_env().containers.list(all=True, filters={"label": "skillopt=1"})
    return [c.name for c in found if (c.labels or {}).get("skillopt.owner", "").startswith(prefix)]
