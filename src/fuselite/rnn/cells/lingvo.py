"""The lingvo LSTM family (``LSTMCellSimple``, ``LayerNormalizedLstmCellSimple``, with or without
``CoupleInputForgetGates``): one step from a zero state, fused only (LiteRT's ``LSTM`` op; the rule is
``sources/lingvo.py``'s). This file holds its weight layout: gates c, i, f, o (a CIFG cell: c, f, o) in one
``[n_in + n_out, gates * n_cell]`` matrix, rows input then recurrent.

Example::

    w = lingvo_to_litert(weight, bias, n_in=5, cifg=False)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fuselite.rnn.kit import GATE_ORDERS, reorder_gates, split_gates


class LingvoWeights(NamedTuple):
    """A lingvo LSTM cell's weights as LiteRT ``LSTM`` operands, gates i, f, c, o (None: absent)."""

    input: tuple  # 4 x [n_cell, n_in]
    recurrent: tuple  # 4 x [n_cell, n_out]
    bias: tuple  # 4 x [n_cell]
    layer_norm: tuple | None  # 4 x [n_cell]
    projection: np.ndarray | None  # [n_out, n_cell]


def lingvo_to_litert(weight: np.ndarray, bias: np.ndarray, n_in: int, *, cifg: bool,
                     layer_norm_scale: np.ndarray | None = None,
                     projection: np.ndarray | None = None) -> LingvoWeights:
    """lingvo's ``LSTMCellSimple`` weights -> LiteRT ``LSTM`` operands (:class:`LingvoWeights`).

    ``weight`` is ``[n_in + n_out, gates * n_cell]`` (rows: input, then recurrent), ``bias``
    and ``layer_norm_scale`` are ``[gates * n_cell]``, in lingvo's gate order c, i, f, o
    (``cifg``: c, f, o); ``projection`` is ``[n_cell, n_out]``. Each gate block is split into
    its transposed input and recurrent parts and the gates are put in LiteRT's order
    (a CIFG cell has no input gate: None). Example::

        >>> w = lingvo_to_litert(weight, bias, n_in=5, cifg=True)
        >>> w.input[0] is None
        True
    """
    source = GATE_ORDERS["lingvo", "CIFG_LSTM" if cifg else "LSTM"]
    target = GATE_ORDERS["litert", "LSTM"]
    n_cell = weight.shape[1] // len(source)

    def per_gate(array):
        return [np.ascontiguousarray(b) for b in split_gates(array, len(source), n_cell)]

    blocks = per_gate(weight)  # each [n_in + n_out, n_cell]
    return LingvoWeights(
        input=reorder_gates([np.ascontiguousarray(b[:n_in].T) for b in blocks], source, target),
        recurrent=reorder_gates([np.ascontiguousarray(b[n_in:].T) for b in blocks], source, target),
        bias=reorder_gates(per_gate(bias), source, target),
        layer_norm=None if layer_norm_scale is None else reorder_gates(per_gate(layer_norm_scale), source, target),
        projection=None if projection is None else np.ascontiguousarray(projection.T),
    )
