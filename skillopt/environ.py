"""The process environment, read at an edge: the CLI (`cli/app.py`) and the Python API (`skillopt.api`).

Library code never reads environment variables; the two edges read them once, here, together with
a `.env` file in the working folder, and register every key-like value for redaction (it never
reaches a file skillopt writes).
"""

from __future__ import annotations

import os
from pathlib import Path


def read_environment(dotenv: str | Path = ".env") -> dict[str, str]:
    from dotenv import dotenv_values

    from skillopt.io.redact import register_secrets, secrets_in_environ

    path = Path(dotenv)
    values = {k: v for k, v in dotenv_values(path).items() if v is not None} if path.is_file() else {}
    environ = {**values, **os.environ}
    register_secrets(*secrets_in_environ(environ))
    return environ
