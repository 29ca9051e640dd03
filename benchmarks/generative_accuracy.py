#!/usr/bin/env python
"""Quantized decoders against the float model (issue 47), on tiny keras-hub CausalLMs trained here.

Random weights make near-ties that any rounding flips, so each model (a keras-hub Llama and a GPT-2, 2 layers,
hidden 64, vocabulary 128) is first trained in-process on a synthetic corpus until its predictions are
confident: text from a fixed Markov chain in which every token has two likely successors (probabilities 0.8
and 0.2). Then each weight scheme's prefill / decode model (``Converter.from_causal_lm``) is run on stock LiteRT
(XNNPACK, 1 thread) and compared with the float Keras model:

- teacher-forced top-1 agreement: a held-out text of 256 tokens fed one token at a time through ``decode``,
  the argmax of each position's logits against Keras' argmax over the same text;
- the largest logits error over those positions, relative to the range of Keras' logits;
- greedy agreement: 64 tokens generated after an 8-token prompt (prefill, then decode), against Keras'
  ``generate()`` with its greedy sampler: the number of leading tokens that agree.

Example (from the repository root)::

    .venv/bin/python benchmarks/generative_accuracy.py --out docs/generative-accuracy.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

VOCAB, LENGTH, CACHE = 128, 64, 512
SCHEMES = ("float32", "float16", "int8", "int4-block32", "int4-block128")


def markov_text(n: int, seed: int):
    """``n`` tokens from the corpus' Markov chain (successors fixed by seed 0; the walk by ``seed``)."""
    import numpy as np

    table = np.random.default_rng(0).integers(1, VOCAB, (VOCAB, 2))
    rng = np.random.default_rng(seed)
    out = [int(rng.integers(1, VOCAB))]
    for _ in range(n - 1):
        out.append(int(table[out[-1], 0 if rng.random() < 0.8 else 1]))
    return np.array(out, np.int32)


def build(family: str):
    import keras_hub

    models = keras_hub.models
    if family == "gpt2":
        backbone = models.GPT2Backbone(vocabulary_size=VOCAB, num_layers=2, num_heads=4, hidden_dim=64,
                                       intermediate_dim=128, max_sequence_length=CACHE)
        return models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    backbone = models.LlamaBackbone(vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=2,
                                    hidden_dim=64, intermediate_dim=128)
    return models.LlamaCausalLM(backbone=backbone, preprocessor=None)


def train(lm, steps: int, seed: int = 1) -> float:
    """``steps`` steps of next-token training (batch 32 x 64 tokens, Adam 3e-3); returns the last loss."""
    import keras
    import numpy as np

    texts = np.stack([markov_text(LENGTH + 1, seed * 100000 + i) for i in range(32 * steps)])
    x = {"token_ids": texts[:, :-1], "padding_mask": np.ones((len(texts), LENGTH), bool)}
    lm.compile(optimizer=keras.optimizers.Adam(3e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               sampler="greedy")
    history = lm.fit(x, texts[:, 1:], batch_size=32, epochs=1, verbose=0)
    return float(history.history["loss"][-1])


def compare(lm, data: bytes, text, prompt_length: int = 8, generated: int = 64) -> dict:
    import numpy as np

    from fuselite.frontend.causal_lm import cache_layout, cache_names, cache_shape
    from fuselite.generative.run import greedy_tokens
    from fuselite.runtime.interpreters import interpreter

    want = np.asarray(lm({"token_ids": text[None], "padding_mask": np.ones((1, text.size), bool)}), np.float64)[0]
    layers, heads, size = cache_layout(lm)
    decode = interpreter(data, 1).get_signature_runner("decode")
    caches = {n: np.zeros(cache_shape(n, CACHE, heads, size), np.float32) for n in cache_names(layers)}
    got = []
    for p, token in enumerate(text):
        out = decode(tokens=np.array([[token]], np.int32), input_pos=np.array([p], np.int32), **caches)
        caches = {n: out[n] for n in caches}
        got.append(out["logits"][0, -1])
    got = np.array(got, np.float64)
    agree = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    error = float(np.abs(got - want).max() / np.ptp(want))
    prompt = text[:prompt_length]
    tokens = np.zeros((1, prompt_length + generated), np.int32)
    tokens[0, :prompt_length] = prompt
    mask = np.zeros_like(tokens, bool)
    mask[0, :prompt_length] = True
    reference = np.asarray(lm.generate({"token_ids": tokens, "padding_mask": mask}, stop_token_ids=None)
                           ["token_ids"])[0, prompt_length:].tolist()
    mine = greedy_tokens(data, prompt, generated)
    same = next((i for i, (a, b) in enumerate(zip(mine, reference)) if a != b), len(reference))
    confident = float(np.mean(np.sort(_softmax(want), -1)[:, -1] > 0.5))
    return {"agree": agree, "error": error, "greedy_same": same, "confident": confident}


def _softmax(x):
    import numpy as np

    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", choices=["llama", "gpt2"], default=["llama", "gpt2"])
    p.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keras
    from report import command_line, emit, fuselite_revision, machine_description, versions

    import fuselite

    lines = ["# Quantized decoders against the float model (trained tiny configs)", "",
             f"Generated by `{command_line()}` (fuselite {fuselite_revision()}).", "",
             machine_description(), "", versions(), "",
             f"keras-hub CausalLMs (2 layers, hidden 64, vocabulary {VOCAB}) trained {args.steps} steps here on a "
             "Markov-chain corpus (two successors per token, 0.8 / 0.2); the converted model on stock LiteRT "
             "(XNNPACK, 1 thread) against the float Keras model: teacher-forced top-1 agreement over 256 held-out "
             "positions, the largest logits error over their range, and how many of 64 greedy tokens after an "
             "8-token prompt are Keras' generate()'s before the first difference.", "",
             "| model | training loss | Keras top-1 > 0.5 | weights | file | top-1 agreement | logits error | "
             "greedy tokens equal |", "|---|---|---|---|---|---|---|---|"]
    text = markov_text(256, seed=7)
    for family in args.families:
        keras.utils.set_random_seed(0)
        lm = build(family)
        t0 = time.perf_counter()
        loss = train(lm, args.steps)
        print(f"{family}: trained in {time.perf_counter() - t0:.0f} s, loss {loss:.3f}", file=sys.stderr, flush=True)
        for scheme in args.schemes:
            conv = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[8], cache_length=CACHE)
            if scheme != "float32":
                conv.optimizations = ["DEFAULT"]
            if scheme == "float16":
                conv.target_spec.supported_types = ["float16"]
            if scheme.startswith("int4"):
                conv.target_spec.supported_types, conv.block_size = ["int4"], int(scheme.rpartition("block")[2])
            data = conv.convert()
            r = compare(lm, data, text)
            ops = conv.report.quantization.get("ops", [])
            int4 = sum(o["mode"] == "int4 weights" for o in ops)
            what = scheme if not int4 else f"{scheme} ({int4} of {sum(o['kind'] == 'FULLY_CONNECTED' for o in ops)} " \
                "FULLY_CONNECTED int4)"
            lines.append(f"| {family} | {loss:.3f} | {100 * r['confident']:.0f}% | {what} | {len(data) / 1024:,.0f} KiB"
                         f" | {100 * r['agree']:.1f}% | {r['error']:.2e} | {r['greedy_same']} of 64 |")
    lines += ["", "int4: FULLY_CONNECTED weights blockwise int4 where the kernels take them (inputs a multiple of the "
              "block: at block 128 a hidden size of 64 leaves the projections from it int8; the record of each op is "
              "in the conversion report), the embedding int8, activations float."]
    emit("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
