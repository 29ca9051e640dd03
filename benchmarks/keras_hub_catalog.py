#!/usr/bin/env python
"""The keras-hub catalog: every backbone keras-hub builds from a tiny configuration (``keras_hub_configs.py``, the
package's own tests' ``init_kwargs``), random weights, converted side by side.

Per backbone, in a child process of its own (a converter or a kernel may crash it):

* fuselite float (``from_keras_model``: batch and length left dynamic): converts, and its error against Keras on
  both LiteRT kernel sets (XNNPACK and the builtin kernels) at the test's shapes and, for a model with a dynamic
  length, at another length and batch 2;
* fuselite int8 and 16x8 (16 random calibration draws, ``TFLITE_BUILTINS_INT8`` / the 16x8 set alone: integer
  only): converts, runs, its error against the float Keras model on both kernel sets, the largest over the test
  input and three more random draws (``TEST_DRAWS``: for either converter one input's error can double on another
  draw, ViT 3.4% -> 6.5%, so one draw cannot tell two converters apart);
* the official converter at its best: ``from_concrete_functions`` of a function of the test's static shapes, its
  variables frozen first with TensorFlow's ``convert_variables_to_constants_v2`` (its ``from_keras_model`` fails
  on most text models; unfrozen, a Keras 3 model's weights stay variables, NaN with XNNPACK), float and int8;
* Keras' own ``model.export(format="litert")``: does the stock LiteRT interpreter run it;
* conversion time and file size.

Errors are max |LiteRT - Keras| over the outputs' range (every output, the largest). Example::

    .venv/bin/python benchmarks/keras_hub_catalog.py --out docs/keras-hub-benchmarks.md
    .venv/bin/python benchmarks/keras_hub_catalog.py --only GPT2Backbone BertBackbone      # a few, to stdout
"""

from __future__ import annotations

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

SIXTEEN = "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"
CALIBRATION = 16
TEST_DRAWS = 4  # the integer errors: the largest over this many test inputs (the test's and more draws)


def _inputs(model, spec: dict, vocabulary: int, batch: int, other_length: bool, seed: int):
    """Inputs like the test's (``spec``: name -> (dtype, shape, max)): token ids below the vocabulary, masks of
    ones with the first row padded at the end, segment ids 0 / 1, floats standard normal; with ``other_length``
    a dynamic length (dim 1) 2 steps shorter (1 longer where that leaves fewer than 2: the tests' lengths are
    often the model's largest)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    dynamic = _dynamic_dims(model)
    declared = model.input if isinstance(model.input, dict) else {"__single__": model.input}
    for name, (dtype, shape, _) in spec.items():
        dtype = str(getattr(declared.get(name), "dtype", None) or dtype)  # the model's own (EdRec: a bool mask)
        shape = list(shape)
        shape[0] = batch
        if other_length and name in dynamic and len(shape) > 1 and 1 in dynamic[name]:
            shape[1] = shape[1] - 2 if shape[1] > 3 else shape[1] + 1
        if dtype.startswith("int") or dtype.startswith("uint"):
            if "mask" in name:
                v = np.ones(shape)
                if len(shape) > 1 and shape[1] > 2:
                    v[0, -2:] = 0
            elif "segment" in name:
                v = rng.integers(0, 2, shape)
            else:
                v = rng.integers(1, max(vocabulary, 2), shape)
            feeds[name] = v.astype(dtype)
        elif dtype == "bool":
            v = np.ones(shape, bool)
            if len(shape) > 1 and shape[1] > 2:
                v[0, -2:] = False
            feeds[name] = v
        else:
            feeds[name] = rng.standard_normal(shape).astype("float32")
    return feeds["__single__"] if "__single__" in feeds else feeds


def _dynamic_dims(model) -> dict[str, set[int]]:
    """input name -> the dims the model leaves unknown (besides the batch)."""
    inputs = model.input if isinstance(model.input, dict) else {"__single__": model.input}
    return {k: {i for i, d in enumerate(t.shape) if d is None and i > 0} for k, t in inputs.items()}


def _keras_outputs(model, feeds) -> list[np.ndarray]:
    out = model(feeds)
    if isinstance(out, dict):
        return [np.asarray(out[k]) for k in sorted(out)]
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _run(data: bytes, feeds, builtin: bool) -> list[np.ndarray]:
    """The model's outputs in the order of the signature's output names (sorted: a dict's keys)."""
    from fuselite.runtime import run

    got = run(data, feeds if isinstance(feeds, dict) else [feeds], builtin_kernels=builtin)
    return [got[k] for k in sorted(got)]


def _error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Max |got - want| over each output's range (paired by shape, closest first), the largest over outputs."""
    worst, rest = 0.0, [np.asarray(g, np.float64) for g in got]  # bool outputs (a padding mask) as 0 / 1
    for w in want:
        w = np.asarray(w, np.float64)
        same = [g for g in rest if g.shape == w.shape]
        if not same:
            raise ValueError(f"no output of shape {w.shape} among {[g.shape for g in got]}")
        g = min(same, key=lambda g: float(np.abs(g - w).max()))
        rest = [r for r in rest if r is not g]
        span = float(w.max() - w.min()) if w.size else 0.0
        worst = max(worst, float(np.abs(g - w).max()) / max(span, 1e-12))
    return worst


def _errors(data: bytes, cases: list[tuple]) -> dict:
    """{"xnnpack": e, "builtin": e} over the cases ((feeds, keras outputs), ...), or {"error": why it fails}."""
    out = {}
    try:
        for builtin in (False, True):
            out["builtin" if builtin else "xnnpack"] = max(_error(_run(data, f, builtin), w) for f, w in cases)
    except Exception as e:
        out["error"] = _first_line(e)
    return out


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:400]


def _fuselite(model, mode: str | None, calibration, cases) -> dict:
    """Converted with batch and length dynamic, or, where fuselite says the model needs static shapes
    (NeedsStaticLength: its Python code branches on a shape), at the test's shapes with ``input_shapes`` (what
    the message tells a user to do), measured at those shapes only."""
    import fuselite
    from fuselite.errors import NeedsStaticLength

    row: dict = {}
    t0 = time.perf_counter()
    shapes = None
    while True:
        try:
            conv = fuselite.Converter.from_keras_model(model)
            if shapes is not None:
                conv.input_shapes = shapes
            if mode is not None:
                conv.optimizations = ["DEFAULT"]
                conv.representative_dataset = lambda: ([c] if not isinstance(c, dict) else c for c in calibration)
                conv.target_spec.supported_ops = [SIXTEEN if mode == "16x8" else "TFLITE_BUILTINS_INT8"]
            data = conv.convert()
            break
        except NeedsStaticLength as e:
            if shapes is not None or not isinstance(cases[0][0], dict):
                return {"converts": False, "why": _first_line(e), "seconds": time.perf_counter() - t0}
            shapes = {k: v.shape for k, v in cases[0][0].items()}
            row["static"] = _first_line(e)
            cases = [c for c in cases if {k: v.shape for k, v in c[0].items()} == shapes]  # at the test's shapes
        except Exception as e:
            return {"converts": False, "why": _first_line(e), "seconds": time.perf_counter() - t0}
    row.update(converts=True, seconds=time.perf_counter() - t0, bytes=len(data), **_errors(data, cases))
    if mode is not None:
        layers = conv.report.quantization.get("layers", {}).get("layers", [])
        row["shares"] = [(r["layer"], round(r["share"], 2)) for r in sorted(layers, key=lambda r: -r["share"])[:3]]
    return row


def _official(model, feeds_static, mode: str | None, calibration, cases=None) -> dict:
    """The official converter on a function of the test's static shapes, variables frozen; its error over
    ``cases`` ((feeds, Keras outputs), ... at those shapes; default the test's input)."""
    import tensorflow as tf

    names = sorted(feeds_static) if isinstance(feeds_static, dict) else None
    specs = [tf.TensorSpec(feeds_static[n].shape, tf.as_dtype(feeds_static[n].dtype), name=n) for n in names] \
        if names else [tf.TensorSpec(feeds_static.shape, tf.as_dtype(feeds_static.dtype), name="x")]
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    @tf.function(input_signature=specs)
    def serve(*xs):
        return model(dict(zip(names, xs)) if names else xs[0], training=False)

    row: dict = {}
    t0 = time.perf_counter()
    try:  # the weights frozen first: the converter keeps a Keras 3 model's as variables (NaN with XNNPACK)
        conv = tf.lite.TFLiteConverter.from_concrete_functions(
            [convert_variables_to_constants_v2(serve.get_concrete_function())])
        if mode is not None:
            conv.optimizations = [tf.lite.Optimize.DEFAULT]
            conv.representative_dataset = lambda: ([c[n] for n in names] if names else [c] for c in calibration)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        data = conv.convert()
    except Exception as e:
        return {"converts": False, "why": _first_line(e), "seconds": time.perf_counter() - t0}
    row.update(converts=True, seconds=time.perf_counter() - t0, bytes=len(data))
    cases = cases or [(feeds_static, _keras_outputs(model, feeds_static))]
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        errs = {}
        for builtin in (False, True):
            kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if builtin else {}
            interp = Interpreter(model_content=data, **kw)
            interp.allocate_tensors()
            worst = 0.0
            for feeds, want in cases:
                for d in interp.get_input_details():  # by name (the spec's): LiteRT's order is not the function's
                    key = next((n for n in names if d["name"].split(":")[0].endswith(n)), None) if names else None
                    interp.set_tensor(d["index"], _as_input(d, feeds[key] if names else feeds))
                interp.invoke()
                got = [_as_output(d, interp.get_tensor(d["index"])) for d in interp.get_output_details()]
                worst = max(worst, _error(got, want))
            errs["builtin" if builtin else "xnnpack"] = worst
        row.update(errs)
    except Exception as e:
        row["error"] = _first_line(e)
    return row


def _as_input(d, v):
    scale, zero = d["quantization"]
    if scale and np.dtype(d["dtype"]).kind in "iu" and np.asarray(v).dtype.kind == "f":
        info = np.iinfo(d["dtype"])
        return np.clip(np.rint(v / scale) + zero, info.min, info.max).astype(d["dtype"])
    return np.asarray(v).astype(d["dtype"])


def _as_output(d, v):
    scale, zero = d["quantization"]
    return (v.astype(np.float64) - zero) * scale if scale and np.dtype(d["dtype"]).kind in "iu" else v


def _keras_export(model) -> dict:
    from fuselite.runtime import interpreter

    with tempfile.TemporaryDirectory() as d:
        try:
            model.export(os.path.join(d, "m.tflite"), format="litert", verbose=False)
            data = open(os.path.join(d, "m.tflite"), "rb").read()
        except Exception as e:
            return {"converts": False, "why": _first_line(e)}
    try:
        interpreter(data)
        return {"converts": True, "runs": True}
    except Exception as e:
        return {"converts": True, "runs": False, "why": _first_line(e)}


WIDTHS = ("hidden_dim", "hidden_size", "intermediate_dim", "embedding_dim", "head_size", "head_dim",
          "num_output_channels")  # ViTDet's neck: a layer norm over its 2 output channels


EXACT = 1e-4  # float "exact": at most this share of the output's range on both kernel sets
CHAOTIC = 0.01  # Keras' eager and XLA results further apart than this share of the range: integer rows not counted


def _keras_spread(model, cases) -> float | None:
    """Keras' own A/A floor where a float conversion is not exact: its eager results against the same model
    compiled by XLA (both TensorFlow, float32, this CPU), as a share of the output's range. A model whose random
    weights amplify float32 rounding (EfficientNet's: a one-ulp change of the input moves its output by 4%)
    has no exact answer for any converter; this says how far two correct implementations already are."""
    import tensorflow as tf

    try:
        compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)
        return max(_error(_keras_outputs(compiled, feeds), want) for feeds, want in cases)
    except Exception:
        return None


def widened(kwargs: dict) -> dict:
    """The test's configuration, its widths times 8 where its hidden size is under 8: a layer norm over 2 features
    gives +-1 whichever of the two is larger, so a rounding difference of 1e-7 flips an output by 2 (a width
    the tests chose for speed, not numbers)."""
    hidden = kwargs.get("hidden_dim", kwargs.get("hidden_size"))
    if not isinstance(hidden, int) or hidden >= 8:
        return kwargs
    return {k: v * 8 if k in WIDTHS and isinstance(v, int) else v for k, v in kwargs.items()}


PARTS = ("fuselite", "official")  # each in a child process of its own, with its own time limit


def one(name: str, part: str | None = None) -> dict:
    """Backbone ``name``'s results (run in a child process): fuselite's float, int8 and 16x8 and Keras' export
    (``part="fuselite"``), the official converter's float and int8 (``"official"``), or all."""
    import keras
    import keras_hub
    from keras_hub_configs import CONFIGS

    config = CONFIGS[name]
    kwargs = widened(dict(config["kwargs"]))
    vocabulary = int(kwargs.get("vocabulary_size", kwargs.get("vocab_size", 10)))
    keras.utils.set_random_seed(0)
    result: dict = {"name": name}
    try:
        model = getattr(keras_hub.models, name)(**kwargs)
    except Exception as e:
        result["build"] = _first_line(e)
        return result
    spec = config["inputs"]
    feeds = _inputs(model, spec, vocabulary, 1, False, 0)
    dynamic = any(1 in dims for dims in _dynamic_dims(model).values())
    cases = [(feeds, _keras_outputs(model, feeds))]
    if dynamic:  # another length, batch 2
        other = _inputs(model, spec, vocabulary, 2, True, 1)
        cases.append((other, _keras_outputs(model, other)))
    calibration = [_inputs(model, spec, vocabulary, 1, False, 100 + i) for i in range(CALIBRATION)]
    draws = [(f, _keras_outputs(model, f)) for f in (_inputs(model, spec, vocabulary, 1, False, 1000 + i)
                                                     for i in range(TEST_DRAWS - 1))]
    result["dynamic"] = dynamic
    if part in (None, "fuselite"):
        result["fuselite"] = _fuselite(model, None, None, cases)
        if (_worst(result["fuselite"]) or 0.0) > EXACT:
            result["keras_spread"] = _keras_spread(model, cases)
        result["fuselite_int8"] = _fuselite(model, "int8", calibration, cases[:1] + draws)
        result["fuselite_16x8"] = _fuselite(model, "16x8", calibration, cases[:1] + draws)
        result["keras_export"] = _keras_export(model)
    if part in (None, "official"):
        result["official"] = _official(model, feeds, None, None)
        result["official_int8"] = _official(model, feeds, "int8", calibration, cases[:1] + draws)
    return result


def _child(name: str, part: str, timeout: float) -> dict:
    """One part of a backbone's results from a child process; a crash or a timeout is its rows' error."""
    try:
        out = subprocess.run([sys.executable, __file__, "--one", name, "--part", part], capture_output=True,
                             text=True, timeout=timeout)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        got = json.loads(line[7:]) if line else {}
        if line and "crash" not in got:
            return got
        why = got.get("crash") or f"the child process ended with {out.returncode}: " \
            f"{(out.stderr.strip().splitlines() or [''])[-1][:200]}"
    except subprocess.TimeoutExpired:
        why = f"did not finish in {timeout:.0f} s"
    keys = ("fuselite", "fuselite_int8", "fuselite_16x8", "keras_export") if part == "fuselite" else \
        ("official", "official_int8")
    return {"name": name, **{k: {"converts": False, "why": why} for k in keys}}


# -- the report ----------------------------------------------------------------------------------------------


def _not_measured(row: dict | None) -> str | None:
    """The cell of a row with no error to show (not tried, not converted, not run), else None."""
    if not row:
        return "—"
    if not row.get("converts"):
        return "fails"
    return "no run" if "xnnpack" not in row else None


def _pct(row: dict | None) -> str:
    if _not_measured(row):
        return _not_measured(row)
    x, b = 100 * row["xnnpack"], 100 * row.get("builtin", row["xnnpack"])
    return f"{x:.2g}%" if abs(x - b) < 0.05 * max(x, 1e-9) or max(x, b) < 1e-3 else f"{x:.2g}% / {b:.2g}%"


def _float_cell(row: dict | None, spread: float | None = None) -> str:
    if _not_measured(row):
        return _not_measured(row)
    worst = _worst(row)
    aa = f"; Keras eager vs XLA {spread:.1e}" if spread is not None else ""
    return f"{'exact' if worst <= EXACT else 'off'} ({worst:.1e}{aa}){' at static shapes' if row.get('static') else ''}"


def table(results: list[dict]) -> str:
    lines = ["| backbone | fuselite float (both kernel sets) | official float | Keras export on LiteRT | "
             "fuselite int8 | official int8 | fuselite 16x8 | fuselite s, bytes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "build" in r or "crash" in r:
            lines.append(f"| {r['name']} | {r.get('build') or r.get('crash')} | | | | | | |")
            continue
        f = r["fuselite"]
        export = r["keras_export"]
        ex = "runs" if export.get("runs") else "no (Flex)" if "Flex" in export.get("why", "") else \
            "fails" if not export.get("converts") else "no"
        size = f"{f['seconds']:.1f} s, {f['bytes']:,}" if f.get("converts") else "—"
        dyn = " (dynamic)" if r.get("dynamic") else ""
        lines.append(f"| {r['name']}{dyn} | {_float_cell(f, r.get('keras_spread'))} | {_float_cell(r['official'])} | {ex} | "
                     f"{_pct(r['fuselite_int8'])} | {_pct(r['official_int8'])} | {_pct(r['fuselite_16x8'])} | {size} |")
    return "\n".join(lines)


def _worst(row: dict | None) -> float | None:
    """The row's error on the worse kernel set, or None where it did not convert and run."""
    if not row or not row.get("converts") or "xnnpack" not in row:
        return None
    return max(row["xnnpack"], row.get("builtin", 0.0))


def int8_section(results: list[dict]) -> str:
    """The issue's bars, counted: int8 within 5% wherever the official converter's is, elsewhere at most the
    official's + 0.5%; 16x8 at most int8's; and for each backbone above a bar, the layers the error shares name."""
    within = beside = misses = 0
    lines, wider, chaotic = [], [], []
    for r in results:
        mine, theirs = _worst(r.get("fuselite_int8")), _worst(r.get("official_int8"))
        sixteen = _worst(r.get("fuselite_16x8"))
        if mine is None:
            continue
        if (r.get("keras_spread") or 0.0) > CHAOTIC:
            chaotic.append(f"{r['name']} (Keras eager vs XLA {r['keras_spread']:.0%} of the range)")
            continue
        bar = 0.05 if theirs is not None and theirs <= 0.05 else (theirs + 0.005 if theirs is not None else None)
        if theirs is not None and theirs <= 0.05:
            within += mine <= 0.05
        elif theirs is not None:
            beside += mine <= bar
        if bar is not None and mine > bar or bar is None and mine > 0.05:
            misses += 1
            shares = ", ".join(f"{layer} {share:.0%}" for layer, share in r["fuselite_int8"].get("shares", []))
            lines.append(f"- {r['name']}: fuselite {mine:.1%}, official "
                         f"{'—' if theirs is None else f'{theirs:.1%}'}; error shares: {shares or 'none measured'}")
        if sixteen is not None and sixteen > mine:
            wider.append(f"{r['name']} ({sixteen:.1%} > {mine:.1%})")
    ran = [r for r in results if _worst(r.get("fuselite_int8")) is not None
           and (r.get("keras_spread") or 0.0) <= CHAOTIC]
    theirs_all = [_worst(r.get("official_int8")) for r in ran]
    official_within = sum(1 for t in theirs_all if t is not None and t <= 0.05)
    official_above = sum(1 for t in theirs_all if t is not None and t > 0.05)
    only_mine = [_worst(r["fuselite_int8"]) for r, t in zip(ran, theirs_all) if t is None]
    return "\n".join([
        f"- Within 5% where the official converter's int8 is: {within} of {official_within}; where it is above 5%, "
        f"at most its error + 0.5%: {beside} of {official_above}; where it has no int8 model, within 5%: "
        f"{sum(1 for e in only_mine if e <= 0.05)} of {len(only_mine)}. Above those bars: {misses}.",
        f"- 16x8 above int8: {', '.join(wider) or 'none'}.",
        *([f"- Not counted, the float model's own answer not fixed (two correct float implementations differ by "
           f"more than {CHAOTIC:.0%} of the output's range, so an integer error there measures nothing): "
           f"{', '.join(chaotic)}."] if chaotic else []),
        *lines])


def _dates(results: list[dict], started) -> str:
    """When the rows ran: one date, or the first and last (rows run again with --update)."""
    dates = sorted(r.get("date", f"{started:%Y-%m-%d %H:%M}") for r in results) or [f"{started:%Y-%m-%d %H:%M}"]
    return dates[0] if dates[0] == dates[-1] or dates[0][:13] == dates[-1][:13] else f"{dates[0]} to {dates[-1]}"


def _kept(results: list[dict]) -> str:
    """Where rows were run again for one part (--update --part), when the other part's columns ran."""
    kept = [r["kept"] for r in results if r.get("kept")]
    if not kept:
        return ""
    revisions = sorted({k["revision"] for k in kept if k.get("revision")})
    dates = sorted(k["date"] for k in kept if k.get("date"))
    part = "the official converter's" if kept[0]["part"] == "official" else "fuselite's"
    return (f"; {part} columns of {len(kept)} rows from the run before (at {', '.join(revisions)}"
            + (f", {dates[0]} to {dates[-1]} UTC" if dates else "") + ")")


def why_section(results: list[dict]) -> str:
    lines = []
    for r in results:
        for key in ("fuselite", "fuselite_int8", "fuselite_16x8", "official", "official_int8"):
            row = r.get(key) or {}
            why = row.get("why") or row.get("error")
            if why:
                lines.append(f"- {r['name']}, {key.replace('_', ' ')}: {why}")
            elif row.get("static") and key == "fuselite":
                lines.append(f"- {r['name']}, fuselite at dynamic shapes: {row['static']} (converted at the test's "
                             "shapes with input_shapes, as it says)")
    return "\n".join(lines) or "- none"


def _without_local_paths(text: str) -> str:
    """Error messages with this machine's paths cut to the package or repository folder they are in."""
    return re.sub(r"/[^\s:\"'`()]*?/(site-packages|benchmarks|src)/", r"\1/", text)


def _write_json(results: list[dict], path: str) -> None:
    """The raw results, written atomically."""
    with open(path + ".tmp", "w") as f:
        f.write(_without_local_paths(json.dumps(results, indent=1)))
    os.replace(path + ".tmp", path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="these backbones only")
    p.add_argument("--one", help=argparse.SUPPRESS)  # the child process
    p.add_argument("--part", choices=PARTS, help="with --update: run this part only (fuselite's columns, or the "
                   "official converter's), the row's other columns kept")
    p.add_argument("--timeout", type=float, default=900, help="seconds per backbone (default 900)")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--update", metavar="JSON", help="run --only's backbones again and replace their rows in these "
                   "results (each row keeps the fuselite revision it ran at); the report covers them all")
    p.add_argument("--report", metavar="JSON", help="run nothing: the report of these results")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.one:
        from measure import quiet

        try:
            with quiet():
                result = one(args.one, args.part)
        except Exception:
            result = {"name": args.one, "crash": traceback.format_exc().strip().splitlines()[-1][:300]}
        print("RESULT " + json.dumps(result))
        return 0
    from keras_hub_configs import CONFIGS
    from report import command_line, emit, fuselite_revision, machine_description, versions

    names = args.only or sorted(CONFIGS)
    started, t0 = datetime.datetime.now(datetime.UTC), time.perf_counter()
    results = []
    revision = fuselite_revision()
    if args.report:
        with open(args.report) as f:
            earlier = json.load(f)
        names = []
    for name in names:
        print(f"[keras_hub] {name} ...", file=sys.stderr, flush=True)
        row: dict = {}
        for part in (args.part,) if args.part and args.update else PARTS:
            got = _child(name, part, args.timeout)
            if "build" in got:  # keras-hub could not build it: nothing to convert
                row = got
                break
            row.update(got)
        results.append(row)
        results[-1].update(revision=revision, date=f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}")
        if args.json and not args.update:  # what ran so far survives an interrupted run (--report renders it)
            _write_json(results, args.json)
    if args.update or args.report:
        if args.update:
            with open(args.update) as f:
                earlier = json.load(f)
        again = {r["name"]: r for r in results}
        if args.part:  # the other part's columns as they were, with the revision and date they ran at
            before = {e["name"]: e for e in earlier}
            again = {k: {**before.get(k, {}), **r, "kept": {
                "part": next(p for p in PARTS if p != args.part),
                "revision": before.get(k, {}).get("kept", {}).get("revision", before.get(k, {}).get("revision")),
                "date": before.get(k, {}).get("kept", {}).get("date", before.get(k, {}).get("date"))}}
                for k, r in again.items()}
        results = [again.pop(r["name"], r) for r in earlier] + list(again.values())
    if args.json or args.update:
        _write_json(results, args.json or args.update)
    revisions = sorted({r.get("revision", revision) for r in results})
    ran = [r for r in results if "build" not in r and "crash" not in r]
    count = {key: sum(1 for r in ran if r[key].get("converts") and "xnnpack" in r[key])
             for key in ("fuselite", "official", "fuselite_int8", "official_int8", "fuselite_16x8")}
    worst = {r["name"]: _worst(r["fuselite"]) for r in ran}
    exact = sum(1 for r in ran if worst[r["name"]] is not None and worst[r["name"]] <= EXACT)
    spread = sum(1 for r in ran if worst[r["name"]] is not None and worst[r["name"]] > EXACT
                 and r.get("keras_spread") is not None and worst[r["name"]] <= r["keras_spread"])
    text = "\n".join([
        "# keras-hub backbones: fuselite, the official converter and Keras' export",
        "",
        f"- Command: `{command_line()}`" + (
            f", rendering the results of `.venv/bin/python benchmarks/keras_hub_catalog.py --json "
            f"{args.report}`" + (f" and of `--update {args.report} --only ...` runs for backbones fixed since (each "
                                 "row keeps the revision and date it ran at)" if len(revisions) > 1 else "")
            if args.report else ""),
        f"- Date: {_dates(results, started)} UTC" + _kept(results) + ("" if args.report else
                                                     f" (this run took {time.perf_counter() - t0:.0f} s)"),
        f"- Machine: {machine_description()}",
        f"- Versions: {versions()}; fuselite sources at {', '.join(revisions)}"
        + (" (each row's in the JSON results)" if len(revisions) > 1 else ""),
        "- Tiny configurations of keras-hub's own backbone tests (`benchmarks/keras_hub_configs.py`; widths times 8 "
        "where the hidden size is under 8, `widened`), random weights. fuselite: `from_keras_model`, batch and length dynamic (errors at the test's shapes and, for a "
        "dynamic length, at another length and batch 2). Official: `from_concrete_functions` of a function of the "
        "test's static shapes, its variables frozen first (`convert_variables_to_constants_v2`). int8 / 16x8: 16 random calibration draws, integer op sets "
        f"alone, errors the largest over {TEST_DRAWS} test inputs (the test's and {TEST_DRAWS - 1} more random draws; "
        "both converters). Error: max |LiteRT - Keras| over the output's range, XNNPACK (and the builtin kernels where they "
        "differ by more than 5%). *exact*: at most 1e-4 on both kernel sets; where fuselite's is not, Keras' own "
        "eager and XLA-compiled results of the model are compared too (its A/A floor).",
        "",
        f"Built {len(ran)} of {len(results)}. Float: fuselite runs {count['fuselite']} ({exact} exact"
        + (f"; {spread} more within Keras' own eager-vs-XLA spread" if spread else "") + "), the "
        f"official converter {count['official']}. int8: fuselite {count['fuselite_int8']}, official "
        f"{count['official_int8']}; 16x8: fuselite {count['fuselite_16x8']}.",
        "",
        table(results),
        "",
        "## int8 against the official converter's, and 16x8 against int8",
        "",
        "The error share of a layer: how much of the int8 error goes when that layer alone stays float "
        "(docs/quantization.md, error shares).",
        "",
        int8_section(results),
        "",
        "## Why a conversion fails or does not run",
        "",
        why_section(results),
        ""])
    emit(_without_local_paths(text), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
