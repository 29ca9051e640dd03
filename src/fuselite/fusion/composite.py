"""What a fusion rule sees: the composite's arguments, results and attributes.

A :class:`Composite` builds the replacement body of one composite function with
TFLite ops. Arguments that are constants at every call site (frozen variables or
constants) have ``arg.const`` set, so rules can check and transform weights; such
transforms are done in NumPy here and end up as constants in the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Value
from fuselite.ir.core import Shaped


def is_zeros(v: Value | None) -> bool:
    """``v`` is zeros: a constant, or a TensorFlow ``Fill`` of 0 / ``ZerosLike`` (zeros whose shape is read at run
    time, as a Keras layer's initial state of an unknown batch)."""
    if v is None:
        return False
    if v.is_const:
        return not np.asarray(v.const).any()
    p = v.producer
    if p is None or p.dialect != "tf":
        return False
    return p.kind == "ZerosLike" or p.kind == "Fill" and p.inputs[1].is_const and not np.asarray(p.inputs[1].const).any()


class FusionDeclined(Exception):
    """Raised by :meth:`Composite.decline`; the composite is converted from its body."""


class CompositeRefused(ConversionError):
    """Raised by :meth:`Composite.refuse`: the composite cannot be fused and its body is no stand-in for it
    (a placeholder, as in exported detectors), so the conversion stops, whatever ``strict_fusion`` says."""


@dataclass
class Arg(Shaped):
    """One argument of the composite."""

    index: int
    name: str
    dtype: Any
    shape: tuple | None
    const: np.ndarray | None
    value: Value  # what to use as an operand (a constant value when ``const`` is set)
    variable: bool = False  # read from a (non-frozen) variable at every call site: a stateful layer's state
    zeros: bool = False  # zeros at every call site: a constant, or a FILL of 0 (a zero state of a run-time batch)


@dataclass
class Result:
    """One result of the composite, as the original body computes it.

    ``placeholder``: the body computes it from none of the arguments (a constant, as the stand-in bodies of
    exported detectors return ``tf.constant(0.0)``), so its shape says nothing about what the composite computes:
    the fused op's shape is taken instead (callers' shapes follow). ``used``: some call site reads it (an op takes
    it, or its function returns it); a rule must still compute an unused one (it is the composite's result), but
    may read what the caller wants from it (a tf-keras LSTM's ``outputs``: read only where the layer returns its
    sequence)."""

    index: int
    dtype: Any
    shape: tuple | None
    placeholder: bool = False
    used: bool = True


class Composite:
    """A composite function being fused. Rules read ``args``/``results``/``attrs`` and emit ops."""

    def __init__(self, fn: Function, interface: str, attrs: dict, args: list[Arg], results: list[Result]):
        self.function = fn
        self.interface = interface
        self.attrs = attrs
        self.args = args
        self.results = results
        self.dynamic_batch = True  # a state may take its batch from an input at run time (not for TFLM)
        # what the conversion asks of the rule families that read it, by key (the recurrent package: "rnn_forms",
        # each family's form, rnn/forms/policy.py); set by prepare_composites, empty: each family's default
        self.settings: dict = {}
        self.form: str | None = None  # the form a rule chose (the report's record says it)
        self.batch_size: int | None = None  # the conversion's fixed batch size, if any
        self.ops: list = []
        self.taken_names: set[str] = set()  # the module's function names (set by prepare_composites)
        self.subgraphs: list[Function] = []  # functions the rule made (loop bodies), added to the module with it
        self.check_draws: dict[int, Any] = {}  # argument index -> draw(rng, shape) for the fusion check

    def draw_for_check(self, index: int, draw) -> None:
        """Declare how the fusion check (:mod:`fuselite.fusion.check`) draws argument ``index``: the body's valid
        domain, where plain random values are inputs the body was never meant for (boxes whose corners are in no
        particular order). ``draw(rng, shape)`` returns a NumPy array of that shape (``rng`` is a NumPy
        ``Generator``); a constant argument keeps its value whatever is declared."""
        self.check_draws[index] = draw

    # -- checks ------------------------------------------------------------------
    def decline(self, reason: str):
        """Give up on fusing; ``reason`` goes into the report (or the error in strict mode)."""
        raise FusionDeclined(reason)

    def refuse(self, reason: str):
        """Stop the conversion: this composite's body must not be inlined in its place (see
        :class:`CompositeRefused`); ``reason`` names what is wrong with it."""
        raise CompositeRefused(f"composite '{self.interface}': {reason}")

    def expect_args(self, n: int) -> None:
        if len(self.args) != n:
            self.decline(f"expected {n} argument(s), got {len(self.args)}")

    def expect_results(self, n: int) -> None:
        if len(self.results) != n:
            self.decline(f"expected {n} result(s), got {len(self.results)}")

    # -- building ------------------------------------------------------------------
    def const(self, array, dtype=None, name: str = "const") -> Value:
        """A constant operand."""
        return self.function.const(np.asarray(array, dtype=dtype), f"{self.function.name}/{name}")

    def _operand(self, x) -> Value | None:
        if x is None or isinstance(x, Value):
            return x
        if isinstance(x, Arg):
            return x.value
        return self.const(x)

    def op(self, kind: str, inputs: Sequence, options: dict | None = None, *,
           like: Result | None = None, outs: Sequence[tuple] | None = None,
           dtype=None, shape=None) -> Value | list[Value]:
        """Emit the LiteRT builtin ``kind`` (e.g. ``"EMBEDDING_LOOKUP"``).

        ``inputs`` are Args, Values, NumPy arrays (become constants) or None (absent
        optional input). The output is described by ``like`` (a Result), by
        ``dtype``/``shape``, or by ``outs=[(dtype, shape), ...]`` for several outputs.
        """
        if outs is None:
            if like is not None:
                outs = [(like.dtype, like.shape)]
            elif dtype is not None:
                outs = [(np.dtype(dtype), shape)]
            else:
                raise ConversionError(f"fusion rule for '{self.interface}': op {kind} needs like=, dtype= or outs=")
        op = self.function.make_op("tfl." + kind, [self._operand(x) for x in inputs], list(outs),
                                   dict(options or {}), name=f"{self.function.name}/{kind.lower()}")
        self.ops.append(op)
        return op.outputs[0] if len(op.outputs) == 1 else op.outputs

    def subgraph(self, suffix: str) -> Composite:
        """A builder for a new function (a ``WHILE``'s body or condition), named after this composite with
        ``suffix`` and unique in the module: emit its ops with the builder's :meth:`op`, then set its
        ``function.inputs``/``outputs`` and ``function.ops = builder.ops``. Refer to it as
        ``"@" + builder.function.name`` in the options of the op that calls it. It joins the module only if the
        fusion is kept."""
        base = f"{self.function.name}/{suffix}"
        taken = self.taken_names | {f.name for f in self.subgraphs}
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        fn = Function(name)
        self.subgraphs.append(fn)
        return Composite(fn, self.interface, {}, [], [])

    def custom_op(self, code: str, inputs: Sequence, options: dict | None = None, *,
                  outs: Sequence[tuple] | None = None) -> Value | list[Value]:
        """Emit a CUSTOM op named ``code``; ``options`` are written as a flexbuffer map."""
        from fuselite.tflite.flexbuffer import encode_options

        outs = outs or [(r.dtype, r.shape) for r in self.results]
        return self.op("CUSTOM", inputs, {"custom_code": code, "custom_options": encode_options(options or {})},
                       outs=outs)
