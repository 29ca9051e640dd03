"""Random ops: RandomUniform, RandomStandardNormal, Multinomial (LiteRT's RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL,
MULTINOMIAL), and RandomUniformInt and TruncatedNormal composed from them (the official converter refuses both).

Seeds (LiteRT ``tflite/kernels/random_ops.cc``). A TF random op carries ``seed`` and ``seed2``, which TF derived
when the program was traced from the graph-level seed (``tf.random.set_seed``) and the op's ``seed=`` argument
(one given: the other is a default or a counter; neither: both 0). They are written as they are into the LiteRT
op's ``RandomOptions``. LiteRT's kernel seeds a Philox generator with (seed, seed2) when the interpreter prepares
the op (``allocate_tensors``); seed = seed2 = 0 means a seed drawn from ``/dev/urandom`` at each prepare, as TF's
"no seed". Every ``invoke`` continues the op's stream, so two invokes give different numbers; a fresh interpreter
(or a fresh ``allocate_tensors``) of a seeded file replays the same numbers.

Against TF (measured with TF 2.21 and ai-edge-litert 2.3, ``tests/test_lowering_random.py``): the generator
(Philox) and the transforms (``Uint32ToFloat``, ``BoxMullerFloat``, the multinomial's CDF search) are TF's, so a
seeded RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL's first invoke gives the numbers of the traced function's first
call, but not later ones (TF's kernel skips ahead 256 draws per call, LiteRT's continues); a seeded MULTINOMIAL
(which skips as TF does) gives TF's numbers call after call. RandomUniformInt and TruncatedNormal, composed here,
follow TF's distributions with numbers of their own; an unseeded op's numbers are nobody's.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import LowerCtx, lowering

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
_FLOATS = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)}
_NONE = {"fused_activation_function": "NONE"}
# RandomUniformInt: two 23-bit draws make a 46-bit integer, reduced modulo the range; a range up to 2^32 keeps
# the modulo bias below range / 2^46 <= 2^-14 of a value's probability
_MAX_INT_RANGE = 2**32
# TruncatedNormal: normals drawn per output value; all of them at or past 2 standard deviations (probability
# 0.0455^8 = 2e-11 per value) leaves the last one clipped to +-2
_TRUNCATED_DRAWS = 8


def _seeds(ctx: LowerCtx) -> dict:
    return {"seed": int(ctx.attr("seed", 0) or 0), "seed2": int(ctx.attr("seed2", 0) or 0)}


def _shape_input(ctx: LowerCtx, i: int = 0) -> Value:
    """The op's output shape operand as int32 (RANDOM_* read an int32 1-D shape: random_ops.cc Prepare)."""
    v = ctx.input(i)
    if v.is_const:
        return ctx.i32(np.asarray(v.const).reshape(-1))
    return ctx.cast(v, np.int32)


def _float_dtype(ctx: LowerCtx) -> np.dtype:
    dt = np.dtype(ctx.out(0).dtype)
    if dt not in _FLOATS:
        ctx.fail(f"{dt.name} is not supported: LiteRT's random ops draw float32 (cast to float16 / float64 after)")
    return dt


def _draw(ctx: LowerCtx, kind: str, shape: Value, out_shape) -> Value:
    """float32 ``kind`` (RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL) of ``shape`` with the op's seeds.

    RANDOM_STANDARD_NORMAL fills its output in pairs (Box-Muller) and writes one float past an odd-sized output
    (random_ops.cc: ``buffer[current_size + i + 1]``): an odd or unknown count is drawn as the next even count,
    flat, and sliced and reshaped to ``shape``."""
    n = None if out_shape is None or any(d is None for d in out_shape) else int(np.prod(out_shape, dtype=np.int64))
    if kind == "RANDOM_UNIFORM" or (n is not None and n % 2 == 0):
        return ctx.emit(kind, [shape], _seeds(ctx), dtype=_F32, shape=out_shape)
    if n is not None:
        flat = ctx.emit(kind, [ctx.i32([n + 1])], _seeds(ctx), dtype=_F32, shape=(n + 1,))
        count = ctx.i32([n])
    else:
        total = ctx.emit("REDUCE_PROD", [shape, ctx.i32([0])], {"keep_dims": True}, dtype=_I32, shape=(1,))
        even = ctx.emit("ADD", [total, ctx.emit("FLOOR_MOD", [total, ctx.i32(2)], dtype=_I32, shape=(1,))], _NONE,
                        dtype=_I32, shape=(1,))
        flat = ctx.emit(kind, [even], _seeds(ctx), dtype=_F32, shape=(None,))
        count = total
    part = ctx.emit("SLICE", [flat, ctx.i32([0]), count], dtype=_F32, shape=(n,))
    return ctx.emit("RESHAPE", [part, shape], dtype=_F32, shape=out_shape)


def _as(ctx: LowerCtx, v: Value, dtype) -> Value:
    out = ctx.cast(v, dtype)
    out.shape = ctx.out(0).shape
    return out


@lowering("RandomUniform")
def lower_random_uniform(ctx):
    # uniform in [0, 1), float32 (float16 / float64 cast from it); seeds: the module docstring
    dt = _float_dtype(ctx)
    return [_as(ctx, _draw(ctx, "RANDOM_UNIFORM", _shape_input(ctx), ctx.out(0).shape), dt)]


@lowering("RandomStandardNormal")
def lower_random_standard_normal(ctx):
    # N(0, 1), float32 (float16 / float64 cast from it); tf.random.normal's mean and stddev are the Mul / Add
    # after it; seeds: the module docstring
    dt = _float_dtype(ctx)
    return [_as(ctx, _draw(ctx, "RANDOM_STANDARD_NORMAL", _shape_input(ctx), ctx.out(0).shape), dt)]


@lowering("Multinomial")
def lower_multinomial(ctx):
    # LiteRT's MULTINOMIAL: float32 logits [batch, classes] (other dtypes cast), an int32 scalar count, int32 or
    # int64 class indices; non-finite logits have probability 0 there (a -inf logit as in TF); seeds: the module
    # docstring
    logits, count = ctx.input(0), ctx.input(1)
    if logits.shape is not None and len(logits.shape) != 2:
        ctx.fail("logits must be 2-D [batch, classes]")
    out_dt = np.dtype(ctx.out(0).dtype)
    if out_dt not in (_I32, _I64):
        ctx.fail(f"output_dtype {out_dt.name} is not supported: MULTINOMIAL writes int32 or int64")
    count = ctx.const(np.asarray(count.const, np.int32).reshape(())) if count.is_const else ctx.cast(count, np.int32)
    return [ctx.emit("MULTINOMIAL", [ctx.cast(logits, np.float32), count], _seeds(ctx), dtype=out_dt)]


@lowering("RandomUniformInt")
def lower_random_uniform_int(ctx):
    # uniform integers in [minval, maxval) (the official converter refuses RandomUniformInt). RANDOM_UNIFORM's
    # floats are k / 2^23 with k uniform in [0, 2^23) (Uint32ToFloat keeps 23 random bits), so k = u * 2^23 is
    # exact; two draws make k1 * 2^23 + k2, 46 uniform bits in int64, and minval + that mod (maxval - minval) is
    # the value (TF: minval + 32 or 64 random bits mod the range); minval and maxval must be constants
    lo, hi = (int(np.asarray(ctx.const_input(i, name)).reshape(())) for i, name in ((1, "minval"), (2, "maxval")))
    if hi <= lo:
        ctx.fail(f"maxval ({hi}) must be greater than minval ({lo})")
    if hi - lo > _MAX_INT_RANGE:
        ctx.fail(f"a range of {hi - lo} values is more than 2^32: 46 random bits would not make them uniform")
    out = ctx.out(0)
    shape = _shape_input(ctx)
    both_shape = None if out.shape is None else (2, *out.shape)
    if shape.is_const:
        both = ctx.i32(np.concatenate([[2], shape.const]))
    else:
        both = ctx.emit("CONCATENATION", [ctx.i32([2]), shape], {"axis": 0, "fused_activation_function": "NONE"},
                        dtype=_I32, shape=(None,))
    u = ctx.emit("MUL", [_draw(ctx, "RANDOM_UNIFORM", both, both_shape), ctx.const(np.float32(2**23))], _NONE,
                 dtype=_F32, shape=both_shape)
    # UNPACK takes no int64 (unpack.cc): the floats are split, then cast
    k1, k2 = (ctx.emit("CAST", [part], dtype=_I64, shape=out.shape)
              for part in ctx.emit("UNPACK", [u], {"num": 2, "axis": 0}, out_specs=[(_F32, out.shape)] * 2))
    bits = ctx.emit("ADD", [ctx.emit("MUL", [k1, ctx.const(np.int64(2**23))], _NONE, dtype=_I64, shape=out.shape),
                            k2], _NONE, dtype=_I64, shape=out.shape)
    value = ctx.emit("FLOOR_MOD", [bits, ctx.const(np.int64(hi - lo))], dtype=_I64, shape=out.shape)
    value = ctx.emit("ADD", [value, ctx.const(np.int64(lo))], _NONE, dtype=_I64, shape=out.shape)
    return [_as(ctx, value, out.dtype)]


@lowering("TruncatedNormal")
def lower_truncated_normal(ctx):
    # N(0, 1) restricted to (-2, 2), as TF's kernel (which redraws a value with |x| >= 2): 8 normals per value,
    # the first inside (-2, 2) is taken (SELECT_V2 from the last back); all 8 outside (2e-11 per value) gives
    # the last clipped to [-2, 2] (the official converter refuses TruncatedNormal)
    dt = _float_dtype(ctx)
    out = ctx.out(0)
    shape = _shape_input(ctx)
    k = _TRUNCATED_DRAWS
    many_shape = None if out.shape is None else (k, *out.shape)
    if shape.is_const:
        many = ctx.i32(np.concatenate([[k], shape.const]))
    else:
        many = ctx.emit("CONCATENATION", [ctx.i32([k]), shape], {"axis": 0, "fused_activation_function": "NONE"},
                        dtype=_I32, shape=(None,))
    draws = ctx.emit("UNPACK", [_draw(ctx, "RANDOM_STANDARD_NORMAL", many, many_shape)], {"num": k, "axis": 0},
                     out_specs=[(_F32, out.shape)] * k)
    two = ctx.const(np.float32(2.0))
    value = ctx.emit("MAXIMUM", [ctx.emit("MINIMUM", [draws[-1], two], dtype=_F32, shape=out.shape),
                                 ctx.const(np.float32(-2.0))], dtype=_F32, shape=out.shape)
    for x in reversed(draws[:-1]):
        inside = ctx.emit("LESS", [ctx.emit("ABS", [x], dtype=_F32, shape=out.shape), two], dtype=np.dtype(np.bool_),
                          shape=out.shape)
        value = ctx.emit("SELECT_V2", [inside, x, value], dtype=_F32, shape=out.shape)
    return [_as(ctx, value, dt)]
