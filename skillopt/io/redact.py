"""No secret on disk: `redact`, the one function every write path calls before it writes.

It masks, wherever they appear:
- known secret values: every key-like environment variable the CLI read, and the secrets found in
  the resolved configuration (`register_secrets`, called once at the CLI edge);
- credentials in URLs (`https://user:password@host` -> `https://***@host`);
- values under key-like names, at any depth of a mapping (`api_key`, `token`, `password`,
  `authorization`, ...), and every value of an `env` / `headers` mapping.

Text is masked for known values and URL credentials only (a skill's own words are not guessed at);
mappings and lists also by name. The writers in `io.files`, `store.index`, the MLflow tracker,
token capture and grading logs call it, so a new writer only has to call it too.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

MASK = "***"
MIN_SECRET = 8  # shorter values are not masked as text (they would hit ordinary words)

_NAME = re.compile(r"(api_?key|apikey|secret|passw(or)?d|passwd|credential|private_?key|access_?key|"
                   r"(auth|access|refresh|session|bearer|id|api)_?token|^token$|^auth$|authorization|cookie|_key$)")
_NOT_SECRET = frozenset({"rollout_key", "cache_key", "sort_key", "task_key"})  # our own ids
_WHOLE = frozenset({"env", "environment", "headers"})  # every value under these is masked
_ENV_NAME = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|SECRETS|PASSWORD|PASSWD|CREDENTIALS?|PAT)($|_)")
_URL_CREDS = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/@:\"'<>]*(:[^\s/@\"'<>]*)?@")


def secret_name(name: str) -> bool:
    """Whether a mapping key names a secret (`api_key`, `X-Api-Key`, `password`, ...)."""
    norm = name.strip().lower().replace("-", "_")
    return norm not in _NOT_SECRET and bool(_NAME.search(norm))


def secret_env_name(name: str) -> bool:
    """Whether an environment variable holds a secret (`OPENAI_API_KEY`, `HF_TOKEN`, ...)."""
    return bool(_ENV_NAME.search(name.upper()))


class Redactor:
    """Masks secrets (see the module docstring). Thread-safe; `add` more known values any time."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self.add(*secrets)

    def add(self, *values: str | None) -> None:
        fresh = {v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET}
        with self._lock:
            self._secrets = tuple(sorted(set(self._secrets) | fresh, key=len, reverse=True))

    def text(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return _URL_CREDS.sub(lambda m: m.group(1) + MASK + "@", text) if "@" in text else text

    def data(self, obj: Any, whole: bool = False) -> Any:
        """A copy of `obj` (a mapping, list, model or scalar) with secrets masked."""
        if isinstance(obj, BaseModel):
            obj = obj.model_dump(mode="json")
        if isinstance(obj, Mapping):
            return {k: self._value(str(k), v, whole) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.data(v, whole) for v in obj]
        if isinstance(obj, str):
            return MASK if whole and obj else self.text(obj)
        return obj

    def _value(self, name: str, value: Any, whole: bool) -> Any:
        if name.lower() in _WHOLE:
            return self.data(value, whole=True)
        if secret_name(name) and isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
            return MASK
        return self.data(value, whole or (secret_name(name) and isinstance(value, (Mapping, list, tuple))))


_ACTIVE = Redactor()


def register_secrets(*values: str | None) -> None:
    """Add known secret values to the process's redactor (the CLI edge calls this once)."""
    _ACTIVE.add(*values)


def secrets_in_environ(environ: Mapping[str, str]) -> list[str]:
    """The values of the key-like variables of an environment."""
    return [v for k, v in environ.items() if secret_env_name(k) and v]


def secrets_in(data: Any) -> list[str]:
    """Secret values held in configuration data: under key-like names, in `env` mappings, in URLs."""
    found: list[str] = []

    def walk(obj: Any, whole: bool) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(v, whole or str(k).lower() in _WHOLE or secret_name(str(k)))
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, whole)
        elif isinstance(obj, str):
            if whole:
                found.append(obj)
            found.extend(m.group(0)[len(m.group(1)):-1].split(":", 1)[-1] for m in _URL_CREDS.finditer(obj))

    walk(data, False)
    return [s for s in found if s]


def redact(obj: Any) -> Any:
    """`obj` with every secret masked: text for known values and URL credentials, mappings and
    lists also by name. The one function every write path calls."""
    return _ACTIVE.text(obj) if isinstance(obj, str) else _ACTIVE.data(obj)


def masked_paths(data: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the values a redaction replaced (`harness_options.env.TOKEN`, `target_model`)."""
    out: list[str] = []
    if isinstance(data, Mapping):
        for k, v in data.items():
            out += masked_paths(v, f"{prefix}{k}.")
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            out += masked_paths(v, f"{prefix}{i}.")
    elif isinstance(data, str) and MASK in data:
        out.append(prefix[:-1])
    return out


# ---------------------------------------------------------------- text from outside: transcripts

# Tokens recognisable by their shape (vendors' key prefixes, JWTs), and values after a key-like word.
_TOKEN = re.compile(r"\b(sk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"
                    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{20,}"
                    r"|glpat-[A-Za-z0-9_-]{20,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})")
_KEYED = re.compile(r"(?i)\b((?:[A-Z0-9_]*_)?(?:api[_-]?key|apikey|token|secret|password|passwd)[A-Z0-9_]*[\"']?"
                    r"\s*[:=]\s*|bearer\s+)([\"']?)([^\s\"'<>,;]{8,})")
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
EMAIL_MASK = "<email>"


def scrub(text: str, home: str | None = None) -> str:
    """Text from outside skillopt (an agent's transcript) made safe to keep: what `redact` masks,
    plus tokens recognisable by their shape, values after key-like words (`API_KEY=...`,
    `Bearer ...`), e-mail addresses, and the user's home folder (`/home/jane/x` -> `~/x`)."""
    text = redact(text)
    text = _TOKEN.sub(MASK, text)
    text = _KEYED.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    if "@" in text:
        text = _EMAIL.sub(EMAIL_MASK, text)
    home = (home or "").rstrip("/")
    if len(home) > 1 and home in text:
        text = re.sub(re.escape(home) + r"(?=/|\b|$)", "~", text)
    return text


def scrub_data(obj: Any, home: str | None = None) -> Any:
    """`redact` (by name too), then `scrub` over every string of a mapping, list or model, keys included."""
    def walk(o: Any) -> Any:
        if isinstance(o, Mapping):
            return {scrub(str(k), home): walk(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v) for v in o]
        return scrub(o, home) if isinstance(o, str) else o

    return walk(redact(obj.model_dump(mode="json") if isinstance(obj, BaseModel) else obj))
