"""A ``.tflite`` file checked before anything native reads it: :func:`validate_model`.

A model file is untrusted input (DESIGN.md). LiteRT's ``Interpreter`` trusts much of a flatbuffer once its own
flatbuffers verifier has passed it: a signature naming a subgraph that is not there, a ``WHILE`` whose body is the
subgraph itself, a string constant whose offsets point past its buffer or a buffer stored at an offset past the
end of the file make it read outside the model (a crash, or bytes from elsewhere in memory). The Python
flatbuffers accessors (``ai_edge_litert.schema_py_generated``) check nothing at all: an index past a vector reads
whatever lies there, and a file whose vectors all point at one table makes the object API build millions of
objects from a few KB. :func:`validate_model` reads the file with bounds checks of its own and raises an
:class:`~fuselite.errors.InputError` naming what is wrong (which subgraph, operator, tensor, index) when

- the flatbuffer itself is out of bounds: every table, vtable, field, offset, vector and string lies inside the
  file (strings end in their NUL, as LiteRT's C++ reads them), as flatbuffers' own ``Verifier`` requires. Every
  table of the schema is read, the operators' options too: the layout of each table comes from the generated
  accessors themselves (one source of truth, whatever LiteRT version is installed);
- the flatbuffer asks for more work than its size allows: tables and vectors that point at the same bytes many
  times over (a 24 KB file whose 3000 x 3000 tensor entries all name one table) are refused once what they add up
  to passes :data:`WORK_PER_BYTE` times the file's size (plus :data:`WORK_FREE`), so that reading any file takes
  time in proportion to its size (about a second per MB of tables at worst here). An honest file names each of
  its tables once (a table counts :data:`TABLE_WORK` and holds at least 8 bytes with the offset naming it) and
  stays below half the limit; tables nest at most :data:`MAX_DEPTH` deep;
- an index is out of range: operator ``opcode_index``; the tensors of operator inputs, outputs and intermediates
  and of subgraph inputs and outputs (``-1``, LiteRT's optional tensor, allowed for operators); tensor ``buffer``
  and metadata ``buffer``; a signature's ``subgraph_index`` and its inputs' and outputs' ``tensor_index``; the
  subgraphs that control flow runs (``WHILE``, ``IF``, ``CALL_ONCE``, ``CALL`` and the StableHLO ops with a
  body: read as LiteRT reads them, ``0`` where the options are missing);
- subgraphs call each other in a cycle (a body that is its own subgraph, or A -> B -> A): LiteRT would recurse
  without end;
- constants do not fit their buffers: a buffer stored after the flatbuffer (``offset`` / ``size``) lies inside
  the file (and ``large_custom_options_offset`` / ``_size`` alike); a numeric constant's shape needs no more bytes
  than its buffer holds (a sparse one's, as LiteRT's verifier counts its elements, whose segments and indices are
  checked); a string constant is in TFLite's string format (an int32 count, then count + 1 increasing int32
  offsets from the buffer's start, the first just past them and the last the buffer's size) with as many strings
  as its shape has elements;
- shapes are absurd: a dimension below ``-1``, a constant with a dynamic dimension, a tensor of more than
  :data:`MAX_TENSOR_BYTES` bytes; quantization scales without as many zero points.

What a file holds past these checks (a custom op's options, a kernel's parameters: ``SPLIT``'s ``num_splits``, a
zero quantization scale) can still crash a native kernel: ``fuselite verify`` and ``bench`` run LiteRT in a child
process (``fuselite.verify``). Names from the file are quoted printable, on one line.

The reader is :mod:`fuselite.tflite.flatbuffer_bounds`. :func:`model_view` gives the validated model itself, read by it, with the object API's attribute
names (``fuselite.inspect`` reads it so: ten times faster than ``ModelT``).

Example::

    from fuselite.tflite.validate import validate_model
    validate_model(open("model.tflite", "rb").read())   # None, or InputError("not a valid TFLite model: ...")
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import InputError
from fuselite.tflite.flatbuffer_bounds import (  # noqa: F401  (WORK_PER_BYTE & co.: documented here)
    MAX_DEPTH,
    TABLE_WORK,
    WORK_FREE,
    WORK_PER_BYTE,
    Bad,
    Field,
    Reader,
    TableView,
    location,
    quoted,
    schema_tables,
)

MAX_TENSOR_BYTES = 1 << 48  # 256 TiB: no device holds a tensor that large
# TensorType -> bits per element (the numeric types; STRING, RESOURCE and VARIANT are not counted)
_TYPE_BITS = {0: 32, 1: 16, 2: 32, 3: 8, 4: 64, 6: 8, 7: 16, 8: 64, 9: 8, 10: 64, 11: 128, 12: 64, 15: 32,
              16: 16, 17: 4, 18: 16, 19: 2, 20: 4}
_STRING = 5

# the ops that run other subgraphs, as LiteRT reads them (ParseOpData): op -> (its union, options table, fields)
SUBGRAPH_REFERENCES = {
    "WHILE": ("BuiltinOptions", "WhileOptions", ("CondSubgraphIndex", "BodySubgraphIndex")),
    "IF": ("BuiltinOptions", "IfOptions", ("ThenSubgraphIndex", "ElseSubgraphIndex")),
    "CALL_ONCE": ("BuiltinOptions", "CallOnceOptions", ("InitSubgraphIndex",)),
    "CALL": ("BuiltinOptions", "CallOptions", ("Subgraph",)),
    "STABLEHLO_WHILE": ("BuiltinOptions2", "StablehloWhileOptions", ("CondSubgraphIndex", "BodySubgraphIndex")),
    "STABLEHLO_REDUCE": ("BuiltinOptions2", "StablehloReduceOptions", ("BodySubgraphIndex",)),
    "STABLEHLO_REDUCE_WINDOW": ("BuiltinOptions2", "StablehloReduceWindowOptions", ("BodySubgraphIndex",)),
    "STABLEHLO_SCATTER": ("BuiltinOptions2", "StablehloScatterOptions", ("UpdateComputationSubgraphIndex",)),
    "STABLEHLO_SORT": ("BuiltinOptions2", "StablehloSortOptions", ("ComparatorSubgraphIndex",)),
    "STABLEHLO_CASE": ("BuiltinOptions2", "StablehloCaseOptions", ("BranchSubgraphIndices",)),
    "STABLEHLO_COMPOSITE": ("BuiltinOptions2", "StableHLOCompositeOptions", ("DecompositionSubgraphIndex",)),
}


# -- the schema, read from the generated accessors --------------------------------------------------------------



def _op_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _out_of_range(values, low: int, high: int):
    """The first of ``values`` outside [low, high), or None."""
    if values is None or not len(values):
        return None
    if int(values.min()) >= low and int(values.max()) < high:
        return None
    return next(int(v) for v in values if not low <= int(v) < high)


class _Checks:
    def __init__(self, model: dict, data):
        self.m, self.data, self.n = model, data, len(data)
        self.subgraphs = model.get("Subgraphs") or []
        self.buffers = model.get("Buffers") or []
        self.codes = model.get("OperatorCodes") or []
        names = _op_names()
        # the builtin code as LiteRT reads it (schema_utils' GetBuiltinCode), whatever custom_code says
        builtins = [names.get(max(c.get("BuiltinCode", 0), c.get("DeprecatedBuiltinCode", 0)), "?")
                    for c in self.codes]
        self.op_names = [f"CUSTOM({quoted(c.get('CustomCode'))})" if b == "CUSTOM" else b
                         for b, c in zip(builtins, self.codes)]

    def subgraph(self, s: int) -> str:
        name = quoted(self.subgraphs[s].get("Name"))
        return f"subgraph {s}" + (f" '{name}'" if name else "")

    def tensor(self, s: int, t: int) -> str:
        name = quoted((self.subgraphs[s].get("Tensors") or [])[t].get("Name"))
        return f"{self.subgraph(s)}, tensor {t}" + (f" '{name}'" if name else "")

    def run(self) -> None:
        if not self.subgraphs:
            raise InputError("not a valid TFLite model: it has no subgraphs")
        for b, buf in enumerate(self.buffers):
            self.stored_after(buf.get("Offset", 0), buf.get("Size", 0), f"buffer {b}")
        for s in range(len(self.subgraphs)):
            self.check_subgraph(s)
        self.check_calls()
        for md in self.m.get("Metadata") or []:
            b = md.get("Buffer", 0)
            if b >= len(self.buffers):
                raise InputError(f"not a valid TFLite model: metadata '{quoted(md.get('Name'))}' names buffer {b}, "
                                 f"and the model has {len(self.buffers)} buffers")
        for k, sig in enumerate(self.m.get("SignatureDefs") or []):
            self.check_signature(k, sig)

    def stored_after(self, offset: int, size: int, what: str) -> None:
        """Bytes stored by offset (schema.fbs: valid above 1) lie inside the file."""
        if offset > 1 and offset + size > self.n:
            raise InputError(f"not a valid TFLite model: {what} is stored at byte offset {offset:,} ({size:,} "
                             f"bytes), past the end of the file ({self.n:,} bytes)")

    def check_subgraph(self, s: int) -> None:
        sg = self.subgraphs[s]
        tensors = sg.get("Tensors") or []
        n = len(tensors)
        for what in ("Inputs", "Outputs"):
            bad = _out_of_range(sg.get(what), 0, n)
            if bad is not None:
                raise InputError(f"not a valid TFLite model: {self.subgraph(s)} names tensor {bad} among its "
                                 f"{what.lower()}, and it has {n} tensors")
        for k, op in enumerate(sg.get("Operators") or []):
            code = op.get("OpcodeIndex", 0)
            if code >= len(self.codes):
                raise InputError(f"not a valid TFLite model: {self.subgraph(s)}, operator {k}: opcode_index {code} "
                                 f"is out of range (the model has {len(self.codes)} operator codes)")
            for what in ("Inputs", "Outputs", "Intermediates"):
                bad = _out_of_range(op.get(what), -1, n)
                if bad is not None:
                    raise InputError(f"not a valid TFLite model: {self.subgraph(s)}, operator {k} "
                                     f"({self.op_names[code]}) names tensor {bad} among its {what.lower()}, and the "
                                     f"subgraph has {n} tensors")
            self.stored_after(op.get("LargeCustomOptionsOffset", 0), op.get("LargeCustomOptionsSize", 0),
                              f"the custom options of {self.subgraph(s)}, operator {k} ({self.op_names[code]})")
        for t, tensor in enumerate(tensors):
            self.check_tensor(s, t, tensor)

    def check_tensor(self, s: int, t: int, tensor: dict) -> None:
        shape = tensor.get("Shape")
        dims = [int(d) for d in shape] if shape is not None else []
        signature = tensor.get("ShapeSignature")
        for what, values in (("shape", shape), ("shape_signature", signature)):
            if values is not None and len(values) and int(values.min()) < -1:
                raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} has a dimension "
                                 f"{int(values.min())} in its {what}")
        kind = tensor.get("Type", 0)
        elements = 1
        for d in dims:
            elements *= max(d, 1)
        if elements * max(_TYPE_BITS.get(kind, 8), 8) // 8 > MAX_TENSOR_BYTES:
            raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} has the shape {dims}, of more than "
                             f"{MAX_TENSOR_BYTES:,} bytes")
        q = tensor.get("Quantization")
        if q is not None and q.get("Scale") is not None and len(q["Scale"]):
            zero = q.get("ZeroPoint")
            if zero is None or len(zero) != len(q["Scale"]):
                raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} has {len(q['Scale'])} quantization "
                                 f"scales and {0 if zero is None else len(zero)} zero points")
        b = tensor.get("Buffer", 0)
        if b and b >= len(self.buffers):
            raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} names buffer {b}, and the model has "
                             f"{len(self.buffers)} buffers")
        held = self.buffer_bytes(b) if b else None
        if held is None or not len(held):  # no data: a tensor LiteRT allocates
            return
        if any(d < 0 for d in dims):
            raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} is a constant with a dynamic dimension "
                             f"({dims})")
        count = 1
        for d in dims:
            count *= d
        if kind == _STRING:
            self.check_strings(s, t, held, count)
            return
        if kind not in _TYPE_BITS:
            return  # resource, variant: no data LiteRT reads as elements
        if tensor.get("Sparsity") is not None:
            count = _sparse_elements(tensor["Sparsity"], dims)
            if count is None:
                raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} has invalid sparsity parameters "
                                 "(traversal order, block map, or segments and indices out of range)")
        need = (count * _TYPE_BITS[kind] + 7) // 8
        if need > len(held):
            raise InputError(f"not a valid TFLite model: {self.tensor(s, t)} of shape {dims} needs {need:,} bytes, "
                             f"and its buffer {b} holds {len(held):,}")

    def buffer_bytes(self, b: int):
        """Buffer ``b``'s bytes (a uint8 view), None when it holds none (a tensor LiteRT allocates)."""
        buf = self.buffers[b]
        if buf.get("Data") is not None:
            return buf["Data"]
        if buf.get("Offset", 0) > 1:
            return np.frombuffer(self.data, np.uint8, buf.get("Size", 0), buf["Offset"])
        return None

    def check_strings(self, s: int, t: int, held, count: int) -> None:
        """TFLite's string format (lite/string_util.h): int32 N, N + 1 int32 offsets from the buffer's start (the
        first just past them, increasing, the last the buffer's size), then the bytes."""
        where = f"not a valid TFLite model: {self.tensor(s, t)} is a string constant whose buffer"
        size = len(held)
        if size < 4:
            raise InputError(f"{where} of {size} bytes holds no string count")
        number = int(np.frombuffer(held, "<u4", 1, 0)[0])
        if 4 * (number + 2) > size:
            raise InputError(f"{where} of {size:,} bytes is too small for the offsets of its {number:,} strings")
        offsets = np.frombuffer(held, "<i4", number + 1, 4).astype(np.int64)
        if offsets[0] != 4 * (number + 2) or offsets[-1] != size or (number and np.diff(offsets).min() < 0):
            raise InputError(f"{where} of {size:,} bytes has string offsets outside it or out of order (they must "
                             f"run from {4 * (number + 2)} up to {size})")
        if number != count:
            raise InputError(f"{where} holds {number:,} strings, and its shape has {count:,} elements")

    def references(self, s: int) -> list[tuple[int, int, str, str, int]]:
        """(subgraph referred to, operator, op, field, value) of each control-flow op of subgraph ``s``."""
        out = []
        for k, op in enumerate(self.subgraphs[s].get("Operators") or []):
            kind = self.op_names[op.get("OpcodeIndex", 0)]
            if kind not in SUBGRAPH_REFERENCES:
                continue
            union, table, fields = SUBGRAPH_REFERENCES[kind]
            _, unions = schema_tables()
            options = op.get(union) if unions[union].get(op.get(union + "Type", 0)) == table else None
            for f in fields:
                value = (options or {}).get(f, 0)  # missing options: LiteRT's parameters stay 0
                for v in (value if isinstance(value, np.ndarray) else [value]):
                    out.append((int(v), k, kind, Field(f, "scalar").name, int(v)))
        return out

    def check_calls(self) -> None:
        count = len(self.subgraphs)
        calls = {}
        for s in range(count):
            calls[s] = self.references(s)
            for target, k, kind, field, value in calls[s]:
                if not 0 <= target < count:
                    raise InputError(f"not a valid TFLite model: {self.subgraph(s)}, operator {k} ({kind}): {field} "
                                     f"{value} is out of range (the model has {count} subgraphs)")
        state = [0] * count  # 0 not seen, 1 on the path, 2 done
        for root in range(count):
            if state[root]:
                continue
            path, stack = [root], [iter(calls[root])]
            state[root] = 1
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    state[path.pop()] = 2
                    stack.pop()
                    continue
                target, k, kind, field, _ = step
                if state[target] == 1:
                    at = path.index(target)
                    if path[-1] == target:
                        raise InputError(f"not a valid TFLite model: {self.subgraph(target)}, operator {k} "
                                         f"({kind}): its {field} is the subgraph itself (LiteRT would recurse "
                                         "without end)")
                    cycle = " -> ".join(str(x) for x in path[at:] + [target])
                    raise InputError(f"not a valid TFLite model: subgraphs {cycle} call each other in a cycle "
                                     f"({self.subgraph(path[-1])}, operator {k} ({kind}): {field} {target}; LiteRT "
                                     "would recurse without end)")
                if state[target] == 0:
                    state[target] = 1
                    path.append(target)
                    stack.append(iter(calls[target]))

    def check_signature(self, k: int, sig: dict) -> None:
        key = quoted(sig.get("SignatureKey"))
        s = sig.get("SubgraphIndex", 0)
        if s >= len(self.subgraphs):
            raise InputError(f"not a valid TFLite model: signature {k} '{key}' names subgraph {s}, and the model "
                             f"has {len(self.subgraphs)} subgraphs")
        n = len(self.subgraphs[s].get("Tensors") or [])
        for what in ("Inputs", "Outputs"):
            for entry in sig.get(what) or []:
                t = entry.get("TensorIndex", 0)
                if t >= n:
                    raise InputError(f"not a valid TFLite model: signature '{key}' {what.lower()[:-1]} "
                                     f"'{quoted(entry.get('Name'))}' names tensor {t} of {self.subgraph(s)}, which "
                                     f"has {n} tensors")


def _values(metadata: dict, union: str):
    """The values of a DimensionMetadata's sparse index vector (Int32Vector, Uint16Vector, Uint8Vector)."""
    vector = metadata.get(union)
    return None if vector is None else vector.get("Values")


def _sparse_elements(sparsity: dict, dims: list[int]) -> int | None:
    """How many values a sparse constant stores, as LiteRT's verifier counts them (VerifyAndCountSparseElements),
    None where its parameters are not valid; block maps must name one of the tensor's own dimensions."""
    order, metadata = sparsity.get("TraversalOrder"), sparsity.get("DimMetadata")
    if order is None or metadata is None:
        return None
    order = [int(x) for x in order]
    total, rank = len(order), len(dims)
    if total < rank or len(metadata) != total:
        return None
    blocks = total - rank
    block_map = [int(x) for x in sparsity.get("BlockMap")] if sparsity.get("BlockMap") is not None else []
    if blocks and len(block_map) != blocks:
        return None
    if sorted(order[:rank]) != list(range(rank)) or sorted(order[rank:]) != list(range(rank, total)):
        return None
    expanded = list(dims) + [0] * blocks
    for i in range(blocks):
        size = int(metadata[rank + i].get("DenseSize", 0))
        if size <= 0 or not 0 <= block_map[i] < rank:
            return None
        expanded[order[rank + i]] = size
        expanded[block_map[i]] //= size
    count = 1
    for i in range(total):
        dim = metadata[i]
        if dim.get("Format", 0) == 0:  # DENSE
            if dim.get("DenseSize", 0) != expanded[order[i]]:
                return None
            count *= int(dim.get("DenseSize", 0))
            continue
        segments, indices = _values(dim, "ArraySegments"), _values(dim, "ArrayIndices")
        if segments is None or indices is None or not len(segments):
            return None
        segments = segments.astype(np.int64)
        if segments.min() < 0 or (len(segments) > 1 and np.diff(segments).min() < 0):
            return None
        if count != len(segments) - 1 or len(indices) != segments[-1]:
            return None
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= expanded[order[i]]):
            return None
        count = len(indices)
    return count


def _decoded(data) -> dict:
    if len(data) < 8 or bytes(data[4:8]) != b"TFL3":
        raise InputError("not a TFLite model: a .tflite file has the identifier 'TFL3' at bytes 4-8")
    reader = Reader(data)
    try:
        model = reader.table(reader.follow(0), "Model")
    except Bad as e:
        where = location(e.path)
        raise InputError(f"not a valid TFLite model: {where + ': ' if where else ''}{e.what}") from None
    _Checks(model, data).run()
    return model


def validate_model(data: bytes) -> None:
    """Check the ``.tflite`` flatbuffer ``data`` (bytes) as the module docstring says; None when it passes, an
    :class:`~fuselite.errors.InputError` naming the first problem otherwise. Reads nothing outside ``data`` and
    takes time in proportion to its size."""
    _decoded(data)




def model_view(data: bytes) -> TableView:
    """The model ``data``, validated (:func:`validate_model`), as a :class:`TableView` of its ``Model`` table."""
    return TableView("Model", _decoded(data))
