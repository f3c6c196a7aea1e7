"""Harness registry: `@harness("name")` on a factory; built-ins register like plugins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from skillopt.errors import BadInput
from skillopt.harness.base import Harness
from skillopt.models.router import Models
from skillopt.models.spec import ModelSpec
from skillopt.sandbox import NoSandbox, Relay, Sandbox


@dataclass(frozen=True)
class HarnessContext:
    """What a harness factory gets: the model router, the harness's options, and for harnesses that
    start agent processes the sandbox they run in and the relay that holds their model key (None:
    the agent gets the endpoint and key itself)."""

    models: Models
    options: dict[str, Any] = field(default_factory=dict)
    sandbox: Sandbox = field(default_factory=NoSandbox)
    relay: Relay | None = None


@dataclass(frozen=True)
class HarnessInfo:
    name: str
    factory: Callable[[HarnessContext], Harness]
    description: str
    apis: frozenset[str]  # wire APIs the target server must speak; empty: any provider works
    agent: bool = False  # starts agent processes (they run in the sandbox, reach the model through the relay)


_REGISTRY: dict[str, HarnessInfo] = {}
ENTRY_POINT_GROUP = "skillopt.harnesses"  # third-party harnesses: a module whose @harness decorators register


def harness(name: str, description: str = "", apis: frozenset[str] = frozenset(), agent: bool = False):
    def register(factory: Callable[[HarnessContext], Harness]):
        _REGISTRY[name.lower()] = HarnessInfo(name.lower(), factory, description, apis, agent)
        return factory

    return register


def _load_plugins() -> None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name.lower() not in _REGISTRY:
            ep.load()


def harness_info(name: str) -> HarnessInfo:
    import skillopt.harness.builtin  # noqa: F401  (registers built-ins)

    key = name.lower()
    if key not in _REGISTRY:
        _load_plugins()
    if key not in _REGISTRY:
        raise BadInput(f"unknown harness {name!r}: choose one of {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[key]


def list_harnesses() -> list[HarnessInfo]:
    import skillopt.harness.builtin  # noqa: F401

    _load_plugins()
    return sorted(_REGISTRY.values(), key=lambda h: h.name)


def make_harness(name: str, ctx: HarnessContext) -> Harness:
    return harness_info(name).factory(ctx)


def check_compatible(harness_name: str, target: ModelSpec) -> None:
    """The one function that decides whether a harness can drive a target; fails before rollouts."""
    info = harness_info(harness_name)
    if info.apis and not (info.apis & target.apis):
        need = " or ".join(sorted(info.apis))
        raise BadInput(
            f"harness {harness_name!r} needs a server that speaks the {need} API, and {target.provider} "
            f"targets speak only {', '.join(sorted(target.apis))}: pick another --target_model or --harness"
        )
