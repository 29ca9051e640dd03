"""What is inside a ``.tflite`` file: ``fuselite inspect MODEL.tflite [--json]``.

Reads any TFLite flatbuffer (fuselite's or another converter's) with the layout of LiteRT's own
schema bindings, each read bounds-checked and the file validated first
(:mod:`fuselite.tflite.validate`: a damaged or hostile file is one :class:`InputError`); runs
nothing. :func:`describe` returns a plain dict (what ``--json`` prints),
:func:`format_description` the text a person reads:

- signatures: each input and output with its tensor name, shape (``-1`` for a dynamic
  dimension) and dtype;
- per subgraph, the ops by kind (most frequent first), tensors and ops counted;
- bytes by tensor kind: weights (tensors with data in the file), activations (the
  other tensors' sizes at their written shapes), and the file itself;
- quantization: quantized tensors by dtype, and per-channel ones;
- variables: resource variables (``VAR_HANDLE`` shared names) and ``is_variable``
  tensors (the in-place state of sequence ops);
- metadata: the model description, ``min_runtime_version``, ``CONVERSION_METADATA``
  (decoded here, without TensorFlow) and the names of the other metadata entries.

Example::

    info = describe(open("model.tflite", "rb").read())
    info["signatures"]["serving_default"]["inputs"]   # [{"name": "x", "shape": [1, 50, 32], ...}]
    print(format_description(info))
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from fuselite.errors import InputError

_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
           8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 13: "resource",
           14: "variant", 15: "uint32", 16: "uint16", 17: "int4", 18: "bfloat16"}
_ITEMSIZE = {"float32": 4, "float16": 2, "int32": 4, "uint8": 1, "int64": 8, "bool": 1, "int16": 2,
             "complex64": 8, "int8": 1, "float64": 8, "complex128": 16, "uint64": 8, "uint32": 4, "uint16": 2,
             "bfloat16": 2}


def load_model(data: bytes):
    """The flatbuffer as LiteRT's object API ``ModelT``; an :class:`InputError` if it is not one, or not a valid
    one (:func:`fuselite.tflite.validate.validate_model`: bounds, indices, cycles, constants, checked before the
    object API reads a byte of it)."""
    from ai_edge_litert import schema_py_generated as schema

    from fuselite.tflite.validate import validate_model

    if len(data) < 8 or data[4:8] != b"TFL3":
        raise InputError("not a TFLite model: a .tflite file has the identifier 'TFL3' at bytes 4-8")
    validate_model(data)
    try:
        return schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    except Exception as e:  # a truncated or corrupt file
        raise InputError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None


def _op_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _text(b) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")


def _indices(vector) -> list[int]:  # an int vector of the object API: a numpy array, a list, or None
    return [int(i) for i in vector] if vector is not None else []


def _tensor_info(t) -> dict:
    shape = list(t.shapeSignature) if t.shapeSignature is not None and len(t.shapeSignature) else \
        list(t.shape if t.shape is not None else [])
    info = {"name": _text(t.name), "shape": [int(d) for d in shape], "dtype": _DTYPES.get(t.type, str(t.type))}
    q = t.quantization
    if q is not None and q.scale is not None and len(q.scale):
        scales = np.asarray(q.scale, np.float64)
        info["quantization"] = ({"scale": float(scales[0]), "zero_point": int(q.zeroPoint[0])} if len(scales) == 1
                                else {"per_channel": len(scales), "axis": int(q.quantizedDimension)})
    return info


# conversion_metadata.fbs: ModelType and ModelOptimizationMode
_MODEL_TYPES = {0: "none", 1: "tf_saved_model", 2: "keras_model", 3: "tf_concrete_functions", 4: "tf_graph_def",
                5: "tf_session", 6: "jax", 7: "pytorch"}
_OPTIMIZATION_MODES = {1001: "ptq_float16", 1002: "ptq_dynamic_range", 1003: "ptq_full_integer", 1004: "ptq_int16",
                       2000: "quantization_aware_training", 3001: "random_sparsity", 3002: "block_sparsity",
                       3003: "structured_sparsity"}


def _conversion_metadata(buf: bytes) -> dict | None:
    """The ``CONVERSION_METADATA`` buffer (``tensorflow/lite/schema/conversion_metadata.fbs``) decoded without
    TensorFlow: ``environment`` (field 0: ``tensorflowVersion``, string field 0; ``modelType``, int field 2) and
    ``options`` (field 1: ``modelOptimizationModes``, [int] field 0); None if the buffer is not such a flatbuffer."""
    from flatbuffers import encode, packer
    from flatbuffers.number_types import Int32Flags
    from flatbuffers.table import Table

    if not buf:
        return None

    def slot(table: Table | None, index: int) -> int:  # the field's vtable offset, 0 if absent
        return table.Offset(4 + 2 * index) if table is not None else 0

    def child(table: Table, index: int) -> Table | None:
        o = slot(table, index)
        return Table(buf, table.Indirect(table.Pos + o)) if o else None

    try:
        root = Table(buf, encode.Get(packer.uoffset, buf, 0))
        env, options = child(root, 0), child(root, 1)
        version, kind, modes = slot(env, 0), slot(env, 2), slot(options, 0)
        model_type = None
        if env is not None:
            code = env.Get(Int32Flags, env.Pos + kind) if kind else 0  # the schema's default: NONE
            model_type = _MODEL_TYPES.get(code, str(code))
        codes = [options.Get(Int32Flags, options.Vector(modes) + 4 * j) for j in range(options.VectorLen(modes))] \
            if modes else []
        return {"tensorflow_version": _text(env.String(env.Pos + version)) if version else "",
                "model_type": model_type,
                "optimization_modes": [_OPTIMIZATION_MODES.get(m, str(m)) for m in codes]}
    except Exception:  # not a conversion-metadata flatbuffer (another tool's, or damaged)
        return None


def describe(data: bytes) -> dict:
    """Everything :mod:`fuselite.inspect` reports about the model ``data`` (bytes), as a plain dict. The file is
    validated first (:func:`fuselite.tflite.validate.validate_model`: an :class:`InputError` naming what is wrong)
    and read by the validator's own reader, in time in proportion to its size."""
    from fuselite.tflite.validate import model_view

    m = model_view(data)
    names = _op_names()
    codes = [(names.get(max(c.builtinCode, c.deprecatedBuiltinCode), "?") if c.customCode is None
              else f"CUSTOM({_text(c.customCode)})") for c in (m.operatorCodes or [])]
    buffers = m.buffers or []

    def data_bytes(t) -> int:  # inline, or after the flatbuffer (Buffer.offset / size: valid above 1)
        if not 0 < t.buffer < len(buffers):
            return 0
        b = buffers[t.buffer]
        return len(b.data) if b.data is not None else (b.size if b.offset > 1 else 0)

    def has_data(t) -> bool:
        return data_bytes(t) > 0

    subgraphs, weights, activations = [], 0, 0
    quantized: Counter = Counter()
    per_channel = 0
    variables, state_tensors = set(), []
    for sg in m.subgraphs or []:
        tensors = sg.tensors or []
        ops = Counter(codes[op.opcodeIndex] for op in (sg.operators or []))
        subgraphs.append({"name": _text(sg.name), "ops": dict(ops.most_common()), "op_count": sum(ops.values()),
                          "tensors": len(tensors)})
        for t in tensors:
            dtype = _DTYPES.get(t.type, "?")
            if has_data(t):
                weights += data_bytes(t)
            elif dtype in _ITEMSIZE:
                activations += math.prod(max(int(d), 1) for d in (t.shape if t.shape is not None else [])) \
                    * _ITEMSIZE[dtype]
            q = t.quantization
            if q is not None and q.scale is not None and len(q.scale):
                quantized[dtype] += 1
                per_channel += len(q.scale) > 1
            if t.isVariable:
                state_tensors.append(f"{_text(sg.name)}/{_text(t.name)}")
        for op in sg.operators or []:
            shared = getattr(op.builtinOptions, "sharedName", None)  # VarHandleOptions (not another op's)
            if codes[op.opcodeIndex] == "VAR_HANDLE" and shared is not None:
                variables.add(_text(shared))
    signatures = {}
    for sig in m.signatureDefs or []:
        sg = m.subgraphs[sig.subgraphIndex]
        signatures[_text(sig.signatureKey)] = {
            "subgraph": int(sig.subgraphIndex),
            "inputs": [{**_tensor_info(sg.tensors[s.tensorIndex]), "name": _text(s.name)} for s in sig.inputs or []],
            "outputs": [{**_tensor_info(sg.tensors[s.tensorIndex]), "name": _text(s.name)} for s in sig.outputs or []]}
    if not signatures and m.subgraphs:  # no signature defs: the first subgraph's inputs and outputs
        sg = m.subgraphs[0]
        signatures["(subgraph 0)"] = {"subgraph": 0,
                                      "inputs": [_tensor_info(sg.tensors[i]) for i in _indices(sg.inputs)],
                                      "outputs": [_tensor_info(sg.tensors[i]) for i in _indices(sg.outputs)]}
    metadata = {_text(md.name): md.buffer for md in m.metadata or []}

    def metadata_bytes(name: str) -> bytes | None:  # a metadata entry's bytes
        at = metadata.get(name)
        return bytes(buffers[at].data) if at is not None and 0 <= at < len(buffers) and buffers[at].data is not None \
            else None

    runtime = metadata_bytes("min_runtime_version")
    runtime = runtime.rstrip(b"\0").decode("ascii", "replace") if runtime is not None else None
    return {
        "size_bytes": len(data), "schema_version": int(m.version), "description": _text(m.description),
        "min_runtime_version": runtime,
        "conversion_metadata": _conversion_metadata(metadata_bytes("CONVERSION_METADATA")),
        "metadata": sorted(metadata), "signatures": signatures, "subgraphs": subgraphs,
        "bytes": {"weights": weights, "activations": activations, "file": len(data),
                  "after_flatbuffer": sum(b.size for b in buffers if b.data is None and b.offset > 1)},
        "quantization": {"tensors": dict(quantized), "per_channel": per_channel},
        "variables": {"resource": sorted(variables), "state_tensors": state_tensors},
    }


def _shape(dims: list[int]) -> str:
    return "[" + ", ".join("?" if d < 0 else str(d) for d in dims) + "]"


def format_description(info: dict) -> str:
    """The text ``fuselite inspect`` prints for :func:`describe`'s dict."""
    lines = [f"{info['size_bytes']:,} bytes, schema v{info['schema_version']}"
             + (f", needs LiteRT >= {info['min_runtime_version']}" if info["min_runtime_version"] else "")]
    if info["description"]:
        lines.append(f"description: {info['description']}")
    if info["conversion_metadata"]:
        c = info["conversion_metadata"]
        lines.append(f"conversion metadata: TensorFlow {c['tensorflow_version']}, source {c['model_type']}, "
                     f"optimizations {', '.join(c['optimization_modes']) or 'none'}")
    for key, sig in info["signatures"].items():
        lines.append(f"signature {key} (subgraph {sig['subgraph']}):")
        for what in ("inputs", "outputs"):
            for t in sig[what]:
                q = t.get("quantization")
                qs = "" if not q else (f" (scale {q['scale']:.3g}, zero point {q['zero_point']})" if "scale" in q
                                       else f" ({q['per_channel']} scales on axis {q['axis']})")
                lines.append(f"  {what[:-1]:6s} {t['name']}: {t['dtype']}{_shape(t['shape'])}{qs}")
    for i, sg in enumerate(info["subgraphs"]):
        ops = ", ".join(f"{k} {v}" for k, v in sg["ops"].items())
        lines.append(f"subgraph {i} {sg['name']}: {sg['op_count']} ops, {sg['tensors']} tensors: {ops or 'no ops'}")
    b = info["bytes"]
    lines.append(f"bytes: weights {b['weights']:,}, activations {b['activations']:,} (at the written shapes), "
                 f"file {b['file']:,}" + (f"; {b['after_flatbuffer']:,} of constants after the flatbuffer (buffer "
                                          "offsets)" if b.get("after_flatbuffer") else ""))
    q = info["quantization"]
    if q["tensors"]:
        kinds = ", ".join(f"{n} {d}" for d, n in sorted(q["tensors"].items()))
        lines.append(f"quantized tensors: {kinds}; {q['per_channel']} per-channel")
    else:
        lines.append("quantized tensors: none")
    v = info["variables"]
    if v["resource"] or v["state_tensors"]:
        lines.append(f"variables: {len(v['resource'])} resource ({', '.join(v['resource']) or '-'}), "
                     f"{len(v['state_tensors'])} in-place state tensors")
    lines.append(f"metadata: {', '.join(info['metadata']) or 'none'}")
    return "\n".join(lines)
