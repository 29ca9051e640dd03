"""TF-level pattern rewrites that recognise activations spelled as several ops.

* GELU (exact): ``0.5 * x * erfc(-x / sqrt(2))`` -> ``Gelu(approximate=False)``
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Op


def _scalar(v, target: float, tol: float = 1e-6) -> bool:
    return v is not None and v.is_const and v.const.size == 1 and abs(float(v.const.reshape(())) - target) < tol


def _operands(op: Op, kind: str):
    """For a commutative binary op, yield (a, b) in both orders."""
    if op is None or op.kind != kind or len(op.inputs) != 2:
        return []
    a, b = op.inputs
    return [(a, b), (b, a)]


def _match_gelu_erfc(fn: Function, users, erfc: Op):
    # erfc(x * -1/sqrt2) or erfc(neg(x) * 1/sqrt2)
    inner = erfc.inputs[0].producer
    x = None
    for a, b in _operands(inner, "Mul"):
        if a.producer is not None and a.producer.kind == "Neg" and _scalar(b, 1 / np.sqrt(2)):
            x = a.producer.inputs[0]
        elif _scalar(b, -1 / np.sqrt(2)):
            x = a
    if x is None:
        return None
    for final in users.get(erfc.outputs[0].uid, []):
        for a, b in _operands(final, "Mul"):
            if b is not erfc.outputs[0]:
                continue
            for p, q in _operands(a.producer, "Mul"):
                if p is x and _scalar(q, 0.5):
                    return x, final
    return None


def rewrite_tf_patterns(module: Module) -> int:
    count = 0
    for fn in module.functions.values():
        users = fn.users()
        for op in list(fn.ops):
            if op.type != "tf.Erfc" or op not in fn.ops:
                continue
            m = _match_gelu_erfc(fn, users, op)
            if m is None:
                continue
            x, final = m
            gelu = fn.make_op("tf.Gelu", [x], [(final.outputs[0].dtype, final.outputs[0].shape)],
                              {"approximate": False}, name=final.name, location=final.location)
            fn.ops.insert(fn.ops.index(final), gelu)
            fn.replace_uses(final.outputs[0], gelu.outputs[0])
            count += 1
            users = fn.users()
    return count
