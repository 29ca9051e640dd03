"""The ``debug_metadata`` of a model (LiteRT's ``debug_metadata.fbs``): a named location for each op with no outputs.

Why: TensorFlow's flatbuffer importer names an op after its output tensors. An op with
no outputs (``ASSIGN_VARIABLE``, ``CALL_ONCE``, an ``IF`` without results) gets the bare
import location wrapped in a ``FusedLoc``, and Model Explorer's MLIR-based adapter
(``GenerateTfliteNodeName`` in its ``translate_helpers.cc``) takes every location inside
a ``FusedLoc`` for a ``NameLoc``: a null dereference, the process dies (SIGSEGV) on any
model with resource variables, the official converter's included. Where an op has debug
metadata, the importer uses that location instead (``OpLoc`` in
``flatbuffer_import.cc``), so each output-less op gets ``NameLoc(op name,
UnknownLoc)``: Model Explorer opens the model and shows the op under its name. (No
source file and line: they would make the bytes depend on where ``convert()`` was
called from.)

The format (``tflite/converter/schema/debug_metadata.fbs``): a ``DebugMetadata`` table
holding one ``ConversionDebugMetadata``: ``attributes`` (a union vector of locations),
and per subgraph (``SubGraph.debug_metadata_index``) a list of
``OperatorDebugMetadata`` (``Operator.debug_metadata_index``), each naming the index
of its location attribute. A ``NameLoc``'s child is the index of an earlier attribute.
The file is stored as model metadata named ``debug_metadata``. Written here with the
flatbuffers builder directly (slot numbers from the schema), since no Python bindings
for it ship with LiteRT.

Example::

    data = debug_metadata([["lstm/AssignVariableOp"], []])   # per subgraph, its output-less ops' names
"""

from __future__ import annotations

import flatbuffers

# union tags (schema order, NONE = 0)
_ATTRIBUTE_LOCATION = 1
_NAME_LOC, _UNKNOWN_LOC = 4, 6
_CONVERSION_DEBUG_METADATA = 1
METADATA_NAME = "debug_metadata"


def _vector(b: flatbuffers.Builder, items: list, size: int, prepend) -> int:
    b.StartVector(size, len(items), size)
    for x in reversed(items):
        prepend(x)
    return b.EndVector()


def _table(b: flatbuffers.Builder, *fields) -> int:
    """A table from ``(slot, kind, value)`` fields; kind ``"offset"``, ``"uint32"`` or ``"uint8"``.

    Every field is written, zeros included (no defaults elided): the importer reads them as they are.
    """
    b.StartObject(max((slot for slot, _, _ in fields), default=-1) + 1)
    for slot, kind, value in fields:
        if kind == "offset":
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
        elif kind == "uint32":
            b.PrependUint32Slot(slot, value, value + 1)
        else:
            b.PrependUint8Slot(slot, value, value + 1)
    return b.EndObject()


def _location(b: flatbuffers.Builder, kind: int, loc: int) -> int:
    return _table(b, (0, "uint8", kind), (1, "offset", loc))


def debug_metadata(names: list[list[str]]) -> bytes:
    """``names[subgraph][k]``: the name of the k-th op given debug metadata in that subgraph."""
    b = flatbuffers.Builder(1024)
    attributes: list[int] = []
    subgraphs = []
    for ops in names:
        tables = []
        for name in ops:
            attributes.append(_location(b, _UNKNOWN_LOC, _table(b)))
            named = _table(b, (0, "offset", b.CreateString(name)), (1, "uint32", len(attributes) - 1))
            attributes.append(_location(b, _NAME_LOC, named))
            indexes = _vector(b, [len(attributes) - 1], 4, b.PrependUint32)
            tables.append(_table(b, (0, "offset", indexes)))
        subgraphs.append(_table(b, (0, "offset", _vector(b, tables, 4, b.PrependUOffsetTRelative))))
    conversion = _table(b, (0, "offset", _vector(b, subgraphs, 4, b.PrependUOffsetTRelative)),
                        (1, "offset", _vector(b, [_ATTRIBUTE_LOCATION] * len(attributes), 1, b.PrependUint8)),
                        (2, "offset", _vector(b, attributes, 4, b.PrependUOffsetTRelative)))
    root = _table(b, (0, "offset", _vector(b, [_CONVERSION_DEBUG_METADATA], 1, b.PrependUint8)),
                  (1, "offset", _vector(b, [conversion], 4, b.PrependUOffsetTRelative)))
    b.Finish(root)
    return bytes(b.Output())
