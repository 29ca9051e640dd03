"""lingvo-style LSTM cells -> the ``LSTM`` builtin.

A composite marked ``LSTMCellSimple`` or ``LayerNormalizedLstmCellSimple``, optionally
followed by comma-separated option tokens (only ``CoupleInputForgetGates`` exists),
e.g. ``experimental_implements="LSTMCellSimple,CoupleInputForgetGates"``, computes one
lingvo LSTM cell step from a zero state. It becomes one ``LSTM`` op (kernel_type FULL).

The argument contract is the one of TensorFlow's MLIR converter
(``ConvertLSTMCellSimpleToFusedLSTM`` in ``lstm_utils.cc``)::

    LSTMCellSimple(input, weight, bias, projection)
    LayerNormalizedLstmCellSimple(input, weight, bias, projection, layer_norm_scale)

* ``input``      [batch, n_in] float32;
* ``weight``     [n_in + n_out, gates * n_cell], gates in lingvo's order
  (cell input, input gate, forget gate, output gate), or with
  ``CoupleInputForgetGates`` three gates (cell input, forget gate, output gate);
* ``bias``       [gates * n_cell], same order;
* ``projection`` [n_cell, n_out], or any tensor whose rank is not 2 for no projection
  (then ``n_out = n_cell``);
* ``layer_norm_scale`` [gates * n_cell], same order (lingvo's ``ln_scale``).

Each gate block of ``weight`` is transposed to LiteRT's [n_cell, n_in + n_out] and
split into its input and recurrent parts; the projection is transposed to
[n_out, n_cell]. The body is ``concat([x, m0]) @ weight`` (per-gate layer norm times
``layer_norm_scale`` for the layer-normalised cell) ``+ bias``, then the usual gates,
``m = sigmoid(o) * tanh(c)`` and ``m @ projection``; this is what the LSTM kernel
computes (its layer norm uses the same epsilon, 1e-8).

Differences from the MLIR converter, all on purpose:

* it only matches the exact string ``LSTMCellSimple``, so the ``CoupleInputForgetGates``
  token never reaches its CIFG code; here it does, in the plain and the attributed
  (``NameAttrList``) forms. Unknown tokens and attributes are declined instead of
  ignored;
* arity, ranks, shapes, dtypes and constant weights are checked and a misfit is declined
  with a reason (the MLIR pass reads missing arguments and crashes on some of them);
* for a layer-normalised CIFG cell the MLIR code takes the forget and output scales at
  offsets 2 * n_cell and 3 * n_cell (past the end of a three-gate scale, silently
  replaced by zeros); here the scale follows the weights' gate order, as lingvo's
  ``ln_scale`` does;
* no projection bias (lingvo's projection has none) and no cell clipping. The MLIR
  converter sets ``cell_clip = 10``, which never acts here: from a zero state the new
  cell state is ``sigmoid(.) * tanh(.)``, inside (-1, 1);
* any static batch size is accepted, not only 1. The kernel keeps its states in
  variable tensors that persist between invokes, so both are rewritten with zeros (FILL)
  before the op on every invoke: the same input gives the same output every time.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import NeedsStaticBatch
from fuselite.fusion.registry import fusion
from fuselite.rnn.cells.lingvo import lingvo_to_litert
from fuselite.rnn.forms.fused import state
from fuselite.rnn.kit import GATE_ORDERS, lstm_operands

LSTM_CELL_SIMPLE = "LSTMCellSimple"
LAYER_NORMALIZED_LSTM_CELL_SIMPLE = "LayerNormalizedLstmCellSimple"
COUPLE_INPUT_FORGET_GATES = "CoupleInputForgetGates"

F32 = np.dtype(np.float32)


def parse_interface(c) -> tuple[bool, bool]:
    """(layer_norm, cifg) from ``c.interface`` = ``"<cell>[,<token>...]"``; declines unknown parts."""
    head, *tokens = [t.strip() for t in c.interface.split(",")]
    if head not in (LSTM_CELL_SIMPLE, LAYER_NORMALIZED_LSTM_CELL_SIMPLE):
        c.decline(f"'{head}' is not a lingvo cell ({LSTM_CELL_SIMPLE} or {LAYER_NORMALIZED_LSTM_CELL_SIMPLE})")
    unknown = [t for t in tokens if t != COUPLE_INPUT_FORGET_GATES]
    if unknown:
        c.decline(f"unknown token(s) {', '.join(repr(t) for t in unknown)} in implements '{c.interface}' "
                  f"(the only option token is {COUPLE_INPUT_FORGET_GATES})")
    if c.attrs:
        c.decline(f"attribute(s) {', '.join(sorted(c.attrs))} are not part of the {head} contract "
                  "(options are comma-separated tokens in the name)")
    return head == LAYER_NORMALIZED_LSTM_CELL_SIMPLE, COUPLE_INPUT_FORGET_GATES in tokens


def _constant(c, arg, what: str, shape: tuple) -> np.ndarray:
    """The float32 constant value of ``arg``, which must have ``shape``."""
    if arg.dtype != F32:
        c.decline(f"{what} (argument {arg.index}) must be float32, got {arg.dtype}")
    if arg.shape is None or tuple(arg.shape) != shape:
        c.decline(f"{what} (argument {arg.index}) must have shape {list(shape)}, got "
                  f"{'unknown' if arg.shape is None else list(arg.shape)}")
    if arg.const is None:
        c.decline(f"{what} (argument {arg.index}) must be constant (a constant or a frozen variable)")
    return arg.const


def _dims(c, gates: int, layer_norm: bool):
    """(n_in, n_cell, n_out, projection or None) from the weight and projection arguments."""
    x, weight, projection = c.args[0], c.args[1], c.args[3]
    if x.dtype != F32 or x.rank != 2:
        c.decline(f"the input (argument 0) must be float32 of rank 2 [batch, n_in], got {x.dtype} "
                  f"{'unknown shape' if x.shape is None else list(x.shape)}")
    if weight.rank != 2 or not weight.static_shape:
        c.decline(f"the weight (argument 1) must have a static rank-2 shape [n_in + n_out, gates * n_cell], got "
                  f"{'unknown' if weight.shape is None else list(weight.shape)}")
    rows, cols = weight.shape
    if cols == 0 or cols % gates:
        c.decline(f"the weight's {cols} columns are not {gates} equal gate blocks"
                  + (" (CoupleInputForgetGates has 3 gates)" if gates == 3 else ""))
    n_cell = cols // gates
    if projection.rank is None:
        c.decline("the projection (argument 3) has an unknown rank: pass [n_cell, n_out], or a tensor of "
                  "rank other than 2 for no projection")
    proj = None
    if projection.rank == 2:
        if projection.shape[0] != n_cell or projection.shape[1] is None:
            c.decline(f"the projection (argument 3) must be [n_cell, n_out] = [{n_cell}, n_out], got "
                      f"{list(projection.shape)}")
        n_out = projection.shape[1]
        proj = _constant(c, projection, "the projection", (n_cell, n_out))
    else:
        n_out = n_cell
    n_in = rows - n_out
    if n_in <= 0:
        c.decline(f"the weight has {rows} rows, not n_in + n_out with n_out = {n_out} and n_in > 0")
    if x.shape[1] != n_in:
        have = "an unknown number of" if x.shape[1] is None else str(x.shape[1])
        c.decline(f"the input has {have} features but the weight's {rows} rows minus n_out = {n_out} "
                  f"give n_in = {n_in}")
    return n_in, n_cell, n_out, proj


@fusion(LAYER_NORMALIZED_LSTM_CELL_SIMPLE + ",*")
@fusion(LAYER_NORMALIZED_LSTM_CELL_SIMPLE)
@fusion(LSTM_CELL_SIMPLE + ",*")
@fusion(LSTM_CELL_SIMPLE)
def fuse_lingvo_lstm_cell(c):
    """One lingvo LSTM cell step from zero state -> FILL, FILL (zero states) and one LSTM op."""
    layer_norm, cifg = parse_interface(c)
    arity = 5 if layer_norm else 4
    if len(c.args) != arity:
        names = "input, weight, bias, projection" + (", layer_norm_scale" if layer_norm else "")
        c.decline(f"expected {arity} argument(s) ({names}; a projection of rank other than 2 means none), "
                  f"got {len(c.args)}")
    c.expect_results(1)
    gates = len(GATE_ORDERS["lingvo", "CIFG_LSTM" if cifg else "LSTM"])
    x = c.args[0]
    n_in, n_cell, n_out, proj = _dims(c, gates, layer_norm)
    weight = _constant(c, c.args[1], "the weight", (n_in + n_out, gates * n_cell))
    bias = _constant(c, c.args[2], "the bias", (gates * n_cell,))
    scale = _constant(c, c.args[4], "the layer norm scale", (gates * n_cell,)) if layer_norm else None

    result = c.results[0]
    if result.dtype != F32:
        c.decline(f"the cell's result must be float32, got {result.dtype}")
    if result.shape is not None and (len(result.shape) != 2 or result.shape[1] not in (None, n_out)):
        c.decline(f"the body returns shape {list(result.shape)}, but the arguments give [batch, {n_out}]")
    batch = x.shape[0] or (result.shape[0] if result.shape else None) or c.batch_size
    if batch is None:
        raise NeedsStaticBatch("the fused lingvo LSTM cell keeps its state in tensors that need a static batch size")

    w = lingvo_to_litert(weight, bias, n_in, cifg=cifg, layer_norm_scale=scale, projection=proj)
    h = state(c, batch, n_out)  # zeros, rewritten before the op on every invoke
    cs = state(c, batch, n_cell)
    options = {"fused_activation_function": "TANH", "cell_clip": 0.0, "proj_clip": 0.0,
               "kernel_type": "FULL", "asymmetric_quantize_inputs": False}
    return c.op("LSTM", lstm_operands(x, w.input, w.recurrent, w.bias, h, cs, projection=w.projection,
                                      layer_norm=w.layer_norm), options, dtype=np.float32, shape=(batch, n_out))
