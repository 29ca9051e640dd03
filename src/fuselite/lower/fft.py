"""Fourier transforms and complex values: RFFT / IRFFT / FFT / IFFT of any length and rank, complex tensors as real
and imaginary parts.

LiteRT holds complex64 tensors (inputs, outputs, ``RESHAPE``, ``MUL``) and has four kernels for them: ``RFFT2D``
(``rfft2d.cc``: float32 in, rank >= 2, both FFT lengths powers of two), ``REAL``, ``IMAG`` and ``COMPLEX_ABS``;
TFLite Micro has none of them. Everything else is spelled here with real builtins:

* **the DFT as constant matrix products.** A transform of length ``n`` over the last axis is ``x @ W.T`` with
  ``W[k, j] = exp(-2 pi i jk / n)``: a ``FULLY_CONNECTED`` per real part (cropping and zero padding to ``n`` are
  folded into the matrix). A power of two longer than :data:`MATRIX_UP_TO` keeps ``RFFT2D`` (``n log2 n``
  multiply-adds against the matrix form's ``2 (n / 2 + 1) L``); ``target="micro"`` takes the matrix form for every
  length (:func:`fourier_forms`, a TFL -> TFL rewrite after lowering).
* **complex values as pairs.** A complex result made here is ``BITCAST(PACK([re, im], axis=-1))`` (the bytes of a
  complex64 tensor are interleaved float32 pairs; ``bitcast.cc`` takes any type), a valid LiteRT tensor if
  something needs it whole (a complex model output). :func:`complex_parts` reads the parts back through the
  lowered ops between (``STRIDED_SLICE``, ``RESHAPE``, ``MUL`` by a complex constant, ``ADD``, ...), so ``REAL``,
  ``IMAG``, ``COMPLEX_ABS``, ``IRFFT`` and ``FFT`` of such a value never touch a complex tensor, and the complex
  ops left unused are dropped (DCE). While only the last axis is touched the parts stay *linear*: a slice of the
  bins or a scale per bin changes the matrix, so ``Real(RFFT(x, 2N)[..., :N] * scale)`` (``tf.signal.dct``,
  every MFCC front end) is one ``FULLY_CONNECTED`` of ``N x N``.
* a true complex tensor (a complex64 input, ``RFFT2D``'s output) is read with ``REAL`` / ``IMAG``.

What the conversion chose, and its cost, is in the report (:func:`fourier_forms`, one line per transform).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fuselite.ir import Function, Module, Op, Value
from fuselite.lower.nn import fully_connected
from fuselite.lower.registry import lowering

F32, C64, I32 = np.dtype(np.float32), np.dtype(np.complex64), np.dtype(np.int32)
# a power of two up to this length takes the matrix form: at one thread, 49 frames, XNNPACK, it ran 2.4-7x faster
# than RFFT2D (n = 16 .. 256; 1.3-1.5x at 512, slower from 1024), for weights of 4 (n + 2) n bytes (258 KiB at 256)
MATRIX_UP_TO = 256
_NONE = {"fused_activation_function": "NONE"}
_LAYOUT = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "STRIDED_SLICE", "SLICE", "GATHER", "REVERSE_V2", "PAD",
           "BROADCAST_TO", "TILE"}  # ops that move complex elements: the same op on each part
_FORM = "_fourier"  # op attribute: what the report says of the transform this op computes


def _is_pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


def fft_cost(n: int) -> int:
    """Multiply-adds of a real FFT of length ``n`` (a power of two), as estimated for the report: ``n log2 n``."""
    return int(n * max(1, int(np.log2(n))))


# -- emitting ops: in a lowering rule (LowerCtx) or in a TFL -> TFL rewrite ---------------------------------------


class Emitter:
    """``emit`` / ``const`` / ``i32`` as :class:`LowerCtx` has them, for a rewrite of TFL ops: the ops are placed
    before ``anchor`` by :meth:`place`."""

    def __init__(self, fn: Function, anchor: Op):
        self.fn, self.op, self.new_ops = fn, anchor, []

    def emit(self, kind: str, inputs, options: dict | None = None, dtype=F32, shape=None) -> Value:
        op = self.fn.make_op("tfl." + kind, inputs, [(np.dtype(dtype), shape)], options or {},
                             name=f"{self.op.name}/{kind.lower()}", location=self.op.location)
        self.new_ops.append(op)
        return op.outputs[0]

    def const(self, array, dtype=None) -> Value:
        return self.fn.const(np.asarray(array, dtype=dtype), f"{self.op.name}/const")

    def i32(self, values) -> Value:
        return self.const(np.asarray(values, np.int32))

    def place(self) -> None:
        at = self.fn.ops.index(self.op)
        self.fn.ops[at:at] = self.new_ops
        self.new_ops = []


def _fc(e, x: Value, w: np.ndarray, form: dict | None = None) -> Value:
    """``x @ w.T`` over the last axis (FULLY_CONNECTED, weights [out, in], a zero bias)."""
    w = np.ascontiguousarray(w, np.float32)
    shape = None if x.shape is None else (*x.shape[:-1], w.shape[0])
    y = e.emit("FULLY_CONNECTED", [x, e.const(w), e.const(np.zeros(w.shape[0], np.float32))],
               {**_NONE, "weights_format": "DEFAULT", "keep_num_dims": len(x.shape) > 2,
                "asymmetric_quantize_inputs": False}, dtype=F32, shape=shape)
    if form is not None:
        y.producer.attrs[_FORM] = form
    return y


def _binary(e, kind: str, a: Value, b: Value) -> Value:
    shape = a.shape if not a.is_const or b.is_const else b.shape
    if a.shape is not None and b.shape is not None and len(b.shape) > len(a.shape):
        shape = b.shape
    return e.emit(kind, [a, b], dict(_NONE), dtype=F32, shape=shape)


# -- complex values as parts -------------------------------------------------------------------------------------


class Parts:
    """A complex tensor as float32 parts: ``re`` and ``im`` values, or (``linear``) ``x @ ar.T + i x @ ai.T`` for a
    real ``x`` and constant matrices in FULLY_CONNECTED layout ([out, in]) while only the last axis was touched."""

    def __init__(self, re: Value | None = None, im: Value | None = None, x: Value | None = None,
                 ar: np.ndarray | None = None, ai: np.ndarray | None = None, form: dict | None = None):
        self.re, self.im, self.x, self.ar, self.ai, self.form = re, im, x, ar, ai, form

    @property
    def linear(self) -> bool:
        return self.x is not None

    @property
    def shape(self):
        if self.linear:
            return None if self.x.shape is None else (*self.x.shape[:-1], self.ar.shape[0])
        return self.re.shape

    def values(self, e) -> tuple[Value, Value]:
        """(re, im) as values (a linear pair becomes two FULLY_CONNECTEDs)."""
        if self.linear:
            self.re = _fc(e, self.x, self.ar, self.form)
            self.im = _fc(e, self.x, self.ai)
            self.x = None
        return self.re, self.im

    def real_readout(self, e, mr: np.ndarray, mi: np.ndarray, form: dict | None = None) -> Value:
        """``re @ mr.T + im @ mi.T`` (a real linear function of the parts over the last axis): one matrix product
        when the parts are linear."""
        if self.linear:
            return _fc(e, self.x, mr @ self.ar + mi @ self.ai, form)
        re, im = self.values(e)
        return _binary(e, "ADD", _fc(e, re, mr, form), _fc(e, im, mi))

    def transform(self, e, dr: np.ndarray, di: np.ndarray, form: dict | None = None) -> Parts:
        """``(dr + i di) @`` the last axis: a complex matrix (FULLY_CONNECTED layout) applied to the values."""
        if self.linear:
            return Parts(x=self.x, ar=dr @ self.ar - di @ self.ai, ai=dr @ self.ai + di @ self.ar, form=form)
        re, im = self.values(e)
        out_re = _binary(e, "SUB", _fc(e, re, dr, form), _fc(e, im, di))
        out_im = _binary(e, "ADD", _fc(e, re, di), _fc(e, im, dr))
        return Parts(out_re, out_im)


def join(e, parts: Parts) -> Value:
    """The complex64 tensor of ``parts``: ``BITCAST(PACK([re, im], axis=-1))``."""
    re, im = parts.values(e)
    rank = len(re.shape)
    pair = e.emit("PACK", [re, im], {"values_count": 2, "axis": rank}, dtype=F32, shape=(*re.shape, 2))
    return e.emit("BITCAST", [pair], {}, dtype=C64, shape=re.shape)


def _joined(v: Value) -> tuple[Value, Value] | None:
    """(re, im) if ``v`` is ``BITCAST(PACK([re, im], axis=-1))`` of float32 parts."""
    op = v.producer
    if op is None or op.type != "tfl.BITCAST" or np.dtype(v.dtype) != C64:
        return None
    pack = op.inputs[0].producer
    if pack is None or pack.type != "tfl.PACK" or len(pack.inputs) != 2:
        return None
    re, im = pack.inputs
    if np.dtype(re.dtype) != F32 or re.shape is None or int(pack.attrs.get("axis", 0)) != len(re.shape):
        return None
    return re, im


def _fc_weights(v: Value) -> tuple[Value, np.ndarray] | None:
    """(x, w) if ``v`` is ``FULLY_CONNECTED(x, w)`` with a constant ``w``, no bias (or zeros) and no activation."""
    op = v.producer
    if op is None or op.type != "tfl.FULLY_CONNECTED" or op.attrs.get("fused_activation_function", "NONE") != "NONE":
        return None
    w = op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    if not w.is_const or w.const.dtype != np.float32 or op.attrs.get("weights_format", "DEFAULT") != "DEFAULT":
        return None
    if bias is not None and (not bias.is_const or np.any(bias.const)):
        return None
    return op.inputs[0], w.const


def _opaque(v: Value) -> bool:
    """``v`` is a true complex tensor (an input, RFFT2D's output, moved only by RESHAPE / SQUEEZE / EXPAND_DIMS),
    which LiteRT's REAL / IMAG / COMPLEX_ABS read as it is."""
    while True:
        if v.is_const:
            return False
        op = v.producer
        if op is None or op.type == "tfl.RFFT2D":
            return True
        if op.type not in ("tfl.RESHAPE", "tfl.SQUEEZE", "tfl.EXPAND_DIMS"):
            return False
        v = op.inputs[0]


def complex_parts(e, v: Value) -> Parts:
    """``v`` (complex64) as float32 parts, read through the lowered ops that made it (module docstring)."""
    if v.is_const:
        c = np.asarray(v.const)
        return Parts(e.const(c.real.astype(np.float32)), e.const(c.imag.astype(np.float32)))
    pair = _joined(v)
    if pair is not None:
        re, im = pair
        a, b = _fc_weights(re), _fc_weights(im)
        if a is not None and b is not None and a[0] is b[0]:
            return Parts(x=a[0], ar=a[1], ai=b[1], form=re.producer.attrs.get(_FORM))
        return Parts(re, im)
    op = v.producer
    kind = op.kind if op is not None and op.dialect == "tfl" else None
    if kind in _LAYOUT and np.dtype(op.inputs[0].dtype) == C64:
        p = complex_parts(e, op.inputs[0])
        if p.linear:
            sl = _last_axis_slice(op, p.shape)
            if sl is not None:
                return Parts(x=p.x, ar=p.ar[sl], ai=p.ai[sl], form=p.form)
        return Parts(*(e.emit(kind, [part, *op.inputs[1:]], dict(op.attrs), dtype=F32, shape=v.shape)
                       for part in p.values(e)))
    if kind in ("CONCATENATION", "PACK"):
        ps = [complex_parts(e, u).values(e) for u in op.inputs]
        return Parts(*(e.emit(kind, [q[i] for q in ps], dict(op.attrs), dtype=F32, shape=v.shape) for i in (0, 1)))
    if kind in ("MUL", "ADD", "SUB") and op.attrs.get("fused_activation_function", "NONE") == "NONE":
        return _arithmetic(e, kind, op, v)
    if kind == "CAST" and np.dtype(op.inputs[0].dtype) == F32 and v.shape is not None and None not in v.shape:
        return Parts(op.inputs[0], e.const(np.zeros(v.shape, np.float32)))
    if kind == "NEG":
        return Parts(*(e.emit("NEG", [part], {}, dtype=F32, shape=v.shape) for part in
                       complex_parts(e, op.inputs[0]).values(e)))
    return Parts(e.emit("REAL", [v], {}, dtype=F32, shape=v.shape), e.emit("IMAG", [v], {}, dtype=F32, shape=v.shape))


def _arithmetic(e, kind: str, op: Op, v: Value) -> Parts:
    a, b = op.inputs
    if kind == "MUL" and b.is_const and not a.is_const:
        p = complex_parts(e, a)
        scale = _per_bin(b.const, p.shape)
        if p.linear and scale is not None:  # a scale per bin: of the matrix's rows
            s_re, s_im = scale.real[:, None], scale.imag[:, None]
            return Parts(x=p.x, ar=p.ar * s_re - p.ai * s_im, ai=p.ar * s_im + p.ai * s_re, form=p.form)
    ar, ai = complex_parts(e, a).values(e)
    br, bi = complex_parts(e, b).values(e)
    if kind in ("ADD", "SUB"):
        re, im = _binary(e, kind, ar, br), _binary(e, kind, ai, bi)
    else:
        re = _binary(e, "SUB", _binary(e, "MUL", ar, br), _binary(e, "MUL", ai, bi))
        im = _binary(e, "ADD", _binary(e, "MUL", ar, bi), _binary(e, "MUL", ai, br))
    for x in (re, im):
        x.shape = v.shape
    return Parts(re, im)


def _per_bin(c: np.ndarray, shape) -> np.ndarray | None:
    """``c`` as one factor per element of the last axis of ``shape`` (it broadcasts along that axis only)."""
    c = np.asarray(c)
    if shape is None or shape[-1] is None or c.ndim > len(shape) or any(d != 1 for d in c.shape[:-1]):
        return None
    if c.ndim == 0 or c.shape[-1] == 1:
        return np.full(shape[-1], c.reshape(()), np.complex128)
    return c.reshape(-1).astype(np.complex128) if c.shape[-1] == shape[-1] else None


def _last_axis_slice(op: Op, shape) -> slice | None:
    """The slice of the last axis if ``op`` (STRIDED_SLICE / SLICE) keeps every other axis whole."""
    if shape is None or None in shape or op.kind not in ("STRIDED_SLICE", "SLICE"):
        return None
    rank = len(shape)
    if not all(u.is_const for u in op.inputs[1:]):
        return None
    if op.kind == "SLICE":
        begin, size = (np.asarray(u.const).reshape(-1).tolist() for u in op.inputs[1:3])
        if len(begin) != rank or any(b != 0 or s not in (-1, d) for b, s, d in zip(begin[:-1], size[:-1], shape)):
            return None
        return slice(begin[-1], None if size[-1] == -1 else begin[-1] + size[-1])
    begin, end, strides = (np.asarray(u.const).reshape(-1).tolist() for u in op.inputs[1:4])
    a = op.attrs
    if a.get("new_axis_mask", 0) or a.get("shrink_axis_mask", 0) or a.get("offset", False):
        return None
    ellipsis = int(a.get("ellipsis_mask", 0))
    bm, em = int(a.get("begin_mask", 0)), int(a.get("end_mask", 0))
    spec = []  # (begin, end, stride) per axis, None: whole
    for i in range(len(begin)):
        if ellipsis >> i & 1:
            spec += [None] * (rank - (len(begin) - 1))
            continue
        spec.append((None if bm >> i & 1 else begin[i], None if em >> i & 1 else end[i], strides[i]))
    spec += [None] * (rank - len(spec))
    if len(spec) != rank:
        return None
    for s, d in zip(spec[:-1], shape[:-1]):
        if s is not None and not (s[2] == 1 and (s[0] in (None, 0)) and (s[1] is None or s[1] >= d)):
            return None
    return slice(None) if spec[-1] is None else slice(*spec[-1])


# -- DFT matrices (FULLY_CONNECTED layout: [out, in]) ---------------------------------------------------------------


def _angles(n_out: int, n_in: int, n: int) -> np.ndarray:
    jk = np.outer(np.arange(n_out), np.arange(n_in)) % n  # exact before the float step
    return 2 * np.pi * jk / n


def rfft_matrices(length: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(re, im) rows of ``RFFT(x, n)`` for an input of ``length`` values (cropped or zero-padded to ``n``)."""
    used = min(length, n)
    angle = _angles(n // 2 + 1, used, n)
    wr, wi = np.zeros((n // 2 + 1, length)), np.zeros((n // 2 + 1, length))
    wr[:, :used], wi[:, :used] = np.cos(angle), -np.sin(angle)
    return wr, wi


def dft_matrices(length: int, n: int, inverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(re, im) of the complex DFT of size ``n`` (``inverse``: conjugate, scaled by ``1/n``) of ``length`` values."""
    used = min(length, n)
    angle = _angles(n, used, n)
    sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
    dr, di = np.zeros((n, length)), np.zeros((n, length))
    dr[:, :used], di[:, :used] = scale * np.cos(angle), sign * scale * np.sin(angle)
    return dr, di


def irfft_matrices(bins: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(mr, mi): ``IRFFT(X, n) = re(X) @ mr.T + im(X) @ mi.T`` for ``bins`` input bins (cropped or zero-padded to
    ``n // 2 + 1``; the Hermitian half counted twice, the imaginary parts of bins 0 and n/2 ignored, as TF does)."""
    used = min(bins, n // 2 + 1)
    k = np.arange(used)
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) / n
    angle = _angles(n, used, n)
    mr, mi = np.zeros((n, bins)), np.zeros((n, bins))
    mr[:, :used], mi[:, :used] = np.cos(angle) * weight, -np.sin(angle) * weight
    mi[:, 0] = 0.0
    if n % 2 == 0 and used > n // 2:
        mi[:, n // 2] = 0.0
    return mr, mi


def _form(op_name: str, kind: str, n: int, length: int, what: str, macs: int, reason: str) -> dict:
    return {"op": op_name, "kind": kind, "n": n, "length": length, "form": what, "macs": macs, "reason": reason}


# -- the rules -----------------------------------------------------------------------------------------------------


def _lengths(ctx, dims: int) -> list[int]:
    x = ctx.input(0)
    if x.shape is None or len(x.shape) < dims:
        ctx.fail(f"the input needs a known rank of at least {dims}")
    if any(d is None for d in x.shape[-dims:]):
        ctx.fail("the transformed axes must have static sizes (the DFT matrices and LiteRT's RFFT2D lengths are "
                 "constants): give the input a static shape there")
    length = ctx.input(1)
    if length is None or not length.is_const:
        ctx.fail("fft_length must be a constant (LiteRT's transforms and the DFT matrices are fixed at conversion)")
    n = [int(d) for d in np.asarray(length.const).reshape(-1)]
    if len(n) != dims or any(d <= 0 for d in n):
        ctx.fail(f"fft_length {n} must hold {dims} positive length(s)")
    return n


def _fit(ctx, x: Value, sizes: list[int]) -> Value:
    """``x`` cropped or zero-padded over its last axes to ``sizes`` (as TF's RFFT ops do)."""
    rank, k = len(x.shape), len(sizes)
    have = list(x.shape[-k:])
    if any(h > s for h, s in zip(have, sizes)):
        keep = [min(h, s) for h, s in zip(have, sizes)]
        x = ctx.emit("SLICE", [x, ctx.i32([0] * rank), ctx.i32([-1] * (rank - k) + keep)], dtype=x.dtype,
                     shape=(*x.shape[:-k], *keep))
    if any(h < s for h, s in zip(x.shape[-k:], sizes)):
        pads = [[0, 0]] * (rank - k) + [[0, s - h] for h, s in zip(x.shape[-k:], sizes)]
        x = ctx.emit("PAD", [x, ctx.i32(pads)], dtype=x.dtype, shape=(*x.shape[:-k], *sizes))
    return x


def _rfft2d_builtin(ctx, x: Value, sizes: list[int]) -> Value:
    """LiteRT's RFFT2D over the last two axes (lengths powers of two), the input fitted to ``sizes``."""
    x = _fit(ctx, x, sizes)
    out = ctx.emit("RFFT2D", [x, ctx.i32(sizes)], dtype=C64, shape=(*x.shape[:-1], sizes[-1] // 2 + 1))
    m, n = sizes
    macs = m * fft_cost(n) + (2 * (n // 2 + 1) * fft_cost(m) if m > 1 else 0)  # the rows, then the columns
    out.producer.attrs[_FORM] = _form(ctx.op.name, ctx.op.kind, n, x.shape[-1], "RFFT2D", macs,
                                      f"a power of two above {MATRIX_UP_TO}: LiteRT's FFT kernel is faster")
    return out


def _move_last(ctx, p: Parts, axis: int) -> Parts:
    rank = len(p.shape)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return Parts(*(ctx.transpose(v, perm) for v in p.values(ctx)))


def _dft_over(ctx, p: Parts, axis: int, n: int, inverse: bool, form: dict | None = None) -> Parts:
    """The complex DFT of size ``n`` of ``p`` along ``axis`` (its length fitted to n)."""
    rank = len(p.shape)
    last = axis in (-1, rank - 1)
    if not last:
        p = _move_last(ctx, p, axis)
    dr, di = dft_matrices(p.shape[-1], n, inverse)
    p = p.transform(ctx, dr, di, form)
    return p if last else _move_last(ctx, p, axis)


def _matrix_form(ctx, kind: str, n: int, length: int, macs: int, reason: str) -> dict:
    return _form(ctx.op.name, kind, n, length, "DFT matrix products (FULLY_CONNECTED)", macs, reason)


@lowering("RFFT")
def lower_rfft(ctx):
    # tf.signal.rfft over the last axis (stft, tf.signal.dct, every audio front end). A power of two above
    # MATRIX_UP_TO: LiteRT's RFFT2D (rank >= 2: x [..., L] as [..., 1, L], fft_length [1, n]); any other length:
    # the real and imaginary rows of the DFT as constant matrices (the crop or zero padding to n folded in).
    x = ctx.input(0)
    (n,) = _lengths(ctx, 1)
    rank, length = len(x.shape), x.shape[-1]
    if _is_pow2(n) and n > MATRIX_UP_TO:
        x2 = ctx.emit("EXPAND_DIMS", [x, ctx.i32(rank - 1)], dtype=x.dtype, shape=(*x.shape[:-1], 1, length))
        y = _rfft2d_builtin(ctx, x2, [1, n])
        return [ctx.emit("SQUEEZE", [y], {"squeeze_dims": [rank - 1]}, dtype=C64, shape=(*x.shape[:-1], n // 2 + 1))]
    wr, wi = rfft_matrices(length, n)
    x, (wr, wi) = _unpadded(x, wr, wi)
    reason = "LiteRT's RFFT2D takes powers of two only" if not _is_pow2(n) else \
        f"a power of two up to {MATRIX_UP_TO}: as fast as RFFT2D"
    form = _matrix_form(ctx, "RFFT", n, x.shape[-1], 2 * wr.size, reason)
    return [join(ctx, Parts(x=x, ar=wr, ai=wi, form=form))]


def _unpadded(x: Value, *ws: np.ndarray) -> tuple[Value, list[np.ndarray]]:
    """``x`` before a zero PAD of its last axis alone (``tf.signal.rfft`` pads to fft_length so), with the
    matrices' columns of the padding dropped: they multiply zeros."""
    op = x.producer
    if op is None or op.type not in ("tfl.PAD", "tfl.PADV2") or not op.inputs[1].is_const:
        return x, list(ws)
    if op.type == "tfl.PADV2" and (not op.inputs[2].is_const or np.any(op.inputs[2].const)):
        return x, list(ws)
    pads = np.asarray(op.inputs[1].const).reshape(-1, 2)
    inner = op.inputs[0]
    if inner.shape is None or inner.shape[-1] is None or np.any(pads[:-1]) or len(pads) != len(inner.shape):
        return x, list(ws)
    lo = int(pads[-1, 0])
    return inner, [w[:, lo:lo + inner.shape[-1]] for w in ws]


@lowering("RFFT2D")
def lower_rfft2d(ctx):
    # tf.signal.rfft2d: LiteRT's RFFT2D where both lengths are powers of two above MATRIX_UP_TO; else the RFFT of
    # the last axis as matrices, then the complex DFT of the one before (both crops / zero paddings folded in)
    x = ctx.input(0)
    m, n = _lengths(ctx, 2)
    if all(_is_pow2(d) and d > MATRIX_UP_TO for d in (m, n)):
        return [_rfft2d_builtin(ctx, x, [m, n])]
    wr, wi = rfft_matrices(x.shape[-1], n)
    p = Parts(x=x, ar=wr, ai=wi)
    rows = min(x.shape[-2], m)
    form = _matrix_form(ctx, "RFFT2D", n, x.shape[-1], m * 2 * wr.size + 4 * (n // 2 + 1) * m * rows,
                        "LiteRT's RFFT2D takes powers of two only" if not (_is_pow2(m) and _is_pow2(n))
                        else f"a power of two up to {MATRIX_UP_TO}")
    p = _dft_over(ctx, p, -2, m, inverse=False, form=form)
    return [join(ctx, p)]


@lowering("IRFFT")
def lower_irfft(ctx):
    # tf.signal.irfft (no LiteRT kernel): x_j = (1/n) sum_k w_k (re_k cos(2 pi jk/n) - im_k sin(2 pi jk/n)) over
    # the n/2 + 1 bins (cropped / zero-padded), w_k = 2 but for bins 0 and n/2; two FULLY_CONNECTEDs and an ADD
    # (one FULLY_CONNECTED when the parts are linear, e.g. irfft(rfft(x)))
    x = ctx.input(0)
    (n,) = _lengths(ctx, 1)
    if np.dtype(x.dtype) != C64:
        ctx.fail(f"takes complex64 values, not {np.dtype(x.dtype).name}")
    mr, mi = irfft_matrices(x.shape[-1], n)
    form = _matrix_form(ctx, "IRFFT", n, x.shape[-1], 2 * mr.size, "no LiteRT kernel for an inverse FFT")
    return [complex_parts(ctx, x).real_readout(ctx, mr, mi, form)]


@lowering("IRFFT2D")
def lower_irfft2d(ctx):
    # tf.signal.irfft2d: the inverse complex DFT of the second-last axis (m, cropped / padded), then IRFFT
    x = ctx.input(0)
    m, n = _lengths(ctx, 2)
    if np.dtype(x.dtype) != C64:
        ctx.fail(f"takes complex64 values, not {np.dtype(x.dtype).name}")
    p = _dft_over(ctx, complex_parts(ctx, x), -2, m, inverse=True)
    mr, mi = irfft_matrices(x.shape[-1], n)
    form = _matrix_form(ctx, "IRFFT2D", n, x.shape[-1], m * 2 * mr.size + 4 * m * m * x.shape[-1],
                        "no LiteRT kernel for an inverse FFT")
    return [p.real_readout(ctx, mr, mi, form)]


_COMPLEX_FFTS = {"FFT": (1, False), "IFFT": (1, True), "FFT2D": (2, False), "IFFT2D": (2, True),
                 "FFT3D": (3, False), "IFFT3D": (3, True)}


@lowering(*_COMPLEX_FFTS)
def lower_complex_fft(ctx):
    # tf.signal.fft / ifft / fft2d / ifft2d / fft3d / ifft3d of complex64 values (no LiteRT kernel): the complex DFT
    # of each of the innermost 1-3 axes as constant matrices on the real and imaginary parts (ifft: conjugate
    # matrices, scaled by 1/n per axis, as TF does)
    x = ctx.input(0)
    dims, inverse = _COMPLEX_FFTS[ctx.op.kind]
    if np.dtype(x.dtype) != C64:
        ctx.fail(f"takes complex64 values, not {np.dtype(x.dtype).name} (complex128 has no LiteRT tensor type)")
    if x.shape is None or len(x.shape) < dims or any(d is None for d in x.shape[-dims:]):
        ctx.fail(f"the {dims} transformed axis(es) must have static sizes (the DFT matrices are constants)")
    p = complex_parts(ctx, x)
    macs = 4 * int(np.prod(x.shape[-dims:])) * int(sum(x.shape[-dims:]))
    form = _matrix_form(ctx, ctx.op.kind, x.shape[-1], x.shape[-1], macs, "no LiteRT kernel for a complex FFT")
    for i, axis in enumerate(range(-1, -dims - 1, -1)):
        p = _dft_over(ctx, p, axis, x.shape[axis], inverse, form if i == dims - 1 else None)
    return [join(ctx, p)]


@lowering("Complex")
def lower_complex(ctx):
    # tf.complex(re, im): the pair as a complex64 tensor (BITCAST of PACK: the bytes LiteRT's complex64 holds);
    # consumers read the parts back (complex_parts)
    re, im = ctx.input(0), ctx.input(1)
    if np.dtype(ctx.out(0).dtype) != C64:
        ctx.fail(f"makes {np.dtype(ctx.out(0).dtype).name}, which LiteRT has no tensor type for (complex64 only)")
    shape = ctx.out(0).shape
    if shape is None or re.shape != shape or im.shape != shape:
        if shape is None or None in shape:
            ctx.fail("parts of different shapes need a static result shape to be broadcast")
        re, im = (u if u.shape == shape else ctx.emit("BROADCAST_TO", [u, ctx.i32(shape)], dtype=F32, shape=shape)
                  for u in (re, im))
    return [join(ctx, Parts(re, im))]


@lowering("ComplexAbs")
def lower_complex_abs(ctx):
    # |z|: LiteRT's COMPLEX_ABS of a true complex tensor (RFFT2D's output, an input); of parts made here,
    # sqrt(re^2 + im^2) (SQRT, ADD, MUL: TFLite Micro has them)
    x = ctx.input(0)
    if _opaque(x):
        return [ctx.emit("COMPLEX_ABS", [x], dtype=F32)]
    return [magnitude(ctx, complex_parts(ctx, x))]


def magnitude(e, p: Parts) -> Value:
    """``sqrt(re^2 + im^2)`` of ``p``."""
    re, im = p.values(e)
    power = _binary(e, "ADD", _binary(e, "MUL", re, re), _binary(e, "MUL", im, im))
    return e.emit("SQRT", [power], {}, dtype=F32, shape=power.shape)


@lowering("Real", "Imag")
def lower_complex_part(ctx):
    """A complex value's real or imaginary part: LiteRT's REAL / IMAG of a true complex tensor, else the part this
    module's rules carry (one FULLY_CONNECTED where it is a linear map of a real input)."""
    x, imag = ctx.input(0), ctx.op.kind == "Imag"
    if _opaque(x):
        return [ctx.emit("IMAG" if imag else "REAL", [x], dtype=F32)]
    p = complex_parts(ctx, x)
    if p.linear:
        return [_fc(ctx, p.x, p.ai if imag else p.ar, _dct_form(ctx, p))]
    return [p.values(ctx)[1 if imag else 0]]


def _dct_form(ctx, p: Parts) -> dict | None:
    """The report's line for one part of a linear transform read alone (``tf.signal.dct``: one matrix)."""
    if p.form is None:
        return None
    out, length = p.ar.shape
    return {**p.form, "form": f"one FULLY_CONNECTED of {length}x{out} ({p.form['kind']} and the ops on its bins "
                              f"folded into one matrix: a {ctx.op.kind.lower()} part read alone, e.g. a DCT)",
            "macs": int(out * length)}


@lowering("FuseliteDFT")
def lower_real_dft(ctx):
    # not a TensorFlow op: passes/patterns.py rewrites Real / Imag(FFT[2D](Complex(re, im))) to it. The discrete
    # Fourier transform over the last axis (and the one before it: dims 2) of re + i im, as real matrix products:
    # with C[j, k] = cos(2 pi jk / n) and S = sin(...), both symmetric, X C - i X S per axis, so
    #   re' = re C + im S,  im' = im C - re S.
    # A static axis takes constant matrices (FULLY_CONNECTED); a dynamic one (a sequence length) matrices made at
    # run time from RANGE, jk mod n, COS and SIN (BATCH_MATMUL). Exact but for float32 rounding.
    re = ctx.input(0)
    im = ctx.input(1) if len(ctx.inputs) > 1 else None
    if re.shape is None or len(re.shape) < int(ctx.attr("dims")):
        ctx.fail("the transformed input needs a known rank")
    rank = len(re.shape)
    parts = (re, im)
    for axis in ([rank - 1, rank - 2] if int(ctx.attr("dims")) == 2 else [rank - 1]):
        parts = _dft_axis(ctx, *parts, axis)
    return [parts[0] if ctx.attr("part") == "real" else parts[1]]


def _dft_axis(ctx, re, im, axis: int):
    """(re', im') of the DFT of ``re + i im`` along ``axis`` (``im`` None: zeros)."""
    rank = len(re.shape)
    last = axis == rank - 1
    if not last:  # bring the axis last, and back after
        perm = list(range(rank))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        re, im = ctx.transpose(re, perm), (None if im is None else ctx.transpose(im, perm))
    n = re.shape[-1]
    cos, sin = _dft_runtime_matrices(ctx, re, n)

    def product(x, w):
        if w.is_const:
            return fully_connected(ctx, x, w, keep_num_dims=len(x.shape) > 2)
        return ctx.emit("BATCH_MATMUL", [x, w], {"adj_x": False, "adj_y": False, "asymmetric_quantize_inputs": False},
                        dtype=np.float32, shape=x.shape)

    def add(a, b, kind="ADD"):
        return ctx.emit(kind, [a, b], {"fused_activation_function": "NONE"}, dtype=np.float32, shape=a.shape)

    real = product(re, cos)
    imag = ctx.emit("NEG", [product(re, sin)], dtype=np.float32, shape=re.shape)
    if im is not None:
        real = add(real, product(im, sin))
        imag = add(product(im, cos), imag)
    for v in (real, imag):
        v.shape = re.shape
    if not last:
        real, imag = ctx.transpose(real, perm), ctx.transpose(imag, perm)
    return real, imag


def _dft_runtime_matrices(ctx, x, n):
    """(C, S) of size n: constants when n is static, else computed from ``x``'s last dim at run time."""
    if n is not None:
        jk = np.outer(np.arange(n), np.arange(n)) % n
        angle = 2 * np.pi * jk / n
        return ctx.const(np.cos(angle).astype(np.float32)), ctx.const(np.sin(angle).astype(np.float32))
    dims = ctx.emit("SHAPE", [x], {"out_type": I32}, dtype=I32, shape=(len(x.shape),))
    size = ctx.emit("GATHER", [dims, ctx.i32(len(x.shape) - 1)], {"axis": 0, "batch_dims": 0}, dtype=I32, shape=())
    idx = ctx.emit("RANGE", [ctx.i32(0), size, ctx.i32(1)], dtype=I32, shape=(None,))
    jk = ctx.emit("MUL", [ctx.emit("RESHAPE", [idx, ctx.i32([-1, 1])], dtype=I32, shape=(None, 1)),
                          ctx.emit("RESHAPE", [idx, ctx.i32([1, -1])], dtype=I32, shape=(1, None))],
                  {"fused_activation_function": "NONE"}, dtype=I32, shape=(None, None))
    jk = ctx.emit("FLOOR_MOD", [jk, size], dtype=I32, shape=(None, None))  # exact before the float step
    step = ctx.emit("DIV", [ctx.const(np.array(2 * np.pi, np.float32)), ctx.cast(size, np.float32)],
                    {"fused_activation_function": "NONE"}, dtype=np.float32, shape=())
    angle = ctx.emit("MUL", [ctx.cast(jk, np.float32), step], {"fused_activation_function": "NONE"},
                     dtype=np.float32, shape=(None, None))
    return (ctx.emit("COS", [angle], dtype=np.float32, shape=(None, None)),
            ctx.emit("SIN", [angle], dtype=np.float32, shape=(None, None)))


# -- the target's forms, and the report ------------------------------------------------------------------------------


def fourier_forms(module: Module, micro: bool = False, report: Any = None) -> int:
    """After lowering: for TFLite Micro (``micro``), every ``RFFT2D`` (no TFLM kernel) becomes DFT matrix products
    and the ``REAL`` / ``IMAG`` / ``COMPLEX_ABS`` reading it real arithmetic on the parts; then each transform's form
    and cost goes to ``report`` (its warnings). Returns how many ops were rewritten."""
    changed = 0
    for fn in module.functions.values():
        if micro:
            changed += _rfft2d_as_matrices(fn)
    if report is not None:
        for fn in module.functions.values():
            live = _live_ops(fn)
            for op in fn.ops:
                f = op.attrs.get(_FORM)
                if f and id(op) in live:
                    report.warn(describe_form(f))
    return changed


def describe_form(f: dict) -> str:
    """The report's line for one transform: its form and its multiply-adds per transform, against RFFT2D's."""
    line = f"{f['kind']} '{f['op']}' (length {f['n']}, {f['length']} values in): {f['form']}, {f['macs']:,} " \
           "multiply-adds per transform"
    if f["form"] == "RFFT2D":
        return f"{line} (n log2 n per axis; {f['reason']})"
    pow2 = 1 << max(1, int(np.ceil(np.log2(f["n"]))))
    return f"{line} (RFFT2D's real FFT: ~{fft_cost(pow2):,} at length {pow2}; {f['reason']})"


def _live_ops(fn: Function) -> set[int]:
    needed = {v.uid for v in fn.outputs if v is not None}
    live = set()
    for op in reversed(fn.ops):
        if any(o.uid in needed for o in op.outputs) or op.attrs.get("_side_effect"):
            live.add(id(op))
            needed.update(v.uid for v in op.inputs if v is not None)
    return live


def _rfft2d_as_matrices(fn: Function) -> int:
    count = 0
    for op in [o for o in fn.ops if o.type == "tfl.RFFT2D"]:
        x, sizes = op.inputs[0], [int(d) for d in np.asarray(op.inputs[1].const).reshape(-1)]
        e = Emitter(fn, op)
        wr, wi = rfft_matrices(x.shape[-1], sizes[1])
        if sizes[0] == 1 and x.shape[-2] == 1:
            x, (wr, wi) = _unpadded(x, wr, wi)
        p = Parts(x=x, ar=wr, ai=wi)
        if sizes[0] > 1 or x.shape[-2] != 1:
            re, im = p.values(e)
            perm = list(range(len(x.shape)))
            perm[-2], perm[-1] = perm[-1], perm[-2]

            def t(v, perm=perm, e=e):
                shape = tuple(v.shape[i] for i in perm)
                return e.emit("TRANSPOSE", [v, e.i32(perm)], {}, dtype=F32, shape=shape)

            q = Parts(t(re), t(im)).transform(e, *dft_matrices(x.shape[-2], sizes[0]))
            p = Parts(*(t(v) for v in q.values(e)))
        form = dict(op.attrs.get(_FORM) or {})
        if form:
            form.update(form="DFT matrix products (FULLY_CONNECTED)", reason="TFLite Micro has no RFFT2D kernel",
                        macs=2 * wr.size * sizes[0] + (4 * (sizes[1] // 2 + 1) * sizes[0] ** 2 if sizes[0] > 1 else 0))
            if p.linear:
                p.form = form
        joined = join(e, p)
        e.place()
        fn.replace_uses(op.outputs[0], joined)
        fn.ops.remove(op)
        count += 1
    if count:
        for op in [o for o in fn.ops if o.type in ("tfl.REAL", "tfl.IMAG", "tfl.COMPLEX_ABS")]:
            e = Emitter(fn, op)
            p = complex_parts(e, op.inputs[0])
            if op.kind == "COMPLEX_ABS":
                out = magnitude(e, p)
            elif p.linear:
                out = _fc(e, p.x, p.ar if op.kind == "REAL" else p.ai, p.form)
            else:
                out = p.values(e)[0 if op.kind == "REAL" else 1]
            e.place()
            fn.replace_uses(op.outputs[0], out)
            fn.ops.remove(op)
            count += 1
    return count
