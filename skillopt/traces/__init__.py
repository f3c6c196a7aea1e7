"""Trace events, summaries, storage and (for vLLM targets) token capture."""

from skillopt.traces.events import TraceEvent, parse_event
from skillopt.traces.summary import summarize

__all__ = ["TraceEvent", "parse_event", "summarize"]
