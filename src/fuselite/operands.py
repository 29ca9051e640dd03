"""Where LiteRT's sequence ops keep their operands: facts of the op schema that more than one stage reads
(the recurrent kit builds the lists, ``rnn/kit.py``; the bidirectional pass merges and splits them,
``passes/bidirectional.py``). Read in ``tflite/kernels/lstm_shared.h`` and ``unidirectional_sequence_rnn.cc``.

Example::

    h, c = (op.inputs[i] for i in LSTM_OPERANDS.states)
"""

from __future__ import annotations

from typing import NamedTuple


class Operands(NamedTuple):
    """Where a unidirectional sequence op's operands sit: its number of inputs, one direction's weights and
    biases (a slice), its state tensors, and the optional inputs (peepholes, projection, layer norm) that
    LiteRT's bidirectional op of the same cell cannot take."""

    n_inputs: int
    weights: slice
    states: tuple
    extras: tuple


LSTM_OPERANDS = Operands(24, slice(1, 18), (18, 19), (9, 10, 11, 16, 17, 20, 21, 22, 23))
"""``UNIDIRECTIONAL_SEQUENCE_LSTM``: 0 input, 1-4 input weights, 5-8 recurrent weights, 9-11 peepholes, 12-15
biases, 16-17 projection, 18 output state, 19 cell state, 20-23 layer norm."""

RNN_OPERANDS = Operands(5, slice(1, 4), (4,), ())
"""``UNIDIRECTIONAL_SEQUENCE_RNN``: 0 input, 1 weights, 2 recurrent weights, 3 bias, 4 hidden state."""
