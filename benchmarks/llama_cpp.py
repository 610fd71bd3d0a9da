"""llama.cpp on this CPU, the peer a CPU user would pick, for the Qwen2.5-Coder-0.5B shape cpu.py measures.

    python benchmarks/llama_cpp.py --llama-bench /work/llama/build/bin/llama-bench
    python benchmarks/llama_cpp.py --llama-bench PATH --gguf-dir /work/llama/gguf --threads 1 --repetitions 5

Writes the shape with random weights (N(0, 0.02), norms 1, q/k/v biases, tied embeddings; seed 0) as
GGUF files in bf16 and in Q8_0 where they are missing (1-D tensors stay float32, as llama.cpp's
converter keeps them), then runs llama-bench once over both: tg64 (64 tokens generated one at a time,
llama-bench's generation figure) and pp32 (one 32-token batch, the size of dcode's block pass), at
each thread count. Prints one JSON object per measurement: tok/s mean and stdev over the repetitions,
with llama.cpp's commit as llama-bench reports it. The vocabulary is a stand-in (the 256 byte
tokens, then placeholders): llama-bench feeds random token ids and never decodes.

Needs `gguf` (pip install gguf: numpy only, no torch) to write the files, and llama-bench, built
offline from llama-cpp-python's sdist on PyPI, which vendors llama.cpp (0.3.36 vendors
ggml-org/llama.cpp@0c1e57098); about 5 minutes with 2 jobs on 2 cores:

    pip download --no-binary :all: --no-deps llama-cpp-python
    tar xzf llama_cpp_python-0.3.36.tar.gz
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release \\
        -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \\
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMIT=0c1e57098
    cmake --build build --target llama-bench -j 2      # build/bin/llama-bench, CPU backend only

GGML_NATIVE=ON compiles for this CPU (-march=native: AVX512 and AVX512-BF16 where it has them);
LLAMA_OPENSSL=OFF replaces the LLAMA_CURL=OFF of older releases (nothing is downloaded either way).
LLAMA_BUILD_COMMIT pins the commit llama-bench reports to the vendored one (`git ls-tree HEAD
vendor/llama.cpp` in the sdist, or its CHANGELOG); the build number it reports comes from the
sdist's shallow git history, not llama.cpp's bNNNN releases.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import gguf
    import numpy as np
except ImportError:  # only writing the GGUF files needs them; main() says so when it must
    gguf = None

SHAPE = "qwen2.5-0.5b"
# Qwen/Qwen2.5-Coder-0.5B's config.json, as benchmarks/cpu.py's SHAPES has it.
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 151936, 896, 24, 14, 2, 4864
ROPE_THETA, RMS_EPS, CONTEXT = 1e6, 1e-6, 32768
QUANTS = ("bf16", "q8_0")
PROMPT, GENERATED = 32, 64  # pp32: a 32-token block pass's worth of tokens in one batch; tg64: one at a time
GPT2_BYTES = [*range(33, 127), *range(161, 173), *range(174, 256)]  # bytes GPT-2's BPE shows as themselves


def byte_tokens() -> list[str]:
    """The 256 byte-level tokens in GPT-2's order (Qwen2's ids 0-255): the bytes shown as themselves,
    then the rest as code points from 256 up ("Ġ" is the space)."""
    rest = [b for b in range(256) if b not in GPT2_BYTES]
    return [chr(b) for b in GPT2_BYTES] + [chr(256 + i) for i in range(len(rest))]


def tensors() -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the shape in float32 under llama.cpp's qwen2 names, (out, in) as Hugging Face
    stores them; no output.weight, so llama.cpp ties it to token_embd."""
    rng = np.random.default_rng(0)
    kv = KV_HEADS * (HIDDEN // HEADS)
    ones = np.ones(HIDDEN, dtype=np.float32)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    yield "token_embd.weight", normal(VOCAB, HIDDEN)
    for i in range(LAYERS):
        yield from {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": normal(HIDDEN, HIDDEN),
            f"blk.{i}.attn_q.bias": normal(HIDDEN),
            f"blk.{i}.attn_k.weight": normal(kv, HIDDEN),
            f"blk.{i}.attn_k.bias": normal(kv),
            f"blk.{i}.attn_v.weight": normal(kv, HIDDEN),
            f"blk.{i}.attn_v.bias": normal(kv),
            f"blk.{i}.attn_output.weight": normal(HIDDEN, HIDDEN),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": normal(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": normal(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": normal(HIDDEN, FFN),
        }.items()
    yield "output_norm.weight", ones


def describe(writer: Any, quant: str) -> None:
    """The metadata llama.cpp's qwen2 loader and its BPE vocabulary read."""
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{quant.upper()}"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    tokens = byte_tokens()
    writer.add_token_list(tokens + [f"<t{i}>" for i in range(len(tokens), VOCAB)])
    writer.add_token_merges(["Ġ Ġ"])  # the loader requires merges; llama-bench never tokenizes


def write_gguf(path: Path, quant: str) -> None:
    """The random-weight shape in `quant` at `path` (written beside it, then renamed: a killed run
    leaves no file that looks finished). 2-D tensors in `quant`, 1-D ones in float32."""
    qtype = gguf.GGMLQuantizationType[quant.upper()]
    part = path.with_suffix(".part")
    writer = gguf.GGUFWriter(part, "qwen2")
    describe(writer, quant)
    for name, array in tensors():
        if array.ndim == 1:
            writer.add_tensor(name, array)
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.rename(path)


def bench(llama_bench: Path, files: list[Path], threads: str, repetitions: int) -> list[dict[str, Any]]:
    """llama-bench's JSON rows for every file, thread count and test (pp, then tg); its table goes to stderr."""
    models = [arg for path in files for arg in ("-m", str(path))]
    command = [str(llama_bench), *models, "-t", threads, "-p", str(PROMPT), "-n", str(GENERATED)]
    done = subprocess.run(
        [*command, "-r", str(repetitions), "-o", "json", "-oe", "md"], stdout=subprocess.PIPE, text=True
    )
    if done.returncode:
        sys.exit(f"llama-bench failed (exit {done.returncode}); its messages are above")
    return json.loads(done.stdout)


def measurement(row: dict[str, Any], quant: str) -> dict[str, Any]:
    """One llama-bench row as this script reports it."""
    test = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
    return {
        "shape": SHAPE,
        "quant": quant,
        "threads": row["n_threads"],
        "test": test,
        "tok_s": round(row["avg_ts"], 2),
        "tok_s_stdev": round(row["stddev_ts"], 2),
        "repetitions": len(row["samples_ts"]),
        "llama_cpp_commit": row["build_commit"],
        "llama_cpp_build": row["build_number"],
        "cpu": row["cpu_info"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--llama-bench", type=Path, required=True, help="the llama-bench binary (built as the docstring says)"
    )
    parser.add_argument("--gguf-dir", type=Path, default=Path(".bench/gguf"), help="where the GGUF files are kept")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)

    if not args.llama_bench.is_file():
        sys.exit(f"llama-bench not found at {args.llama_bench}: build it as benchmarks/llama_cpp.py's docstring says")
    files = {quant: args.gguf_dir / f"{SHAPE}-random-{quant}.gguf" for quant in QUANTS}
    missing = [quant for quant, path in files.items() if not path.is_file()]
    if missing and gguf is None:
        sys.exit("the gguf package is missing (pip install gguf); it writes the random-weight GGUF files")
    args.gguf_dir.mkdir(parents=True, exist_ok=True)
    for quant in missing:
        print(f"writing {files[quant]}", file=sys.stderr)
        write_gguf(files[quant], quant)

    quants = {str(path): quant for quant, path in files.items()}
    for row in bench(args.llama_bench, list(files.values()), args.threads, args.repetitions):
        print(json.dumps(measurement(row, quants[row["model_filename"]])), flush=True)


if __name__ == "__main__":
    main()
