"""Another quantization of the embedded 1.5B, and how fast llama.cpp runs it on this machine (issue 27:
"a quantization that keeps the quality: show both").

The shipped weights are Q4_K_M. This script dequantizes every tensor of that file with gguf-py and
quantizes it again as Q4_0 or Q8_0 (the formats gguf-py can write), the metadata copied unchanged, into
the cache folder beside the shipped file. Q8_0 of Q4_K_M values keeps them almost exactly (8 bits for
values that had 4); Q4_0 quantizes them a second time, which loses some. Then each file is served in
turn (the shipped one first and last, the load may drift) and measured as perf/local_model.py --limit
measures the shipped one: a cold prompt's tokens/s, exactly `--gen` generated tokens for one sequence,
and the best skill's kind of request (numbered working, up to the preset's reply cap), one at a time.

Usage: python perf/requant.py [--to q8_0 q4_0] [--gen 64] [--tasks 2]   (needs the `rl` extra's gguf)
Results: perf/results/requant.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, machine, stop_runs_on_sigterm, uptime, write_json  # noqa: E402
from perf.local_model import WORKING, _batch, _post, quick_requests  # noqa: E402

MODEL = "qwen2.5-coder-1.5b"


def convert(src: Path, dst: Path, to: str) -> dict:
    """`src` with every quantized tensor dequantized and written again as `to`; 1-D tensors (norms,
    biases) and float ones kept as they are."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize, quantize

    target = Q[to.upper()]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = dst.with_suffix(".part")
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    t0, kept, changed = time.perf_counter(), 0, 0
    for t in reader.tensors:
        quantized = t.tensor_type not in (Q.F32, Q.F16, Q.BF16)
        if not quantized or len(t.shape) < 2:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            kept += 1
            continue
        values = dequantize(t.data, t.tensor_type)
        writer.add_tensor(t.name, quantize(values, target), raw_dtype=target)
        changed += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(dst)
    return {"to": to, "file": dst.name, "bytes": dst.stat().st_size, "tensors_requantized": changed,
            "tensors_kept": kept, "convert_s": round(time.perf_counter() - t0, 1)}


def served(file: Path):
    """A LocalServer of the 1.5B that loads `file` instead of the shipped weights (one slot)."""
    from skillopt.models.local import LocalServer

    class Server(LocalServer):
        def _spawn(self, gguf: Path) -> None:
            super()._spawn(file)

    return Server(MODEL, slots=1)


def rates(file: Path, label: str, args, reqs: list[tuple[str, str]]) -> dict:
    server = served(file)
    server.start()
    try:
        with httpx.Client(timeout=1800) as client:
            base = server.base_url
            cold = _post(client, base, reqs[-1][0], reqs[-1][1], 1, False)["timings"]
            one = _post(client, base, reqs[0][0], reqs[0][1], args.gen, True)["timings"]
            worked = [(system + WORKING, user) for system, user in reqs[1:1 + args.tasks]]
            _post(client, base, worked[0][0], reqs[-2][1], 1, False)  # the skill prefix into the cache
            row = {"weights": label, "uptime": uptime(), "threads": server.threads,
                   "prompt_tokens": cold["prompt_n"], "prompt_tok_s": round(cold["prompt_per_second"], 1),
                   "gen_tok_s_1": round(one["predicted_per_second"], 2),
                   "worked": _batch(client, base, worked, args.max_reply, False, 1),
                   "worked_replies": [_post(client, base, s, u, args.max_reply, False)["choices"][0]["message"]["content"]
                                      for s, u in worked]}
    finally:
        server.stop()
    print(json.dumps({k: v for k, v in row.items() if k != "worked_replies"}), flush=True)
    return row


def main() -> None:
    stop_runs_on_sigterm()
    ap = argparse.ArgumentParser()
    ap.add_argument("--to", nargs="+", default=["q8_0", "q4_0"], choices=["q8_0", "q4_0"])
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--tasks", type=int, default=2, help="the best skill's kind of request, one at a time")
    ap.add_argument("--max-reply", type=int, default=320)
    ap.add_argument("--out", type=Path, default=RESULTS / "requant.json")
    args = ap.parse_args()
    from skillopt.models.local import weights_path

    shipped = weights_path(MODEL)
    files, converted = {"q4_k_m (shipped)": shipped}, []
    for to in args.to:
        dst = shipped.with_name(shipped.name.replace("q4_k_m", to))
        if not dst.is_file():
            converted.append(convert(shipped, dst, to))
            print(json.dumps(converted[-1]), flush=True)
        files[to] = dst
    reqs = quick_requests(2 + args.tasks + 2)
    order = [*files, "q4_k_m (shipped)"]
    doc = {"machine": machine(), "model": MODEL, "converted": converted, "uptime": [uptime()],
           "command": f"python perf/requant.py --to {' '.join(args.to)} --gen {args.gen} --tasks {args.tasks}",
           "runs": [rates(files[label], label, args, reqs) for label in order]}
    doc["uptime"].append(uptime())
    write_json(args.out, doc)


if __name__ == "__main__":
    main()
