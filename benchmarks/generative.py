#!/usr/bin/env python
"""Generative decoders on LiteRT-LM (issue 47): keras-hub LlamaCausalLMs built from a configuration (random
weights, no preset download) converted by ``Converter.from_causal_lm`` into ``.litertlm`` bundles and run by
LiteRT-LM's own runtime (``litert-lm-api``, CPU backend, float32 activations) at 1 and 2 threads.

For each size and weight scheme: the conversion's time and peak resident memory (``VmHWM`` reset before it,
over the resident memory before it, in a fresh process), the file, the weight bytes every decode step reads,
and LiteRT-LM's own prefill and decode tokens per second (its benchmark info; each thread count in a fresh
process). Beside decode, the physical floor: the weight bytes read per token over this machine's memory
read bandwidth (one thread: NumPy reducing a 1 GiB array, the fastest of three reductions, best of 5 each), and
the ratio of the measured decode time per token to it.

Sizes: ``tiny`` (2 layers, hidden 64, vocabulary 512) and ``1b`` (TinyLlama-1.1B's shape: 22 layers, hidden
2048, 32 query / 4 key-value heads, MLP 5632, vocabulary 32000). The tokenizer is a byte-level BPE built here
(256 byte symbols, one merge, the rest of the vocabulary as unreachable pieces), so that the prompt is about
one token per character and every id the model can emit decodes. Example (from the repository root)::

    .venv/bin/python benchmarks/generative.py --out docs/generative-benchmark.md
    .venv/bin/python benchmarks/generative.py --sizes tiny --weights float32   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZES = {
    "tiny": {"vocabulary_size": 512, "num_layers": 2, "num_query_heads": 4, "num_key_value_heads": 2,
             "hidden_dim": 64, "intermediate_dim": 128},
    "1b": {"vocabulary_size": 32000, "num_layers": 22, "num_query_heads": 32, "num_key_value_heads": 4,
           "hidden_dim": 2048, "intermediate_dim": 5632},
}
WEIGHTS = ("float32", "float16", "int8", "int4", "int4-block128")  # int4: blockwise, block 32
PROMPT = "the quick brown fox jumps over"  # 30 characters: 30 tokens and the start token

_CONVERT = r"""
import gc, json, re, sys, time
import numpy as np
import keras, keras_hub
import fuselite
from fuselite.tflite.flatbuffer import return_freed_memory

config, weights, path, prefill, cache = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
keras.utils.set_random_seed(0)
from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode
_, symbols = bytes_to_unicode()
vocabulary = {s: i for i, s in enumerate(symbols)}
vocabulary["<|endoftext|>"] = len(vocabulary)
vocabulary["\u0120t"] = len(vocabulary)  # one merge (keras-hub's tokenizer needs one): a space and a t
while len(vocabulary) < config["vocabulary_size"]:
    vocabulary[f"x{len(vocabulary)}"] = len(vocabulary)
tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=["\u0120 t"])
model = keras_hub.models.LlamaCausalLM(backbone=keras_hub.models.LlamaBackbone(**config), preprocessor=None)
parameters = int(sum(np.prod(w.shape) for w in model.weights))


def status(field):
    return int(re.search(field + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024


conv = fuselite.Converter.from_causal_lm(model, prefill_lengths=[prefill], cache_length=cache)
if weights != "float32":
    conv.optimizations = ["DEFAULT"]
if weights == "float16":
    conv.target_spec.supported_types = ["float16"]
if weights.startswith("int4"):
    conv.target_spec.supported_types, conv.block_size = ["int4"], int(weights.partition("block")[2] or 32)
gc.collect()
return_freed_memory()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
t0 = time.perf_counter()
data = conv.convert()
seconds = time.perf_counter() - t0
peak = status("VmHWM")
written = fuselite.write_litertlm(data, path, tokenizer)
print("RESULT", json.dumps({"parameters": parameters, "float32_bytes": parameters * 4, "before": before,
                            "peak": peak, "seconds": seconds, "size": len(data), "bundle": written["bytes"],
                            **conv.report.generative}))
"""

_GENERATE = r"""
import json, sys
import fuselite
text, stats = fuselite.generate(sys.argv[1], sys.argv[2], max_new_tokens=int(sys.argv[3]), threads=int(sys.argv[4]))
print("RESULT", json.dumps(stats))
"""


def _child(script: str, args: list[str], timeout: float) -> dict:
    try:
        out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"why": f"did not finish in {timeout:.0f} s"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    lines = out.stderr.strip().splitlines()
    return {"why": f"exit {out.returncode}: {(lines or ['?'])[-1][:300]}"}


def read_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second one thread reads: NumPy reducing a ``gib`` GiB array (sum of float32, max of float32,
    bitwise or of uint64), the best of ``repeats`` of each, the fastest kernel."""
    import numpy as np

    a = np.ones(int(gib * 2**30) // 4, np.float32)
    best = float("inf")
    for reduce in (np.sum, np.max, lambda x: np.bitwise_or.reduce(x.view(np.uint64))):
        for _ in range(repeats):
            t0 = time.perf_counter()
            reduce(a)
            best = min(best, time.perf_counter() - t0)
    return a.nbytes / best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["tiny", "1b"])
    p.add_argument("--weights", nargs="+", choices=WEIGHTS, default=["float32", "int8", "int4", "int4-block128"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--prefill", type=int, default=32, help="the prefill signature's length (default 32)")
    p.add_argument("--cache", type=int, default=512, help="KV cache positions (default 512)")
    p.add_argument("--tokens", type=int, default=32, help="tokens to decode (default 32)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child (default 1800)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from report import command_line, emit, fuselite_revision, machine_description, versions

    bandwidths = [read_bandwidth()]  # measured again before each timed run: the floor takes the fastest
    rows = []
    for size in args.sizes:
        for weights in args.weights:
            with tempfile.TemporaryDirectory(prefix="fuselite-generative-") as work:
                path = os.path.join(work, "model.litertlm")
                print(f"{size} {weights}: converting ...", file=sys.stderr, flush=True)
                conv = _child(_CONVERT, [json.dumps(SIZES[size]), weights, path, str(args.prefill), str(args.cache)],
                              args.timeout)
                if "why" in conv:
                    rows.append((size, weights, conv, None, None))
                    continue
                for threads in args.threads:
                    print(f"{size} {weights}: generating at {threads} thread(s) ...", file=sys.stderr, flush=True)
                    bandwidths.append(read_bandwidth())
                    rows.append((size, weights, conv, threads,
                                 _child(_GENERATE, [path, PROMPT, str(args.tokens), str(threads)], args.timeout)))
    bandwidth = max(bandwidths)
    lines = ["# Generative decoders on LiteRT-LM", "",
             f"Generated by `{command_line()}` (fuselite {fuselite_revision()}).", "",
             machine_description(), "", versions(), "",
             f"keras-hub LlamaCausalLM, random weights; `Converter.from_causal_lm(prefill_lengths=[{args.prefill}], "
             f"cache_length={args.cache})`; the bundle run by LiteRT-LM's runtime (CPU, float32 activations, "
             f"greedy) on a prompt of {len(PROMPT) + 1} tokens, at most {args.tokens} decoded. Memory read "
             f"bandwidth here (one thread, NumPy reductions of 1 GiB, measured {len(bandwidths)} times, before each "
             f"timed run): {min(bandwidths) / 1e9:.1f} to {bandwidth / 1e9:.1f} GB/s; the floor takes the fastest.",
             "", "| size | weights | parameters | convert | peak / float32 weights | file | file / float32 file | "
             "weights read per token | threads | prefill tok/s | decode tok/s | decode ms/token | floor ms/token | "
             "ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    float_files = {size: conv["size"] for size, weights, conv, _, _ in rows if weights == "float32" and "size" in conv}
    for size, weights, conv, threads, run in rows:
        if "why" in conv:
            lines.append(f"| {size} | {weights} | | not converted: {conv['why']} | | | | | | | | | | |")
            continue
        ratio = f"{conv['size'] / float_files[size]:.3f}" if size in float_files else ""
        head = (f"| {size} | {weights} | {conv['parameters'] / 1e6:,.1f} M | {conv['seconds']:.1f} s | "
                f"{(conv['peak'] - conv['before']) / conv['float32_bytes']:.2f} | "
                f"{conv['size'] / 2**20:,.1f} MiB | {ratio} | {conv['weight_bytes_read_per_token'] / 2**20:,.1f} MiB")
        if "why" in run:
            lines.append(f"{head} | {threads} | not run: {run['why']} | | | | |")
            continue
        floor_ms = 1e3 * conv["weight_bytes_read_per_token"] / bandwidth
        per_token = 1e3 / run["decode_tokens_per_s"]
        lines.append(f"{head} | {threads} | {run['prefill_tokens_per_s']:,.1f} | {run['decode_tokens_per_s']:,.2f} | "
                     f"{per_token:,.2f} | {floor_ms:,.2f} | {per_token / floor_ms:.2f} |")
    lines += ["", "Weights read per token: the constant bytes one decode call reads (the report's "
              "weight_bytes_read_per_token: each weight every op reads, the token embedding's one row). The floor "
              "counts them alone; the KV cache read per token (the report's cache_bytes_per_token times the tokens "
              "so far) is small beside them here. int4: FULLY_CONNECTED weights blockwise int4 (block 32, or 128), with a "
              "float16 scale per block; the token embedding int8 (LiteRT's EMBEDDING_LOOKUP has no blockwise "
              "kernel); file / float32 file is the size ratio issue 47 bounds (0.27 int8, 0.15 int4)."]
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
