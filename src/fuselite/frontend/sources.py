"""Turn the user's program (Keras model, SavedModel, concrete functions) into traced entries.

An *entry* is ``(signature_key, concrete_function, input_names, output_names)``.
"""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager

from fuselite.errors import ConversionError, InputError, NeedsStaticLength


def _flat_output_names(structured, prefix="output"):
    import tensorflow as tf

    if isinstance(structured, dict):
        return [str(k) for k in sorted(structured)]
    flat = tf.nest.flatten(structured)
    return [f"{prefix}_{i}" for i in range(len(flat))]


def keras_entries(model, notes: list | None = None, zero_initial=None, input_signature=None,
                  input_shapes: dict | None = None, batch_given: bool = False) -> list:
    """Trace a Keras 3 or tf-keras model in inference mode (notes for the report go to ``notes``).

    Stateful recurrent layers' state variables are marked in ``zero_initial`` (a
    :class:`~fuselite.passes.variables.ZeroInitialVariables`; a new one when not given). ``input_signature``: as
    Keras' ``export`` takes it (one structure of specs per positional argument of the call); default: the
    model's own inputs. ``input_shapes`` ({input name: shape}): the model is traced at them (its Python code may
    branch on a shape). A Sequential model whose batch came from the data that built it (``fit`` without an
    ``Input``: :func:`data_batch`) is an InputError unless ``batch_given`` (the user chose a ``batch_size``, or
    None for a dynamic one); then it is traced with its batch dynamic.
    """
    import tensorflow as tf

    if input_signature is not None:
        return _signature_entries(model, input_signature, notes, zero_initial)
    specs, names, structure = _keras_input_specs(model)
    from_data = data_batch(model)
    if from_data is not None and not batch_given:
        raise InputError(_data_batch_problem(model, from_data))
    if from_data is not None:
        specs = [tf.TensorSpec([None, *s.shape.as_list()[1:]], s.dtype, name=s.name) for s in specs]
    specs = _shaped(specs, names, input_shapes or {})
    struct = getattr(model, "_inputs_struct", None)  # Keras 3 functional: the structure the model was built on
    if structure is not None:  # a subclassed model, called on a list, tuple or dict: that structure again
        fn = tf.function(lambda *xs: model(tf.nest.pack_sequence_as(structure, list(xs)), training=False))
    elif isinstance(struct, dict) and len(struct) == len(specs):  # dict inputs ({"token_ids", "padding_mask"})
        by_name = {getattr(t, "name", "").split(":")[0]: key for key, t in struct.items()}
        keys = [by_name.get(n) for n in names]
        if None in keys:
            keys = list(struct)  # model.inputs follows the dict's order
        fn = tf.function(lambda *xs: model(dict(zip(keys, xs)), training=False))
    elif len(specs) == 1:
        fn = tf.function(lambda x: model(x, training=False))
    else:
        fn = tf.function(lambda *xs: model(list(xs), training=False))
    return _traced_entry(model, fn, specs, names, notes, zero_initial, retype=structure is not None)


def data_batch(model) -> tuple[int, str] | None:
    """(batch, how) where a Keras 3 ``Sequential`` model without an ``Input`` took its batch from the data it was
    built with, else None. Such a model's ``InputLayer`` is the one ``Sequential.build`` adds, for the shape of
    the first batch ``fit`` / ``train_on_batch`` / a call / ``build`` gave (keras/src/models/sequential.py): its
    recorded arguments are a ``batch_shape`` and the first layer's dtype, where ``keras.Input`` records no dtype
    unless given one. A batch of 1 is not reported (its file runs one sample, as the model was built for).
    ``how``: "fit gave it" where the model was trained, else "it was built or called with"."""
    layers = getattr(model, "_layers", None)
    if type(model).__name__ != "Sequential" or not layers or type(layers[0]).__name__ != "InputLayer":
        return None
    config = getattr(getattr(layers[0], "_auto_config", None), "config", None) or {}
    shape = config.get("batch_shape")
    made_by_build = (config.get("dtype") is not None and config.get("shape") is None
                     and config.get("batch_size") is None and config.get("input_tensor") is None)
    if not made_by_build or not shape or not isinstance(shape[0], int) or shape[0] == 1:
        return None
    optimizer = getattr(model, "optimizer", None)
    try:
        trained = optimizer is not None and int(optimizer.iterations.numpy()) > 0
    except (AttributeError, TypeError, ValueError):
        trained = False
    return shape[0], "fit gave it" if trained else "it was built or called with"


def _data_batch_problem(model, found: tuple[int, str]) -> str:
    batch, how = found
    shape = tuple(model._layers[0].batch_shape)
    return (f"Keras model '{model.name}' has no Input: its input shape {shape} is that of the first batch {how}, "
            f"so a file for it would take batches of {batch} only (where the model reshapes, LiteRT fails to "
            f"prepare it for one sample); pass batch_size=1 (the CLI's --batch-size 1) to "
            f"convert it for one sample, batch_size=None for a dynamic batch, batch_size={batch} to keep "
            f"{batch}, or give the model a keras.Input(shape={shape[1:]})")


def _traced_entry(model, fn, specs: list, names: list[str], notes: list | None, zero_initial, retype: bool = False,
                  signature: bool = False) -> list:
    """The entry of ``model`` traced through ``fn`` on ``specs``, its recurrent layers as composites (their notes
    to ``notes``), each op's location its layer where no line of the user's is (``_locate_by_layer``).
    ``retype``: an input the model casts to an integer at once is traced again as one (``_integer_inputs``);
    ``signature``: the specs are the user's ``input_signature`` (a call it does not fit is an InputError)."""
    import tensorflow as tf

    from fuselite.frontend.keras_rnn import recurrent_composites
    from fuselite.passes.variables import ZeroInitialVariables

    with recurrent_composites(model, zero_initial if zero_initial is not None else ZeroInitialVariables()) \
            as layer_notes, _layer_scopes() as scopes:
        cf = _concrete(fn, specs, signature)
        if retype:  # an input the model casts to an integer at once (Embedding ids) is one
            retyped = _integer_inputs(cf, specs)
            if retyped != specs:
                cf = _concrete(fn, retyped, signature)
        if notes is not None:
            notes.extend(n for n in layer_notes if n not in notes)
    _locate_by_layer(cf, model, scopes)
    out_names = getattr(model, "output_names", None)
    n_out = len(tf.nest.flatten(cf.structured_outputs))
    if isinstance(cf.structured_outputs, dict) or not out_names or len(out_names) != n_out \
            or len(set(out_names)) != n_out:  # a dict's keys (keras-hub backbones), as Keras' own export names them
        out_names = _flat_output_names(cf.structured_outputs)
    return [("serving_default", cf, names, list(out_names))]


def traced_in_layers(model, fn, specs: list, signature: bool = False):
    """``fn`` traced on ``specs`` (what its Python code raises: a ConversionError naming the layer and line), each
    op's location the Keras layer it is in where no line of the user's is (errors and the report name it)."""
    with _layer_scopes() as scopes:
        cf = _concrete(fn, specs, signature)
    _locate_by_layer(cf, model, scopes)
    return cf


def _concrete(fn, specs: list, signature: bool):
    """``fn`` traced on ``specs``. What the model's Python code raises while traced is a ConversionError naming
    its layer and line (NeedsStaticLength where it needs a shape the specs leave unknown), an InputError where the
    specs are the user's input_signature and do not fit the call; fuselite's own errors pass as they are."""
    import tensorflow as tf

    try:
        return fn.get_concrete_function(*specs)
    except ConversionError:
        raise
    except tf.errors.OperatorNotAllowedInGraphError as e:  # Python control flow on a tensor
        raise _untraceable(e, specs) from None
    except (TypeError, ValueError) as e:
        if "cannot be interpreted as an integer" in str(e):  # range(T) of a tensor (RWKV-7's time loop)
            raise _untraceable(e, specs, "as a Python integer (a range, a count)") from None
        if signature:
            raise InputError(f"the model cannot be called on input_signature: {_first_line(e)}") from None
        raise _trace_failed(e, specs) from e
    except Exception as e:
        raise _trace_failed(e, specs) from e


def _first_line(e: BaseException) -> str:
    """The reason in an exception's text: after Keras' "Exception encountered when calling X.call()." where it
    wraps one, else the last "SomeError: ..." line of TensorFlow's "in user code:" traceback, else its first."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines[:-1]):
        if "Exception encountered when calling" in ln:
            return lines[i + 1]
    raised = [ln for ln in lines if re.match(r"\w+(Error|Exception): ", ln)]
    return raised[-1] if raised else lines[0] if lines else type(e).__name__


def _where(e: BaseException) -> str:
    """`` in Layer (file.py:12: `code`)``: the Keras layer whose call raised ``e`` (Keras names it in the message)
    and the last line of the model's own code: from the "in user code" frames TensorFlow lists in the message
    (autograph's), else from the traceback; TensorFlow's, Keras' and fuselite's own frames skipped."""
    import traceback

    library = re.compile(r"[\\/](tensorflow|keras[\\/]src|tf_keras|fuselite)[\\/]")
    layer = re.findall(r"calling (\S+)\.call\(\)", str(e))
    where = f" in {layer[-1]}" if layer else ""
    listed = [(path, int(line), code) for path, line, code
              in re.findall(r'File "([^"]+)", line (\d+), in \w+[ \t*]*\n[ \t]+(\S.*)', str(e))]
    frames = [f for f in listed if not library.search(f[0])] or \
        [(f.filename, f.lineno, f.line or "") for f in traceback.extract_tb(e.__traceback__)
         if not library.search(f.filename)]
    if frames:
        path, line, code = frames[-1]
        where += f" ({os.path.basename(path)}:{line}: `{code.strip()}`)"
    return where


def _shapes(specs: list) -> str:
    """``name: (?, 3), ...``: the traced inputs' shapes, unknown dimensions as ``?``."""
    return ", ".join(f"{s.name}: ({', '.join('?' if d is None else str(d) for d in s.shape.as_list())})"
                     for s in specs)


def _trace_failed(e: BaseException, specs: list) -> ConversionError:
    return ConversionError(f"the model's Python code{_where(e)} raised {type(e).__name__} while traced on its "
                           f"inputs ({_shapes(specs)}): {_first_line(e)}")


def _shaped(specs: list, names: list[str], input_shapes: dict) -> list:
    """``specs`` with the ``input_shapes`` given for them (a None there leaves that dimension as it is). A shape
    that does not fit is left for the import to name (``tf_graph._shapes_by_position``: one home for the check)."""
    import tensorflow as tf

    out = []
    for spec, name in zip(specs, names):
        shape, traced = input_shapes.get(name), spec.shape.as_list()
        merged = None if shape is None or len(shape) != len(traced) else \
            [t if d is None else int(d) for d, t in zip(shape, traced)]
        fits = merged is not None and all(t is None or t == m for t, m in zip(traced, merged))
        out.append(tf.TensorSpec(merged, spec.dtype, name=spec.name) if fits else spec)
    return out


def _untraceable(e: Exception, specs: list, use: str = "as a bool") -> ConversionError:
    """A model whose Python code branches on a tensor (``if pad_size > 0:`` with the length unknown) or counts with
    one (``for t in range(T):``): the layer, its line, and the shapes to give. NeedsStaticLength where a dimension
    past the batch is unknown."""
    where = _where(e)
    unknown = [s for s in specs if None in s.shape.as_list()[1:]]
    if unknown:
        shapes = _shapes(unknown)
        return NeedsStaticLength(
            f"the model's Python code{where} uses a tensor {use}, which needs its inputs' shapes known; some "
            f"are not ({shapes}): give them a length, with the input_shapes option (the CLI's --input-shape) or an "
            "input_signature of static shapes")
    return ConversionError(f"the model's Python code{where} uses a tensor {use}, which a traced function "
                           "cannot (use keras.ops.cond / keras.ops.fori_loop, or tf.cond / tf.while_loop)")


@contextmanager
def _layer_scopes():
    """While tracing, the TensorFlow name scope each Keras 3 layer's call opens, as {scope: layer} (Keras 3 names
    a layer's scope after the layer, made unique by TensorFlow: ``repeat_vector_1`` can be the scope of the layer
    ``repeat_vector``); tf-keras' scopes are its layers' names and need no record."""
    scopes: dict[str, object] = {}
    try:
        from keras.src.backend.tensorflow.core import name_scope
    except ImportError:
        yield scopes
        return
    import tensorflow as tf

    enter = name_scope.__enter__
    recording = threading.get_ident()

    def recorded(self):
        entered = enter(self)
        if threading.get_ident() == recording and getattr(self, "caller", None) is not None:
            scopes.setdefault(tf.get_current_name_scope(), self.caller)
        return entered

    name_scope.__enter__ = recorded
    try:
        yield scopes
    finally:
        name_scope.__enter__ = enter


def _signature_entries(model, input_signature, notes: list | None, zero_initial) -> list:
    """The entry of ``model`` traced on ``input_signature``, Keras' ``export`` argument: a list or tuple with one
    structure per positional argument of the call (a bare structure is one argument, as Keras takes it)."""
    import tensorflow as tf

    args = list(input_signature) if isinstance(input_signature, (list, tuple)) else [input_signature]
    try:
        structure = tf.nest.map_structure(_tensor_spec, args)
    except (TypeError, ValueError) as e:
        raise InputError(f"input_signature: {e}") from None
    flat = tf.nest.flatten(structure)
    if not flat:
        raise InputError("input_signature names no input")
    paths = [p for p, _ in _leaf_paths(args)]
    names = [spec.name or _path_name(path[1:] if len(args) == 1 else path, "input") for spec, path in zip(flat, paths)]
    if len(set(names)) != len(names):
        raise InputError(f"input_signature: inputs named twice ({', '.join(sorted(names))}): give each "
                         "tf.TensorSpec its own name")
    specs = [tf.TensorSpec(s.shape, s.dtype, name=n) for s, n in zip(flat, names)]
    structure = tf.nest.pack_sequence_as(structure, specs)
    fn = tf.function(lambda *xs: model(*tf.nest.pack_sequence_as(structure, list(xs)), training=False))
    return _traced_entry(model, fn, specs, names, notes, zero_initial, signature=True)


def _tensor_spec(x):
    """A ``tf.TensorSpec`` of ``x``: a ``tf.TensorSpec``, a ``keras.InputSpec`` or a Keras tensor (as Keras'
    ``export`` takes them)."""
    import tensorflow as tf

    if isinstance(x, tf.TensorSpec):
        return x
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"{x!r} is not a tf.TensorSpec, keras.InputSpec or Keras tensor with a shape and a dtype")
    name = getattr(x, "name", None)
    return tf.TensorSpec(list(shape), tf.as_dtype(dtype), name=name.split(":")[0] if isinstance(name, str) else None)


def _locate_by_layer(cf, model, scopes: dict) -> None:
    """Where an op of the traced model has no line of the user's own code (a built-in layer of a functional or
    sequential model: only the ``convert()`` call is the user's), its location names the Keras layer whose
    scope it is in instead, e.g. "Keras layer 'repeat_vector' (RepeatVector)", for errors and the report: the
    innermost scope a Keras 3 layer opened (``scopes``), or a tf-keras layer's own name."""
    from fuselite.frontend.tf_graph import user_location

    try:
        layers = {layer.name: layer for layer in model._flatten_layers(include_self=False)}
    except (AttributeError, TypeError):
        return
    for op in cf.graph.get_operations():
        if user_location(op) is not None:
            continue
        parts = op.name.split("/")[:-1]
        for k in range(len(parts), 0, -1):
            layer = scopes.get("/".join(parts[:k])) if scopes else layers.get(parts[k - 1])
            if layer is not None and layer is not model:
                op._fuselite_location = f"Keras layer '{layer.name}' ({type(layer).__name__})"
                break


def _integer_inputs(cf, specs: list) -> list:
    """``specs`` with each float input that the traced function only casts to an integer type (Keras'
    ``Embedding`` casts its ids to int32) given that type: a subclassed model records its inputs' shapes, not
    their dtypes (``input_dtype`` is one float for all), and the model was called with integer ids."""
    import tensorflow as tf

    graph = cf.graph
    placeholders = [t for t in graph.inputs if t.dtype != tf.resource][:len(specs)]
    retyped = []
    for spec, t in zip(specs, placeholders):
        users = [c for c in t.consumers() if c.type != "NoOp"]
        casts = {c.get_attr("DstT") for c in users if c.type == "Cast"}
        if spec.dtype.is_floating and users and len(casts) == 1 and all(c.type == "Cast" for c in users) \
                and next(iter(casts)).is_integer:
            spec = tf.TensorSpec(spec.shape, next(iter(casts)), name=spec.name)
        retyped.append(spec)
    return retyped


def _keras_input_specs(model) -> tuple[list, list[str], object]:
    """The model's input specs, their names and, for a subclassed model called on a list, tuple or dict, that
    structure (of specs; else None): its ``inputs`` (functional and sequential models), or for a subclassed
    model the shapes of the call that built it (Keras 3: ``_build_shapes_dict`` and ``input_dtype``; tf-keras:
    ``save_spec()``), the batch dimension left dynamic."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if inputs:
        specs, names = [], []
        for i, t in enumerate(inputs):
            name = (getattr(t, "name", None) or f"input_{i}").split(":")[0]
            specs.append(tf.TensorSpec(list(t.shape), tf.as_dtype(t.dtype), name=name))
            names.append(name)
        return specs, names, None
    save_spec = getattr(model, "save_spec", None)  # tf-keras, once called or fit
    if callable(save_spec):
        saved = save_spec(dynamic_batch=True)
        if saved is not None:
            args, kwargs = saved
            flat = tf.nest.flatten(args)
            if not kwargs and flat and all(isinstance(t, tf.TensorSpec) for t in flat) and len(args) == 1:
                if isinstance(args[0], tf.TensorSpec):
                    names = [(flat[0].name or "input_0").split(":")[0]]
                    return [tf.TensorSpec(flat[0].shape, flat[0].dtype, name=names[0])], names, None
                return _structured_specs(args[0], [(t.shape, t.dtype) for t in tf.nest.flatten(args[0])], "input")
    shapes = getattr(model, "_build_shapes_dict", None)  # Keras 3, once called or built
    if shapes and len(shapes) == 1 and _positional_arguments(model) <= 1:
        key, shape = next(iter(shapes.items()))
        name = key[:-len("_shape")] if key.endswith("_shape") else key
        dtype = tf.as_dtype(getattr(model, "input_dtype", None) or "float32")
        if _is_shape(shape) and shape:
            return [tf.TensorSpec([None, *shape[1:]], dtype, name=name)], [name], None
        structure = _plain(shape)
        leaves = tf.nest.flatten(structure, expand_composites=False) if structure is not None else []
        if leaves and all(isinstance(s, _Shape) and s.dims for s in leaves):
            return _structured_specs(structure, [([None, *s.dims[1:]], dtype) for s in leaves], name)
    raise InputError(
        f"Keras model '{getattr(model, 'name', model)}' has no known inputs: build it first "
        "(give it a keras.Input or call it once on data: one tensor, or a list, tuple or dict of them as its "
        "first argument; a model whose call takes several tensor arguments must be wrapped in a functional "
        "model, or given an input_signature with fuselite.export)"
    )


def _positional_arguments(model) -> int:
    """How many tensor arguments a subclassed model's ``call`` takes without defaults (Keras records the first's
    shapes only)."""
    import inspect

    try:
        params = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


class _Shape:
    """One input's shape in a subclassed model's recorded structure (a leaf for ``tf.nest``)."""

    def __init__(self, dims):
        self.dims = list(dims)


def _is_shape(x) -> bool:
    return isinstance(x, (tuple, list)) and all(d is None or isinstance(d, int) for d in x)


def _plain(structure):
    """Keras' recorded input structure (tracked lists / dicts of shape tuples) as plain Python containers with
    :class:`_Shape` leaves, or None where it holds something else."""
    if _is_shape(structure) and structure:
        return _Shape(structure)
    if isinstance(structure, dict):
        items = {str(k): _plain(v) for k, v in structure.items()}
        return None if None in items.values() else items
    if isinstance(structure, (list, tuple)):
        items = [_plain(v) for v in structure]
        return None if None in items or not items else (tuple(items) if isinstance(structure, tuple) else items)
    return None


def _structured_specs(structure, leaves: list, prefix: str) -> tuple[list, list[str], object]:
    """(specs, names, the structure of specs) for a structure whose flattened leaves are ``leaves`` ((shape,
    dtype) each): a dict's inputs are named by their keys, a list's or tuple's ``<prefix>_<i>``."""
    import tensorflow as tf

    paths = [p for p, _ in _leaf_paths(structure)]
    names = [_path_name(p, prefix) for p in paths]
    specs = [tf.TensorSpec(shape, dtype, name=n) for (shape, dtype), n in zip(leaves, names)]
    return specs, names, tf.nest.pack_sequence_as(structure, specs)


def _leaf_paths(structure, path=()):
    """(path, leaf) of every leaf, in ``tf.nest``'s order (dict keys sorted)."""
    if isinstance(structure, dict):
        for k in sorted(structure):
            yield from _leaf_paths(structure[k], (*path, k))
    elif isinstance(structure, (list, tuple)):
        for i, v in enumerate(structure):
            yield from _leaf_paths(v, (*path, i))
    else:
        yield path, structure


def _path_name(path: tuple, prefix: str) -> str:
    if path and all(isinstance(p, str) for p in path):
        return "_".join(path)
    return "_".join([prefix, *(str(p) for p in path)])


def saved_model_entries(path, signature_keys=None, tags=None) -> tuple[list, object]:
    """Load a SavedModel and return its signatures as entries (plus the loaded object)."""
    import tensorflow as tf

    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"SavedModel not found: '{path}' does not exist")
    if not os.path.isdir(path) or not any(
        os.path.exists(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")
    ):
        raise InputError(f"'{path}' is not a SavedModel directory (no saved_model.pb inside)")
    pb = os.path.join(path, "saved_model.pb")
    if os.path.exists(pb) and os.path.getsize(pb) == 0:
        raise InputError(f"'{path}' is not a usable SavedModel: its saved_model.pb is empty (an interrupted save?)")
    try:
        loaded = tf.saved_model.load(path, tags=tags)
    except Exception as e:  # corrupt protobuf, wrong tags, missing variables...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"cannot read SavedModel at '{path}': {first}") from None
    available = list(loaded.signatures.keys())
    if not available:
        raise InputError(f"SavedModel at '{path}' has no signatures; save it with signatures=... or export()")
    if isinstance(signature_keys, (str, bytes)):
        raise InputError(f"signature_keys is a list of keys, got the string {signature_keys!r}: pass "
                         f"[{signature_keys!r}]")
    if signature_keys:
        keys = list(signature_keys)
    else:  # like tf.lite.TFLiteConverter: the default signature, else all of them
        keys = ["serving_default"] if "serving_default" in available else sorted(available)
    missing = [k for k in keys if k not in loaded.signatures]
    if missing:
        raise InputError(
            f"signature key(s) {', '.join(map(repr, missing))} not in SavedModel '{path}'; "
            f"available: {', '.join(map(repr, available))}"
        )
    entries = []
    for key in keys:
        cf = loaded.signatures[key]
        in_names = sorted(cf.structured_input_signature[1].keys())
        out_names = _flat_output_names(cf.structured_outputs)
        entries.append((key, cf, in_names, out_names))
    return entries, loaded


def concrete_function_entries(funcs) -> list:
    if hasattr(funcs, "graph") and hasattr(funcs, "structured_outputs"):
        raise InputError("from_concrete_functions takes a list of concrete functions, as "
                         "tf.lite.TFLiteConverter does: pass [f.get_concrete_function(...)]")
    if not hasattr(funcs, "__iter__"):
        raise InputError(f"from_concrete_functions takes a list of concrete functions, got {type(funcs).__name__}")
    keys = None
    if isinstance(funcs, dict):
        keys = [str(k) for k in funcs]
        if any(not k for k in keys):
            raise InputError("from_concrete_functions: a signature key is empty")
        funcs = list(funcs.values())
    funcs = list(funcs)
    if not funcs:
        raise InputError("no concrete functions given")
    entries = []
    for i, cf in enumerate(funcs):
        if not hasattr(cf, "graph") or not hasattr(cf, "structured_outputs"):
            raise InputError(
                f"argument {i} is a {type(cf).__name__}, not a ConcreteFunction "
                "(call .get_concrete_function(...) on your tf.function)"
            )
        key = keys[i] if keys else "serving_default" if len(funcs) == 1 else getattr(cf, "name", f"fn_{i}")
        if isinstance(key, bytes):
            key = key.decode()
        captured = {id(t) for t in cf.graph.internal_captures}
        in_names = [t.op.name for t in cf.graph.inputs if id(t) not in captured]
        entries.append((key, cf, in_names, _flat_output_names(cf.structured_outputs)))
    return entries
