"""The integer LSTM (LiteRT's 8x8->16 kernel, TFLite Micro's 16x8): when an LSTM can be one, where its
states come from, and its cell state's scale from the calibration data replayed through the cell."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Op, Quantization, Value
from fuselite.quantize.dynamic import symmetric_int8
from fuselite.quantize.int8_params import (
    FLOAT32,
    INT8,
    INT16,
    activation_params,
    int16_params,
    int32_bias,
    quantize_values,
)
from fuselite.quantize.select import op_name

# -- the integer LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM, 8x8->16) -------------------------------------------------
# Contract: docs/kernel-contracts.md §7.2 (unidirectional_sequence_lstm.cc, lstm_eval.cc, operator_property.cc).
LSTM_W = (1, 2, 3, 4)  # the LSTM's input weights, recurrent weights and biases (operand indices)


LSTM_R = (5, 6, 7, 8)


LSTM_B = (12, 13, 14, 15)


_LSTM_UNSUPPORTED = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection", 17: "projection",
                     20: "layer norm", 21: "layer norm", 22: "layer norm", 23: "layer norm"}


CELL_SCALE_LOG2 = (-15, -9)  # the kernel's ApplyTanh handles 2^-15..2^-9 only (anything else: silently wrong)


def _zero_fill(v: Value | None) -> Op | None:
    """The FILL of zeros that makes ``v`` (an LSTM state), or None."""
    op = v.producer if v is not None else None
    if op is None or op.kind != "FILL" or not op.inputs[1].is_const:
        return None
    return op if not np.any(op.inputs[1].const) else None


def why_not_integer_lstm(fn: Function, op: Op) -> str | None:
    """Why fuselite cannot make this LSTM integer (None: it can)."""
    if op.attrs.get("diagonal_recurrent_tensors"):
        return ("an LSTM with diagonal recurrent weights (an IndyLSTM) has no integer kernel in LiteRT (only its "
                "float and hybrid kernels read diagonals, unidirectional_sequence_lstm.cc)")
    for i, what in _LSTM_UNSUPPORTED.items():
        if i < len(op.inputs) and op.inputs[i] is not None:
            return f"an LSTM with {what} has no integer form in fuselite yet"
    if op.inputs[1] is None:
        return "a CIFG LSTM has no integer form in fuselite yet"
    if any(op.inputs[i] is None or not op.inputs[i].is_const for i in (*LSTM_W, *LSTM_R, *LSTM_B)):
        return "its weights and biases must be constants"
    for i in (18, 19):
        state = op.inputs[i]
        writer = state.producer if state is not None else None
        # zeros (FILL) or an initial value copied in (CAST); the cell state may be read back after the op
        others = [u for u in fn.uses(state) if u is not op] if state is not None else []
        if writer is None or (writer.kind != "CAST" and _zero_fill(state) is None) or \
                (i == 18 and others) or any(u.kind != "RESHAPE" for u in others) or fn.is_output(state):
            return "its state is neither zeros nor an initial value copied into the kernel's state"
    return None


def state_source(op: Op, index: int) -> Value | None:
    """The value an LSTM's state tensor (input ``index``: 18 h, 19 c) is copied from on every invoke: an initial
    state given to the layer (None: zeros, or nothing recognisable)."""
    state = op.inputs[index] if index < len(op.inputs) else None
    writer = state.producer if state is not None else None
    return writer.inputs[0] if writer is not None and writer.kind == "CAST" else None


def lstm_state_sources(op: Op) -> list[Value]:
    """The initial states an LSTM op is given (h, c), for calibration to keep their values per sample."""
    return [v for v in (state_source(op, 18), state_source(op, 19)) if v is not None]


def variable_read(v: Value | None) -> Op | None:
    """The READ_VARIABLE that ``v`` (an LSTM state: a copy of a RESHAPE of it) comes from, or None."""
    op = v.producer if v is not None else None
    for kind in ("CAST", "RESHAPE"):
        if op is not None and op.kind == kind:
            op = op.inputs[0].producer
    return op if op is not None and op.kind == "READ_VARIABLE" else None


def shared_name(handle: Value) -> str | None:
    """The variable a resource handle names (its VAR_HANDLE's shared_name)."""
    op = handle.producer
    return op.attrs.get("shared_name") if op is not None and op.kind == "VAR_HANDLE" else None


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell_peak(op: Op, sequences: list[np.ndarray], carry: bool = False, initial: list | None = None) -> float:
    """max |cell state| of the float LSTM over the calibration inputs (a NumPy replay of the op); with
    ``carry`` (a stateful LSTM) each sample starts from the states the previous one left, as on LiteRT;
    ``initial``: per sample, the (h, c) it starts from (initial states given to the layer; None: zeros)."""
    w = [np.asarray(op.inputs[i].const, np.float64) for i in LSTM_W]
    r = [np.asarray(op.inputs[i].const, np.float64) for i in LSTM_R]
    b = [np.asarray(op.inputs[i].const, np.float64) for i in LSTM_B]
    clip = float(op.attrs.get("cell_clip", 0.0) or 0.0)
    peak = 0.0
    h = c = None
    for n, x in enumerate(sequences):
        x = np.asarray(x, np.float64)
        if not op.attrs.get("time_major", False):
            x = x.transpose(1, 0, 2)
        if h is None or not carry:
            h = np.zeros((x.shape[1], r[0].shape[1]))
            c = np.zeros((x.shape[1], w[0].shape[0]))
        if initial is not None:
            h0, c0 = initial[n]
            h = h if h0 is None else np.broadcast_to(np.asarray(h0, np.float64).reshape(-1, h.shape[1]), h.shape)
            c = c if c0 is None else np.broadcast_to(np.asarray(c0, np.float64).reshape(-1, c.shape[1]), c.shape)
            peak = max(peak, float(np.abs(c).max()))
        for step in x:
            z = [step @ w[k].T + h @ r[k].T + b[k] for k in range(4)]
            c = _sigmoid(z[1]) * c + _sigmoid(z[0]) * np.tanh(z[2])
            if clip > 0:
                c = np.clip(c, -clip, clip)
            h = _sigmoid(z[3]) * np.tanh(c)
            peak = max(peak, float(np.abs(c).max()))
    return peak


LSTM_8X8 = "integer LSTM (8x8->16)"


LSTM_16X8 = "integer LSTM (16x8: int16 activations, TFLite Micro's kernel)"


# of the calibrated output range, each side: the output (and state) clips beyond it. Inputs beyond the calibration
# data drive h = o * tanh(c) past its calibrated range: a Keras 3 Bidirectional(LSTM(16)) over 12 steps, 32 random
# calibration draws, four test draws: 0.1 -> up to 6.3% off (its last step clipped), 0.25 -> at most 0.91%; an
# int8 step 1.25x coarser costs the stacked LSTM of the coverage benchmark 1.07% -> 1.78% on its worst draw.
OUTPUT_MARGIN = 0.25


CELL_HEADROOM = 1.5  # inputs beyond the calibration data drive the cell further; int16 has bits to spare


def cell_scale_log2(peak: float) -> int:
    """The power-of-two int16 cell scale 2^k whose range (2^(k+15)) holds ``CELL_HEADROOM * peak``, k in
    CELL_SCALE_LOG2 (a saturated cell state is a large error; one bit less of an int16 is a small one)."""
    k = int(np.ceil(np.log2(peak * CELL_HEADROOM))) - 15 if peak > 0 else CELL_SCALE_LOG2[0]
    return int(np.clip(k, *CELL_SCALE_LOG2))


def initial_states(op: Op, captured: dict[int, list], stateful: bool) -> list | None:
    """Per calibration sample, the (h, c) an LSTM starts from where it is given initial states (not a stateful
    layer's variables, which the replay carries itself), from the values calibration kept; None: zeros."""
    if stateful:
        return None
    h0, c0 = state_source(op, 18), state_source(op, 19)
    if (h0 is None or h0.uid not in captured) and (c0 is None or c0.uid not in captured):
        return None
    n = len(captured[op.inputs[0].uid])
    pick = [captured[v.uid] if v is not None and v.uid in captured else [None] * n for v in (h0, c0)]
    return list(zip(*pick))


def initial_values(module: Module, variables: dict[str, tuple]) -> None:
    """The constants assigned to integer variables (the init and reset functions) quantized to their types."""
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind != "ASSIGN_VARIABLE" or shared_name(op.inputs[0]) not in variables:
                continue
            v = op.inputs[1]
            if v.is_const and v.const.dtype == FLOAT32:
                dtype, quant = variables[shared_name(op.inputs[0])]
                op.inputs[1] = fn.const(quantize_values(v.const, quant, dtype), f"{v.name}_{dtype.name}", quant=quant)


def integer_lstm(engine, op: Op, cell_peak: float, int16: bool = False) -> list[str]:
    """The 8x8->16 integer LSTM: int8 input, weights (one scale each), output and output state;
    int32 gate biases at input scale x weight scale; int16 cell state at a power-of-two scale;
    5 intermediates, the last with the output's parameters (the kernel quantizes h with them).

    ``int16``: the 16x8 LSTM of TFLite Micro's kernel (and Vela's): int16 input, output and output state
    (symmetric, zero point 0), int64 gate biases, the rest as above. TFLM's kernel reads no intermediate
    (its gates are Q3.12 in and Q0.15 out, fixed); Vela reads the last for h's parameters. LiteRT has no
    such kernel (it registers the op up to version 4; this is version 5).

    The hidden state (input 18) and the output share one set of parameters (the kernel writes h once, with
    the last intermediate's, and copies it into both): an initial hidden state given to the layer widens
    them to its calibrated range too, so that it is not clipped. The cell state's scale holds the
    calibrated initial cell states as well (``cell_peak``). Returns warnings for the report where a range
    the kernel forces costs the model: an output made coarser by a wider initial state, a cell state
    beyond the largest scale the kernel takes. ``engine``: the int8 engine quantizing the function
    (``int8_engine.Int8Function``: its ranges, function, variables and integer inputs)."""
    act = INT16 if int16 else INT8
    x = op.inputs[0] = engine.integer_input(op.inputs[0], op, act)
    own = engine.ranges[op.outputs[0].uid] if op.outputs[0].uid in engine.ranges else (-1.0, 1.0)
    margin = OUTPUT_MARGIN * (own[1] - own[0])  # h = o * tanh(c) is in (-1, 1): room up to that, not beyond
    lo, hi = max(own[0] - margin, -1.0), min(own[1] + margin, 1.0)
    warnings = []
    h0 = state_source(op, 18)
    if h0 is not None and h0.uid in engine.ranges:  # the initial hidden state shares the output's parameters
        h_lo, h_hi = engine.ranges[h0.uid]
        wider = (min(lo, h_lo), max(hi, h_hi))
        if (wider[1] - wider[0]) > 1.25 * (hi - lo):
            warnings.append(f"LSTM '{op_name(op)}': its initial hidden state reaches [{h_lo:.3g}, {h_hi:.3g}], "
                            f"its output [{own[0]:.3g}, {own[1]:.3g}]; LiteRT's integer LSTM gives both one "
                            f"{act.name} scale, so the output's steps are {(wider[1] - wider[0]) / (hi - lo):.1f}x "
                            "coarser than its own range needs (pass initial states within the output's range, "
                            "as an encoder LSTM's own h is, or keep the layer float with keep_float)")
        lo, hi = wider
    out = int16_params(lo, hi) if int16 else activation_params(lo, hi)
    largest = 2.0 ** (CELL_SCALE_LOG2[1] + 15)
    if cell_peak > largest:
        warnings.append(f"LSTM '{op_name(op)}': its cell state reaches {cell_peak:.3g} in calibration, beyond "
                        f"+-{largest:g}, the widest int16 cell range LiteRT's integer LSTM computes with (scale "
                        f"2^{CELL_SCALE_LOG2[1]}): it is clipped there (keep the layer float with keep_float)")
    for i in (*LSTM_W, *LSTM_R):
        q, quant = symmetric_int8(op.inputs[i].const, None)
        op.inputs[i] = engine.fn.const(q, f"{op.inputs[i].name}_int8", quant=quant)
    bias_type = np.int64 if int16 else np.int32
    for w, i in zip(LSTM_W, LSTM_B):
        scale = np.float64(x.quant.scale[0]) * np.float64(op.inputs[w].quant.scale[0])
        op.inputs[i] = engine.fn.const(int32_bias(op.inputs[i].const, scale, bias_type),
                                     f"{op.inputs[i].name}_{np.dtype(bias_type).name}",
                                     quant=Quantization((float(np.float32(scale)),), (0,)))
    k = cell_scale_log2(cell_peak)
    for i, dtype, quant in ((18, act, out), (19, np.dtype(np.int16), Quantization((2.0 ** k,), (0,)))):
        writer = op.inputs[i].producer  # FILL (zeros) or CAST (a copy of the initial value)
        if writer.kind == "FILL":
            # The zero state, written afresh on every invoke: a QUANTIZE (to the same parameters) of a
            # constant. Not an integer FILL: TFLite Micro's FILL takes a float32 value only.
            source = engine.fn.const(np.full(op.inputs[i].shape, quant.zero_point[0], dtype), "zero_state",
                                   quant=quant)
        else:
            source = writer.inputs[0]
            read = variable_read(op.inputs[i])
            if read is not None:  # a stateful LSTM: its variable holds the state in the kernel's type
                for v in {source.uid: source, read.outputs[0].uid: read.outputs[0]}.values():
                    v.dtype, v.quant = dtype, quant
                engine.variables[shared_name(read.inputs[0])] = (dtype, quant)
            else:  # an initial state computed in the graph
                source = engine.integer_input(source, writer, act)
        # the kernel's state tensor (a variable tensor it updates in place), written by a copy
        state = engine.fn.make_op("tfl.QUANTIZE", [source], [(dtype, source.shape)], name=f"{op.name}/state_{i}")
        state.outputs[0].quant = quant
        state.outputs[0].meta["is_variable"] = True
        engine.fn.ops[engine.fn.ops.index(writer)] = state
        engine.fn.replace_uses(op.inputs[i], state.outputs[0])
    op.attrs["_intermediates"] = [("float32", (0,), None)] * 4 + [(act.name, (0,), out.as_dict())]
    op.attrs.pop("asymmetric_quantize_inputs", None)
    op.outputs[0].dtype, op.outputs[0].quant = act, out
    return warnings
