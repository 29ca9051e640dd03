"""The recurrent families: one file per cell, each with its gate layout, weight transforms, NumPy reference
and the IR builder of one step.

A cell is a :class:`Cell`: the input projection every form hoists out of the steps (``input`` [width, in] and
``bias`` [width], one ``FULLY_CONNECTED`` over all steps at once) and :meth:`Cell.step`, the ops of one step
from that step's projection and the previous states. The forms of ``rnn/forms/`` drive any cell over time:
unrolled (``forms/unrolled.py``) and in a ``WHILE`` (``forms/loop.py``); a cell with a LiteRT sequence op
also writes the fused form (:meth:`Cell.fused`).

Families: ``lstm.py``, ``gru.py``, ``simple_rnn.py`` (Keras' three, :data:`FAMILIES`), ``peephole_lstm.py``
(a cell added through the public API: docs/architecture.md, "Adding a cell"), ``conv_lstm.py`` (Keras'
ConvLSTM2D, unrolled only) and ``lingvo.py`` (lingvo's LSTM cells, fused only).

Example (a Keras LSTM's weights as a cell, its first step from zero states)::

    cell = keras_cell("LSTM", kernel, recurrent_kernel, bias, "tanh")
    (h, c_state), out = cell.step(c, xt, [None, None])
"""

from __future__ import annotations

from fuselite.rnn.cells.base import Cell
from fuselite.rnn.cells.gru import GRUCell
from fuselite.rnn.cells.lstm import LSTMCell
from fuselite.rnn.cells.simple_rnn import SimpleRNNCell

__all__ = ["FAMILIES", "Cell", "GRUCell", "LSTMCell", "SimpleRNNCell", "keras_cell", "keras_family"]


FAMILIES: dict[str, type[Cell]] = {"LSTM": LSTMCell, "GRU": GRUCell, "SimpleRNN": SimpleRNNCell}
"""Keras layer kind -> its cell class."""


def keras_family(kind: str) -> type[Cell]:
    """The cell class of a Keras ``kind`` layer ("LSTM", "GRU", "SimpleRNN")."""
    return FAMILIES[kind]


def keras_cell(kind: str, kernel, recurrent, bias, activation: str, *, reset_after: bool = True,
               recurrent_bias=None) -> Cell:
    """The cell of a Keras ``kind`` layer (LSTM, GRU, SimpleRNN) from its weights in Keras' layout (a GRU's
    ``bias`` its input bias, ``recurrent_bias`` the other row: zero or None with ``reset_after=False``)."""
    family = keras_family(kind)
    if kind == "GRU":
        return family(kernel, recurrent, bias, activation, reset_after=reset_after, recurrent_bias=recurrent_bias)
    return family(kernel, recurrent, bias, activation)
