"""Check a ``.tflite`` against its TensorFlow source, and time ``.tflite`` files on LiteRT.

:func:`verify` (``fuselite verify SRC MODEL.tflite``, ``fuselite convert --verify``) runs
the source (a ``.keras`` file, or a SavedModel's signature) and LiteRT on the same
inputs — given in an ``.npz`` (one array per input, by name), or drawn from the input
specs (normal floats, integers in ``[0, 10)``, a dynamic batch as 1 and other dynamic
dimensions as 4) — and compares every output. A model without resource variables is
invoked twice: the second answer must be bit-identical (state that an in-place kernel
kept by mistake shows here). A model with resource variables (``VAR_HANDLE``) keeps
state on purpose and is not checked. Integer inputs and outputs with a quantization scale are
quantized / dequantized on the way. The model passes when each output's max abs error
is at most ``tolerance × max(1, max |TensorFlow output|)``.

:func:`bench` (``fuselite bench A.tflite [B.tflite]``) times ``invoke()`` on LiteRT,
interleaving the models round by round, and reports the median and the 10th–90th
percentiles.

Both check the file first (``fuselite.tflite.validate``) and run LiteRT in a child process
(``python -I`` in a temporary folder): a kernel that crashes on a damaged file ends the child,
and the call raises one :class:`InputError` ("LiteRT crashed running the model (signal
SIGSEGV) ..."). The forms :func:`fastest_form` times during a conversion run in this process.

Example::

    result = verify("model.keras", open("model.tflite", "rb").read())
    result.passed, result.outputs   # True, [{"name": "dense", "max_abs_error": 3e-7, ...}]
"""

from __future__ import annotations

import contextvars
import os
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from fuselite.errors import InputError


@dataclass
class Verification:
    """What :func:`verify` found: one entry per output, and whether the model passed."""

    tolerance: float
    outputs: list[dict] = field(default_factory=list)
    stateless: bool | None = None  # None: the model has variables, not checked
    inputs: dict = field(default_factory=dict)  # name -> (shape, dtype) used

    @property
    def passed(self) -> bool:
        return all(o["ok"] for o in self.outputs) and self.stateless is not False

    def __str__(self) -> str:
        lines = []
        for o in self.outputs:
            mark = "ok  " if o["ok"] else "FAIL"
            lines.append(f"{mark} {o['name']}: max abs error {o['max_abs_error']:.3g} (allowed {o['allowed']:.3g}; "
                         f"TensorFlow's outputs in [{o['min']:.4g}, {o['max']:.4g}])")
        if self.stateless is None:
            lines.append("the model has variables: a second invoke may differ (not checked)")
        else:
            lines.append("stateless: a second invoke gives bit-identical outputs" if self.stateless
                         else "FAIL a second invoke on the same inputs gives other outputs (state kept by mistake)")
        lines.append(("PASSED" if self.passed else "FAILED") + f" ({len(self.outputs)} output(s), tolerance "
                     f"{self.tolerance:g} × max(1, max |output|))")
        return "\n".join(lines)


# -- the TensorFlow side ----------------------------------------------------------------------------

class _Source:
    """A callable TensorFlow program: named inputs -> named outputs (numpy)."""

    def __init__(self, path: str, signature_key: str | None = None):
        from fuselite.keras_files import check_keras_file, check_regular_file, keras_load_error
        from fuselite.requirements import require_tensorflow

        if not os.path.exists(path):  # before TensorFlow's import: said at once
            raise InputError(f"source model not found: '{path}'")
        if path.endswith(".keras"):
            check_keras_file(path)
        elif path.endswith(".h5"):  # h5py would block on a FIFO
            check_regular_file(path)
        require_tensorflow()
        if path.endswith((".keras", ".h5")):
            import keras

            try:
                self.model = keras.models.load_model(path, compile=False)
            except Exception as e:
                raise keras_load_error(path, e) from None
            self.input_names = [str(getattr(t, "name", f"input_{i}")).split(":")[0]
                                for i, t in enumerate(self.model.inputs)]
            self.output_names = list(getattr(self.model, "output_names", None) or
                                     [f"output_{i}" for i in range(len(self.model.outputs))])
            self.fn = None
        elif os.path.isdir(path):
            import tensorflow as tf

            try:
                loaded = tf.saved_model.load(path)
            except Exception as e:
                raise InputError(f"cannot load SavedModel '{path}': {str(e).splitlines()[0] if str(e) else e}") \
                    from None
            key = signature_key or "serving_default"
            if key not in loaded.signatures:
                raise InputError(f"SavedModel '{path}' has no signature '{key}' (it has: "
                                 f"{', '.join(loaded.signatures) or 'none'})")
            self.loaded, self.fn = loaded, loaded.signatures[key]
            self.input_names = sorted(self.fn.structured_input_signature[1])
            self.output_names = sorted(self.fn.structured_outputs)
        else:
            raise InputError(f"'{path}' is neither a .keras file nor a SavedModel directory")

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.fn is None:
            xs = [inputs[n] for n in self.input_names]
            out = self.model(xs if len(xs) > 1 else xs[0], training=False)
            outs = list(out.values()) if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else [out]
            return {n: np.asarray(o) for n, o in zip(self.output_names, outs)}
        import tensorflow as tf

        specs = self.fn.structured_input_signature[1]
        out = self.fn(**{n: tf.constant(inputs[n], dtype=specs[n].dtype) for n in self.input_names})
        return {n: np.asarray(v) for n, v in out.items()}


# -- the LiteRT side ---------------------------------------------------------------------------------

def _runner(data: bytes, signature_key: str | None, num_threads: int = 1):
    from fuselite.inspect import load_model
    from fuselite.runtime import interpreter

    load_model(data)  # not a TFLite file: said as such
    try:
        interp = interpreter(data, num_threads)
    except Exception as e:
        raise InputError(f"LiteRT cannot load the model: {str(e).splitlines()[0] if str(e) else e}") from None
    sigs = interp.get_signature_list()
    if not sigs:
        raise InputError("the .tflite has no signatures (fuselite and the official converter always write them)")
    key = signature_key or ("serving_default" if "serving_default" in sigs else next(iter(sigs)))
    if key not in sigs:
        raise InputError(f"the .tflite has no signature '{key}' (it has: {', '.join(sigs)})")
    return interp, interp.get_signature_runner(key)


def draw_inputs(details: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for a signature runner's ``get_input_details()``: random values of each input's spec."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, d in details.items():
        sig = d.get("shape_signature")
        dims = list(sig if sig is not None and len(sig) else d["shape"])
        shape = tuple((1 if i == 0 else 4) if int(n) < 0 else int(n) for i, n in enumerate(dims))
        dtype = np.dtype(d["dtype"])
        scale = d.get("quantization_parameters", {}).get("scales")
        if dtype.kind == "f" or (dtype.kind in "iu" and scale is not None and len(scale)):
            out[name] = rng.standard_normal(shape).astype(np.float32)  # real values; quantized on the way
        elif dtype.kind in "iu":
            out[name] = rng.integers(0, 10, shape).astype(dtype)
        elif dtype.kind == "b":
            out[name] = rng.random(shape) > 0.5
        else:
            raise InputError(f"cannot draw values for input '{name}' of dtype {dtype}; give them with --inputs")
    return out


def load_inputs(path: str) -> dict[str, np.ndarray]:
    """Inputs from an ``.npz`` (one array per input, by input name), each array's header checked before it is
    read (``fuselite.npz``): one :class:`InputError` line for a file that is not one."""
    from fuselite.npz import read_npz

    return read_npz(path, "inputs")


def _to_runtime(x: np.ndarray, d: dict) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    q = d.get("quantization_parameters", {})
    scales = q.get("scales")
    if dtype.kind in "iu" and scales is not None and len(scales) and np.asarray(x).dtype.kind == "f":
        info = np.iinfo(dtype)
        return np.clip(np.rint(x / scales[0]) + q["zero_points"][0], info.min, info.max).astype(dtype)
    return np.asarray(x).astype(dtype)


def _from_runtime(y: np.ndarray, d: dict) -> np.ndarray:
    q = d.get("quantization_parameters", {})
    scales = q.get("scales")
    if y.dtype.kind in "iu" and scales is not None and len(scales):
        return (y.astype(np.float64) - q["zero_points"][0]) * scales[0]
    return y


def _invoke(runner, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from fuselite.runtime import check_input_shapes

    details, out_details = runner.get_input_details(), runner.get_output_details()
    missing = sorted(set(details) - set(inputs))
    if missing:
        raise InputError(f"inputs lack {', '.join(missing)} (the model's inputs: {', '.join(details)})")
    for name, d in details.items():  # strings (or records) for a number: said, not numpy's cast failing
        given = np.asarray(inputs[name]).dtype
        if np.dtype(d["dtype"]).kind in "biufc" and given.kind not in "biufc":
            raise InputError(f"input '{name}' is given as {'strings' if given.kind in 'SU' else 'values'} (dtype "
                             f"{given.str}); the model takes {np.dtype(d['dtype']).name}")
    feed = {name: _to_runtime(inputs[name], d) for name, d in details.items()}
    check_input_shapes(details, feed)
    out = runner(**feed)
    return {k: _from_runtime(np.asarray(v), out_details[k]) for k, v in out.items()}


def _pair(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """TensorFlow's outputs with LiteRT's: by name, then the rest in order (shapes must agree)."""
    pairs, left = [], [k for k in got if k not in want]
    for name, w in want.items():
        if name in got:
            pairs.append((name, w, got[name]))
        elif left:
            pairs.append((name, w, got[left.pop(0)]))
    for name, w, g in pairs:
        if np.shape(w) != np.shape(g):
            raise InputError(f"output '{name}': TensorFlow gives shape {list(np.shape(w))}, the .tflite "
                             f"{list(np.shape(g))}")
    return pairs


def verify(source: str, data: bytes, inputs: dict[str, np.ndarray] | None = None, tolerance: float = 1e-4,
           signature_key: str | None = None, isolated: bool = True) -> Verification:
    """Run ``source`` and the model ``data`` on the same inputs and compare every output. The file is checked
    first (:func:`fuselite.tflite.validate.validate_model`); LiteRT runs it in a child process (``isolated``, the
    default: a native crash on a damaged file is an :class:`InputError`, "LiteRT crashed running the model
    (signal SIGSEGV) ...")."""
    from fuselite.inspect import describe

    info = describe(data)  # validated: nothing native has read the file yet
    if not os.path.exists(source):  # said before LiteRT runs (as _Source says it)
        raise InputError(f"source model not found: '{source}'")
    run = _in_child if isolated else _run_here
    inputs, got, stateless = run("outputs", [data], {"signature_key": signature_key,
                                                    "again": not info["variables"]["resource"]}, inputs)
    src = _Source(source, signature_key)  # TensorFlow's import (seconds) once LiteRT has run the model
    real = {n: np.asarray(x, np.float32) if np.asarray(x).dtype.kind == "f" else x for n, x in inputs.items()}
    try:
        want = src(real)
    except KeyError as e:
        raise InputError(f"the source takes an input {e} that the inputs lack") from None
    result = Verification(tolerance, inputs={n: (list(x.shape), str(x.dtype)) for n, x in inputs.items()})
    for name, w, g in _pair(want, got):
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        err = float(np.abs(w - g).max()) if w.size else 0.0
        allowed = tolerance * max(1.0, float(np.abs(w).max()) if w.size else 0.0)
        result.outputs.append({"name": name, "max_abs_error": err, "allowed": allowed, "ok": bool(err <= allowed),
                               "min": float(w.min()) if w.size else 0.0, "max": float(w.max()) if w.size else 0.0})
    result.stateless = stateless  # None: the model has resource variables, state it keeps on purpose
    return result


def _outputs(data: bytes, signature_key: str | None, inputs: dict | None, again: bool):
    """LiteRT's side of :func:`verify`: (the inputs, drawn where not given; the outputs; whether a second invoke
    gives bit-identical outputs, None unless ``again``)."""
    _, runner = _runner(data, signature_key)
    if inputs is None:
        inputs = draw_inputs(runner.get_input_details())
    got = _invoke(runner, inputs)
    stateless = None
    if again:
        second = _invoke(runner, inputs)
        stateless = all(np.array_equal(got[k], second[k]) for k in got)
    return inputs, got, stateless


# -- LiteRT in a child process ---------------------------------------------------------------------------------

LITERT_TIMEOUT_S = 600  # a child running LiteRT on a model is stopped after this long (bench: plus its seconds)
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from fuselite.verify import _child_main; _child_main(sys.argv[2])"


def _run_here(task: str, models: list[bytes], request: dict, inputs: dict | None):
    """``task`` ("outputs": :func:`_outputs`, "bench": :func:`_bench`) in this process."""
    if task == "outputs":
        return _outputs(models[0], request["signature_key"], inputs, request["again"])
    return _bench(models, inputs=inputs, **request)


def _save(path: str, arrays: dict) -> list[str]:
    """``arrays`` in an ``.npz`` by position (any name survives), their names returned in order."""
    np.savez(path, *[np.asarray(a).astype(bytes) if np.asarray(a).dtype == object else np.asarray(a)
                     for a in arrays.values()])
    return list(arrays)


def _load(path: str, names: list[str]) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {name: z[f"arr_{i}"] for i, name in enumerate(names)}


def _in_child(task: str, models: list[bytes], request: dict, inputs: dict | None):
    """:func:`_run_here` in a child process (``python -I`` in a temporary folder, the environment's ``PYTHON*``
    variables dropped, as ``fuselite.runtime.compiled``'s worker): a model that crashes LiteRT's native code
    (a custom kernel fed garbage) ends the child, not this process, and is said in one :class:`InputError`.
    LiteRT's own log lines reach this process's stderr (hidden by the CLI unless ``--verbose``)."""
    import json
    import subprocess
    import sys
    import tempfile

    from fuselite.runtime.compiled import exit_description

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder fuselite is imported from
    timeout = LITERT_TIMEOUT_S + float(request.get("seconds", 0))
    with tempfile.TemporaryDirectory(prefix="fuselite-litert-") as work:
        paths = []
        for i, data in enumerate(models):
            paths.append(os.path.join(work, f"model{i}.tflite"))
            with open(paths[-1], "wb") as f:
                f.write(data)
        names = _save(os.path.join(work, "inputs.npz"), inputs) if inputs is not None else None
        with open(os.path.join(work, "request.json"), "w") as f:
            json.dump({"task": task, "models": paths, "inputs": names, "request": request}, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        try:
            # stdout to stderr: LiteRT's prints never mix with what the CLI prints (--json)
            done = subprocess.run([sys.executable, "-I", "-c", _CHILD, root, work], cwd=work, env=env,
                                  stdin=subprocess.DEVNULL, stdout=2, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise InputError(f"LiteRT did not finish running the model in {timeout:.0f} s (it ran in a child "
                             "process, stopped)") from None
        answer_path = os.path.join(work, "answer.json")
        if done.returncode != 0 or not os.path.exists(answer_path):
            raise InputError(f"LiteRT crashed running the model ({exit_description(done.returncode)}): the file is "
                             "damaged, or one of its kernels fails on it (LiteRT ran in a child process)")
        with open(answer_path) as f:
            answer = json.load(f)
        if "error" in answer:
            raise InputError(answer["error"])
        if task == "bench":
            return answer["results"]
        used = _load(os.path.join(work, "used.npz"), answer["inputs"])
        return used, _load(os.path.join(work, "outputs.npz"), answer["outputs"]), answer["stateless"]


def _child_main(work: str) -> None:
    """The child process of :func:`_in_child`: the request in ``work/request.json``, the answer in
    ``work/answer.json`` (and the arrays of "outputs" in ``used.npz`` and ``outputs.npz``)."""
    import json

    from fuselite.errors import ConversionError

    with open(os.path.join(work, "request.json")) as f:
        req = json.load(f)
    try:
        models = []
        for path in req["models"]:
            with open(path, "rb") as f:
                models.append(f.read())
        inputs = _load(os.path.join(work, "inputs.npz"), req["inputs"]) if req["inputs"] is not None else None
        result = _run_here(req["task"], models, req["request"], inputs)
        if req["task"] == "bench":
            answer = {"results": result}
        else:
            used, got, stateless = result
            answer = {"inputs": _save(os.path.join(work, "used.npz"), used),
                      "outputs": _save(os.path.join(work, "outputs.npz"), got), "stateless": stateless}
    except ConversionError as e:
        answer = {"error": str(e)}
    except Exception as e:  # LiteRT's own exceptions (a kernel's error at invoke): one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        answer = {"error": f"LiteRT cannot run the model: {type(e).__name__}" + (f": {first}" if first else "")}
    with open(os.path.join(work, "answer.json"), "w") as f:
        json.dump(answer, f)


# -- latency -------------------------------------------------------------------------------------------

def bench(models: list[bytes], seconds: float = 2.0, num_threads: int = 1, inputs: dict | None = None,
          warmup: int = 10, burst: int = 1, isolated: bool | None = None) -> list[dict]:
    """``invoke()`` latency of each model (µs): median and 10th / 90th percentiles, the models interleaved:
    ``burst`` invokes of one, then of the next (the order reversed every round). A burst of a few invokes times
    each model with its own weights in the caches, as an app that runs one model; one invoke at a time, the
    other models evict a large one's.

    With ``isolated`` (the default, but for the forms :func:`fastest_form` times during a conversion) each file
    is checked first (:func:`fuselite.tflite.validate.validate_model`), then the models load and are timed in a
    child process (the timing is the child's own, as it is in this process), so a native crash on a damaged file
    is an :class:`InputError` ("LiteRT crashed running the model ...")."""
    from fuselite.tflite.validate import validate_model

    request = {"seconds": seconds, "num_threads": num_threads, "warmup": warmup, "burst": burst}
    if isolated is None:
        isolated = not _OWN_MODELS.get()
    if not isolated:
        return _run_here("bench", models, request, inputs)
    for data in models:
        validate_model(data)
    return _in_child("bench", models, request, inputs)


_OWN_MODELS = contextvars.ContextVar("fuselite_own_models", default=False)  # fastest_form: bench in this process


def _bench(models: list[bytes], seconds: float = 2.0, num_threads: int = 1, inputs: dict | None = None,
           warmup: int = 10, burst: int = 1) -> list[dict]:
    """:func:`bench` in this process."""
    from fuselite.inspect import describe

    runs = []
    for data in models:
        _, runner = _runner(data, None, num_threads)
        feed = inputs if inputs is not None else draw_inputs(runner.get_input_details())
        _invoke(runner, feed)  # checks the inputs against the signature
        signatures = describe(data)["signatures"]
        key = "serving_default" if "serving_default" in signatures else next(iter(signatures))
        if signatures[key]["subgraph"] != 0:  # through the signature runner (copies in and out)
            runs.append(lambda r=runner, f=feed: _invoke(r, f))
            continue
        # the first subgraph: in an interpreter with no signature runner (LiteRT refuses to invoke one whose
        # runner holds a reference), its inputs set once, then its own invoke(): no copies
        from fuselite.runtime import interpreter

        interp = interpreter(data, num_threads)
        details = runner.get_input_details()
        values = {n: _to_runtime(feed[n], d) for n, d in details.items()}
        for n, d in details.items():
            interp.resize_tensor_input(d["index"], values[n].shape)
        interp.allocate_tensors()
        for n, d in details.items():
            interp.set_tensor(d["index"], values[n])
        runs.append(interp.invoke)
    for invoke in runs:
        for _ in range(warmup):
            invoke()
    samples: list[list[float]] = [[] for _ in runs]
    deadline = time.perf_counter() + seconds
    rounds = 0
    while time.perf_counter() < deadline or rounds < 20:
        for n in range(len(runs)) if rounds % 2 == 0 else reversed(range(len(runs))):
            invoke = runs[n]
            for _ in range(burst):
                t = time.perf_counter_ns()
                invoke()
                samples[n].append((time.perf_counter_ns() - t) / 1e3)
        rounds += 1
    return [{"median_us": statistics.median(s), "p10_us": float(np.percentile(s, 10)),
             "p90_us": float(np.percentile(s, 90)), "invokes": len(s)} for s in samples]


# rnn_form="auto" (fastest_form): its timing, the same wherever it runs (the converter; benchmarks/rnn_forms.py
# --time on a machine with LiteRT alone)
AUTO_SECONDS = 2.0  # seconds of interleaved invokes timing the forms
AUTO_BURST = 10  # invokes of one form in a row (each form timed with its own weights in the caches)
AUTO_BLOCKS = 8  # blocks of fresh interpreters; the form with the fastest block is kept
AUTO_MARGIN = 0.05  # the two fastest forms closer than this: as many blocks again before choosing


def fastest_form(models: dict[str, bytes], num_threads: int = 1) -> dict:
    """The fastest of ``models`` ({form: .tflite bytes}) on this machine's LiteRT at ``num_threads``, as
    ``rnn_form="auto"`` chooses: interleaved (:func:`bench`, ``AUTO_BURST`` invokes of one before the next) in
    ``AUTO_BLOCKS`` blocks of fresh interpreters over ``AUTO_SECONDS``, and the form whose fastest block (its
    median invoke in the block) is the fastest is kept. Load on the machine only adds time, and comes in bursts
    that slow the forms unevenly (measured on a shared 2-core VM: blocks at 1.6x for a single-threaded fused op
    and 1.3x for the unrolled form), so each form's least-disturbed block is the best estimate of its time on a
    quiet machine. Where the two fastest are within ``AUTO_MARGIN`` of each other, as many blocks again are timed
    before choosing. Models with the same bytes are timed once, under the first name.

    Returns {"chosen": form, "fastest_block_us", "median_us", "slowest_block_us": {form: µs}, "blocks": n}."""
    if not models:
        raise InputError("fastest_form needs at least one model ({form: .tflite bytes})")
    forms: dict[str, bytes] = {}
    for form, data in models.items():
        if all(data != other for other in forms.values()):
            forms[form] = data
    if len(forms) == 1:
        return {"chosen": next(iter(forms)), "fastest_block_us": None, "median_us": None, "slowest_block_us": None,
                "blocks": 0}
    names, datas = list(forms), list(forms.values())

    def block() -> list[float]:
        own = _OWN_MODELS.set(True)  # the forms fuselite just wrote: timed in this process
        try:
            return [r["median_us"] for r in bench(datas, seconds=AUTO_SECONDS / AUTO_BLOCKS,
                                                  num_threads=num_threads, burst=AUTO_BURST)]
        finally:
            _OWN_MODELS.reset(own)

    def ranked(blocks: list[list[float]]) -> list[tuple[str, float]]:
        return sorted(((f, min(b[n] for b in blocks)) for n, f in enumerate(names)), key=lambda item: item[1])

    blocks = [block() for _ in range(AUTO_BLOCKS)]
    order = ranked(blocks)
    if order[1][1] / order[0][1] < 1 + AUTO_MARGIN:
        blocks += [block() for _ in range(AUTO_BLOCKS)]  # too close to call on this many
        order = ranked(blocks)
    return {"chosen": order[0][0],
            "fastest_block_us": {f: min(b[n] for b in blocks) for n, f in enumerate(names)},
            "median_us": {f: statistics.median(b[n] for b in blocks) for n, f in enumerate(names)},
            "slowest_block_us": {f: max(b[n] for b in blocks) for n, f in enumerate(names)},
            "blocks": len(blocks)}
