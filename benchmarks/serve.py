"""dcode-tiny behind `dcode serve`: throughput and latency at 1, 4 and 16 concurrent clients.

    python benchmarks/serve.py    # 16 requests, max_tokens 64, modes default, threads, batched; both streams

Starts `dcode serve` in a subprocess on a free loopback port once per mode (default: no flags, on a
CPU --batching --busy-draft 3; threads: each request its own forwards, --no-batching; batched:
--batching --busy-draft 15, the draft unchanged under load; busyN: --batching --busy-draft N),
every server with the same torch intra-op threads (--threads, default 1), sends the same requests
(the first N prompts of benchmarks/prompts.jsonl as streamed chat requests) one at a time, then
from 4 and from 16 concurrent clients, once per stream kind (--streams: "appended", OpenAI's
appended deltas, what every client gets by default; "diffusing", the whole canvas every pass),
and reports requests/s, answer tokens/s, p50/p95 latency and time to first chunk. Writes
docs/benchmarks/serve/serve.json and serve.md with the command, the date and the weights' sha256.
The answers of every run must equal the one-at-a-time answers of the same mode and stream (greedy),
and every mode's the first mode's, or the script says so.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2

from dcode.dtypes import cpu_model

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "serve"
WEIGHTS = ROOT / "dcode" / "assets" / "dcode-tiny" / "model.safetensors"


def start_server(mode: str, threads: int) -> tuple[subprocess.Popen[str], str]:
    """`dcode serve` for a mode: "default" (no flags), "threads" (--no-batching), "batched"
    (--batching --busy-draft 15), or "busyN" (--batching --busy-draft N)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    argv = [sys.executable, "-m", "dcode.cli", "serve", "--port", str(port), "--max-batch", "16"]
    if mode == "threads":
        argv.append("--no-batching")
    elif mode == "batched":
        argv += ["--batching", "--busy-draft", "15"]
    elif mode.startswith("busy"):
        argv += ["--batching", "--busy-draft", mode[len("busy") :]]
    elif mode != "default":
        raise SystemExit(f"unknown mode {mode!r}")
    # The same intra-op threads for every mode and every client count, so that one at a time and
    # concurrent are compared on equal terms (OMP_NUM_THREADS; the report states it).
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx2.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx2.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"dcode serve did not start: {proc.communicate()[1][-2000:]}")


def ask(client: httpx2.Client, url: str, prompt: str, max_tokens: int, stream: str = "appended") -> dict[str, Any]:
    """One streamed chat request: its latency, time to first chunk, code and tokens. "appended":
    the deltas joined are the code, the usage chunk counts its tokens; "diffusing": the finished
    event carries both. `client` is shared by every request of a run, as an application's client
    is (a new httpx client costs ~50 ms of the benchmark's CPU, on the server's cores)."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True}
    body.update({"diffusing": True} if stream == "diffusing" else {"stream_options": {"include_usage": True}})
    began = time.perf_counter()
    first = None
    parts: list[str] = []
    finished: dict[str, Any] = {}
    with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            first = first if first is not None else time.perf_counter() - began
            chunk = json.loads(line[6:])
            if stream == "diffusing":
                if chunk.get("dcode", {}).get("event") == "finished":
                    finished = {"code": chunk["dcode"]["code"], "tokens": chunk["dcode"]["metadata"]["tokens"]}
            elif chunk.get("usage"):
                finished = {"code": "".join(parts), "tokens": chunk["usage"]["completion_tokens"]}
            elif chunk.get("choices"):
                parts.append(chunk["choices"][0]["delta"].get("content") or "")
    if not finished:
        raise SystemExit(f"no finished answer for {prompt!r}")
    return {"latency": time.perf_counter() - began, "first_frame": first, **finished}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_level(url: str, prompts: list[str], clients: int, max_tokens: int, stream: str) -> dict[str, Any]:
    began = time.perf_counter()
    with (
        httpx2.Client(limits=httpx2.Limits(max_connections=clients)) as client,
        ThreadPoolExecutor(clients) as pool,
    ):
        results = list(pool.map(lambda p: ask(client, url, p, max_tokens, stream), prompts))
    wall = time.perf_counter() - began
    latencies = [r["latency"] for r in results]
    firsts = [r["first_frame"] for r in results]
    return {
        "clients": clients,
        "requests": len(prompts),
        "seconds": round(wall, 3),
        "requests_per_second": round(len(prompts) / wall, 3),
        "tokens_per_second": round(sum(r["tokens"] for r in results) / wall, 1),
        "latency_p50": round(percentile(latencies, 50), 3),
        "latency_p95": round(percentile(latencies, 95), 3),
        "first_frame_p50": round(percentile(firsts, 50), 3),
        "first_frame_p95": round(percentile(firsts, 95), 3),
        "codes": [r["code"] for r in results],
    }


def measure(
    mode: str, threads: int, prompts: list[str], levels: list[int], max_tokens: int, stream: str
) -> list[dict[str, Any]]:
    proc, url = start_server(mode, threads)
    try:
        with httpx2.Client() as client:
            ask(client, url, prompts[0], 8, stream)  # warm-up: first-call costs out of the numbers
        rows = []
        for clients in levels:
            rows.append(run_level(url, prompts, clients, max_tokens, stream))
            rows[-1]["load_average"] = round(os.getloadavg()[0], 2)  # the machine is shared: how busy it was
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    reference = rows[0]["codes"]
    for row in rows:
        row["same_answers"] = row["codes"] == reference
        row["speedup"] = round(row["requests_per_second"] / rows[0]["requests_per_second"], 2)
        print(
            f"{mode + ' ' + stream:18} {row['clients']:>3} clients: {row['requests_per_second']:6.2f} req/s "
            f"{row['tokens_per_second']:7.1f} tok/s  latency p50 {row['latency_p50']:6.2f} s p95 "
            f"{row['latency_p95']:6.2f} s  first frame p50 {row['first_frame_p50']:5.2f} s  x{row['speedup']}"
            f"{'' if row['same_answers'] else '  ANSWERS DIFFER'}",
            flush=True,
        )
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# dcode serve: dcode-tiny at 1, 4 and 16 concurrent clients",
        "",
        f"`{report['command']}` on {report['date']} ({report['machine']}),",
        f"weights sha256 `{report['weights_sha256']}`.",
        f"{report['requests']} chat requests (benchmarks/prompts.jsonl), max_tokens {report['max_tokens']}, "
        f"streamed as appended deltas (OpenAI's default) and as `diffusing: true` canvases (column `stream`); "
        f"1 client = one at a time; every server with "
        f"OMP_NUM_THREADS={report['threads']}; `vs best` divides by the fastest one-at-a-time row "
        f"of the same stream; `same answers`: equal to that mode's one-at-a-time answers and to every "
        f"other row's; `load` is the 1-minute load average after the row.",
        "",
        "| mode | stream | clients | req/s | tok/s | latency p50 | p95 | first chunk p50 | p95 | vs 1 client "
        "| vs best | same answers | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, rows in report["results"].items():
        mode, stream = key.split(" ")
        for r in rows:
            lines.append(
                f"| {mode} | {stream} | {r['clients']} | {r['requests_per_second']} | {r['tokens_per_second']} | "
                f"{r['latency_p50']} s | {r['latency_p95']} s | {r['first_frame_p50']} s | {r['first_frame_p95']} s | "
                f"x{r['speedup']} | x{r['vs_best_one_at_a_time']} | {'yes' if r['same_answers'] else 'NO'} | "
                f"{r['load_average']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument(
        "--modes",
        default="default,threads,batched",
        help="default, threads, batched, busyN (batched with --busy-draft N)",
    )
    parser.add_argument("--streams", default="appended,diffusing", help="appended, diffusing")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, default=1, help="the server's torch intra-op threads, every mode")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (ROOT / "benchmarks" / "prompts.jsonl").read_text().splitlines() if line]
    prompts = [r["prompt"] for r in rows if r.get("lang", "python") == "python"][: args.requests]
    levels = [int(n) for n in args.levels.split(",")]
    modes = args.modes.split(",")
    results = {
        f"{mode} {stream}": measure(mode, args.threads, prompts, levels, args.max_tokens, stream)
        for stream in args.streams.split(",")
        for mode in modes
    }
    reference = next(iter(results.values()))[0]["codes"]
    for rows in results.values():
        for row in rows:
            row["same_answers"] = row["same_answers"] and row.pop("codes") == reference
    report = {
        "command": "python benchmarks/serve.py " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu_model() or platform.machine()}, {os.cpu_count()} cores",
        "weights_sha256": hashlib.sha256(WEIGHTS.read_bytes()).hexdigest(),
        "requests": len(prompts),
        "max_tokens": args.max_tokens,
        "threads": args.threads,
        "results": results,
    }
    best = {
        stream: max(rows[0]["requests_per_second"] for key, rows in results.items() if key.endswith(" " + stream))
        for stream in args.streams.split(",")
    }
    report["best_one_at_a_time"] = best
    for key, rows in results.items():
        for row in rows:
            row["vs_best_one_at_a_time"] = round(row["requests_per_second"] / best[key.split(" ")[1]], 2)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "serve.md").write_text(markdown(report))
    print(f"wrote {args.out / 'serve.json'} and {args.out / 'serve.md'}")


if __name__ == "__main__":
    main()
