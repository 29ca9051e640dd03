"""The base of every recurrent cell: what the forms of ``rnn/forms/`` need from one (see ``rnn/cells/``)."""

from __future__ import annotations

import numpy as np


class Cell:
    """One recurrent cell as every form writes it (see the package doc).

    Subclasses set ``kind`` (the family), ``units``, ``n_states`` (the states carried from step to step, the
    output first), ``input`` ([width, in] float32) and ``bias`` ([width]), and write :meth:`step`.
    ``form_key``: the family whose form a conversion's ``rnn_form`` gives the cell (a peephole LSTM takes the
    LSTM's). ``marks_steps``: the unrolled form marks the cell's ops ``_recurrent_cell`` (an integer conversion runs them
    16x8, as LiteRT's integer LSTM keeps its insides int16). ``static_batch_unrolled``: the unrolled form needs
    a static batch (the first step folds a zero state into constants of the batch's shape).
    """

    kind = "cell"
    form_key = ""  # the family whose form (``rnn_form``, ``rnn/forms/policy.py``) the cell takes: "" for ``kind``
    n_states = 1
    marks_steps = False
    static_batch_unrolled = False
    units: int
    input: np.ndarray
    bias: np.ndarray

    def step(self, b, xt, states: list) -> tuple[list, object]:
        """(new states, output) after one step on builder ``b`` (a ``Composite`` or a loop body), from ``xt``
        (the step's input projection, [batch, width]) and ``states`` (None: zeros)."""
        raise NotImplementedError

    def fused(self, c, x_tm, states: list):
        """The fused form: LiteRT's sequence op over the time-major ``x_tm`` with the state tensors
        ``states`` (``forms.fused.state``), its [time, batch, units] outputs; None where LiteRT has none."""
        return None
