"""Comparing two models of the same program on LiteRT (a float model and its quantized form)."""

from __future__ import annotations

import numpy as np

N_SAMPLES = 8


def _draw(details: dict, rng: np.random.Generator) -> np.ndarray:
    """An input like the model's: standard normal floats, small non-negative integers (valid ids)."""
    shape = [max(int(d), 1) for d in details["shape"]]
    dtype = np.dtype(details["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(dtype)
    return np.zeros(shape, dtype)


def quantization_error(reference: bytes, model: bytes, samples: list[dict] | None = None,
                       seed: int = 0) -> tuple[int, list[dict]]:
    """Max abs error of ``model``'s outputs against ``reference``'s, per output of the first signature.

    ``samples``: input dicts by name; by default :data:`N_SAMPLES` drawn like the inputs.
    Returns ``(number of samples, [{"name", "max_abs_error", "relative_error"}, ...])``; the
    relative error is the max abs error over the range (max - min) of the reference output.
    """
    from fuselite.runtime import interpreter

    ref_interp, q_interp = interpreter(reference), interpreter(model)
    key = next(iter(ref_interp.get_signature_list()))
    ref_run, q_run = ref_interp.get_signature_runner(key), q_interp.get_signature_runner(key)
    if samples is None:
        rng = np.random.default_rng(seed)
        details = ref_run.get_input_details()
        samples = [{name: _draw(d, rng) for name, d in details.items()} for _ in range(N_SAMPLES)]
    refs: dict[str, list] = {}
    got: dict[str, list] = {}
    for inputs in samples:
        for name, value in ref_run(**inputs).items():
            refs.setdefault(name, []).append(np.asarray(value, np.float64))
        for name, value in q_run(**inputs).items():
            got.setdefault(name, []).append(np.asarray(value, np.float64))
    outputs = []
    for name in refs:
        r, g = np.stack(refs[name]), np.stack(got[name])
        err = float(np.abs(r - g).max()) if r.size else 0.0
        span = float(r.max() - r.min()) if r.size else 0.0
        outputs.append({"name": name, "max_abs_error": err, "relative_error": err / span if span > 0 else err})
    return len(samples), outputs
