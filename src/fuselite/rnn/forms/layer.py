"""What a recurrent layer adds around any form: its results, and the merge of a Bidirectional's directions.

* :func:`merge`: a Bidirectional's ``merge_mode`` (concat, sum, ave, mul, none) as ops;
* :func:`merge_directions`: a Bidirectional's results from its two directions' per-step outputs (the
  unrolled form);
* :func:`layer_results`: a layer's results (the sequence or its last output, and the final states with
  ``return_state``).

Example (a Bidirectional of two unrolled directions)::

    return merge_directions(c, merge, fw_outs, bw_outs, fw_final, bw_final, tm)
"""

from __future__ import annotations

import numpy as np

from fuselite.rnn.build import pack_steps


def merge(c, mode: str, fw, bw, shape):
    """A Bidirectional's two directions (each of ``shape``) merged as ``mode`` says; ``none``: both."""
    if mode == "concat":
        return c.op("CONCATENATION", [fw, bw], {"axis": -1, "fused_activation_function": "NONE"},
                    dtype=np.float32, shape=shape[:-1] + (shape[-1] * 2,))
    if mode in ("sum", "ave"):
        y = c.op("ADD", [fw, bw], {"fused_activation_function": "NONE"}, dtype=np.float32, shape=shape)
        if mode == "ave":
            y = c.op("MUL", [y, np.array(0.5, np.float32)], {"fused_activation_function": "NONE"},
                     dtype=np.float32, shape=shape)
        return y
    if mode == "mul":
        return c.op("MUL", [fw, bw], {"fused_activation_function": "NONE"}, dtype=np.float32, shape=shape)
    return [fw, bw]


def merge_directions(c, merge_fn, fw: list, bw: list, fw_final: list, bw_final: list, tm: bool) -> list:
    """A Bidirectional's results from its two unrolled directions (outputs per step in processing order):
    the backward outputs put back in time order, merged by ``merge_fn(c, mode, fw, bw, shape)``; in Keras'
    order (the merged output(s), then the forward and the backward final states with ``return_state``)."""
    a = c.attrs
    mode = a.get("merge_mode", "concat")
    if a.get("return_sequences"):
        fw_seq, bw_seq = pack_steps(c, fw, tm), pack_steps(c, bw[::-1], tm)
        y = merge_fn(c, mode, fw_seq, bw_seq, fw_seq.shape)
    else:
        y = merge_fn(c, mode, fw[-1], bw[-1], fw[-1].shape)
    y = y if isinstance(y, list) else [y]
    return y + list(fw_final) + list(bw_final) if a.get("return_state") else y


def layer_results(c, out, finals: list) -> list:
    """A layer's results: ``out`` (its sequence or last output), and with ``return_state`` the final states."""
    return [out, *finals] if c.attrs.get("return_state") else out
