"""Inputs for the checks on LiteRT's other runtimes (CompiledModel, the GPU accelerator, NPU plugins), and how far
one runtime's outputs are from another's: a fraction of the output's range over all samples.

Example::

    samples = input_samples(model, 4)            # [{input name: array}] for the first signature
    errors = relative_error(gpu_runs, cpu_runs)   # {output name: max |gpu - cpu| / range(cpu)}
"""

from __future__ import annotations

import numpy as np


def input_details(model: bytes) -> dict | None:
    """The first signature's input details (shape and dtype by name), None without a signature."""
    from fuselite.runtime.interpreters import interpreter

    interp = interpreter(model, allocate=False)
    signatures = interp.get_signature_list()
    if not signatures:
        return None
    return interp.get_signature_runner(next(iter(signatures))).get_input_details()


def input_samples(model: bytes, count: int, given: list[dict] | None = None) -> list[dict] | None:
    """``count`` samples of ``model``'s first signature inputs: ``given`` ones (calibration samples) where there
    are enough, else seeded normal floats and integers of 0 or 1 (an index any table of two rows takes; either
    bool) at the file's shapes; None where an input is not numeric."""
    given = given or []
    details = input_details(model)
    if details is None:
        return None
    if len(given) >= count and all(set(s) == set(details) for s in given[:count]):
        return [{k: np.asarray(v, details[k]["dtype"]) for k, v in s.items()} for s in given[:count]]
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        inputs = {}
        for name, d in details.items():
            dtype = np.dtype(d["dtype"])
            if dtype.kind not in "biuf":
                return None
            shape = tuple(int(n) for n in d["shape"])
            if dtype.kind == "f":
                inputs[name] = rng.standard_normal(shape).astype(dtype)
            else:
                inputs[name] = rng.integers(0, 2, shape).astype(dtype)
        out.append(inputs)
    return out


def relative_error(got: list[dict], want: list[dict]) -> dict[str, float]:
    """Each output's max |got - want| over all samples, as a fraction of want's range over all samples."""
    names = [n for n in want[0] if all(n in g for g in got)] if want and got else []
    return {n: relative(np.concatenate([np.ravel(g[n]) for g in got]),
                        np.concatenate([np.ravel(w[n]) for w in want])) for n in names}


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over b's range (1 where it is 0), NaNs where both have them counted equal (inf otherwise)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    both = np.isnan(a) & np.isnan(b)
    diff = np.where(both, 0.0, np.abs(a - b))
    finite = b[np.isfinite(b)]
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    return float(np.nanmax(diff, initial=0.0)) / (span or 1.0) if not np.isnan(diff).any() else float("inf")
