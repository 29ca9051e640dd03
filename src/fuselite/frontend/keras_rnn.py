"""Recognise Keras recurrent layers from the Keras objects and mark them as composites.

While a Keras model is traced, each ``LSTM``, ``SimpleRNN`` and ``Bidirectional`` of
them (Keras 3 and tf-keras) runs through a ``tf.function`` whose
``experimental_implements`` names the layer type and carries its configuration;
its weights are arguments. The body is the layer's own computation, so a composite
that the fusion rules decline (``fuselite.fusion.rnn``) still converts exactly.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

from fuselite.fusion.implements import implements
from fuselite.fusion.rnn_kit import GATE_ORDERS

RECURRENT = ("LSTM", "SimpleRNN", "GRU")


def _flavour(layer) -> str | None:
    mod = type(layer).__module__
    if mod.startswith("keras.") or mod.startswith("tf_keras."):
        return mod.split(".")[0]
    return None


def _kind(layer) -> str | None:
    if _flavour(layer) is None:
        return None
    name = type(layer).__name__
    if name in RECURRENT:
        return name
    if name == "Bidirectional" and type(layer.forward_layer).__name__ in RECURRENT and \
            type(layer.forward_layer).__name__ == type(layer.backward_layer).__name__:
        return name
    return None


def _act_name(fn) -> str:
    return getattr(fn, "__name__", str(fn))


def _config(layer) -> dict:
    cell = getattr(layer, "cell", layer)
    cfg = {
        "units": int(layer.units),
        "activation": _act_name(cell.activation),
        "return_sequences": bool(layer.return_sequences),
        "return_state": bool(layer.return_state),
        "go_backwards": bool(layer.go_backwards),
        "stateful": bool(layer.stateful),
        "time_major": bool(getattr(layer, "time_major", False)),
        "use_bias": bool(cell.use_bias),
    }
    if hasattr(cell, "recurrent_activation"):
        cfg["recurrent_activation"] = _act_name(cell.recurrent_activation)
    if hasattr(cell, "reset_after"):
        cfg["reset_after"] = bool(cell.reset_after)
    return cfg


def _weights(layer, n_gates: int):
    import tensorflow as tf

    cell = layer.cell
    units = int(layer.units)
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
    return len(GATE_ORDERS["keras", kind])


def _cells(layer, kind: str) -> list:
    if kind == "Bidirectional":
        return [layer.forward_layer.cell, layer.backward_layer.cell]
    return [layer.cell]


@contextmanager
def _weights_bound(cells, tensors):
    """Let the cells compute with ``tensors`` instead of their variables.

    TensorFlow forbids an ``experimental_implements`` function to capture variables,
    so the composite body must read the weights from its arguments.
    """
    saved = []
    for i, cell in enumerate(cells):
        for j, attr in enumerate(("kernel", "recurrent_kernel", "bias")):
            if attr == "bias" and not cell.use_bias:
                continue
            saved.append((cell, attr, cell.__dict__.get(attr)))
            object.__setattr__(cell, attr, tensors[3 * i + j])
        for attr in ("dropout", "recurrent_dropout"):  # inference: dropout is a no-op
            if attr in cell.__dict__:
                saved.append((cell, attr, cell.__dict__[attr]))
                object.__setattr__(cell, attr, 0.0)
    try:
        yield
    finally:
        for cell, attr, value in saved:
            object.__setattr__(cell, attr, value)


def _call_layer(layer, x, initial_state, mask):
    kwargs = {"mask": mask, "training": False}
    if initial_state is not None:
        kwargs["initial_state"] = initial_state
    return layer._fuselite_original_call(x, **kwargs)


@contextmanager
def _stateless_with_states(layer):
    """Run a stateful layer as a stateless one that returns its final states.

    The composite must not touch the layer's state variables (TensorFlow forbids an
    ``experimental_implements`` function to capture them), so the caller reads them
    into the initial-state arguments and assigns the returned final states itself.
    """
    saved = {a: getattr(layer, a) for a in ("stateful", "return_state")}  # tf-keras: properties
    object.__setattr__(layer, "stateful", False)
    object.__setattr__(layer, "return_state", True)
    try:
        yield
    finally:
        for attr, value in saved.items():
            object.__setattr__(layer, attr, value)


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
        attrs.update(layer=inner, merge_mode=str(layer.merge_mode).lower(),
                     backward_go_backwards=bool(layer.backward_layer.go_backwards))
        interface = "keras.layers.Bidirectional"
    else:
        attrs = _config(layer)
        interface = f"keras.layers.{kind}"

    def call(inputs, *args, initial_state=None, mask=None, training=None, **kwargs):
        if args or kwargs.get("constants") is not None:
            return layer._fuselite_original_call(inputs, *args, initial_state=initial_state, mask=mask,
                                                 training=False, **kwargs)
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else (
            [initial_state] if initial_state is not None else [])
        state_vars = []
        if kind == "Bidirectional" and getattr(layer.forward_layer, "stateful", False):
            notes.append(f"Bidirectional layer '{layer.name}' is stateful: its directions are converted as "
                          "two stateful layers (two sequence ops), not one bidirectional op")
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
            with _weights_bound(_cells(layer, kind), rest[:n_w]), \
                    (_stateless_with_states(layer) if state_vars else nullcontext()):
                out = _call_layer(layer, x, st, m)
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
    found: list = []
    notes: list[str] = []
    if hasattr(model, "_flatten_layers"):
        _find(model, found, {id(model)})
    saved = []
    for layer, kind in found:
        saved.append((layer, layer.__dict__.get("call")))
        object.__setattr__(layer, "_fuselite_original_call", layer.call)
        object.__setattr__(layer, "call", _make_call(layer, kind, notes, zero_initial))
    try:
        yield notes
    finally:
        for layer, own_call in saved:
            if own_call is None:
                object.__delattr__(layer, "call")
            else:
                object.__setattr__(layer, "call", own_call)
            object.__delattr__(layer, "_fuselite_original_call")
