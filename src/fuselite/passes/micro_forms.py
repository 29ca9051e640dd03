"""Forms of LiteRT ops that TFLite Micro can run: the same math from ops its kernels have.

TFLite Micro (tflite-micro at 90b983c) has no ``GELU`` kernel and its ``SELECT_V2`` takes
float32, int8 and int16 values only (``kernels/select.cc``). With ``target="micro"``:

* ``GELU`` becomes elementwise builtins. Exact GELU, ``x * Phi(x)``, needs ``erf``, which
  neither runtime has as an op; it is spelled with Abramowitz & Stegun 7.1.26 (``|error| <=
  1.5e-7`` in erf), using that ``x * erf(x / sqrt 2) = |x| * erf(|x| / sqrt 2)``::

      a = |x|;  t = 1 / (1 + p * a / sqrt 2);  P = t (a1 + t (a2 + t (a3 + t (a4 + t a5))))
      gelu(x) = 0.5 * (x + a * (1 - P * exp(-x * x / 2)))

  TFLite Micro's ``EXP`` is float32 only (``kernels/exp.cc``), so a model quantized to
  integers gets the tanh approximation instead, as ``x * sigmoid(x * (k0 + k1 * x * x))``
  (``0.5 (1 + tanh u) = sigmoid(2 u)``; every op has an int8 and int16 kernel); this is also
  the exact form of ``GELU(approximate=True)``.
* An int32 ``SELECT_V2(c, a, b)`` (Keras 3's ``Embedding`` wraps negative ids this way)
  becomes ``b + CAST(c) * (a - b)``, or ``b + CAST(c) * k`` when ``a`` is ``b + k`` for a
  constant ``k``: ``CAST`` from bool, ``MUL``, ``ADD`` and ``SUB`` take int32 in TFLite Micro.

* ``TILE`` (Keras' ``RepeatVector``, a ``tf.tile``) with constant multiples and a static input shape, which
  TFLite Micro has no kernel for, becomes ``BROADCAST_TO``, which it has (``kernels/broadcast_to.cc``, any
  type, at most 5 dims): directly where every tiled dimension has size 1 (``RepeatVector``'s
  ``[batch, 1, features]``), else as ``RESHAPE`` (a new axis of 1 before each tiled dimension),
  ``BROADCAST_TO`` (that axis to the multiple) and ``RESHAPE`` back (``[m, d] -> [m * d]``): the same
  values, in the same order, as tiling.

* A ``STRIDED_SLICE`` whose begin, end and strides name fewer dimensions than its input has (Keras 3's
  ``TimeDistributed`` takes ``x[k]`` of a rank-3 tensor) names them all: TFLite Micro's kernel reads every
  dimension's begin and end (``strided_slice_common.cc`` fails its shape check otherwise); the ones added
  take the whole dimension (their begin and end mask bits set).

The recurrent forms (a bidirectional LSTM as two unidirectional ones, sequence RNNs
unrolled) are the passes of ``passes/bidirectional.py`` and ``passes/unroll_rnn.py``.
"""

from __future__ import annotations

import math

import numpy as np

from fuselite.ir import Function, Module, Op, Value

_F32, _I32, _BOOL = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)
_NONE = {"fused_activation_function": "NONE"}
# Abramowitz & Stegun 7.1.26
_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_K0 = 2 * math.sqrt(2 / math.pi)  # sigmoid(2u) = 0.5 (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3)
_K1 = _K0 * 0.044715


class _Emitter:
    """Builds elementwise ops next to the op they replace, with its name and source line."""

    def __init__(self, fn: Function, op: Op):
        self.fn, self.op, self.new = fn, op, []

    def __call__(self, kind: str, *inputs: Value, attrs: dict | None = None, dtype=None) -> Value:
        shapes = [v.shape for v in inputs if v is not None and not v.is_const] or [inputs[0].shape]
        out = self.fn.make_op(f"tfl.{kind}", list(inputs), [(dtype or self.op.outputs[0].dtype, shapes[0])],
                              dict(_NONE if attrs is None else attrs), name=f"{self.op.name}/{kind.lower()}",
                              location=self.op.location)
        self.new.append(out)
        return out.outputs[0]

    def scalar(self, value: float, dtype=_F32) -> Value:
        return self.fn.const(np.array(value, dtype), "k")


def _gelu_erf(e: _Emitter, x: Value) -> Value:
    a = e("ABS", x, attrs={})
    t = e("DIV", e.scalar(1.0), e("ADD", e("MUL", a, e.scalar(_P / math.sqrt(2))), e.scalar(1.0)))
    p = e("MUL", t, e.scalar(_A[4]))
    for coef in reversed(_A[:4]):
        p = e("MUL", e("ADD", p, e.scalar(coef)), t)
    gauss = e("EXP", e("MUL", e("MUL", x, x), e.scalar(-0.5)), attrs={})
    erf_part = e("SUB", e.scalar(1.0), e("MUL", p, gauss))
    return e("MUL", e("ADD", x, e("MUL", a, erf_part)), e.scalar(0.5))


def _gelu_sigmoid(e: _Emitter, x: Value) -> Value:
    inner = e("ADD", e("MUL", e("MUL", x, x), e.scalar(_K1)), e.scalar(_K0))
    return e("MUL", x, e("LOGISTIC", e("MUL", x, inner), attrs={}))


def expand_gelu(module: Module, integer: bool) -> int:
    """Every float ``GELU`` -> elementwise builtins (the erf form in float, the sigmoid form when the model
    will be integer or the GELU is the tanh approximation); how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "GELU" and op.inputs[0].dtype == _F32]:
            e = _Emitter(fn, op)
            approximate = bool(op.attrs.get("approximate"))
            y = (_gelu_sigmoid if integer or approximate else _gelu_erf)(e, op.inputs[0])
            fn.replace_op(op, e.new, [y])
            count += 1
    return count


def _constant_offset(a: Value, b: Value) -> Value | None:
    """``k`` if ``a`` is ``ADD(b, k)`` (or ``ADD(k, b)``) with a constant ``k``, else None."""
    op = a.producer
    if op is None or op.kind != "ADD" or op.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    x, y = op.inputs
    return y if x is b and y.is_const else x if y is b and x.is_const else None


def int32_select_as_arithmetic(module: Module) -> int:
    """Every ``SELECT_V2`` on int32 values -> ``b + CAST(c) * (a - b)``; how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "SELECT_V2" and op.inputs[1].dtype == _I32]:
            c, a, b = op.inputs
            e = _Emitter(fn, op)
            flag = e("CAST", c, attrs={}, dtype=_I32)
            k = _constant_offset(a, b)
            step = k if k is not None else e("SUB", a, b)
            y = e("ADD", b, e("MUL", flag, step))
            y.shape = op.outputs[0].shape
            fn.replace_op(op, e.new, [y])
            count += 1
    return count


MAX_BROADCAST_DIMS = 5  # TFLite Micro's BROADCAST_TO (kernels/broadcast_to.cc: kMaxDims)


def tile_as_broadcast_to(module: Module) -> int:
    """Every ``TILE`` with constant multiples over a static input shape -> ``BROADCAST_TO`` (between two
    ``RESHAPE``s where a tiled dimension is not 1), within TFLite Micro's 5 dims; how many."""
    count = 0
    for fn in module.functions.values():
        for op in [op for op in fn.ops if op.kind == "TILE"]:
            x, multiples = op.inputs
            if not multiples.is_const or x.shape is None or None in x.shape:
                continue
            reps = [int(m) for m in np.asarray(multiples.const).reshape(-1)]
            spread = [(m, d) for m, d in zip(reps, x.shape)]
            # a dimension of size 1 broadcasts as it is; a tiled one of more gets an axis of its own, before it
            wide = [(1, d) if m == 1 or d == 1 else (m, d) for m, d in spread]
            grown = [size for m, d in wide for size in ((m, d) if m != 1 and d != 1 else (m * d,))]
            if len(grown) > MAX_BROADCAST_DIMS:
                continue
            e = _Emitter(fn, op)
            out = tuple(m * d for m, d in spread)
            if len(grown) == len(out):  # every tiled dimension has size 1: one BROADCAST_TO
                y = e("BROADCAST_TO", x, fn.const(np.array(out, np.int32), "shape"), attrs={}, dtype=x.dtype)
            else:
                ones = tuple(s for m, d in wide for s in ((1, d) if m != 1 and d != 1 else (d,)))
                r = e("RESHAPE", x, fn.const(np.array(ones, np.int32), "shape"), attrs={}, dtype=x.dtype)
                r.shape = ones
                b = e("BROADCAST_TO", r, fn.const(np.array(grown, np.int32), "shape"), attrs={}, dtype=x.dtype)
                b.shape = tuple(grown)
                y = e("RESHAPE", b, fn.const(np.array(out, np.int32), "shape"), attrs={}, dtype=x.dtype)
            y.shape = out
            fn.replace_op(op, e.new, [y])
            count += 1
    return count


def _expand_ellipsis(fn: Function, op: Op, rank: int) -> int:
    """A STRIDED_SLICE with an ellipsis (``x[..., :13]``; TFLite Micro's kernel reads no ellipsis mask) names
    every dimension: the ellipsis becomes whole dimensions (their begin and end mask bits set), the masks of the
    entries after it move with them. 1 if rewritten, 0 where the ellipsis is not a single bit."""
    mask, given = int(op.attrs["ellipsis_mask"]), op.inputs[1].const.size
    at = mask.bit_length() - 1
    if mask != 1 << at or at >= given or given - 1 > rank:
        return 0
    fill = rank - (given - 1)  # dimensions the ellipsis stands for
    whole = sum(1 << d for d in range(at, at + fill))

    def moved(m: int) -> int:
        low, high = m & ((1 << at) - 1), m >> (at + 1)
        return low | (high << (at + fill))

    parts = []
    for v, pad, what in ((op.inputs[1], 0, "begin"), (op.inputs[2], 0, "end"), (op.inputs[3], 1, "strides")):
        c = v.const.astype(np.int32).reshape(-1)
        parts.append(fn.const(np.concatenate([c[:at], np.full(fill, pad, np.int32), c[at + 1:]]), f"{op.name}/{what}"))
    op.inputs[1:] = parts
    op.attrs["begin_mask"] = moved(int(op.attrs.get("begin_mask", 0))) | whole
    op.attrs["end_mask"] = moved(int(op.attrs.get("end_mask", 0))) | whole
    op.attrs["shrink_axis_mask"] = moved(int(op.attrs.get("shrink_axis_mask", 0)))
    op.attrs["ellipsis_mask"] = 0
    return 1


def full_rank_strided_slices(module: Module) -> int:
    """Every ``STRIDED_SLICE`` with constant begin, end and strides shorter than its input's rank, or with an
    ellipsis (no new axis) -> the same slice with one entry per dimension, the added ones whole; how many."""
    count = 0
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind != "STRIDED_SLICE" or op.attrs.get("new_axis_mask"):
                continue
            x, begin, end, strides = op.inputs
            rank = len(x.shape) if x.shape is not None else None
            if rank is None or not all(v.is_const for v in (begin, end, strides)):
                continue
            if op.attrs.get("ellipsis_mask"):
                count += _expand_ellipsis(fn, op, rank)
                continue
            if begin.const.size >= rank:
                continue
            given = begin.const.size
            whole = sum(1 << d for d in range(given, rank))
            op.inputs[1:] = [fn.const(np.concatenate([v.const.astype(np.int32), np.full(rank - given, fill, np.int32)]),
                                      f"{op.name}/{what}")
                             for v, fill, what in ((begin, 0, "begin"), (end, 0, "end"), (strides, 1, "strides"))]
            op.attrs["begin_mask"] = int(op.attrs.get("begin_mask", 0)) | whole
            op.attrs["end_mask"] = int(op.attrs.get("end_mask", 0)) | whole
            count += 1
    return count
