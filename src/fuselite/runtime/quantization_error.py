"""Comparing two models of the same program on LiteRT (a float model and its quantized form)."""

from __future__ import annotations

import gc
import warnings

import numpy as np

N_SAMPLES = 8


def draw_input(details: dict, rng: np.random.Generator) -> np.ndarray:
    """An input like the model's: standard normal floats, small non-negative integers (valid ids)."""
    shape = [max(int(d), 1) for d in details["shape"]]
    dtype = np.dtype(details["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(dtype)
    return np.zeros(shape, dtype)


def to_input(details: dict, value: np.ndarray) -> np.ndarray:
    """A float input for an integer model input: quantized with that input's scale and zero point."""
    dtype = np.dtype(details["dtype"])
    scale, zero_point = details.get("quantization", (0.0, 0))
    if dtype.kind in "iu" and np.asarray(value).dtype.kind == "f" and scale:
        info = np.iinfo(dtype)
        return np.clip(np.rint(value / scale) + zero_point, info.min, info.max).astype(dtype)
    return np.asarray(value).astype(dtype, copy=False)


def real_output(details: dict, value: np.ndarray) -> np.ndarray:
    """An integer output as the reals it stands for (float outputs as they are)."""
    scale, zero_point = details.get("quantization", (0.0, 0))
    value = np.asarray(value, np.float64)
    return (value - zero_point) * scale if scale and np.dtype(details["dtype"]).kind in "iu" else value


def _flat(values: list[np.ndarray]) -> np.ndarray:
    """Every sample's values in one array (samples may differ in a dynamic dimension)."""
    return np.concatenate([np.ravel(v) for v in values]) if values else np.zeros(0)


def _error(ref: np.ndarray, got: np.ndarray) -> dict:
    """Over the finite reference values (log(0) = -inf where a float op computes positions); non-finite ones
    count only where the other side differs."""
    finite = np.isfinite(ref)
    differ = ~finite & (ref != got) & ~(np.isnan(ref) & np.isnan(got))
    err = float(np.abs(ref[finite] - got[finite]).max()) if finite.any() else 0.0
    if differ.any():
        err = float("inf")
    span = float(ref[finite].max() - ref[finite].min()) if finite.any() else 0.0
    return {"max_abs_error": err, "relative_error": err / span if span > 0 else err}


def quantization_error(reference: bytes | list[bytes], model: bytes, samples: list[dict] | None = None,
                       seed: int = 0, tensors: dict[str, str] | None = None,
                       signature: str | None = None) -> tuple[int, list[dict], dict[str, dict]]:
    """Max abs error of ``model``'s outputs against ``reference``'s, per output of the first signature (or of
    ``signature``).

    ``samples``: input dicts by name; by default :data:`N_SAMPLES` drawn like the inputs.
    ``tensors`` maps tensor names of ``reference`` to the names of the same values in
    ``model`` (op outputs both graphs share): their error is measured too, from the
    intermediate tensors LiteRT keeps with ``experimental_preserve_all_tensors``.
    ``reference`` in a one-element list is taken from it (the list emptied): it then runs on every sample first
    and is freed before ``model`` runs (LiteRT keeps a float16 model's weights dequantized, as large as the
    reference's; an argument itself stays held by the caller's frame until the call returns).
    Returns ``(number of samples, [{"name", "max_abs_error", "relative_error"}, ...],
    {reference tensor name: {"max_abs_error", "relative_error"}})``; a relative error is
    the max abs error over the range (max - min) of the reference's values.
    """
    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.signatures import kernel_set, packs_too_much

    if isinstance(reference, list):
        reference = reference.pop()
    keep = {"experimental_preserve_all_tensors": True} if tensors else {}
    keep.update(kernel_set(packs_too_much(reference)))  # (a large model: no second copy of its weights)
    with warnings.catch_warnings():  # LiteRT warns that keeping every tensor is for debugging: it is, here
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors", category=UserWarning)
        # not allocated here: each signature runner resizes a dynamic dimension to the sample's, then allocates
        ref_interp, q_interp = interpreter(reference, allocate=False, **keep), interpreter(model, allocate=False, **keep)
    first = next(iter(ref_interp.get_signature_list()))
    key = signature or first
    ref_run, q_run = ref_interp.get_signature_runner(key), q_interp.get_signature_runner(key)
    if samples is None:
        samples = draw_samples(ref_run, seed)
    # the intermediate tensors LiteRT's Python API reads are the first subgraph's: on another signature, outputs only
    pairs = _tensor_pairs(ref_interp, q_interp, tensors or {}) if key == first else {}
    refs: dict[str, list] = {}
    got: dict[str, list] = {}
    for inputs in samples:  # the reference on every sample first, then it is let go
        for name, value in ref_run(**inputs).items():
            refs.setdefault(name, []).append(np.asarray(value, np.float64))
        for name, (i, _) in list(pairs.items()):
            value = _kept_tensor(ref_interp, i)
            if value is None:  # nothing wrote it (an output of a SPLIT that nothing reads): not compared
                del pairs[name]
                continue
            refs.setdefault(("tensor", name), []).append(np.asarray(value, np.float64))
    del ref_run, ref_interp, reference
    gc.collect()
    q_in, q_out = q_run.get_input_details(), q_run.get_output_details()
    for inputs in samples:
        for name, value in q_run(**{k: to_input(q_in[k], v) for k, v in inputs.items()}).items():
            got.setdefault(name, []).append(real_output(q_out[name], value))
        for name, (_, q) in list(pairs.items()):
            value = _kept_tensor(q_interp, q["index"])
            if value is None:
                del pairs[name]
                continue
            got.setdefault(("tensor", name), []).append(real_output(q, value))
    outputs = [{"name": name, **_error(_flat(refs[name]), _flat(got[name]))}
               for name in refs if not isinstance(name, tuple)]
    per_tensor = {name: _error(_flat(refs[("tensor", name)]), _flat(got[("tensor", name)])) for name in pairs}
    return len(samples), outputs, per_tensor


def _kept_tensor(interp, index: int) -> np.ndarray | None:
    """A tensor LiteRT kept (experimental_preserve_all_tensors), None where no kernel wrote it ("Tensor data is
    null": an output nothing reads, which LiteRT does not allocate)."""
    try:
        return interp.get_tensor(index)
    except ValueError:
        return None


def tensor_quantization(data: bytes) -> tuple[list[dict], list[dict]]:
    """The first subgraph's inputs and outputs of a model, in order, as ``{"dtype", "quantization": (scale,
    zero_point)}`` (LiteRT's details' form; (0.0, 0) when not quantized): for runtimes that take tensors by
    position (TFLite Micro), read from the flatbuffer (LiteRT may have no kernel for the model)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    sg = model.subgraphs[0]
    types = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}

    def details(i: int) -> dict:
        t = sg.tensors[i]
        q = t.quantization
        one = q is not None and q.scale is not None and len(q.scale) == 1
        return {"dtype": np.dtype(types[t.type]),
                "quantization": (float(q.scale[0]), int(q.zeroPoint[0])) if one else (0.0, 0)}

    return [details(i) for i in sg.inputs], [details(i) for i in sg.outputs]


def draw_samples(runner, seed: int = 0) -> list[dict]:
    """:data:`N_SAMPLES` input dicts drawn like a signature runner's inputs (:func:`draw_input`)."""
    rng = np.random.default_rng(seed)
    details = runner.get_input_details()
    return [{name: draw_input(d, rng) for name, d in details.items()} for _ in range(N_SAMPLES)]


def micro_quantization_error(reference: bytes, model: bytes, samples: list[dict] | None = None,
                             seed: int = 0) -> tuple[int, list[dict]]:
    """As :func:`quantization_error` (outputs only), with ``model`` run on TFLite Micro's interpreter (for
    models LiteRT has no kernels for: an LSTM with int16 activations) and ``reference`` on LiteRT; the two
    models' inputs and outputs are matched by their order in the first subgraph."""
    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.micro import run_samples_on_micro

    ref = interpreter(reference, allocate=False)
    key = next(iter(ref.get_signature_list()))
    runner = ref.get_signature_runner(key)
    if samples is None:
        samples = draw_samples(runner, seed)
    order = [d["index"] for d in ref.get_input_details()]  # subgraph input order, by tensor index
    by_index = {d["index"]: name for name, d in runner.get_input_details().items()}
    names = [by_index[i] for i in order]
    outs = {d["index"]: name for name, d in runner.get_output_details().items()}
    out_names = [outs[d["index"]] for d in ref.get_output_details()]
    q_in, q_out = tensor_quantization(model)
    fed = [[to_input(q_in[k], sample[name]) for k, name in enumerate(names)] for sample in samples]
    got = run_samples_on_micro(model, fed)
    refs: dict[str, list] = {}
    mine: dict[str, list] = {}
    for sample, outputs in zip(samples, got):
        for name, value in runner(**sample).items():
            refs.setdefault(name, []).append(np.asarray(value, np.float64))
        for k, value in enumerate(outputs):
            mine.setdefault(out_names[k], []).append(real_output(q_out[k], value))
    return len(samples), [{"name": name, **_error(_flat(refs[name]), _flat(mine[name]))} for name in refs]


def _tensor_pairs(ref_interp, q_interp, tensors: dict[str, str]) -> dict[str, tuple[int, dict]]:
    """Reference tensor name -> (its index, the details of its twin in the other model): a float32 tensor
    and its twin of the same shape, float32 or integer with one scale (compared as the reals it holds)."""
    def by_name(interp) -> dict:
        return {d["name"]: d for d in interp.get_tensor_details()}

    ref, q = by_name(ref_interp), by_name(q_interp)
    pairs = {}
    for a, b in tensors.items():
        if a not in ref or b not in q or ref[a]["dtype"] != np.float32 or \
                list(ref[a]["shape"]) != list(q[b]["shape"]):
            continue
        if q[b]["dtype"] == np.float32 or (np.dtype(q[b]["dtype"]).kind in "iu" and q[b]["quantization"][0]):
            pairs[a] = (ref[a]["index"], q[b])
    return pairs
