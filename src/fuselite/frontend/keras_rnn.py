"""Recognise Keras recurrent layers from the Keras objects and mark them as composites.

While a Keras model is traced, each ``LSTM``, ``SimpleRNN`` and ``Bidirectional`` of
them (Keras 3 and tf-keras) runs through a ``tf.function`` whose
``experimental_implements`` names the layer type and carries its configuration;
its weights are arguments. The body is the layer's own computation, so a composite
that the fusion rules decline (``fuselite.rnn.sources.keras_layers``) still converts exactly.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from fuselite.fusion.implements import implements
from fuselite.rnn.kit import GATE_ORDERS

RECURRENT = ("LSTM", "SimpleRNN", "GRU")
CONVOLUTIONAL = ("ConvLSTM2D",)  # composites of their own (rnn/cells/conv_lstm.py); not in Bidirectional

# Tracing replaces attributes of the model's layers (their ``call``, a cell's weights) for as long as
# the trace runs: one trace at a time, so that two conversions of one model in two threads never
# wrap each other's replacements. Only the trace is serialised; the rest of a conversion is not.
_TRACE_LOCK = threading.RLock()
_tracing = threading.local()  # .model: the model this thread is tracing


def _flavour(layer) -> str | None:
    mod = type(layer).__module__
    if mod.startswith("keras.") or mod.startswith("tf_keras."):
        return mod.split(".")[0]
    return None


def _kind(layer) -> str | None:
    if _flavour(layer) is None:
        return None
    name = type(layer).__name__
    if name in RECURRENT or name in CONVOLUTIONAL:
        return name
    if name == "Bidirectional" and type(layer.forward_layer).__name__ in RECURRENT and \
            type(layer.forward_layer).__name__ == type(layer.backward_layer).__name__:
        return name
    return None


def _act_name(fn) -> str:
    return getattr(fn, "__name__", str(fn))


def _units(layer) -> int:
    """An RNN's units, a convolutional RNN's filters."""
    return int(layer.units) if hasattr(layer, "units") else int(layer.filters)


def _config(layer) -> dict:
    cell = getattr(layer, "cell", layer)
    cfg = {
        "units": _units(layer),
        "activation": _act_name(cell.activation),
        "return_sequences": bool(layer.return_sequences),
        "return_state": bool(layer.return_state),
        "go_backwards": bool(layer.go_backwards),
        "stateful": bool(layer.stateful),
        "time_major": bool(getattr(layer, "time_major", False)),
        "use_bias": bool(cell.use_bias),
        "flavour": _flavour(layer),  # "keras" or "tf_keras" (the default forms differ: rnn/forms/policy.py)
        "layer_name": str(layer.name),  # the layer, as errors and the report name it
    }
    if hasattr(cell, "recurrent_activation"):
        cfg["recurrent_activation"] = _act_name(cell.recurrent_activation)
    if hasattr(cell, "reset_after"):
        cfg["reset_after"] = bool(cell.reset_after)
    if getattr(layer, "zero_output_for_mask", False):  # masked steps output zeros (Bidirectional sequences)
        cfg["zero_output_for_mask"] = True
    if type(layer).__name__ in CONVOLUTIONAL:
        cfg.update(kernel_size=[int(k) for k in cell.kernel_size], strides=[int(k) for k in cell.strides],
                   dilation_rate=[int(k) for k in cell.dilation_rate], padding=str(cell.padding).lower(),
                   data_format=str(cell.data_format))
    return cfg


def _weights(layer, n_gates: int):
    import tensorflow as tf

    cell = layer.cell
    units = _units(layer)
    shape = [2, n_gates * units] if getattr(cell, "reset_after", False) else [n_gates * units]
    bias = cell.bias if cell.use_bias else tf.zeros(shape, cell.kernel.dtype)
    return [_tensor(cell.kernel), _tensor(cell.recurrent_kernel), _tensor(bias)]


def _tensor(v):
    """Keras 3 variables and tf.Variables as tensors (read in the caller's graph)."""
    import tensorflow as tf

    try:
        return tf.convert_to_tensor(v)
    except (TypeError, ValueError):
        return tf.convert_to_tensor(v.value)


def _gates(kind: str) -> int:
    return 4 if kind in CONVOLUTIONAL else len(GATE_ORDERS["keras", kind])


def _view(obj, **attrs):
    """A shallow copy of ``obj`` with ``attrs`` set on the copy only: what a trace changes, no other thread
    using the model sees."""
    view = object.__new__(type(obj))  # not copy.copy: a Keras 3 object's __reduce__ saves the whole model
    view.__dict__.update(obj.__dict__)
    for key, value in attrs.items():
        object.__setattr__(view, key, value)
    return view


def _cell_view(cell, tensors):
    """The cell computing with ``tensors`` (kernel, recurrent kernel, bias) instead of its variables, dropout
    off (inference). TensorFlow forbids an ``experimental_implements`` function to capture variables, so the
    composite body reads the weights from its arguments."""
    attrs = {"kernel": tensors[0], "recurrent_kernel": tensors[1]}
    if cell.use_bias:
        attrs["bias"] = tensors[2]
    attrs.update({a: 0.0 for a in ("dropout", "recurrent_dropout") if a in cell.__dict__})
    return _view(cell, **attrs)


def _traced_view(layer, kind: str, tensors, stateless: bool):
    """The layer as the composite's body runs it: over cells bound to the weight arguments; a stateful
    layer as a stateless one that returns its final states (the caller reads and assigns the state
    variables: the composite must not capture them)."""
    def one(rnn, weights):
        attrs = {"cell": _cell_view(rnn.cell, weights)}
        if stateless:
            attrs.update(stateful=False, return_state=True)  # tf-keras: properties, set on the view
        return _view(rnn, **attrs)

    if kind == "Bidirectional":
        return _view(layer, forward_layer=one(layer.forward_layer, tensors[:3]),
                     backward_layer=one(layer.backward_layer, tensors[3:6]))
    return one(layer, tensors)


def _call_layer(layer, view, x, initial_state, mask):
    """The layer's own ``call`` (as before fuselite replaced it) run on ``view``."""
    kwargs = {"mask": mask, "training": False}
    if initial_state is not None:
        kwargs["initial_state"] = initial_state
    return layer._fuselite_original_call.__func__(view, x, **kwargs)


def _start_from_zero_state(layer, state_vars, notes: list, zero_initial) -> None:
    """The converted model starts from, and resets to, zero state, as ``reset_states()`` does."""
    import numpy as np
    import tensorflow as tf

    for v in state_vars:
        zero_initial.mark(v)
    with tf.init_scope():  # the current values, read eagerly while tracing
        nonzero = any(np.any(np.asarray(_tensor(v))) for v in state_vars)
    if nonzero:
        notes.append(f"stateful {type(layer).__name__} layer '{layer.name}' has a non-zero state now; the "
                      "converted model starts from zero state (as after reset_states())")


def _state_variables(layer) -> list:
    """A stateful layer's state variables (built with the layer), in Keras' order."""
    import tensorflow as tf

    states = getattr(layer, "states", None)
    return [s for s in tf.nest.flatten(states) if s is not None] if states is not None else []


def _make_call(layer, kind: str, notes: list, zero_initial):
    import tensorflow as tf

    if kind == "Bidirectional":
        inner = type(layer.forward_layer).__name__
        attrs = _config(layer.forward_layer)
        attrs.update(layer=inner, layer_name=str(layer.name), merge_mode=str(layer.merge_mode).lower(),
                     backward_go_backwards=bool(layer.backward_layer.go_backwards))
        interface = "keras.layers.Bidirectional"
    else:
        attrs = _config(layer)
        interface = f"keras.layers.{kind}"

    def call(inputs, *args, initial_state=None, mask=None, training=None, **kwargs):
        if getattr(_tracing, "model", None) is None:  # another thread using the model meanwhile: Keras' own
            return layer._fuselite_original_call(inputs, *args, initial_state=initial_state, mask=mask,
                                                 training=training, **kwargs)
        if args or kwargs.get("constants") is not None:
            return layer._fuselite_original_call(inputs, *args, initial_state=initial_state, mask=mask,
                                                 training=False, **kwargs)
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else (
            [initial_state] if initial_state is not None else [])
        state_vars = []
        if kind == "Bidirectional" and getattr(layer.forward_layer, "stateful", False):
            notes.append(f"Bidirectional layer '{layer.name}' is stateful: its directions are converted as "
                          "two stateful layers (two sequence ops), not one bidirectional op")
            for direction in (layer.forward_layer, layer.backward_layer):  # Keras' own call reads their state
                _start_from_zero_state(direction, _state_variables(direction), notes, zero_initial)
            return layer._fuselite_original_call(inputs, initial_state=initial_state, mask=mask, training=False)
        if kind != "Bidirectional" and getattr(layer, "stateful", False):
            state_vars = _state_variables(layer)
            if states or not state_vars:  # an initial state given to a stateful layer: Keras' own rules
                notes.append(f"{kind} layer '{layer.name}' is stateful and "
                              f"{'receives an initial state' if states else 'has no state variables'}: "
                              "it is converted without fusion")
                return layer._fuselite_original_call(inputs, initial_state=initial_state, mask=mask,
                                                     training=False)
            states = [_tensor(v) for v in state_vars]
            _start_from_zero_state(layer, state_vars, notes, zero_initial)
        if kind == "Bidirectional":
            n = _gates(attrs["layer"])
            weights = _weights(layer.forward_layer, n) + _weights(layer.backward_layer, n)
        else:
            weights = _weights(layer, _gates(kind))
        spec = dict(attrs, has_mask=mask is not None, n_initial_states=len(states))
        if state_vars:  # the composite itself is stateless: states in, final states out
            spec.update(stateful=False, state_variables=True, return_state=True)
        n_w, n_s = len(weights), len(states)

        @tf.function(experimental_implements=implements(interface, **spec), autograph=False)
        def composite(x, *rest):
            st = list(rest[n_w:n_w + n_s]) or None
            m = rest[n_w + n_s] if mask is not None else None
            out = _call_layer(layer, _traced_view(layer, kind, rest[:n_w], bool(state_vars)), x, st, m)
            return list(out) if isinstance(out, (list, tuple)) else out

        extra = [mask] if mask is not None else []
        try:
            out = composite(inputs, *weights, *states, *extra)
            if not state_vars:
                return out
            for var, final in zip(state_vars, out[1:]):
                var.assign(final)
            return out if layer.return_state else out[0]
        except Exception as e:  # the layer does something the composite cannot capture
            notes.append(f"{kind} layer '{layer.name}' is converted without fusion: it could not be "
                          f"traced as a composite ({type(e).__name__}: {str(e).strip().splitlines()[0][:200]})")
            return layer._fuselite_original_call(inputs, initial_state=initial_state, mask=mask, training=False)

    return call


def _find(layer, found: list, seen: set) -> None:
    for child in layer._flatten_layers(include_self=False, recursive=False):
        if id(child) in seen:
            continue
        seen.add(id(child))
        kind = _kind(child)
        if kind:
            found.append((child, kind))
            continue  # a Bidirectional's own LSTMs are handled by its composite
        _find(child, found, seen)


@contextmanager
def recurrent_composites(model, zero_initial):
    """While active, the model's recurrent layers trace as fuselite composites.

    Yields the list of notes for the report (layers traced without fusion, and why);
    stateful layers' state variables are marked in ``zero_initial``
    (:class:`~fuselite.passes.variables.ZeroInitialVariables`).
    """
    with _TRACE_LOCK:
        found: list = []
        notes: list[str] = []
        if hasattr(model, "_flatten_layers"):
            _find(model, found, {id(model)})
        saved = []
        for layer, kind in found:
            saved.append((layer, layer.__dict__.get("call")))
            object.__setattr__(layer, "_fuselite_original_call", layer.call)
            object.__setattr__(layer, "call", _make_call(layer, kind, notes, zero_initial))
        outer, _tracing.model = getattr(_tracing, "model", None), model
        try:
            yield notes
        finally:
            _tracing.model = outer
            for layer, own_call in saved:
                if own_call is None:
                    object.__delattr__(layer, "call")
                else:
                    object.__setattr__(layer, "call", own_call)
                object.__delattr__(layer, "_fuselite_original_call")
