"""``make demo``: what fuselite is for, in one screen.

The text classifier of Keras' own example (keras.io/examples/nlp/bidirectional_lstm_imdb: token ids of any
length -> Embedding -> two Bidirectional LSTMs -> Dense), built in-process with random weights, converted by
fuselite and by ``tf.lite.TFLiteConverter`` side by side (the official one in a child process, which it can
crash): does it convert, does it run on the stock LiteRT interpreter, its ops, its latency, its error against
Keras at two sentence lengths; then fuselite's int8 of it, with its error.
"""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

VOCABULARY, EMBEDDING, UNITS = 2000, 32, 32  # the example's layers, a tenth of its vocabulary, half its width
LENGTHS = (80, 200)  # two sentence lengths: the file takes any
CALIBRATION = 16  # sentences the int8 conversion calibrates on


def build(keras):
    """The example's model, as it writes it: ``keras.Input(shape=(None,), dtype="int32")``."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCABULARY, EMBEDDING)(inputs)
    x = keras.layers.Bidirectional(keras.layers.LSTM(UNITS, return_sequences=True))(x)
    x = keras.layers.Bidirectional(keras.layers.LSTM(UNITS))(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs, outputs, name="imdb_bidirectional_lstm")


def _sentences(rng, n: int, length: int):
    return [rng.integers(1, VOCABULARY, (1, length)).astype("int32") for _ in range(n)]


def _runs_on_litert(data: bytes) -> str | None:
    """None if the stock LiteRT interpreter prepares the model, else why not (its own words)."""
    from fuselite.runtime import interpreter

    try:
        interpreter(data, allocate=False)
        return None
    except Exception as e:  # Flex ops, a kernel that refuses the model
        return " ".join(str(e).split()).split(". ")[0]


def _error(data: bytes, sentences, wants) -> float:
    """Max abs difference from Keras' outputs ``wants`` over ``sentences`` (each resized into the model: any
    length)."""
    import numpy as np

    from fuselite.runtime import run

    return max(float(np.abs(next(iter(run(data, [s]).values())) - w).max()) for s, w in zip(sentences, wants))


def _describe(row: dict, tests, wants) -> None:
    """Ops, size, and whether (and how close to Keras) the stock LiteRT interpreter runs ``row["data"]``."""
    from fuselite.inspect import describe

    ops = {k: v for sg in describe(row["data"])["subgraphs"] for k, v in sg["ops"].items()}
    row.update(ops=sum(ops.values()), size=len(row["data"]), sequence_ops=sum(v for k, v in ops.items()
                                                                            if "SEQUENCE" in k),
               **{"while": ops.get("WHILE", 0)})
    refused = _runs_on_litert(row["data"])
    if refused:
        row["error"] = f"does not run on the stock LiteRT interpreter: {refused}"
    else:
        row["max_abs_error"] = _error(row["data"], tests, wants)


def main() -> int:
    import numpy as np

    import fuselite
    from fuselite.compare import format_comparison, official_conversion
    from fuselite.runtime import run
    from fuselite.testing import models as zoo
    from fuselite.verify import bench

    keras = zoo.keras3()
    print("fuselite demo: the text classifier of Keras' own example (keras.io/examples/nlp/bidirectional_lstm_imdb)")
    print(f"  keras.Input((None,), int32) -> Embedding({VOCABULARY}, {EMBEDDING}) -> Bidirectional(LSTM({UNITS}, "
          f"return_sequences=True))\n  -> Bidirectional(LSTM({UNITS})) -> Dense(1, sigmoid); random weights, "
          "sentences of any length\n", flush=True)
    model = build(keras)
    rng = np.random.default_rng(0)
    tests = [s for length in LENGTHS for s in _sentences(rng, 2, length)]
    wants = [np.asarray(model(s)) for s in tests]  # Keras' own outputs, once
    rows = []
    with tempfile.TemporaryDirectory(prefix="fuselite-demo-") as work:
        src = os.path.join(work, "model.keras")
        model.save(src)
        t0 = time.perf_counter()
        conv = fuselite.Converter.from_keras_model(model)
        ours = conv.convert()
        rows.append({"converter": "fuselite", "converts": True, "seconds": time.perf_counter() - t0, "data": ours,
                     "error": None})
        print("converting with tf.lite.TFLiteConverter, as it is and with SELECT_TF_OPS (what Keras' "
              "export(format='litert') asks for), in child processes ...\n", flush=True)
        from concurrent.futures import ThreadPoolExecutor

        columns = (("tf.lite.TFLiteConverter", False), ("+ SELECT_TF_OPS", True))
        with ThreadPoolExecutor(len(columns)) as pool:  # two child processes at once
            done = list(pool.map(lambda column: official_conversion(src, work, select_tf_ops=column[1]), columns))
        for (name, _), (theirs, why, seconds) in zip(columns, done):
            rows.append({"converter": name, "converts": theirs is not None, "seconds": seconds, "data": theirs,
                         "error": None if theirs is not None else why})
    for row in rows:
        if row["data"] is not None:
            _describe(row, tests, wants)
    runnable = [r for r in rows if r.get("max_abs_error") is not None]
    for r, t in zip(runnable, bench([r["data"] for r in runnable], seconds=2.0, inputs={"tokens": tests[0]})):
        r["latency_us"] = t["median_us"]
    for r in rows:
        r.pop("data")
    print(format_comparison(rows, error_label=f"max abs error vs Keras, {' / '.join(map(str, LENGTHS))} tokens"))
    forms = sorted({r.get("form", "") for r in conv.report.composites if r.get("status") == "fused"})
    print(f"fuselite's recurrent layers: the {', '.join(forms)} form (docs/rnn.md); any sentence length, any batch")

    print(f"\nfuselite int8, calibrated on {CALIBRATION} sentences (the official converter fails on every Keras 3 recurrent "
          "layer in int8):", flush=True)
    calibration = _sentences(np.random.default_rng(1), CALIBRATION, LENGTHS[0])
    t0 = time.perf_counter()
    q = fuselite.Converter.from_keras_model(model)
    q.optimizations = ["DEFAULT"]
    q.representative_dataset = lambda: ([s] for s in calibration)
    quantized = q.convert()
    seconds = time.perf_counter() - t0
    want = np.concatenate([w.ravel() for w in wants])
    got = np.concatenate([next(iter(run(quantized, [s]).values())).ravel() for s in tests])
    schemes = sorted({r["scheme"] for r in q.report.quantization["ops"] if r.get("scheme")})
    print(f"  converted in {seconds:.1f} s: {len(quantized):,} bytes ({len(quantized) / len(ours):.2f}x "
          f"the float file), the LSTMs as LiteRT's {', '.join(schemes)}")
    print(f"  max abs error vs Keras at {' / '.join(map(str, LENGTHS))} tokens: {np.abs(got - want).max():.1e} "
          f"(its outputs, probabilities: {want.min():.4f} to {want.max():.4f} with random weights)")
    print("\nYour own model: fuselite compare model.keras (this table); fuselite convert model.keras -o m.tflite")
    ok = rows[0].get("max_abs_error") is not None and rows[0]["max_abs_error"] <= 1e-5
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
