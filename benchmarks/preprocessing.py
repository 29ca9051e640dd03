#!/usr/bin/env python
"""Preprocessing inside the model: each Keras preprocessing layer alone in a small Keras 3 model (and the raw-string
text classifier), converted by fuselite and by tf.lite.TFLiteConverter, run on stock LiteRT (builtin kernels and
XNNPACK) on inputs with out-of-vocabulary values, empty strings and masks, compared with Keras exactly.

    .venv/bin/python benchmarks/preprocessing.py --out docs/preprocessing-benchmarks.md

Each converter as a new user calls it: ``from_keras_model(model).convert()`` with its defaults (the official
converter's op set is TFLITE_BUILTINS: no Flex ops, which the current LiteRT runtimes do not run). A cell: "exact"
(every output equal to Keras', floats within 1e-6 of the range), "off" with the error, or why it fails.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time

import numpy as np

VOCAB = ["the", "cat", "sat", "on", "mat"]
WORDS = np.array([[b"the", b"zebra", b"", b"mat"], [b"cat", b"cat", b"on", b"sat"]], dtype=object)
SENTENCES = np.array([b"the cat sat on the mat", b"", b"  zebra\tcat  ", b"mat on cat sat the the extra"], dtype=object)
IDS = np.array([[12, 30, 5, 0, 99], [7, 7, -3, 12, 1000]], np.int64)


def _cases(keras) -> dict:
    """name -> (model builder, inputs)."""
    def one(layer, shape, dtype):
        i = keras.Input(shape, dtype=dtype)
        return keras.Model(i, layer(i))

    def text_lstm():
        keras.utils.set_random_seed(0)
        i = keras.Input((4,), dtype="string")
        x = keras.layers.Embedding(len(VOCAB) + 1, 8)(keras.layers.StringLookup(vocabulary=VOCAB)(i))
        return keras.Model(i, keras.layers.Dense(2)(keras.layers.LSTM(8)(x)))

    def text_tokens():  # TextVectorization(split="whitespace", standardize=None) from tensorflow-text's kernels
        from fuselite.testing.models import text_tokens as tokens

        return tokens(VOCAB, 6)

    def text_tokens_lstm():
        keras.utils.set_random_seed(0)
        i = keras.Input((), dtype="string")
        x = keras.layers.Embedding(len(VOCAB) + 2, 8)(text_tokens()(i))
        return keras.Model(i, keras.layers.Dense(2)(keras.layers.LSTM(8)(x)))

    lookup = keras.layers.StringLookup
    return {
        "StringLookup (int)": (lambda: one(lookup(vocabulary=VOCAB), (4,), "string"), [WORDS]),
        "StringLookup (mask_token)": (lambda: one(lookup(vocabulary=VOCAB, mask_token=""), (4,), "string"), [WORDS]),
        "StringLookup (one_hot)": (lambda: one(lookup(vocabulary=VOCAB, output_mode="one_hot"), (1,), "string"),
                                   [WORDS[:, 1:2]]),
        "StringLookup (multi_hot)": (lambda: one(lookup(vocabulary=VOCAB, output_mode="multi_hot"), (4,), "string"),
                                     [WORDS]),
        "StringLookup (count)": (lambda: one(lookup(vocabulary=VOCAB, output_mode="count"), (4,), "string"), [WORDS]),
        "StringLookup (tf_idf)": (lambda: one(lookup(vocabulary=VOCAB, output_mode="tf_idf",
                                                     idf_weights=[0.5, 1.0, 1.5, 2.0, 2.5]), (4,), "string"), [WORDS]),
        "StringLookup (invert)": (lambda: one(lookup(vocabulary=VOCAB, invert=True), (5,), "int64"),
                                  [np.array([[0, 1, 5, 9, 3]], np.int64)]),
        "StringLookup (num_oov_indices=2)": (lambda: one(lookup(vocabulary=VOCAB, num_oov_indices=2), (4,), "string"),
                                             [WORDS]),
        "IntegerLookup (int)": (lambda: one(keras.layers.IntegerLookup(vocabulary=[12, 7, 30, 99]), (5,), "int64"),
                                [IDS]),
        "IntegerLookup (mask_token, multi_hot)": (lambda: one(keras.layers.IntegerLookup(
            vocabulary=[12, 7, 30, 99], mask_token=0, output_mode="multi_hot"), (5,), "int64"), [IDS]),
        "IntegerLookup (invert)": (lambda: one(keras.layers.IntegerLookup(vocabulary=[12, 7, 30, 99], invert=True),
                                               (5,), "int64"), [np.array([[0, 1, 2, 4, 7]], np.int64)]),
        "Discretization": (lambda: one(keras.layers.Discretization(bin_boundaries=[-1.0, 0.0, 0.5, 2.0]), (6,),
                                       "float32"), [np.array([[-2, -1, 0, 0.25, 0.5, 3]], np.float32)]),
        "Discretization (count)": (lambda: one(keras.layers.Discretization(bin_boundaries=[-1.0, 0.0, 0.5, 2.0],
                                                                           output_mode="count"), (6,), "float32"),
                                   [np.array([[-2, -1, 0, 0.25, 0.5, 3]], np.float32)]),
        "CategoryEncoding (multi_hot)": (lambda: one(keras.layers.CategoryEncoding(6, output_mode="multi_hot"), (4,),
                                                     "int32"), [np.array([[0, 3, 3, 5]], np.int32)]),
        "CategoryEncoding (count)": (lambda: one(keras.layers.CategoryEncoding(6, output_mode="count"), (4,), "int32"),
                                     [np.array([[0, 3, 3, 5]], np.int32)]),
        "Hashing (strings)": (lambda: one(keras.layers.Hashing(num_bins=4), (4,), "string"), [WORDS]),
        "Hashing (integers)": (lambda: one(keras.layers.Hashing(num_bins=4), (5,), "int64"), [IDS]),
        "TextVectorization": (lambda: one(keras.layers.TextVectorization(vocabulary=VOCAB), (1,), "string"),
                              [np.array([[b"The cat, sat!"], [b""]], dtype=object)]),
        "TextVectorization (split='whitespace', standardize=None)": (lambda: one(keras.layers.TextVectorization(
            vocabulary=VOCAB, standardize=None, output_sequence_length=6), (1,), "string"), [SENTENCES[:, None]]),
        "tensorflow_text.WhitespaceTokenizer -> table -> ids (a Keras layer)": (
            lambda: one(text_tokens(), (), "string"), [SENTENCES]),
        "strings -> StringLookup -> Embedding -> LSTM": (text_lstm, [WORDS]),
        "strings -> tensorflow-text tokens -> table -> Embedding -> LSTM": (text_tokens_lstm, [SENTENCES]),
    }


def _compare(data: bytes, model, xs: list) -> str:
    from fuselite.runtime import run

    want = model(xs[0] if len(xs) == 1 else xs)
    want = np.asarray(want)
    worst = 0.0
    for builtin in (True, False):
        got = next(iter(run(data, xs, builtin_kernels=builtin).values()))
        if want.dtype.kind in "OSU":
            if [bytes(x) for x in np.ravel(got)] != [bytes(x) for x in np.ravel(want)]:
                return "off (strings differ)"
            continue
        if got.shape != want.shape:
            return f"off (shape {got.shape} against {want.shape})"
        span = max(float(np.ptp(want)), 1e-12)
        worst = max(worst, float(np.abs(got.astype(np.float64) - want).max()) / span)
    return "exact" if worst <= 1e-6 else f"off ({worst:.1e} of the range)"


def _side(convert, model, xs) -> str:
    try:
        data = convert(model)
    except Exception as e:  # the op it fails on, in the converter's words
        text = " ".join(str(e).split())
        ours = re.search(r"no lowering for TF op (\w+) .*?\(at Keras layer '[^']*' \((\w+)\)\)", text)
        if ours:
            return f"fails: no lowering for `{ours.group(1)}` (one error naming the layer, {ours.group(2)}, " \
                   "and the way out)"
        theirs = re.search(r"fused\[\"(\w+):", text) or re.search(r"'tf\.(\w+)' op", text)
        if theirs:
            return f"fails: {type(e).__name__} on `{theirs.group(1)}`"
        return f"fails: {type(e).__name__}: {text[:160]}"
    try:
        return _compare(data, model, xs)
    except Exception as e:
        return f"converts, does not run: {type(e).__name__}: {' '.join(str(e).split())[:160]}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keras
    import tensorflow as tf
    from report import command_line, emit, fuselite_revision, machine_description, versions

    import fuselite

    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    rows = []
    for name, (build, xs) in _cases(keras).items():
        print(f"[preprocessing] {name} ...", file=sys.stderr, flush=True)
        model = build()
        ours = _side(lambda m: fuselite.Converter.from_keras_model(m).convert(), model, xs)
        theirs = _side(lambda m: tf.lite.TFLiteConverter.from_keras_model(m).convert(), model, xs)
        rows.append(f"| {name} | {ours} | {theirs} |")
    text = "\n".join([
        "# Preprocessing layers inside the model: fuselite and tf.lite.TFLiteConverter", "",
        f"- Command: `{command_line()}` (from the repository root)",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC (took {time.perf_counter() - t0:.0f} s)",
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {fuselite_revision()}",
        "- Each layer alone in a Keras 3 model (the last rows: the raw-string text classifiers), both converters "
        "with their defaults (`from_keras_model(model).convert()`; the official converter's op set is "
        "TFLITE_BUILTINS, no Flex), run on stock LiteRT with its builtin kernels and with XNNPACK, on inputs with "
        "out-of-vocabulary values, empty strings and masked ids. exact: every output Keras' own (floats within 1e-6 "
        "of the range), on both kernel sets. tensorflow-text's ops stay the CUSTOM ops its TFLite kernels run "
        "(an app links them; `fuselite.runtime` registers them on the stock interpreter, docs/custom-ops.md).",
        "",
        "| layer | fuselite | tf.lite.TFLiteConverter |",
        "|---|---|---|",
        *rows]) + "\n"
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
