"""Inline calls (``PartitionedCall`` / ``StatefulPartitionedCall``) into their callers."""

from __future__ import annotations

from fuselite.ir import Module
from fuselite.passes.clone import clone_body

CALL_OPS = ("tf.PartitionedCall", "tf.StatefulPartitionedCall")


def inline_calls(module: Module, keep=None) -> int:
    """Inline call ops, innermost first; calls to functions for which ``keep(fn)`` is true stay.

    Returns how many calls were inlined.
    """
    count = 0
    changed = True
    while changed:
        changed = False
        for fn in list(module.functions.values()):
            i = 0
            while i < len(fn.ops):
                op = fn.ops[i]
                if op.type not in CALL_OPS:
                    i += 1
                    continue
                callee = module.functions[op.attrs["f"]]
                if keep is not None and keep(callee):
                    i += 1
                    continue
                head, tail = fn.ops[:i], fn.ops[i + 1 :]
                fn.ops = head
                outs = clone_body(fn, callee, op.inputs, prefix=op.name + "/")
                body = fn.ops[len(head) :]
                mapping = {o.uid: n for o, n in zip(op.outputs, outs)}
                for other in tail:
                    other.inputs = [mapping.get(v.uid, v) if v is not None else None for v in other.inputs]
                fn.outputs = [mapping.get(v.uid, v) for v in fn.outputs]
                fn.ops = head + body + tail
                i = len(head) + len(body)
                count += 1
                changed = True
    return count
