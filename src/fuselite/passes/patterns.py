"""TF-level pattern rewrites that recognise activations spelled as several ops.

* GELU (exact): ``0.5 * x * erfc(-x / sqrt(2))`` -> ``Gelu(approximate=False)``
* GELU (erf form): ``0.5 * x * (1 + erf(x / sqrt(2)))`` -> ``Gelu(approximate=False)``
* GELU (tanh form): ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``
  -> ``Gelu(approximate=True)`` (the cube as ``Pow(x, 3)`` or a chain of ``Mul``)
* hard-swish: ``x * relu6(x + 3) / 6`` (or ``* (1/6)``) -> ``HardSwish`` (a fuselite
  pseudo-op lowered to the HARD_SWISH builtin)

* the real or imaginary part of a Fourier transform (``FFT`` / ``FFT2D``) of a complex tensor made of real parts
  (``Complex(re, im)``, or a float cast to complex; FNet mixes its tokens so) -> ``FuseliteDFT`` (a pseudo-op
  lowered to real matrix products: LiteRT holds complex tensors for its RFFT2D alone)

Products are matched up to association and commutation of ``Mul`` (and division by a
scalar constant), so ``(0.5 * x) * g``, ``x * (g * 0.5)`` and ``x * g / 2`` all match.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module
from fuselite.passes.rewrite import TF, Const, Match, OneOf, Pattern, RewriteCtx, Var, rewrite, rule


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


class Product(Pattern):
    """``coef * f1 * f2 * ...`` up to association and commutation of ``Mul`` and division by
    constants (see :func:`_monomial`): ``Product(0.5, x, y)`` matches ``(0.5 * x) * y``,
    ``x * (y * 0.5)`` and ``x * y / 2``; ``Product(0.044715, x, x, x)`` a cube.

    Each factor is a named :class:`Var` captured before, or the op below on the way up from
    the rule's anchor; then the candidates are the ``Mul`` / ``RealDiv`` / ``Div`` ops up to
    three levels of users above it.
    """

    _TYPES = frozenset({"tf.Mul", "tf.RealDiv", "tf.Div"})

    def __init__(self, coef: float, *factors: Pattern, name: str | None = None, tol: float = 1e-6):
        self.coef, self.factors, self.name, self.tol = coef, factors, name, tol

    def children(self):
        return self.factors

    def _is_product(self, v, m: Match, fixed) -> bool:
        atoms, powers = [], []
        for f in self.factors:
            a = fixed[1] if fixed is not None and f is fixed[0] else m[f.name]
            i = next((i for i, b in enumerate(atoms) if b is a), None)
            if i is None:
                atoms.append(a)
                powers.append(1)
            else:
                powers[i] += 1
        found = _monomial(v, atoms)
        return found is not None and abs(found[0] - self.coef) < self.tol and found[1] == powers

    def match(self, v, m, ctx) -> bool:
        return self._is_product(v, m, None) and m.bind(self.name, v.producer)

    def match_op(self, op, m, ctx, fixed=None) -> bool:
        return op.type in self._TYPES and self._is_product(op.outputs[0], m, fixed) and m.bind(self.name, op)

    def consumers(self, v, ctx):
        frontier = [v]
        for _ in range(3):
            above = []
            for u in frontier:
                for op in ctx.users_of(u):
                    if op.type in self._TYPES:
                        yield op
                        above.append(op.outputs[0])
            frontier = above

    def __repr__(self) -> str:
        return f"Product({self.coef}, {', '.join(map(repr, self.factors))})"


def _is_float32(v) -> bool:
    return not isinstance(v.dtype, str) and np.dtype(v.dtype) == np.float32


X = Var("x")
_INV_SQRT2 = 1 / np.sqrt(2)


def _one_plus(p: Pattern) -> Pattern:
    """``p + 1`` (AddV2 or Add, either order), captured as ``add``."""
    return TF["AddV2", "Add"](p, Const(value=1.0), commutative=True, name="add")


def _replace_final(ctx: RewriteCtx, m: Match, new_type: str, **attrs) -> None:
    """A ``new_type(x)`` op computes what ``m.final`` did (which is left for DCE)."""
    final = m.final
    new = ctx.fn.make_op(new_type, [m.x], [(final.outputs[0].dtype, final.outputs[0].shape)], attrs,
                         name=final.name, location=final.location)
    ctx.insert_before(final, new)
    ctx.fn.replace_uses(final.outputs[0], new.outputs[0])


ERFC = TF.Erfc(OneOf(TF.Mul(TF.Neg(X), Const(value=_INV_SQRT2), commutative=True),
                     TF.Mul(X, Const(value=-_INV_SQRT2), commutative=True)), name="erfc")


@rule("tf_patterns", TF.Mul(TF.Mul(X, Const(value=0.5), commutative=True), ERFC, commutative=True, name="final"),
      anchor="erfc")
def gelu_erfc(ctx: RewriteCtx, m: Match) -> None:
    """``0.5 * x * erfc(-x / sqrt(2))`` -> ``Gelu(approximate=False)``."""
    _replace_final(ctx, m, "tf.Gelu", approximate=False)


ERF = TF.Erf(OneOf(TF.Mul(X, Const(value=_INV_SQRT2), commutative=True), TF.RealDiv(X, Const(value=np.sqrt(2)))),
             name="erf")


@rule("tf_patterns", Product(0.5, X, _one_plus(ERF), name="final"), anchor="erf",
      condition=lambda ctx, m: _is_float32(m.x))
def gelu_erf(ctx: RewriteCtx, m: Match) -> None:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` -> ``Gelu(approximate=False)``."""
    _replace_final(ctx, m, "tf.Gelu", approximate=False)


TANH = TF.Tanh(TF.Mul(TF["AddV2", "Add"](X, Product(0.044715, X, X, X), commutative=True),
                      Const(value=np.sqrt(2 / np.pi), tol=1e-5), commutative=True), name="tanh")


@rule("tf_patterns", Product(0.5, X, _one_plus(TANH), name="final"), anchor="tanh",
      condition=lambda ctx, m: _is_float32(m.x))
def gelu_tanh(ctx: RewriteCtx, m: Match) -> None:
    """``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`` -> ``Gelu(approximate=True)``."""
    _replace_final(ctx, m, "tf.Gelu", approximate=True)


RELU6 = TF.Relu6(TF["AddV2", "Add"](X, Const(value=3.0), commutative=True), name="relu6")


@rule("tf_patterns", Product(1 / 6, X, RELU6, name="final"), anchor="relu6",
      condition=lambda ctx, m: _is_float32(m.x))
def hard_swish(ctx: RewriteCtx, m: Match) -> None:
    """``x * relu6(x + 3) / 6`` -> ``HardSwish`` (a fuselite pseudo-op lowered to HARD_SWISH)."""
    _replace_final(ctx, m, "tf.HardSwish")


FFT = TF["FFT", "FFT2D"](TF.Complex(Var("re"), Var("im")), name="fft")
FFT_OF_REAL = TF["FFT", "FFT2D"](TF.Cast(Var("re"), name="cast"), name="fft")


def _complex_of_floats(v) -> bool:
    return not isinstance(v.dtype, str) and np.dtype(v.dtype) == np.float32


def _zeros(v) -> bool:
    """``v`` is zeros: a constant of zeros, or ``ZerosLike`` (FNet's imaginary part)."""
    if v.is_const:
        return not np.any(v.const)
    return v.producer is not None and v.producer.kind == "ZerosLike"


def _dft(ctx: RewriteCtx, m: Match, im) -> None:
    """``Real`` / ``Imag`` of the transform -> ``FuseliteDFT(re[, im])`` with the part and the number of axes (no
    imaginary input where it is zeros)."""
    if im is not None and _zeros(im):
        im = None
    final = m.final
    inputs = [m.re] + ([im] if im is not None else [])
    new = ctx.fn.make_op("tf.FuseliteDFT", inputs, [(np.dtype(np.float32), final.outputs[0].shape)],
                         {"dims": 2 if m.fft.kind == "FFT2D" else 1, "part": final.kind.lower()}, name=final.name,
                         location=final.location)
    ctx.insert_before(final, new)
    ctx.fn.replace_uses(final.outputs[0], new.outputs[0])


@rule("tf_patterns", TF["Real", "Imag"](FFT, name="final"), anchor="fft",
      condition=lambda ctx, m: _complex_of_floats(m.re) and _complex_of_floats(m.im))
def real_dft(ctx: RewriteCtx, m: Match) -> None:
    """``Real`` / ``Imag`` of ``FFT`` / ``FFT2D`` of ``Complex(re, im)`` -> ``FuseliteDFT(re, im)``."""
    _dft(ctx, m, m.im)


@rule("tf_patterns", TF["Real", "Imag"](FFT_OF_REAL, name="final"), anchor="fft",
      condition=lambda ctx, m: _complex_of_floats(m.re))
def real_dft_of_a_cast(ctx: RewriteCtx, m: Match) -> None:
    """``Real`` / ``Imag`` of ``FFT`` / ``FFT2D`` of a float32 tensor cast to complex -> ``FuseliteDFT(re)``."""
    _dft(ctx, m, None)


def rewrite_tf_patterns(module: Module) -> int:
    """Apply the ``tf_patterns`` rules to every function; returns how many activations were found."""
    return sum(rewrite(fn, "tf_patterns") for fn in module.functions.values())
