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
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from fuselite.errors import ConversionError, InputError
from fuselite.runtime.signatures import fits


class CalibrationDataError(InputError):
    """The representative dataset does not fit the model's inputs."""


DEFAULT_MAX_SAMPLES = 500  # the ``max_calibration_samples`` option's default (the official converter has none)


def _said(e: Exception) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split()) or '(no message)'}"


def _samples(dataset) -> Iterator:
    """TF accepts a callable returning an iterable (the usual generator function) or an iterable: an iterator
    over it, or a :class:`CalibrationDataError` saying what the dataset is instead (and what calling it raised)."""
    what = ("representative_dataset is a callable returning an iterable of samples (a generator function), or "
            "an iterable of samples")
    samples, got = dataset, f"got {type(dataset).__name__}"
    if callable(dataset):
        try:
            samples = dataset()
        except Exception as e:  # the user's code: said in one line, chained for whoever debugs it
            raise CalibrationDataError(f"representative_dataset raised {_said(e)} (when called)") from e
        got = f"calling it returned {type(samples).__name__}"
    if isinstance(samples, (str, bytes, dict)):  # iterable, but of characters or keys: not samples
        raise CalibrationDataError(f"{what}; {got}")
    try:
        return iter(samples)
    except TypeError:
        raise CalibrationDataError(f"{what}; {got}") from None
    except Exception as e:  # a user's __iter__ that fails
        raise CalibrationDataError(f"representative_dataset raised {_said(e)} (when iterated)") from e


def _next(samples: Iterator, index: int):
    """The next sample, ``_END`` at the end, or a :class:`CalibrationDataError` for what the user's code raised."""
    try:
        return next(samples)
    except StopIteration:
        return _END
    except Exception as e:  # the user's generator: said in one line, chained for whoever debugs it
        raise CalibrationDataError(f"representative_dataset raised {type(e).__name__} at sample {index}: "
                                   f"{' '.join(str(e).split()) or '(no message)'}") from e


_END = object()


def _as_array(value, name: str, dtype, index: int) -> np.ndarray:
    """``value`` as an array of the input's dtype, or a :class:`CalibrationDataError` saying why not: strings
    for a numeric input, ragged lists, objects that are not numbers."""
    want = np.dtype(dtype)
    where = f"calibration sample {index}: input '{name}'"
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise CalibrationDataError(f"{where} is not an array ({type(value).__name__}: "
                                   f"{' '.join(str(e).split())})") from None
    if want.kind not in "OSU" and arr.dtype.kind in "SU":
        raise CalibrationDataError(f"{where} is an array of strings (dtype {arr.dtype.str}), the model takes "
                                   f"{want.name}")
    if want.kind not in "OSU" and arr.dtype.kind not in "biufc":
        try:
            return arr.astype(want)
        except (ValueError, TypeError, OverflowError) as e:
            raise CalibrationDataError(f"{where} has dtype {arr.dtype.str} ({' '.join(str(e).split())}), the model "
                                       f"takes {want.name}") from None
    return arr


def _feed(sample, names: list[str], details: dict, index: int) -> dict:
    if isinstance(sample, dict):
        unknown = sorted(set(sample) - set(names))
        missing = [n for n in names if n not in sample]
        if unknown or missing:
            raise CalibrationDataError(f"calibration sample {index}: inputs {names}, got keys "
                                       f"{sorted(map(str, sample))}")
        values = [sample[n] for n in names]
    elif sample is None or isinstance(sample, (str, bytes)):
        raise CalibrationDataError(f"calibration sample {index} is {'None' if sample is None else 'a string'}: a "
                                   "sample is a list of arrays in the order of the model's inputs ("
                                   f"{', '.join(names)}), a dict keyed by input name, or one array")
    else:
        values = list(sample) if isinstance(sample, (list, tuple)) else [sample]
        if len(values) != len(names):
            raise CalibrationDataError(f"calibration sample {index}: the model has {len(names)} input(s) "
                                       f"({', '.join(names)}), the sample {len(values)}")
    fed = {}
    for name, value in zip(names, values):
        d = details[name]
        arr = _as_array(value, name, d["dtype"], index)
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
                   capture: Iterable[str] = (), captured: dict[str, list] | None = None,
                   limit: int | None = DEFAULT_MAX_SAMPLES, limited: dict | None = None
                   ) -> tuple[list[dict], dict[str, tuple[float, float]], int]:
    """(the first ``keep`` samples as input dicts, {tensor name: (min, max)}, number of samples) over the
    float32 tensors of ``model``'s first signature. The values of the tensors named in ``capture``
    are appended to ``captured[name]`` sample by sample (an op's inputs, to replay it).

    At most ``limit`` samples are used (None: all, as the official converter, which never ends on an endless
    generator); ``limited["limited"]`` says whether the dataset had more. A dataset that is not one, that
    raises or whose sample does not fit the inputs is a :class:`CalibrationDataError` naming the sample."""
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
    samples = _samples(dataset)
    stopped = False
    while True:
        if limit is not None and count >= limit:
            try:  # one more sample, to say whether the limit cut the dataset short
                stopped = next(samples, _END) is not _END
            except Exception:  # a failing sample past the limit: unused, the dataset had more
                stopped = True
            break
        sample = _next(samples, count)
        if sample is _END:
            break
        count += 1
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
    close = getattr(samples, "close", None)
    if stopped and callable(close):  # a generator left at the limit runs its own cleanup (finally, with) now
        try:
            close()
        except Exception:
            pass
    if limited is not None:
        limited["limited"] = stopped
    if count == 0:
        raise CalibrationDataError("the representative dataset gave no samples")
    return kept, {name: (lo[name], hi[name]) for name in lo}, count
