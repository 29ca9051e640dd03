"""Calibration: the range of every float tensor of a model over representative samples, on LiteRT.

The float model is run sample by sample with ``experimental_preserve_all_tensors`` so
that every intermediate tensor of its first signature can be read after the invoke; each
float32 tensor's min and max over all samples is kept. A sample is what TensorFlow's
``representative_dataset`` yields: a list (or tuple) of arrays in the order of the
signature's inputs, a single array for a one-input model, or a dict keyed by input name.

Example::

    kept, ranges, count = collect_ranges(float_model_bytes, representative_dataset, keep=8)
    ranges["model/dense/MatMul"]      # (min, max)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import numpy as np

from fuselite.errors import ConversionError, InputError
from fuselite.runtime.signatures import fits


class CalibrationDataError(InputError):
    """The representative dataset does not fit the model's inputs."""


def _samples(dataset) -> Iterable:
    """TF accepts a callable returning an iterable (the usual generator function) or an iterable."""
    return dataset() if callable(dataset) else dataset


def _feed(sample, names: list[str], details: dict, index: int) -> dict:
    if isinstance(sample, dict):
        unknown = sorted(set(sample) - set(names))
        missing = [n for n in names if n not in sample]
        if unknown or missing:
            raise CalibrationDataError(f"calibration sample {index}: inputs {names}, got keys {sorted(sample)}")
        values = [sample[n] for n in names]
    else:
        values = list(sample) if isinstance(sample, (list, tuple)) else [sample]
        if len(values) != len(names):
            raise CalibrationDataError(f"calibration sample {index}: the model has {len(names)} input(s) "
                                       f"({', '.join(names)}), the sample {len(values)}")
    fed = {}
    for name, value in zip(names, values):
        d = details[name]
        arr = np.asarray(value)
        signature = [int(n) for n in d.get("shape_signature", d["shape"])]
        if not fits(arr.shape, signature) and arr.size == int(np.prod(d["shape"])):
            arr = arr.reshape(d["shape"])
        if not fits(arr.shape, signature):
            shown = "[" + ", ".join("?" if n < 0 else str(n) for n in signature) + "]"
            raise CalibrationDataError(f"calibration sample {index}: input '{name}' has shape {list(arr.shape)}, "
                                       f"the model takes {shown}")
        fed[name] = arr.astype(d["dtype"], copy=False)
    return fed


def collect_ranges(model: bytes, dataset, progress: Callable[[int], None] | None = None, keep: int = 0,
                   capture: Iterable[str] = (), captured: dict[str, list] | None = None
                   ) -> tuple[list[dict], dict[str, tuple[float, float]], int]:
    """(the first ``keep`` samples as input dicts, {tensor name: (min, max)}, number of samples) over the
    float32 tensors of ``model``'s first signature. The values of the tensors named in ``capture``
    are appended to ``captured[name]`` sample by sample (an op's inputs, to replay it)."""
    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.signatures import signature_inputs

    with warnings.catch_warnings():  # LiteRT warns that keeping every tensor is for debugging: it is, here
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors", category=UserWarning)
        # not allocated here: the signature runner resizes a dynamic dimension to each sample's, then allocates
        interp = interpreter(model, allocate=False, experimental_preserve_all_tensors=True)
    key = next(iter(interp.get_signature_list()))
    names = signature_inputs(model, key) or interp.get_signature_list()[key]["inputs"]  # the function's order
    runner = interp.get_signature_runner(key)
    details = runner.get_input_details()
    tensors = [(d["name"], d["index"]) for d in interp.get_tensor_details() if d["dtype"] == np.float32]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    count = 0
    kept: list[dict] = []
    capture = set(capture)
    for count, sample in enumerate(_samples(dataset), start=1):
        fed = _feed(sample, names, details, count - 1)
        if len(kept) < keep:
            kept.append(fed)
        try:
            runner(**fed)
        except (RuntimeError, ValueError) as e:  # a kernel that refuses the float model: said, not raised raw
            said = " ".join(str(e).split())
            raise ConversionError(f"LiteRT cannot run the float model on calibration sample {count - 1} (before "
                                  f"quantizing it): {said}") from None
        for name, i in tensors:
            try:
                value = interp.get_tensor(i)
            except ValueError:  # no data: a tensor the interpreter never filled (an unused or loop-only one)
                continue
            if value.size:
                lo[name] = min(lo.get(name, np.inf), float(value.min()))
                hi[name] = max(hi.get(name, -np.inf), float(value.max()))
            if name in capture and captured is not None:
                captured.setdefault(name, []).append(value.copy())
        if progress is not None:
            progress(count)
    if count == 0:
        raise CalibrationDataError("the representative dataset gave no samples")
    return kept, {name: (lo[name], hi[name]) for name in lo}, count
