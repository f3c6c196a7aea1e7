"""Import the built-in harnesses so they register. Agent harnesses import their SDKs lazily."""

from skillopt.harness import chat, claude_code, codex, mini_swe_agent  # noqa: F401
