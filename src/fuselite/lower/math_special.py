"""Math ops LiteRT has no builtin for, composed from builtins (DivNoNan, Xlogy, Lgamma, ...), and the bitwise ops.

Where the official converter (TF 2.21) lowers an op, the numbers here match or beat its composition
(``lower_tf.cc`` / ``legalize_patterns.td``): ``Expm1`` and ``Log1p`` keep their relative precision near 0 (it
writes ``EXP(x) - 1`` and ``LOG(1 + x)``, which lose every digit for ``|x| < 1e-7``), ``Lgamma`` is its Lanczos
approximation (XLA's) with that accurate ``log1p`` inside. The ops it refuses are composed exactly: the bitwise
``BitwiseAnd``, ``BitwiseOr``, ``Invert``, ``LeftShift`` and int64 ``RightShift`` from ``BITWISE_XOR``, ``RIGHT_SHIFT``,
``BITCAST`` and integer arithmetic, ``TruncateMod`` / ``Mod`` from ``FLOOR_MOD``.

On LiteRT's builtin kernels ADD / SUB / MUL / DIV clamp their results to the float range (an infinite sum, product
or quotient comes out as +-FLT_MAX; XNNPACK gives inf), as for every Add / Mul / RealDiv: where TF defines an
infinite result of a unary function here (``Expm1(inf)``, ``Log1p(inf)``, ``Log1p(-1)``, ``Lgamma`` at its poles)
it is selected, not computed; ``Xdivy(1, 0)`` or ``Xlogy(1, 0)`` on the builtin kernels stay +-FLT_MAX.
"""

from __future__ import annotations

import math

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import LowerCtx, lowering

_NONE = {"fused_activation_function": "NONE"}
_FUSED = {"ADD", "SUB", "MUL", "DIV"}  # LiteRT ops that carry a fused activation
_BOOL = np.dtype(np.bool_)
_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)

# -- building blocks -----------------------------------------------------------------------------------------


def _broadcast(*shapes):
    """The broadcast of ``shapes`` (None where a rank is unknown; a dim None where it is not static)."""
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        known = {d for d in dims if d is not None and d != 1}
        out.append(None if None in dims and not known else (known.pop() if known else 1))
    return tuple(out)


def _op(ctx: LowerCtx, kind: str, *inputs: Value, dtype=None, options: dict | None = None) -> Value:
    """``tfl.<kind>`` of ``inputs``: the first input's dtype unless given, the inputs' broadcast shape."""
    dtype = np.dtype(dtype if dtype is not None else inputs[0].dtype)
    opts = dict(_NONE) if kind in _FUSED and options is None else (options or {})
    return ctx.emit(kind, list(inputs), opts, dtype=dtype, shape=_broadcast(*[v.shape for v in inputs]))


def _k(ctx: LowerCtx, value, like: Value) -> Value:
    """A scalar constant of ``like``'s dtype."""
    return ctx.const(np.asarray(value, dtype=like.dtype))


def _select(ctx: LowerCtx, cond: Value, a: Value, b: Value) -> Value:
    return _op(ctx, "SELECT_V2", cond, a, b, dtype=a.dtype)


def _float32_only(ctx: LowerCtx, *values: Value) -> None:
    for v in values:
        if np.dtype(v.dtype) != _F32:
            ctx.fail(f"{np.dtype(v.dtype).name} is not supported: LiteRT's kernels this op is composed of take "
                     "float32 (cast to float32 first)")


def _horner(ctx: LowerCtx, x: Value, coefficients) -> Value:
    """sum_j coefficients[j] * x**j, by Horner's rule."""
    p = _k(ctx, coefficients[-1], x)
    for c in reversed(coefficients[:-1]):
        p = _op(ctx, "ADD", _op(ctx, "MUL", x, p), _k(ctx, c, x))
    return p


# expm1(x) = x * sum_{j<9} x^j / (j+1)! for |x| < 1/2: the first term left out is below 0.5^9 / 10! = 5e-10 of x
_EXPM1_SERIES = [1.0 / math.factorial(j + 1) for j in range(9)]
_EXPM1_SMALL = 0.5
# log1p(x) = x * sum_{j<9} (-x)^j / (j+1) for |x| < 1/8: the first term left out is below 0.125^9 / 10 = 8e-10 of x
_LOG1P_SERIES = [(-1.0) ** j / (j + 1) for j in range(9)]
_LOG1P_SMALL = 0.125


def expm1(ctx: LowerCtx, x: Value) -> Value:
    """exp(x) - 1 to float32's relative precision: a series for |x| < 1/2 (where EXP(x) - 1 cancels), EXP(x) - 1
    beyond (its rounding is at most 2.5 ulp of the result there); inf, -inf and NaN as TF (inf, -1, NaN), on both
    kernel sets."""
    small = _op(ctx, "LESS", _op(ctx, "ABS", x), _k(ctx, _EXPM1_SMALL, x), dtype=_BOOL)
    series = _op(ctx, "MUL", x, _horner(ctx, x, _EXPM1_SERIES))
    e = _op(ctx, "EXP", x)
    # an overflowed EXP passes as it is: LiteRT's builtin SUB clamps its result to the float range (inf - 1 would
    # be FLT_MAX)
    big = _select(ctx, _op(ctx, "EQUAL", e, _k(ctx, np.inf, x), dtype=_BOOL), e, _op(ctx, "SUB", e, _k(ctx, 1.0, x)))
    # NaN passes as NaN (XNNPACK's EXP gives 0 for NaN)
    nan = _op(ctx, "NOT_EQUAL", x, x, dtype=_BOOL)
    return _select(ctx, nan, x, _select(ctx, small, series, big))


def log1p(ctx: LowerCtx, x: Value) -> Value:
    """log(1 + x) to float32's relative precision: a series for |x| < 1/8; for 1/8 <= |x| < 1 Goldberg's
    ``LOG(u) * x / (u - 1)`` with u = 1 + x rounded (the quotient undoes u's rounding); LOG(1 + x) beyond, where
    1 + x is exact or its rounding is below an ulp of the result. -1 gives -inf, x < -1 NaN, inf inf, as TF (but
    XNNPACK's LOG, and so this, overflows to inf above about 1.7e38, 2^127)."""
    ax = _op(ctx, "ABS", x)
    u = _op(ctx, "ADD", x, _k(ctx, 1.0, x))
    log_u = _op(ctx, "LOG", u)
    # LOG(u) itself where |x| >= 1, so that its inf / -inf / NaN pass unclamped (LiteRT's builtin MUL clamps to
    # the float range)
    goldberg = _op(ctx, "MUL", log_u, _op(ctx, "DIV", x, _op(ctx, "SUB", u, _k(ctx, 1.0, x))))
    big = _select(ctx, _op(ctx, "LESS", ax, _k(ctx, 1.0, x), dtype=_BOOL), goldberg, log_u)
    series = _op(ctx, "MUL", x, _horner(ctx, x, _LOG1P_SERIES))
    out = _select(ctx, _op(ctx, "LESS", ax, _k(ctx, _LOG1P_SMALL, x), dtype=_BOOL), series, big)
    # inf passes as inf (LiteRT's builtin ADD clamps inf + 1 to FLT_MAX, whose LOG is 88.7)
    return _select(ctx, _op(ctx, "EQUAL", x, _k(ctx, np.inf, x), dtype=_BOOL), x, out)


def _is_zero(ctx: LowerCtx, v: Value) -> Value:
    return _op(ctx, "EQUAL", v, _k(ctx, 0, v), dtype=_BOOL)


def _zero_where(ctx: LowerCtx, cond: Value, value: Value) -> Value:
    out = _select(ctx, cond, _k(ctx, 0, value), value)
    out.shape = ctx.out(0).shape if ctx.out(0).shape is not None else out.shape
    return out


# -- division and products that define their zeros -----------------------------------------------------------


@lowering("DivNoNan")
def lower_div_no_nan(ctx):
    # x / y, 0 where y == 0 (even 0 / 0 and NaN / 0), as lower_tf.td's BinaryNoNanPat: SELECT_V2(y == 0, 0, x / y)
    x, y = ctx.inputs
    _float32_only(ctx, x, y)
    return [_zero_where(ctx, _is_zero(ctx, y), _op(ctx, "DIV", x, y))]


@lowering("MulNoNan")
def lower_mul_no_nan(ctx):
    # x * y, 0 where y == 0 even if x is NaN or inf (lower_tf.td's BinaryNoNanPat)
    x, y = ctx.inputs
    _float32_only(ctx, x, y)
    return [_zero_where(ctx, _is_zero(ctx, y), _op(ctx, "MUL", x, y))]


@lowering("Xdivy")
def lower_xdivy(ctx):
    # x / y, 0 where x == 0 (TF's xdivy: whatever y is)
    x, y = ctx.inputs
    _float32_only(ctx, x, y)
    return [_zero_where(ctx, _is_zero(ctx, x), _op(ctx, "DIV", x, y))]


@lowering("Xlogy")
def lower_xlogy(ctx):
    # x * log(y), 0 where x == 0 (Xlogy(0, 0) = 0; TF's xlogy gives 0 for x == 0 whatever y is, NaN included)
    x, y = ctx.inputs
    _float32_only(ctx, x, y)
    return [_zero_where(ctx, _is_zero(ctx, x), _op(ctx, "MUL", x, _op(ctx, "LOG", y)))]


@lowering("Xlog1py")
def lower_xlog1py(ctx):
    # x * log1p(y), 0 where x == 0; log1p accurate near 0 (the official converter's LOG(1 + y) is not)
    x, y = ctx.inputs
    _float32_only(ctx, x, y)
    return [_zero_where(ctx, _is_zero(ctx, x), _op(ctx, "MUL", x, log1p(ctx, y)))]


@lowering("TruncateDiv")
def lower_truncate_div(ctx):
    # x / y rounded toward zero. int32: LiteRT's DIV (div.cc divides int32 as C++ does, toward zero); int8, int16,
    # uint8, uint16: the same in int32 and back (exact: |x / y| <= |x|; int8's -128 / -1 wraps to -128 as TF's);
    # float32: DIV, then CEIL below 0 and FLOOR above (as the official converter)
    x, y = ctx.inputs
    dt = np.dtype(x.dtype)
    if dt == _F32:
        q = _op(ctx, "DIV", x, y)
        neg = _op(ctx, "LESS", q, _k(ctx, 0.0, q), dtype=_BOOL)
        return [_select(ctx, neg, _op(ctx, "CEIL", q), _op(ctx, "FLOOR", q))]
    if dt == _I32:
        return [_op(ctx, "DIV", x, y)]
    if dt in (np.int8, np.int16, np.uint8, np.uint16):
        q = _op(ctx, "DIV", ctx.cast(x, np.int32), ctx.cast(y, np.int32))
        return [ctx.cast(q, dt)]
    ctx.fail(f"{dt.name} is not supported: LiteRT's DIV divides float32 and int32 only (div.cc), and an exact "
             f"{dt.name} quotient does not fit in them")


@lowering("TruncateMod", "Mod")
def lower_truncate_mod(ctx):
    # the remainder of the truncating division, with x's sign (C's %, std::fmod; the official converter has no
    # lowering), from LiteRT's FLOOR_MOD (floor_mod.cc: int32, int64, float32), exactly:
    # * int32, int64 (TF's integer types for it): FLOOR_MOD's r has y's sign; where r != 0 and its sign is not
    #   x's, r - y (no overflow: r and y have opposite signs);
    # * float32: FLOOR_MOD(|x|, |y|) is fmod(|x|, |y|) (no sign fix-up for non-negative operands), given x's sign
    #   (r - y would round)
    x, y = ctx.inputs
    dt = np.dtype(x.dtype)
    if dt == _F32:
        r = _op(ctx, "FLOOR_MOD", _op(ctx, "ABS", x), _op(ctx, "ABS", y))
        return [_select(ctx, _op(ctx, "LESS", x, _k(ctx, 0.0, x), dtype=_BOOL), _op(ctx, "NEG", r), r)]
    if dt not in (_I32, np.int64):
        ctx.fail(f"{dt.name} is not supported: LiteRT's FLOOR_MOD takes int32, int64 and float32 (floor_mod.cc)")
    r = _op(ctx, "FLOOR_MOD", x, y)
    zero = _k(ctx, 0, r)
    signs_differ = _op(ctx, "NOT_EQUAL", _op(ctx, "LESS", r, zero, dtype=_BOOL), _op(ctx, "LESS", x, zero, dtype=_BOOL),
                       dtype=_BOOL)
    fix = _op(ctx, "LOGICAL_AND", _op(ctx, "NOT_EQUAL", r, zero, dtype=_BOOL), signs_differ, dtype=_BOOL)
    return [_select(ctx, fix, _op(ctx, "SUB", r, y), r)]


# -- exp, log, gamma ----------------------------------------------------------------------------------------


@lowering("Expm1")
def lower_expm1(ctx):
    _float32_only(ctx, ctx.input(0))
    return [expm1(ctx, ctx.input(0))]


@lowering("Log1p")
def lower_log1p(ctx):
    _float32_only(ctx, ctx.input(0))
    return [log1p(ctx, ctx.input(0))]


# Lanczos' approximation with g = 7 and 9 coefficients, XLA's (xla/client/lib/math.cc) and the official converter's
_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354, 12.507343278686904814458936853,
            -0.13857109526572011689554707, 9.984369578019570859563e-6, 1.50563273514931155834e-7)


@lowering("Lgamma")
def lower_lgamma(ctx):
    # log|Gamma(x)|, as XLA computes it (the official converter's composition): Lanczos for x >= 1/2, Euler's
    # reflection log(pi) - log|sin(pi x)| - lgamma(1 - x) below, with sin taken of the reduced fraction of |x|
    # (exact 0 at the poles: +inf there); lgamma(+-inf) = +inf. The log1p inside is the accurate one above.
    x = ctx.input(0)
    _float32_only(ctx, x)
    one, half = _k(ctx, 1.0, x), _k(ctx, 0.5, x)
    reflect = _op(ctx, "LESS", x, half, dtype=_BOOL)
    z = _select(ctx, reflect, _op(ctx, "NEG", x), _op(ctx, "SUB", x, one))
    series = _k(ctx, _LANCZOS_BASE, x)
    for i, c in enumerate(_LANCZOS):
        series = _op(ctx, "ADD", series, _op(ctx, "DIV", _k(ctx, c, x), _op(ctx, "ADD", z, _k(ctx, i + 1.0, x))))
    gh = _LANCZOS_G + 0.5
    t = _op(ctx, "ADD", z, _k(ctx, gh, x))
    log_t = _op(ctx, "ADD", log1p(ctx, _op(ctx, "DIV", z, _k(ctx, gh, x))), _k(ctx, math.log(gh), x))
    # (z + 1/2 - t / log t) * log t: (z + 1/2) log t - t without overflowing for large z
    lead = _op(ctx, "SUB", _op(ctx, "ADD", z, half), _op(ctx, "DIV", t, log_t))
    log_y = _op(ctx, "ADD", _op(ctx, "ADD", _op(ctx, "MUL", lead, log_t), _op(ctx, "LOG", series)),
                _k(ctx, 0.5 * math.log(2 * math.pi), x))
    ax = _op(ctx, "ABS", x)
    frac = _op(ctx, "SUB", ax, _op(ctx, "FLOOR", ax))
    frac = _select(ctx, _op(ctx, "GREATER", frac, half, dtype=_BOOL), _op(ctx, "SUB", one, frac), frac)
    log_sin = _op(ctx, "LOG", _op(ctx, "SIN", _op(ctx, "MUL", frac, _k(ctx, math.pi, x))))
    finite = _op(ctx, "LESS", _op(ctx, "ABS", log_sin), _k(ctx, np.inf, x), dtype=_BOOL)
    reflection = _select(ctx, finite, _op(ctx, "SUB", _op(ctx, "SUB", _k(ctx, math.log(math.pi), x), log_sin), log_y),
                         _op(ctx, "NEG", log_sin))
    out = _select(ctx, reflect, reflection, log_y)
    is_inf = _op(ctx, "EQUAL", ax, _k(ctx, np.inf, x), dtype=_BOOL)
    return [_select(ctx, is_inf, _k(ctx, np.inf, x), out)]


@lowering("Rint")
def lower_rint(ctx):
    # round half to even: LiteRT's ROUND (round.cc: RoundToNearest, ties to even; XNNPACK's bankers' rounding)
    _float32_only(ctx, ctx.input(0))
    return [ctx.emit("ROUND", [ctx.input(0)])]


# -- classification ---------------------------------------------------------------------------------------------


@lowering("IsNan")
def lower_is_nan(ctx):
    # NaN is the only value not equal to itself (as the official converter: NOT_EQUAL(x, x))
    x = ctx.input(0)
    _float32_only(ctx, x)
    return [ctx.emit("NOT_EQUAL", [x, x], dtype=_BOOL)]


@lowering("IsInf")
def lower_is_inf(ctx):
    x = ctx.input(0)
    _float32_only(ctx, x)
    return [ctx.emit("EQUAL", [_op(ctx, "ABS", x), _k(ctx, np.inf, x)], dtype=_BOOL)]


@lowering("IsFinite")
def lower_is_finite(ctx):
    # |x| < inf: false for inf, -inf and NaN (a comparison with NaN is false)
    x = ctx.input(0)
    _float32_only(ctx, x)
    return [ctx.emit("LESS", [_op(ctx, "ABS", x), _k(ctx, np.inf, x)], dtype=_BOOL)]


# -- bits --------------------------------------------------------------------------------------------------------

# dtypes LiteRT's BITWISE_XOR and RIGHT_SHIFT take (bitwise_xor.cc, right_shift.cc)
_WORDS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)}
_BITCASTABLE = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                     np.uint8, np.uint16, np.uint32, np.complex64)}


def _bitcast(ctx: LowerCtx, v: Value, dtype) -> Value:
    """``v``'s bytes as ``dtype`` (LiteRT's BITCAST: a last dim of the size ratio added or removed)."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(v.dtype):
        return v
    if v.is_const:
        return ctx.const(np.ascontiguousarray(v.const).view(dtype).reshape(_bitcast_shape(v.const.shape, v.dtype,
                                                                                            dtype)))
    shape = None if v.shape is None else _bitcast_shape(v.shape, v.dtype, dtype)
    return ctx.emit("BITCAST", [v], dtype=dtype, shape=shape)


def _bitcast_shape(shape, src, dst) -> tuple:
    a, b = np.dtype(src).itemsize, np.dtype(dst).itemsize
    shape = tuple(shape)
    return shape + (a // b,) if a > b else (shape[:-1] if a < b else shape)


def _check_broadcast_rank(ctx: LowerCtx, x: Value, y: Value, extra: int = 0) -> None:
    # BITWISE_XOR / RIGHT_SHIFT broadcast through BroadcastBinaryFunction4DSlow: 4 dims at most
    if x.shape != y.shape and (x.shape is None or y.shape is None or max(len(x.shape), len(y.shape)) + extra > 4):
        ctx.fail("LiteRT's BITWISE_XOR / RIGHT_SHIFT broadcast up to 4 dims only (bitwise_xor.cc, right_shift.cc): "
                 "give both operands the same shape")


def _xor(ctx: LowerCtx, x: Value, y: Value) -> Value:
    """x ^ y of any integer dtype: 64-bit operands as pairs of int32 words (BITCAST), xored, and back."""
    dt = np.dtype(x.dtype)
    if dt in _WORDS:
        _check_broadcast_rank(ctx, x, y)
        return _op(ctx, "BITWISE_XOR", x, y)
    _check_broadcast_rank(ctx, x, y, extra=1)
    words = _op(ctx, "BITWISE_XOR", _bitcast(ctx, x, np.int32), _bitcast(ctx, y, np.int32))
    return _bitcast(ctx, words, dt)


def _integer_only(ctx: LowerCtx, *values: Value) -> np.dtype:
    dt = np.dtype(values[0].dtype)
    if dt not in _WORDS and dt != np.int64:
        ctx.fail(f"{dt.name} is not supported: LiteRT holds int8, int16, int32, int64, uint8, uint16 and uint32 "
                 "tensors for bitwise ops (no uint64)")
    return dt


@lowering("BitwiseXor")
def lower_bitwise_xor(ctx):
    # LiteRT's BITWISE_XOR (int8 / 16 / 32, uint8 / 16 / 32); int64 as two int32 words each
    x, y = ctx.inputs
    _integer_only(ctx, x, y)
    return [_xor(ctx, x, y)]


@lowering("Invert")
def lower_invert(ctx):
    # ~x = x ^ (all ones) (the official converter has no lowering for Invert)
    x = ctx.input(0)
    dt = _integer_only(ctx, x)
    ones = ctx.const(np.full((), -1, np.int64).astype(dt))
    return [_xor(ctx, x, ones)]


@lowering("BitwiseAnd", "BitwiseOr")
def lower_bitwise_and_or(ctx):
    # LiteRT has no AND / OR of integers (the official converter refuses both). Exactly, per 16-bit word: with the
    # words sign-extended to int32, a + b = (a ^ b) + 2 (a & b) and a | b = (a ^ b) + (a & b), so
    #   a & b = (a + b - (a ^ b)) / 2,  a | b = (a + b + (a ^ b)) / 2,
    # no int32 overflow (|a|, |b| < 2^15) and the halving exact (even). 32- and 64-bit operands are BITCAST to
    # int16 words and back; 8- and 16-bit ones cast to int32 and back (the result fits: bits of the operands).
    x, y = ctx.inputs
    dt = _integer_only(ctx, x, y)
    sign = 1.0 if ctx.op.kind == "BitwiseOr" else -1.0
    wide = dt.itemsize > 2
    if wide:
        _check_broadcast_rank(ctx, x, y, extra=1)
        a, b = _bitcast(ctx, x, np.int16), _bitcast(ctx, y, np.int16)
    else:
        _check_broadcast_rank(ctx, x, y)
        a, b = x, y
    a32, b32 = ctx.cast(a, np.int32), ctx.cast(b, np.int32)
    x32 = ctx.cast(_op(ctx, "BITWISE_XOR", a, b), np.int32)
    total = _op(ctx, "ADD" if sign > 0 else "SUB", _op(ctx, "ADD", a32, b32), x32)
    half = ctx.cast(_op(ctx, "DIV", total, ctx.i32(2)), np.int16 if wide else dt)
    return [_bitcast(ctx, half, dt) if wide else half]


def _shift_amount(ctx: LowerCtx, y: Value, bits: int) -> Value:
    """``y`` clamped to [0, bits - 1] (TF's kernels clamp the shift so), as int32."""
    if np.dtype(y.dtype) == np.int64:  # clamped before the cast: a cast would wrap 2^40 first
        y = _op(ctx, "MINIMUM", _op(ctx, "MAXIMUM", y, _k(ctx, 0, y)), _k(ctx, bits - 1, y))
        return ctx.cast(y, np.int32)
    y32 = ctx.cast(y, np.int32)
    return _op(ctx, "MINIMUM", _op(ctx, "MAXIMUM", y32, ctx.i32(0)), ctx.i32(bits - 1))


def _top_bit_shifted(ctx: LowerCtx, s: Value) -> Value:
    """2^(31 - s) as uint32 for int32 ``s`` in [0, 31]: RIGHT_SHIFT of the uint32 2^31 (a logical shift)."""
    top = ctx.const(np.array(0x80000000, np.uint32))
    return _op(ctx, "RIGHT_SHIFT", top, ctx.cast(s, np.uint32), dtype=np.uint32)


def _words(ctx: LowerCtx, x: Value) -> tuple[Value, Value]:
    """An int64's low and high int32 words (BITCAST to [..., 2], little-endian, and UNPACK)."""
    if x.shape is None:
        ctx.fail("a 64-bit shift needs the operand's rank")
    lo, hi = ctx.emit("UNPACK", [_bitcast(ctx, x, np.int32)], {"num": 2, "axis": len(x.shape)},
                      out_specs=[(_I32, x.shape)] * 2)
    return lo, hi


@lowering("RightShift")
def lower_right_shift(ctx):
    # LiteRT's RIGHT_SHIFT: arithmetic for signed types, the shift clamped to [0, bits - 1], as TF's kernel.
    # int64 (RIGHT_SHIFT has no 64-bit form): x = hi * 2^32 + lo (hi signed, lo unsigned), so exactly
    #   s < 32:  x >> s = hi * 2^(32 - s) + (lo >>> s)   (int64 arithmetic, no overflow: |result| <= |x|)
    #   s >= 32: x >> s = hi >> (s - 32)
    x, y = ctx.inputs
    dt = np.dtype(x.dtype)
    _check_broadcast_rank(ctx, x, y)
    if dt in _WORDS:
        return [_op(ctx, "RIGHT_SHIFT", x, y)]
    if dt != np.int64:
        ctx.fail(f"{dt.name} is not supported: LiteRT holds int8 / 16 / 32 / 64 and uint8 / 16 / 32 (no uint64)")
    s = _shift_amount(ctx, y, 64)
    lo, hi = _words(ctx, x)
    small_s = _op(ctx, "MINIMUM", s, ctx.i32(31))
    low_part = ctx.cast(_op(ctx, "RIGHT_SHIFT", _bitcast(ctx, lo, np.uint32), ctx.cast(small_s, np.uint32)), np.int64)
    scale = _op(ctx, "MUL", ctx.cast(_top_bit_shifted(ctx, small_s), np.int64), _k(ctx, 2, x))  # 2^(32 - s)
    small = _op(ctx, "ADD", _op(ctx, "MUL", ctx.cast(hi, np.int64), scale), low_part)
    big = ctx.cast(_op(ctx, "RIGHT_SHIFT", hi, _op(ctx, "MAXIMUM", _op(ctx, "SUB", s, ctx.i32(32)), ctx.i32(0))),
                   np.int64)
    return [_select(ctx, _op(ctx, "LESS", s, ctx.i32(32), dtype=_BOOL), small, big)]


@lowering("LeftShift")
def lower_left_shift(ctx):
    # x << y, y clamped to [0, bits - 1] and the bits above the width dropped, as TF's kernel (which shifts the
    # unsigned value). LiteRT has no LEFT_SHIFT: x * 2^y, which wraps as the shift does (mul.cc multiplies int32
    # and int64 modulo 2^32 / 2^64), with 2^y = RIGHT_SHIFT(uint32 2^31, 31 - y) (exact for y = 31 too); 8- and
    # 16-bit values are cast to int32 and back (the cast drops the high bits), uint32 read as int32; int64's 2^y
    # for y >= 32 is 2^(y - 32) * 2^32 (2^63 wraps to the int64 sign bit, as the shift does)
    x, y = ctx.inputs
    dt = np.dtype(x.dtype)
    if dt not in _WORDS and dt != np.int64:
        ctx.fail(f"{dt.name} is not supported: LiteRT holds int8 / 16 / 32 / 64 and uint8 / 16 / 32 (no uint64)")
    if y.shape is None or len(y.shape) > 4:
        ctx.fail("the shift amounts need a known rank of at most 4 (RIGHT_SHIFT, which makes 2^y, broadcasts up to "
                 "4 dims)")
    bits = 8 * dt.itemsize
    s = _shift_amount(ctx, y, bits)
    if dt == np.int64:
        low = _op(ctx, "MINIMUM", s, ctx.i32(31))
        high = _op(ctx, "MAXIMUM", _op(ctx, "SUB", s, ctx.i32(32)), ctx.i32(0))
        p_low = ctx.cast(_top_bit_shifted(ctx, _op(ctx, "SUB", ctx.i32(31), low)), np.int64)
        p_high = _op(ctx, "MUL", ctx.cast(_top_bit_shifted(ctx, _op(ctx, "SUB", ctx.i32(31), high)), np.int64),
                     _k(ctx, 2**32, x))
        power = _select(ctx, _op(ctx, "LESS", s, ctx.i32(32), dtype=_BOOL), p_low, p_high)
        return [_op(ctx, "MUL", x, power)]
    power = _bitcast(ctx, _top_bit_shifted(ctx, _op(ctx, "SUB", ctx.i32(31), s)), np.int32)
    x32 = _bitcast(ctx, x, np.int32) if dt == np.uint32 else ctx.cast(x, np.int32)
    out = _op(ctx, "MUL", x32, power)
    return [_bitcast(ctx, out, dt) if dt == np.uint32 else ctx.cast(out, dt)]


@lowering("Bitcast")
def lower_bitcast(ctx):
    # LiteRT's BITCAST (bitcast.cc): the shape rule is TF's (a last dim of the size ratio added for a narrower
    # type, the last dim, which must be that ratio, removed for a wider one)
    x = ctx.input(0)
    src, dst = np.dtype(x.dtype), np.dtype(ctx.out(0).dtype)
    for dt in (src, dst):
        if dt not in _BITCASTABLE:
            ctx.fail(f"{dt.name} is not supported: LiteRT tensors hold float16 / 32 / 64, int8 / 16 / 32 / 64, "
                     "uint8 / 16 / 32 and complex64 here")
    if src.itemsize < dst.itemsize and (x.shape is None or not x.shape
                                        or x.shape[-1] != dst.itemsize // src.itemsize):
        ctx.fail(f"bitcasting {src.name} to {dst.name} needs a static last dim of {dst.itemsize // src.itemsize}")
    return [_bitcast(ctx, x, dst)]
