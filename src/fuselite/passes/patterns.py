"""TF-level pattern rewrites that recognise activations spelled as several ops.

* GELU (exact): ``0.5 * x * erfc(-x / sqrt(2))`` -> ``Gelu(approximate=False)``
* GELU (erf form): ``0.5 * x * (1 + erf(x / sqrt(2)))`` -> ``Gelu(approximate=False)``
* GELU (tanh form): ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``
  -> ``Gelu(approximate=True)`` (the cube as ``Pow(x, 3)`` or a chain of ``Mul``)
* hard-swish: ``x * relu6(x + 3) / 6`` (or ``* (1/6)``) -> ``HardSwish`` (a fuselite
  pseudo-op lowered to the HARD_SWISH builtin)

Products are matched up to association and commutation of ``Mul`` (and division by a
scalar constant), so ``(0.5 * x) * g``, ``x * (g * 0.5)`` and ``x * g / 2`` all match.
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


def _monomial(v, atoms, depth: int = 8):
    """``v`` as ``coef * prod(atom_i ** p_i)`` through Mul / RealDiv-by-scalar / Pow-by-int ops.

    Returns ``(coef, powers)`` (powers per atom), or None if ``v`` is not such a product.
    Atoms are matched by identity before looking through their producers.
    """
    for i, a in enumerate(atoms):
        if v is a:
            p = [0] * len(atoms)
            p[i] = 1
            return 1.0, p
    if v is None:
        return None
    if v.is_const:
        ok = v.const.size == 1 and v.const.dtype.kind in "fiu"
        return (float(v.const.reshape(())), [0] * len(atoms)) if ok else None
    op = v.producer
    if op is None or depth == 0 or op.kind not in ("Mul", "RealDiv", "Div", "Pow") or len(op.inputs) != 2:
        return None
    a, b = (_monomial(u, atoms, depth - 1) for u in op.inputs)
    if a is None or b is None:
        return None
    if op.kind == "Mul":
        return a[0] * b[0], [p + q for p, q in zip(a[1], b[1], strict=True)]
    if any(b[1]):  # divisor / exponent must be a constant
        return None
    if op.kind == "Pow":
        e = b[0]
        return (a[0] ** int(e), [p * int(e) for p in a[1]]) if e == int(e) and e > 0 else None
    return (a[0] / b[0], a[1]) if b[0] != 0 else None


def _product_of(users, start, atoms, coef: float, powers, tol: float = 1e-6):
    """The op computing ``coef * prod(atoms ** powers)``, found among the Mul/RealDiv users
    of ``start`` (up to three levels above it), or None."""
    frontier = [start]
    for _ in range(3):
        nxt = []
        for v in frontier:
            for op in users.get(v.uid, []):
                if op.kind not in ("Mul", "RealDiv", "Div"):
                    continue
                m = _monomial(op.outputs[0], atoms)
                if m is not None and abs(m[0] - coef) < tol and m[1] == list(powers):
                    return op
                nxt.append(op.outputs[0])
        frontier = nxt
    return None


def _is_float32(v) -> bool:
    return not isinstance(v.dtype, str) and np.dtype(v.dtype) == np.float32


def _match_gelu_erf(fn: Function, users, erf: Op):
    # erf(x / sqrt2) or erf(x * 1/sqrt2); then 0.5 * x * (1 + erf(...))
    inner, x = erf.inputs[0].producer, None
    for a, b in _operands(inner, "Mul"):
        if _scalar(b, 1 / np.sqrt(2)):
            x = a
    if inner is not None and inner.kind == "RealDiv" and _scalar(inner.inputs[1], np.sqrt(2)):
        x = inner.inputs[0]
    if x is None or not _is_float32(x):
        return None
    for add in users.get(erf.outputs[0].uid, []):
        for e, one in _operands(add, "AddV2") + _operands(add, "Add"):
            if e is erf.outputs[0] and _scalar(one, 1.0):
                final = _product_of(users, add.outputs[0], [x, add.outputs[0]], 0.5, [1, 1])
                if final is not None:
                    return x, final
    return None


def _match_gelu_tanh(fn: Function, users, tanh: Op):
    # tanh(sqrt(2/pi) * (x + 0.044715 * x^3)); then 0.5 * x * (1 + tanh(...))
    x = None
    for a, b in _operands(tanh.inputs[0].producer, "Mul"):
        if not _scalar(b, np.sqrt(2 / np.pi), 1e-5) or a.producer is None:
            continue
        for p, q in _operands(a.producer, "AddV2") + _operands(a.producer, "Add"):
            m = _monomial(q, [p])
            if m is not None and abs(m[0] - 0.044715) < 1e-6 and m[1] == [3]:
                x = p
    if x is None or not _is_float32(x):
        return None
    for add in users.get(tanh.outputs[0].uid, []):
        for t, one in _operands(add, "AddV2") + _operands(add, "Add"):
            if t is tanh.outputs[0] and _scalar(one, 1.0):
                final = _product_of(users, add.outputs[0], [x, add.outputs[0]], 0.5, [1, 1])
                if final is not None:
                    return x, final
    return None


def _match_hard_swish(fn: Function, users, relu6: Op):
    # relu6(x + 3); then x * relu6(x + 3) / 6
    x = None
    for a, b in _operands(relu6.inputs[0].producer, "AddV2") + _operands(relu6.inputs[0].producer, "Add"):
        if _scalar(b, 3.0):
            x = a
    if x is None or not _is_float32(x):
        return None
    final = _product_of(users, relu6.outputs[0], [x, relu6.outputs[0]], 1 / 6, [1, 1])
    return None if final is None else (x, final)


# anchor op type -> (matcher, replacement op type, replacement attrs)
_PATTERNS = {
    "tf.Erfc": (_match_gelu_erfc, "tf.Gelu", {"approximate": False}),
    "tf.Erf": (_match_gelu_erf, "tf.Gelu", {"approximate": False}),
    "tf.Tanh": (_match_gelu_tanh, "tf.Gelu", {"approximate": True}),
    "tf.Relu6": (_match_hard_swish, "tf.HardSwish", {}),
}


def rewrite_tf_patterns(module: Module) -> int:
    count = 0
    for fn in module.functions.values():
        users = fn.users()
        for op in list(fn.ops):
            if op.type not in _PATTERNS or op not in fn.ops:
                continue
            matcher, new_type, attrs = _PATTERNS[op.type]
            m = matcher(fn, users, op)
            if m is None:
                continue
            x, final = m
            new = fn.make_op(new_type, [x], [(final.outputs[0].dtype, final.outputs[0].shape)],
                             dict(attrs), name=final.name, location=final.location)
            fn.ops.insert(fn.ops.index(final), new)
            fn.replace_uses(final.outputs[0], new.outputs[0])
            count += 1
            users = fn.users()
    return count
