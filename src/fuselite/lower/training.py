"""On-device training: the optimizer ops of a train signature and what it needs of its resource variables.

Keras 3 optimizers (and tf-keras' current ones) update their variables with plain math and ``assign`` /
``assign_add`` / ``assign_sub``, which ``lower/variables.py`` lowers. ``tf.compat.v1.train`` optimizers and
tf-keras' ``optimizers.legacy`` emit one fused TF kernel per variable instead, a ``ResourceApply*`` op that
reads and writes the variable and its slots in place. Each rule here reads them (``READ_VARIABLE``), computes
TF's update with builtins, term by term in the order of the CPU functor (``tensorflow/core/kernels/
training_ops.cc``), and assigns the results back (``ASSIGN_VARIABLE``):

=================================  ===============================================================================
``ResourceApplyGradientDescent``   ``var -= grad * alpha``
``ResourceApplyMomentum``          ``accum = accum * momentum + grad``; ``var -= accum * lr``, or with
                                   ``use_nesterov`` ``var -= grad * lr + accum * momentum * lr``
``ResourceApplyKerasMomentum``     ``accum = accum * momentum - grad * lr``; ``var += accum``, or with
                                   ``use_nesterov`` ``var += accum * momentum - grad * lr``
``ResourceApplyAdam``              ``alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)``;
                                   ``m += (grad - m) * (1 - beta1)``; ``v += (grad² - v) * (1 - beta2)``;
                                   ``var -= m * alpha / (sqrt(v) + epsilon)``, or with ``use_nesterov``
                                   ``var -= (grad * (1 - beta1) + beta1 * m) * alpha / (sqrt(v) + epsilon)``
``ResourceApplyAdagrad``           ``accum += grad²`` (if ``update_slots``); ``var -= grad * lr * rsqrt(accum)``
``ResourceApplyAdagradV2``         ``accum += grad²`` (if ``update_slots``); ``var -= grad * lr / (sqrt(accum) +
                                   epsilon)``
``ResourceApplyRMSProp``           ``ms += (grad² - ms) * (1 - rho)``; ``mom = mom * momentum + grad * lr /
                                   sqrt(ms + epsilon)``; ``var -= mom``
=================================  ===============================================================================

``use_locking`` (a mutex around the update for concurrent steps) has nothing to lock in one interpreter and
changes no number. Only float32 variables convert (``T``; another is refused). The sparse forms
(``ResourceSparseApply*``, what those optimizers do for an Embedding's ``IndexedSlices`` gradient) are not
lowered: the conversion names them (``passes/variables.py``). Keras 3 optimizers update an Embedding's table
with ``scatter_sub`` or densely, tf.compat.v1's SGD with ``scatter_add``: ``ResourceScatterAdd`` /
``ResourceScatterSub`` are lowered here too (``ResourceScatterUpdate`` is not: TF leaves the winner among
duplicate indices unspecified, and the conversion names it).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import lowering

_PIN = {"_pinned": True}
_NONE = {"fused_activation_function": "NONE"}


def variable_shape(ctx, handle) -> tuple[int, ...]:
    """The shape of the resource variable behind ``handle`` (its VarHandleOp's ``shape``: the value at
    conversion time, passes/variables.py)."""
    op = handle.producer
    shape = None if op is None else op.attrs.get("_shape", op.attrs.get("shape"))
    if shape is None:
        ctx.fail("takes a resource that is not one of the program's variables")
    return tuple(int(d) for d in shape)


@lowering("ResourceScatterAdd", "ResourceScatterSub")
def lower_resource_scatter_add_sub(ctx):
    """``v.scatter_add(IndexedSlices)`` / ``scatter_sub`` (an Embedding's sparse update): rows ``indices`` of the
    variable gain / lose ``updates``, duplicates accumulating (TF adds them one by one; SCATTER_ND sums them into
    zeros first, then one ADD / SUB: the same up to float rounding). READ_VARIABLE, SCATTER_ND, ADD / SUB,
    ASSIGN_VARIABLE. SCATTER_ND takes int32 indices (scatter_nd.cc): int64 ones are cast. An index out of range
    is an error on both sides (scatter_nd.cc returns kTfLiteError)."""
    handle, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    shape = variable_shape(ctx, handle)
    if indices.shape is None or updates.shape is None or not indices.static_shape or not updates.static_shape:
        ctx.fail("needs static shapes of indices and updates")
    if np.dtype(updates.dtype) not in (np.float32, np.int32, np.int64):
        ctx.fail(f"updates of dtype {np.dtype(updates.dtype).name}: SCATTER_ND takes float32, int32 and int64")
    if tuple(updates.shape) != tuple(indices.shape) + shape[1:]:
        ctx.fail(f"updates of shape {list(updates.shape)} for indices of shape {list(indices.shape)} into a "
                 f"variable of shape {list(shape)}: only updates.shape == indices.shape + variable.shape[1:] "
                 "converts (not a broadcast scalar)")
    spec = [(updates.dtype, shape)]
    if np.dtype(indices.dtype) != np.int32:  # the op has no outputs: every emit names its own out_specs
        indices = ctx.emit("CAST", [indices], {}, out_specs=[(np.int32, indices.shape)])
    where_shape = (*indices.shape, 1)
    where = ctx.emit("RESHAPE", [indices, ctx.i32(where_shape)], {},
                     out_specs=[(np.int32, where_shape)])
    delta = ctx.emit("SCATTER_ND", [where, updates, ctx.i32(shape)], {}, out_specs=spec)
    old = ctx.emit("READ_VARIABLE", [handle], dict(_PIN), out_specs=spec)
    kind = "ADD" if ctx.op.kind == "ResourceScatterAdd" else "SUB"
    new = ctx.emit(kind, [old, delta], {"fused_activation_function": "NONE", **_PIN}, out_specs=spec)
    ctx.emit("ASSIGN_VARIABLE", [handle, new], dict(_PIN), out_specs=[])
    return []


class _Update:
    """Builds one optimizer update: reads, elementwise math on the variable's shape, assigns.

    The TF op has no outputs, so every emitted op names its own ``out_specs``; scalars that are constants
    (learning rates, betas: frozen or literal) are combined in NumPy, in float32, as TF's kernel does on its
    scalars.
    """

    def __init__(self, ctx, var: Value):
        dtype = ctx.attr("T")
        if dtype is None or np.dtype(dtype) != np.float32:
            ctx.fail(f"updates a variable of dtype {np.dtype(dtype).name if dtype is not None else '?'}; "
                     "only float32 variables convert")
        self.ctx = ctx
        self.spec = (np.float32, variable_shape(ctx, var))

    def read(self, handle: Value) -> Value:
        return self.ctx.emit("READ_VARIABLE", [handle], dict(_PIN), out_specs=[self.spec])

    def assign(self, handle: Value, value: Value) -> None:
        self.ctx.emit("ASSIGN_VARIABLE", [handle, value], dict(_PIN), out_specs=[])

    def scalar(self, i: int, what: str) -> Value:
        v = self.ctx.input(i)
        if v.shape is not None and len(v.shape) != 0:
            self.ctx.fail(f"{what} of shape {list(v.shape)}: TF takes a scalar")
        return v

    def op(self, kind: str, a: Value, b: Value | None = None) -> Value:
        """``kind`` of ``a`` (and ``b``): constant scalars fold here, the rest is a builtin."""
        if a.is_const and (b is None or b.is_const):
            x, y = np.float32(a.const), None if b is None else np.float32(b.const)
            value = {"ADD": lambda: x + y, "SUB": lambda: x - y, "MUL": lambda: x * y, "DIV": lambda: x / y,
                     "SQRT": lambda: np.sqrt(x), "RSQRT": lambda: np.float32(1) / np.sqrt(x),
                     "SQUARE": lambda: x * x}[kind]()
            return self.ctx.const(np.asarray(value, np.float32))
        scalar = all(v is None or (v.shape is not None and len(v.shape) == 0) for v in (a, b))
        spec = [(np.float32, ())] if scalar else [self.spec]
        inputs = [a] if b is None else [a, b]
        options = dict(_NONE) if kind in ("ADD", "SUB", "MUL", "DIV") else {}
        return self.ctx.emit(kind, inputs, options, out_specs=spec)

    def number(self, value: float) -> Value:
        return self.ctx.const(np.asarray(value, np.float32))


@lowering("ResourceApplyGradientDescent")
def lower_apply_gradient_descent(ctx):
    u = _Update(ctx, ctx.input(0))
    var, alpha, delta = ctx.input(0), u.scalar(1, "alpha"), ctx.input(2)
    u.assign(var, u.op("SUB", u.read(var), u.op("MUL", delta, alpha)))
    return []


@lowering("ResourceApplyMomentum")
def lower_apply_momentum(ctx):
    u = _Update(ctx, ctx.input(0))
    var, accum, lr, grad, momentum = (ctx.input(0), ctx.input(1), u.scalar(2, "lr"), ctx.input(3),
                                      u.scalar(4, "momentum"))
    w, a = u.read(var), u.read(accum)
    a = u.op("ADD", u.op("MUL", a, momentum), grad)
    if ctx.attr("use_nesterov", False):
        step = u.op("ADD", u.op("MUL", grad, lr), u.op("MUL", u.op("MUL", a, momentum), lr))
    else:
        step = u.op("MUL", a, lr)
    u.assign(accum, a)
    u.assign(var, u.op("SUB", w, step))
    return []


@lowering("ResourceApplyKerasMomentum")
def lower_apply_keras_momentum(ctx):
    u = _Update(ctx, ctx.input(0))
    var, accum, lr, grad, momentum = (ctx.input(0), ctx.input(1), u.scalar(2, "lr"), ctx.input(3),
                                      u.scalar(4, "momentum"))
    w, a = u.read(var), u.read(accum)
    a = u.op("SUB", u.op("MUL", a, momentum), u.op("MUL", grad, lr))
    step = u.op("SUB", u.op("MUL", a, momentum), u.op("MUL", grad, lr)) if ctx.attr("use_nesterov", False) else a
    u.assign(accum, a)
    u.assign(var, u.op("ADD", w, step))
    return []


@lowering("ResourceApplyAdam")
def lower_apply_adam(ctx):
    u = _Update(ctx, ctx.input(0))
    var, m_var, v_var, grad = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(9)
    beta1_power, beta2_power, lr, beta1, beta2, epsilon = (
        u.scalar(i, what) for i, what in enumerate(("beta1_power", "beta2_power", "lr", "beta1", "beta2",
                                                    "epsilon"), start=3))
    one = u.number(1.0)
    alpha = u.op("DIV", u.op("MUL", lr, u.op("SQRT", u.op("SUB", one, beta2_power))),
                 u.op("SUB", one, beta1_power))
    w, m, v = u.read(var), u.read(m_var), u.read(v_var)
    one_minus_beta1 = u.op("SUB", one, beta1)
    m = u.op("ADD", m, u.op("MUL", u.op("SUB", grad, m), one_minus_beta1))
    v = u.op("ADD", v, u.op("MUL", u.op("SUB", u.op("SQUARE", grad), v), u.op("SUB", one, beta2)))
    if ctx.attr("use_nesterov", False):
        top = u.op("MUL", u.op("ADD", u.op("MUL", grad, one_minus_beta1), u.op("MUL", m, beta1)), alpha)
    else:
        top = u.op("MUL", m, alpha)
    step = u.op("DIV", top, u.op("ADD", u.op("SQRT", v), epsilon))
    u.assign(m_var, m)
    u.assign(v_var, v)
    u.assign(var, u.op("SUB", w, step))
    return []


@lowering("ResourceApplyAdagrad", "ResourceApplyAdagradV2")
def lower_apply_adagrad(ctx):
    u = _Update(ctx, ctx.input(0))
    v2 = ctx.op.kind == "ResourceApplyAdagradV2"
    var, accum, lr, grad = ctx.input(0), ctx.input(1), u.scalar(2, "lr"), ctx.input(4 if v2 else 3)
    w, a = u.read(var), u.read(accum)
    if ctx.attr("update_slots", True):
        a = u.op("ADD", a, u.op("SQUARE", grad))
        u.assign(accum, a)
    if v2:
        step = u.op("DIV", u.op("MUL", grad, lr), u.op("ADD", u.op("SQRT", a), u.scalar(3, "epsilon")))
    else:
        step = u.op("MUL", u.op("MUL", grad, lr), u.op("RSQRT", a))
    u.assign(var, u.op("SUB", w, step))
    return []


@lowering("ResourceApplyRMSProp")
def lower_apply_rms_prop(ctx):
    u = _Update(ctx, ctx.input(0))
    var, ms_var, mom_var, grad = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(7)
    lr, rho, momentum, epsilon = (u.scalar(i, what) for i, what in enumerate(("lr", "rho", "momentum", "epsilon"),
                                                                              start=3))
    w, ms, mom = u.read(var), u.read(ms_var), u.read(mom_var)
    ms = u.op("ADD", ms, u.op("MUL", u.op("SUB", u.op("SQUARE", grad), ms), u.op("SUB", u.number(1.0), rho)))
    mom = u.op("ADD", u.op("MUL", mom, momentum), u.op("DIV", u.op("MUL", grad, lr), u.op("SQRT", u.op("ADD", ms,
                                                                                                         epsilon))))
    u.assign(ms_var, ms)
    u.assign(mom_var, mom)
    u.assign(var, u.op("SUB", w, mom))
    return []
