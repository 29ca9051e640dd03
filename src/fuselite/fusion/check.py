"""Check a fusion before trusting it: the fused ops against the composite's own TensorFlow body.

The body runs in TensorFlow (``evaluate_function``, no Grappler) and the fused ops run on
stock LiteRT, on the same random arguments (constant arguments keep their values; a rule may
declare the body's valid domain for an argument with ``Composite.draw_for_check``, such as
boxes whose corners are ordered); the results must agree within ``atol + rtol * max|reference|``.
A rule that emits something else than the body computes (an embedding composite whose body is
``gather * 2 + 1`` taken for a plain lookup), or one whose ops LiteRT rejects (a weight in the wrong layout), is
declined with the difference or LiteRT's message. Where the check cannot run (no TensorFlow
function kept, a resource or string argument, a CUSTOM op without a kernel here, TensorFlow
refusing random arguments, a body that is not pure: an op in it, or in a function it calls, that touches files, the
network, the environment or the clock, which conversion never runs), the record says why it was not checked.
"""

from __future__ import annotations

import time

import numpy as np

from fuselite.ir import Function, Module

RTOL, ATOL = 1e-4, 1e-5


class Mismatch(Exception):
    """The fused ops do not compute what the body computes."""


def _random_argument(arg, rng, batch: int, draw=None) -> np.ndarray | None:
    if arg.const is not None:
        return np.asarray(arg.const)
    if arg.shape is None or isinstance(arg.dtype, str):
        return None
    shape = [batch if d is None else int(d) for d in arg.shape]
    dtype = np.dtype(arg.dtype)
    if draw is not None:  # the rule's valid domain for this argument (Composite.draw_for_check)
        return np.asarray(draw(rng, tuple(shape))).astype(dtype).reshape(shape)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(dtype)  # small: valid indices of any table
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return None


def _zeros(rng, shape) -> np.ndarray:
    return np.zeros(shape, np.float32)


def check_fusion(c, outs: list, seed: int = 0) -> dict:
    """``{"checked": True, "max_abs_error", "seconds"}`` or ``{"checked": False, "why"}``; raises
    :class:`Mismatch` when the fused ops disagree with the body."""
    from fuselite.fusion.evaluate import evaluate_function, impure_nodes
    from fuselite.passes.clone import snapshot_module

    t0 = time.perf_counter()
    fdef = c.function.attrs.get("_function_def")
    if fdef is None:
        return {"checked": False, "why": "the original TensorFlow function is not available"}
    if any(op.kind == "CUSTOM" for op in c.ops):
        return {"checked": False, "why": "a CUSTOM op has no kernel here"}
    impure = impure_nodes(fdef, c.function.attrs.get("_library") or {})
    if impure:  # conversion runs no op that touches files, the network, the environment or the clock
        return {"checked": False, "why": f"the body is not pure, so it is not run: {impure[0]}"
                                         + (f" (and {len(impure) - 1} more)" if len(impure) > 1 else "")}
    rng = np.random.default_rng(seed)
    draws = getattr(c, "check_draws", {})
    # an argument that is zeros at every call site (a zero state of a run-time batch) is drawn as zeros, as a
    # constant one keeps its value: rules may read it as zeros
    args = [_random_argument(a, rng, c.batch_size or 1, draws.get(a.index) or (_zeros if a.zeros else None))
            for a in c.args]
    if any(a is None for a in args):
        return {"checked": False, "why": "an argument is not a tensor of known shape (resource, string)"}
    try:
        want = evaluate_function(fdef, c.function.attrs.get("_library") or {}, args)
    except Exception as e:  # TensorFlow refuses the random arguments: nothing to compare with
        return {"checked": False, "why": f"TensorFlow could not run the body on random arguments "
                                         f"({type(e).__name__})"}
    live = [(a, x) for a, x in zip(c.args, args) if a.const is None]
    probe = Function("fusion_check")
    probe.inputs = [a.value for a, _ in live]
    probe.input_names = [f"arg{i}" for i in range(len(live))]
    probe.ops = list(c.ops)
    probe.outputs = list(outs)
    probe.output_names = [f"out{i}" for i in range(len(outs))]
    module = Module()
    module.add(probe)
    for sub in c.subgraphs:  # loop bodies and conditions
        module.add(sub)
    module.signatures = {"serving_default": probe.name}
    try:
        from fuselite.runtime import run
        from fuselite.tflite.flatbuffer import write_flatbuffer

        snap = snapshot_module(module)
        snap.functions[probe.name].topo_sort()
        got = run(write_flatbuffer(snap), {f"arg{i}": x for i, (_, x) in enumerate(live)})
    except Exception as e:  # LiteRT rejects what the rule emitted (a weight in the wrong layout): not trusted
        first = " ".join(str(e).split())[:300] or type(e).__name__
        raise Mismatch(f"the fused ops fail on LiteRT on random arguments: {first}") from None
    worst = 0.0
    for i, ref in enumerate(want):
        out = np.asarray(got[f"out{i}"], np.float64)
        ref = np.asarray(ref, np.float64)
        if out.shape != ref.shape:
            raise Mismatch(f"result {i} has shape {list(out.shape)} on random arguments, the body's {list(ref.shape)}")
        err = float(np.abs(out - ref).max()) if ref.size else 0.0
        limit = ATOL + RTOL * (float(np.abs(ref).max()) if ref.size else 0.0)
        if not err <= limit:
            raise Mismatch(f"result {i} differs from the composite's body by {err:.3g} on random arguments "
                           f"(allowed {limit:.3g}): the rule does not compute what the body does")
        worst = max(worst, err)
    return {"checked": True, "max_abs_error": worst, "seconds": round(time.perf_counter() - t0, 4)}
