"""The lowest floor: atomic files (`files`), redaction (`redact`), safe file names (`names`).

It imports nothing of skillopt's but `skillopt.errors`, so every package may use it (the run record
in `store/`, the response cache in `models/`, benchmarks, traces, the configuration).
"""
