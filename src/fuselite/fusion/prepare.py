"""The prepare-composites stage: fuse every composite function a rule accepts.

A *composite* is a function carrying an implements attribute: TF's
``experimental_implements`` (``_implements``, plain string or attributed
``NameAttrList`` form) or Keras' ``api_implements``. The stage runs after calls to
other functions are inlined and variables are frozen (so rules see constant
weights) but before composite calls are inlined. A rule rewrites the function body
once, however many places call it; a declined composite keeps its body and is
converted like any other code.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import ConversionError, NeedsStaticBatch, NeedsStaticLength
from fuselite.fusion.check import Mismatch, check_fusion
from fuselite.fusion.composite import Arg, Composite, CompositeRefused, FusionDeclined, Result, is_zeros
from fuselite.fusion.registry import RuleSet
from fuselite.ir import Function, Module, Value
from fuselite.passes.inline import CALL_OPS
from fuselite.passes.variables import variable_dtype
from fuselite.tflite.flatbuffer import check_op


class FusionError(ConversionError):
    """Strict fusion: a composite was not fused."""


def interface_of(fn: Function) -> str | None:
    """The interface name a function implements, if it is a composite."""
    name = fn.attrs.get("_implements") or fn.attrs.get("api_implements")
    return name if isinstance(name, str) and name else None


def composite_attrs(fn: Function) -> dict:
    return dict(fn.attrs.get("_implements._attrs") or {})


def is_composite(fn: Function) -> bool:
    return interface_of(fn) is not None


def _call_sites(module: Module) -> dict[str, list]:
    sites: dict[str, list] = {}
    for fn in module.functions.values():
        for op in fn.ops:
            if op.type in CALL_OPS:
                sites.setdefault(op.attrs["f"], []).append((fn, op))
    return sites


def _resolve_const(v: Value, reader_dtype, read_variable) -> np.ndarray | None:
    if v is None:
        return None
    if v.is_const:
        return v.const
    if v.dtype == "resource" and "handle" in v.meta and not v.meta.get("mutable"):
        # read as in the body, or, where the body's reads were already frozen, as the variable's own dtype
        dtype = reader_dtype if reader_dtype is not None else variable_dtype(v)
        return read_variable(v, dtype) if dtype is not None else None
    return None


def _reader_dtype(fn: Function, inp: Value):
    """The dtype a resource argument is read as in ``fn`` (None where the body reads it elsewhere, or its reads
    were frozen already: the variable's own dtype is used then)."""
    return next((op.outputs[0].dtype for op in fn.ops
                 if op.kind == "ReadVariableOp" and op.inputs and op.inputs[0] is inp), None)


def _args(fn: Function, sites, read_variable) -> list[Arg]:
    args = []
    for i, inp in enumerate(fn.inputs):
        reader = _reader_dtype(fn, inp) if inp.dtype == "resource" else None
        consts = [_resolve_const(op.inputs[i], reader, read_variable) for _, op in sites]
        const = consts[0] if consts and all(
            c is not None and c.dtype == consts[0].dtype and np.array_equal(c, consts[0]) for c in consts) else None
        if const is not None:
            value = fn.const(const, inp.name)
            dtype, shape = const.dtype, tuple(const.shape)
        else:
            value, dtype, shape = inp, inp.dtype, inp.shape
        name = fn.input_names[i] if i < len(fn.input_names) else inp.name
        variable = const is None and bool(sites) and all(
            op.inputs[i].producer is not None and op.inputs[i].producer.kind == "ReadVariableOp" for _, op in sites)
        zeros = not const.any() if const is not None else bool(sites) and all(is_zeros(op.inputs[i])
                                                                               for _, op in sites)
        args.append(Arg(i, name, dtype, shape, const, value, variable, zeros))
    return args


def _used(sites, i: int) -> bool:
    """Whether some call site reads the composite's result ``i`` (an op of its caller takes it, or the caller
    returns it)."""
    return any(i < len(call.outputs) and (caller.uses(call.outputs[i]) or caller.is_output(call.outputs[i]))
               for caller, call in sites)


def _from_no_argument(fn: Function, v: Value) -> bool:
    """Whether ``fn`` computes ``v`` from none of its arguments (a placeholder result such as ``tf.constant(0.0)``)."""
    inputs = {x.uid for x in fn.inputs}
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        if x is None or x.uid in seen:
            continue
        seen.add(x.uid)
        if x.uid in inputs:
            return False
        if x.producer is not None:
            todo.extend(x.producer.inputs)
    return True


def _shape_text(shape) -> str:
    return "unknown" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _shapes_agree(a, b) -> bool:
    """Known shapes of the same rank whose known dims are equal (an unknown one agrees with anything)."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x is None or y is None or int(x) == int(y) for x, y in zip(a, b))


def _check_outputs(c: Composite, outs) -> list[Value]:
    """The rule's results must be what the composite's are (count, dtype, shape: a placeholder result's shape,
    one the body computes from no argument, says nothing and is the rule's to give), and every op it emitted
    writable (a builtin, its own options, known enum values): else the rule's fusion is declined."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != len(c.results):
        raise FusionDeclined(f"the rule returned {len(outs)} value(s) for {len(c.results)} result(s)")
    for v, r in zip(outs, c.results):
        if not isinstance(v, Value):
            raise FusionDeclined(f"the rule returned {type(v).__name__}, not a value")
        if v.dtype != r.dtype:
            raise FusionDeclined(f"result {r.index} would change dtype from {r.dtype} to {v.dtype}")
        if not r.placeholder and not _shapes_agree(v.shape, r.shape):
            raise FusionDeclined(f"result {r.index} would change shape from {_shape_text(r.shape)} to "
                                 f"{_shape_text(v.shape)}")
    for op in c.ops:
        problem = check_op(op) if op.dialect == "tfl" else f"'{op.type}' is not a LiteRT op"
        if problem:
            raise FusionDeclined(f"the rule emits an op LiteRT cannot take: {problem}")
    return outs


def _reshape_call_sites(fn: Function, sites, c: Composite, outs: list[Value]) -> list[int]:
    """Where the fused op gives a placeholder result another shape than the body's (a detector's stand-in body
    returns scalars, the op [1, N, 4] boxes), every call site takes the op's shape and the values computed from
    it in the caller lose theirs for shape refinement to infer again. Returns the results reshaped."""
    changed = [r.index for r, v in zip(c.results, outs) if r.placeholder and v.shape != r.shape]
    for caller, call in sites:
        stale = set()
        for i in changed:
            call.outputs[i].shape = outs[i].shape
            stale.add(call.outputs[i].uid)
        for op in caller.ops[caller.ops.index(call) + 1:]:
            if any(x is not None and x.uid in stale for x in op.inputs):
                for o in op.outputs:
                    o.shape = None
                    stale.add(o.uid)
    return changed


def prepare_composites(module: Module, rules: RuleSet, strict: bool = False,
                       batch_size: int | None = None, refine_shapes=None, check: bool = True,
                       dynamic_batch: bool = True, settings: dict | None = None) -> tuple[list[dict], dict]:
    """Fuse composites in place.

    After each fused composite, ``refine_shapes(module)`` (default:
    :func:`fuselite.passes.shapes.refine_shapes`; the pipeline passes its own
    ``refine-shapes`` pass) lets static result shapes reach the composites fed by it.
    Returns one record per composite (for the report) and the variables whose values
    were read as constant arguments ({name: array}). ``dynamic_batch``: whether rules may leave an unknown
    batch dynamic (False for TFLite Micro, whose kernels need constant shapes). ``settings``: what the
    conversion asks of the rule families, by key (``Composite.settings``; the recurrent package reads "rnn_forms"). With ``check``, each fusion is run against the
    composite's own body on random arguments first (:mod:`fuselite.fusion.check`); a mismatch declines it.
    """
    from fuselite.fusion.custom_op import fuse_custom_op
    from fuselite.passes.variables import read_variable_value

    if refine_shapes is None:
        from fuselite.passes.shapes import refine_shapes

    def read_variable(v, dtype):
        arr = read_variable_value(v, dtype)
        read[v.meta["variable"]] = arr
        return arr

    read: dict[str, np.ndarray] = {}
    records, problems = [], []
    for fname, fn in list(module.functions.items()):  # callers were imported before callees
        iface = interface_of(fn)
        if iface is None:
            continue
        sites = _call_sites(module)  # fusing an outer composite drops the calls in its old body
        if not sites.get(fname):
            continue
        attrs = composite_attrs(fn)
        record = {"function": fname, "interface": iface, "call_sites": len(sites[fname]), "attrs": attrs,
                  "source_lines": sorted({op.location for _, op in sites[fname] if op.location})}
        rule = rules.lookup(iface)
        if rule is None and attrs.get("tfl_fusable_op"):
            rule = fuse_custom_op
        if rule is None:
            record.update(status="not fused", reason=f"no fusion rule for interface '{iface}'")
        else:
            record["rule"] = getattr(rule, "__qualname__", getattr(rule, "__name__", repr(rule)))
            c = Composite(fn, iface, attrs, _args(fn, sites[fname], read_variable),
                          [Result(i, v.dtype, v.shape, _from_no_argument(fn, v), _used(sites[fname], i))
                           for i, v in enumerate(fn.outputs)])
            c.batch_size = batch_size
            c.dynamic_batch = dynamic_batch
            c.taken_names = set(module.functions)
            c.settings = dict(settings or {})
            try:
                outs = _check_outputs(c, rule(c))
                if check:
                    record["check"] = check_fusion(c, outs)
            except (NeedsStaticBatch, NeedsStaticLength, CompositeRefused):
                raise
            except (FusionDeclined, Mismatch) as e:
                record.update(status="declined", reason=str(e))
            except ConversionError as e:
                record.update(status="declined", reason=str(e))
            except Exception as e:  # a bug in a (user) rule must not lose the model
                record.update(status="declined", reason=f"rule {getattr(rule, '__name__', rule)} raised "
                                                        f"{type(e).__name__}: {e}")
            else:
                reshaped = _reshape_call_sites(fn, sites[fname], c, outs)
                if reshaped:
                    record["shapes_from_op"] = {str(i): _shape_text(outs[i].shape) for i in reshaped}
                fn.ops, fn.outputs = c.ops, outs
                fn.attrs["_fused"] = True
                for sub in c.subgraphs:  # loop bodies and conditions the rule made
                    module.add(sub)
                record.update(status="fused", into=[op.kind for op in c.ops])
                if c.form is not None:
                    record["form"] = c.form
                refine_shapes(module)  # static result shapes reach the composites fed by this one
        if record["status"] != "fused":
            problems.append(f"composite '{iface}' (function {fname}) {record['status']}: {record['reason']}")
        records.append(record)
    if strict and problems:
        raise FusionError("strict fusion: composites were not fused", problems)
    return records, read
