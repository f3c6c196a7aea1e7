"""Benchmark registry: `@benchmark("name")` on a factory; built-ins register like plugins.

A factory is `(sizes: SplitSizes, **options) -> Benchmark`. Third-party packages register theirs
under the entry-point group `skillopt.benchmarks`: the entry point's module is imported (its
decorators register), or, when the entry point names a callable that did not register itself, that
callable is registered under the entry point's name. A path to a `.jsonl` file is a benchmark too
(the generic QA format, see `skillopt.benchmarks.qa`).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import Benchmark, SplitSizes
from skillopt.errors import BadInput

ENTRY_POINT_GROUP = "skillopt.benchmarks"
Factory = Callable[..., Benchmark]


@dataclass(frozen=True)
class BenchmarkInfo:
    name: str
    factory: Factory
    description: str = ""
    size: int | None = None  # number of tasks, when known without loading them
    origin: str = "builtin"  # "builtin" or the plugin's distribution / entry point

    @property
    def options(self) -> dict[str, Any]:
        """The factory's options and their defaults (`sizes` excluded)."""
        params = list(inspect.signature(self.factory).parameters.values())[1:]
        return {p.name: (None if p.default is inspect.Parameter.empty else p.default)
                for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


_REGISTRY: dict[str, BenchmarkInfo] = {}
_plugins_loaded = False


def benchmark(name: str, description: str = "", size: int | None = None, origin: str = "builtin"):
    """Register a benchmark factory under `name` (a later registration of the same name wins)."""

    def register(factory: Factory) -> Factory:
        _REGISTRY[name] = BenchmarkInfo(name, factory, description, size, origin)
        return factory

    return register


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep, loaded in plugin_callables(ENTRY_POINT_GROUP, "benchmark", lambda name: name in _REGISTRY):
        origin = f"plugin {ep.dist.name}" if ep.dist is not None else f"plugin {ep.value}"
        _REGISTRY[ep.name] = BenchmarkInfo(ep.name, loaded, inspect.getdoc(loaded) or "", None, origin)


def plugin_callables(group: str, kind: str, known: Callable[[str], bool]) -> Iterator[tuple[EntryPoint, Callable]]:
    """The callables an entry-point group offers under names not registered yet (loading one may
    register it by decorator instead). A plugin that fails to load is a warning, never an error of
    the built-ins."""
    for ep in entry_points(group=group):
        if known(ep.name):
            continue
        try:
            loaded = ep.load()
        except Exception as e:  # a broken plugin must not break the built-ins
            warnings.warn(f"{kind} plugin {ep.name!r} ({ep.value}) failed to load: {e}", stacklevel=3)
            continue
        if not known(ep.name) and callable(loaded) and not inspect.ismodule(loaded):
            yield ep, loaded


def _builtins() -> None:
    import skillopt.benchmarks.builtin  # noqa: F401  (registers the built-ins)
    import skillopt.benchmarks.builtin_more  # noqa: F401


def is_jsonl_path(name_or_path: str | Path) -> bool:
    return str(name_or_path).endswith(".jsonl") or Path(name_or_path).suffix == ".jsonl"


ARGUMENT_OPTION = "path"  # `NAME:VALUE` gives VALUE to benchmark NAME's `path` option (`harvest:OUT`)


def split_argument(name: str) -> tuple[str, str | None]:
    """`harvest:OUT` -> ("harvest", "OUT") when `harvest` is a benchmark with a `path` option;
    any other name -> (name, None)."""
    head, sep, rest = str(name).partition(":")
    if not sep or not rest or is_jsonl_path(name):
        return str(name), None
    _builtins()
    info = _find(head)
    return (head, rest) if info is not None and ARGUMENT_OPTION in info.options else (str(name), None)


def benchmark_info(name: str) -> BenchmarkInfo:
    """The registration of a benchmark name (`NAME:VALUE` too); unknown names list the known ones."""
    name = split_argument(name)[0]
    _builtins()
    if _find(name) is None:
        _load_plugins()
    found = _find(name)
    if found is None:
        raise BadInput(f"unknown benchmark {name!r}: choose one of {', '.join(sorted(_REGISTRY))}, "
                       "or give the path of a .jsonl file")
    return found


def _find(name: str) -> BenchmarkInfo | None:
    """A registered benchmark by name, case-insensitively (`GSM8K` is `gsm8k`)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    folded = {k.lower(): v for k, v in _REGISTRY.items()}
    return folded.get(name.lower())


def list_benchmarks() -> list[BenchmarkInfo]:
    """Every registered benchmark (built-ins and plugins), by name; loads no data."""
    _builtins()
    _load_plugins()
    return sorted(_REGISTRY.values(), key=lambda b: b.name)


def _check_options(info: BenchmarkInfo, options: dict[str, Any]) -> None:
    params = inspect.signature(info.factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        known = ", ".join(info.options) or "none"
        raise BadInput(f"benchmark {info.name!r} has no option {', '.join(map(repr, unknown))}: "
                       f"its options are {known}")


_MEASURES = ("timeout", "memory", "cpus", "tokens", "size", "limit", "_mb", "_s")


def _check_ranges(options: dict[str, Any]) -> None:
    """Sizes, timeouts and limits among benchmark options are positive (`test_timeout_s=0` is a mistake)."""
    for k, v in options.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 and any(m in k for m in _MEASURES):
            raise BadInput(f"bad benchmark option {k}={v}: it must be greater than 0")


def get_benchmark(name_or_path: str | Path, sizes: SplitSizes | None = None, **options: Any) -> Benchmark:
    """The one function that turns a benchmark name or a `.jsonl` path (plus options) into a benchmark."""
    sizes = sizes or SplitSizes()
    _check_ranges(options)
    if is_jsonl_path(name_or_path):
        from skillopt.benchmarks.qa import jsonl_benchmark

        known = {"scorer", "max_answer_tokens"}
        if str(options.get("scorer", "auto")).lower() == "judge":
            known |= {"rubric", "judge_model", "threshold"}
        unknown = sorted(set(options) - known - {"scorer_options"})
        if unknown:
            raise BadInput(f"a .jsonl benchmark has no option {', '.join(map(repr, unknown))}: "
                           f"its options are {', '.join(sorted(known))}, scorer_options")
        extra = dict(options.pop("scorer_options", None) or {})
        return jsonl_benchmark(name_or_path, sizes, **options, **extra)
    name, arg = split_argument(str(name_or_path))
    if arg is not None:
        if options.get(ARGUMENT_OPTION) not in (None, arg):
            raise BadInput(f"benchmark {name_or_path!r} and option {ARGUMENT_OPTION}={options[ARGUMENT_OPTION]!r} "
                           "disagree: give the path once")
        options = {**options, ARGUMENT_OPTION: arg}
    info = benchmark_info(name)
    _check_options(info, options)
    return info.factory(sizes, **options)
