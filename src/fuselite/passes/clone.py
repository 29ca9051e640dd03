"""Copy a function body into another function (used by inlining and specialisation)."""

from __future__ import annotations

from fuselite.ir import Function, Module, Op, Value


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


def snapshot_module(module: Module) -> Module:
    """An exact copy of ``module`` to rewrite separately: every value keeps its uid and name (tables keyed
    by uid, such as calibrated ranges, apply to both), constants share their arrays (rewrites replace
    constants, they do not change them). Not recursive: any depth of ops is fine."""
    out = Module()
    out.signatures = dict(module.signatures)
    for name, src in module.functions.items():
        out.functions[name] = _snapshot(src)
    return out


def _snapshot(src: Function) -> Function:
    fn = Function(src.name)
    fn.attrs = dict(src.attrs)
    fn.input_names, fn.output_names = list(src.input_names), list(src.output_names)
    fn._names = set(src._names)
    env: dict[int, Value] = {}

    def value(v: Value | None) -> Value | None:
        if v is None:
            return None
        if v.uid not in env:
            env[v.uid] = Value(v.name, v.dtype, v.shape, const=v.const, index=v.index, meta=dict(v.meta),
                               quant=v.quant, uid=v.uid)
        return env[v.uid]

    fn.inputs = [value(v) for v in src.inputs]
    ops = []
    for op in src.ops:
        new = Op(op.type, [value(v) for v in op.inputs], [], dict(op.attrs), op.name, op.location)
        for o in op.outputs:
            n = value(o)
            n.producer = new
            new.outputs.append(n)
        ops.append(new)
    fn.ops = ops
    fn.outputs = [value(v) for v in src.outputs]
    return fn
