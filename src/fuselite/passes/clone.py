"""Copy a function body into another function (used by inlining and specialisation)."""

from __future__ import annotations

from fuselite.ir import Function, Value


def clone_body(dst: Function, src: Function, args: list[Value], prefix: str = "") -> list[Value]:
    """Append a copy of ``src``'s ops to ``dst`` with ``args`` bound to its inputs.

    Returns the values in ``dst`` that correspond to ``src.outputs``.
    """
    env: dict[int, Value] = {v.uid: a for v, a in zip(src.inputs, args)}
    for op in src.ops:
        ins = [None if v is None else env.get(v.uid, v) for v in op.inputs]
        outs = [(o.dtype, o.shape) for o in op.outputs]
        new = dst.add_op(op.type, ins, outs, dict(op.attrs), name=prefix + op.name, location=op.location)
        for o, n in zip(op.outputs, new.outputs):
            n.meta = dict(o.meta)
            env[o.uid] = n
    return [env.get(v.uid, v) for v in src.outputs]


def copy_function(src: Function, name: str) -> Function:
    """A fresh copy of ``src`` named ``name`` (new input and output values)."""
    fn = Function(name)
    fn.attrs = dict(src.attrs)
    args = [fn.add_input(v.name, v.dtype, v.shape) for v in src.inputs]
    for a, v in zip(args, src.inputs):
        a.meta = dict(v.meta)
    fn.outputs = clone_body(fn, src, args)
    fn.input_names, fn.output_names = list(src.input_names), list(src.output_names)
    return fn
