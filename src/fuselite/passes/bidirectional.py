"""Two sequence LSTMs over ``x`` and ``reverse(x)`` -> one BIDIRECTIONAL_SEQUENCE_LSTM.

This is how a Keras ``Bidirectional(LSTM)`` looks after its two ``while`` loops were
recognised in a SavedModel (``fusion/loops.py``). The backward op's outputs are in
processing order, i.e. the reverse of the bidirectional op's time-aligned backward
output, so its uses get ``REVERSE_V2(bw)``; a following reverse (Keras re-aligns the
backward sequence) cancels against it.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function

_LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"
_UNUSED = (9, 10, 11, 16, 17, 20, 21, 22, 23)  # peepholes, projection, layer norm


def _reverse_axis(op) -> int | None:
    if op is None or op.kind != "REVERSE_V2" or not op.inputs[1].is_const or op.inputs[1].const.size != 1:
        return None
    return int(op.inputs[1].const.reshape(-1)[0])


def _plain(op) -> bool:
    return len(op.inputs) == 24 and all(op.inputs[i] is None for i in _UNUSED) and \
        all(op.inputs[i] is not None for i in (18, 19))


def merge_bidirectional_lstms(fn: Function) -> bool:
    lstms = [op for op in fn.ops if op.kind == _LSTM and _plain(op)]
    for bw in lstms:
        rev = bw.inputs[0].producer
        axis = _reverse_axis(rev)
        tm = bool(bw.attrs.get("time_major"))
        if axis is None or axis != (0 if tm else 1) or rev not in fn.ops:
            continue
        x = rev.inputs[0]
        for fw in lstms:
            if fw is bw or fw.inputs[0] is not x or fw.attrs != bw.attrs:
                continue
            opts = {k: v for k, v in fw.attrs.items() if k in ("fused_activation_function", "cell_clip", "proj_clip",
                                                               "time_major", "asymmetric_quantize_inputs")}
            opts["merge_outputs"] = False
            inputs = [x, *fw.inputs[1:18], *bw.inputs[1:18], fw.inputs[18], fw.inputs[19], bw.inputs[18],
                      bw.inputs[19]] + [None] * 9
            shape = fw.outputs[0].shape
            bi = fn.make_op("tfl.BIDIRECTIONAL_SEQUENCE_LSTM", inputs, [(np.dtype(np.float32), shape)] * 2, opts,
                            name=fw.name, location=fw.location)
            processing = fn.make_op("tfl.REVERSE_V2", [bi.outputs[1], fn.const(np.array([axis], np.int32))],
                                    [(np.dtype(np.float32), bw.outputs[0].shape)], name=bw.name + "/reverse")
            pos = max(fn.ops.index(fw), fn.ops.index(bw))
            fn.ops[pos + 1:pos + 1] = [bi, processing]
            fn.replace_uses(fw.outputs[0], bi.outputs[0])
            fn.replace_uses(bw.outputs[0], processing.outputs[0])
            fn.ops.remove(fw)
            fn.ops.remove(bw)
            return True
    return False


def cancel_reverse_pairs(fn: Function) -> bool:
    """REVERSE_V2(REVERSE_V2(y, a), a) -> y."""
    for op in fn.ops:
        axis = _reverse_axis(op)
        inner = op.inputs[0].producer if axis is not None else None
        if inner is not None and inner in fn.ops and _reverse_axis(inner) == axis and op.outputs[0] not in fn.outputs:
            fn.replace_uses(op.outputs[0], inner.inputs[0])
            fn.ops.remove(op)
            return True
    return False
