"""Write a fuselite Module (lowered to ``tfl.*`` ops) as a TFLite schema-v3 flatbuffer.

Layout: buffer 0 is the empty sentinel; every constant gets a 16-byte aligned buffer
(identical constants share one); one subgraph per function, entry functions first in
signature order; signature defs carry the user's input/output names.
"""

from __future__ import annotations

import ctypes
import mmap
import re
import struct
import sys
import time
from collections.abc import Callable

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from fuselite.errors import ConversionError
from fuselite.ir import BlockwiseQuantization, Module, Quantization, Value
from fuselite.ir.arrays import digest
from fuselite.tflite.debug_metadata import METADATA_NAME as DEBUG_METADATA
from fuselite.tflite.debug_metadata import debug_metadata
from fuselite.tflite.flexbuffer import encode_tf_attrs
from fuselite.tflite.names import StableNames, readable
from fuselite.tflite.provenance import Provenance
from fuselite.tflite.versions import min_runtime_version, op_version

_TENSOR_TYPES = {
    np.dtype(np.float32): schema.TensorType.FLOAT32, np.dtype(np.float16): schema.TensorType.FLOAT16,
    np.dtype(np.int32): schema.TensorType.INT32, np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.int64): schema.TensorType.INT64, np.dtype(np.bool_): schema.TensorType.BOOL,
    np.dtype(np.int16): schema.TensorType.INT16, np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.float64): schema.TensorType.FLOAT64, np.dtype(np.complex64): schema.TensorType.COMPLEX64,
    np.dtype(np.uint32): schema.TensorType.UINT32, np.dtype(np.uint16): schema.TensorType.UINT16,
    "string": schema.TensorType.STRING, "resource": schema.TensorType.RESOURCE,
    "variant": schema.TensorType.VARIANT,
}
# Options tables whose name does not follow the op name.
_OPTIONS_OVERRIDES = {
    "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "RNN": "RNNOptions",
}
_ENUMS = {
    "fused_activation_function": schema.ActivationFunctionType,
    "padding": schema.Padding,
    "weights_format": schema.FullyConnectedOptionsWeightsFormat,
    "mode": schema.MirrorPadMode,
    "kernel_type": schema.LSTMKernelType,
    "combiner": schema.CombinerType,
}
_DTYPE_OPTIONS = {"out_type", "output_type", "in_data_type", "out_data_type", "idx_out_type", "key_dtype", "value_dtype"}


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


_OPTION_NAMES = {_norm(k): k for k in vars(schema.BuiltinOptions) if not k.startswith("_")}


def options_table(kind: str) -> str | None:
    """Name of the BuiltinOptions table for op ``kind`` (None if the op has none)."""
    if kind in _OPTIONS_OVERRIDES:
        return _OPTIONS_OVERRIDES[kind]
    return _OPTION_NAMES.get(_norm(kind) + "options")


def check_op(op) -> str | None:
    """Why ``op`` (a ``tfl.`` op) cannot be written, in a sentence; None if it can: an op kind that is no
    LiteRT builtin, an option its options table lacks, an enum option with an unknown value."""
    kind = op.kind
    if kind != "CUSTOM" and not hasattr(schema.BuiltinOperator, kind):
        return f"'{kind}' is not a LiteRT builtin op"
    table = options_table(kind) if kind != "CUSTOM" else None
    fields = set(vars(getattr(schema, table + "T")())) if table else set()
    for key, val in op.attrs.items():
        if key.startswith("_") or key in ("custom_code", "custom_options", "custom_tf_attrs"):
            continue
        if _camel(key) not in fields:
            known = ", ".join(sorted(_snake(f) for f in fields)) or "none"
            return f"{kind} has no option '{key}' (its options: {known})"
        if key in _ENUMS and not (isinstance(val, str) and hasattr(_ENUMS[key], val)):
            names = ", ".join(k for k in vars(_ENUMS[key]) if not k.startswith("_"))
            return f"{kind} option {key}={val!r} is not one of {names}"
    return None


def _snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def tensor_type(dtype) -> int:
    key = dtype if isinstance(dtype, str) else np.dtype(dtype)
    if not isinstance(key, str) and key.kind in "SOU":  # a constant of bytes / str (a lookup table's keys)
        return schema.TensorType.STRING
    if not isinstance(key, str) and key.name == "int4":  # ml_dtypes.int4: two per byte in the file
        return schema.TensorType.INT4
    if key not in _TENSOR_TYPES:
        raise ConversionError(f"dtype {dtype} has no LiteRT tensor type")
    return _TENSOR_TYPES[key]


class _AlignedBuffer(schema.BufferT):
    """A BufferT whose data vector is 16-byte aligned (LiteRT maps weights in place), its space reserved in the
    builder and its bytes written into the finished file itself (``FlatbufferWriter._fill``), or, ``outside``,
    written after the flatbuffer (``Buffer.offset`` / ``size``).

    ``data``: the bytes, as an array of any layout (a transposed weight stays a view until it is written).
    ``owners``: the constant values whose array ``data`` is; once written, each owner's array becomes a read-only
    view of the file, and the module's own copy is freed, one constant at a time.
    """

    def __init__(self, data: np.ndarray | None = None, owners=()):
        super().__init__()
        self.data = data
        self.owners = list(owners)
        self.from_end: int | None = None  # where its space was reserved: bytes from the builder's end

    outside = False  # written after the flatbuffer (Buffer.offset / size), placeholders 1 / 1 here

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else int(self.data.nbytes)

    def Pack(self, builder):
        if self.outside:  # nonzero placeholders: the fields exist in the file, patched once the layout is known
            schema.BufferStart(builder)
            schema.BufferAddOffset(builder, 1)
            schema.BufferAddSize(builder, 1)
            return schema.BufferEnd(builder)
        vector = None
        if self.nbytes:
            builder.StartVector(1, self.nbytes, 16)
            builder.head = builder.head - self.nbytes  # reserved (zeros): _fill writes the bytes into the file
            self.from_end = len(builder.Bytes) - builder.head
            vector = builder.EndVector(self.nbytes)
        schema.BufferStart(builder)
        if vector is not None:
            schema.BufferAddData(builder, vector)
        return schema.BufferEnd(builder)


def _new_file(size: int) -> tuple[bytes, np.ndarray]:
    """A new zero-filled ``bytes`` of ``size`` and a writable array over its bytes. The file is written into it
    once, before anything else holds it, as C code fills a new bytes object (``PyBytes_FromStringAndSize(NULL,
    n)``): its constants need no second copy beside it. ``bytes(n)`` is calloc'd, so its pages are resident only
    as they are written."""
    data = bytes(size)
    if not size:
        return data, np.zeros(0, np.uint8)
    address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    return data, np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))


def _put(out: np.ndarray, at: int, arr: np.ndarray) -> None:
    """``arr``'s bytes (row-major, whatever its layout) into ``out[at:]``, without a temporary copy."""
    dest = out[at : at + arr.nbytes]
    if arr.flags.c_contiguous:
        dest[:] = arr.reshape(-1).view(np.uint8)
    else:
        np.copyto(dest.view(arr.dtype).reshape(arr.shape), arr)


def _reserved_builder(size: int) -> flatbuffers.Builder:
    """A builder over ``size`` bytes of anonymous memory: the space reserved for the constants is never touched
    (not resident), where a ``bytearray`` would be zero-filled."""
    builder = flatbuffers.Builder(0)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    builder.Bytes = mmap.mmap(-1, size, flags=flags) if flags else mmap.mmap(-1, size)
    builder.head = size
    return builder


PROGRESS_FROM = 64 << 20  # a file this large tells the progress line how much of it is written
PROGRESS_EVERY = 0.5  # seconds between those lines
_TRIM_ABOVE = 1 << 20  # a constant this large, freed as the file fills, is given back to the system at once


def return_freed_memory() -> None:
    """Give the memory just freed back to the system: glibc keeps freed blocks up to its mmap threshold (32 MiB
    at most) in its heap, resident, where the file being filled cannot reuse them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to do
        pass


def pack_int4(values: np.ndarray) -> np.ndarray:
    """int4 values two per byte, the even index in the low nibble, row-major, ceil(n / 2) bytes (LiteRT's
    ``UnpackPackedIntToInt8`` reverses it; ``BytesRequired``: ``(bytes + 1) / 2``)."""
    flat = values.astype(np.int8).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.int8)])
    nibbles = flat.view(np.uint8) & 0x0F
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)


def _view(buffer, offset: int, like: np.ndarray) -> np.ndarray:
    """A read-only array over ``buffer[offset:]`` with ``like``'s dtype and shape (no copy)."""
    arr = np.frombuffer(buffer, like.dtype, like.size, offset).reshape(like.shape)
    arr.flags.writeable = False
    return arr


class FlatbufferWriter:
    def __init__(self, module: Module, provenance: Provenance | None = None):
        self.module = module
        self.provenance = provenance
        self.model = schema.ModelT()
        self.model.version = 3
        self.model.description = provenance.description() if provenance else "fuselite"
        self.model.buffers = [_AlignedBuffer()]
        self.model.operatorCodes = []
        self.model.subgraphs = []
        self._buffer_index: dict[bytes, int] = {}
        self._opcode_index: dict[tuple, int] = {}
        self._zero_points: dict[bytes, int] = {}  # shared zero-point vectors (see _QuantizationParameters)
        order = list(module.signatures.values())
        order += [n for n in module.functions if n not in order]
        self.subgraph_index = {name: i for i, name in enumerate(order)}
        self.order = order
        self.names = StableNames()
        self.tensor_names: dict[int, str] = {}  # value uid -> its tensor's name
        self._used: set[str] = set()  # tensor names in the whole model (tools such as the quantizer key on them)
        self._debug: list[list[str]] = []  # per subgraph: the named locations of output-less ops
        self._metadata_buffers: set[int] = set()  # buffers of metadata: inline in any layout
        self._digests: dict[int, tuple[bytes, np.ndarray]] = {}

    def write(self, buffer_offsets: bool = False, progress: Callable[[str], None] | None = None) -> bytes:
        """The file. ``buffer_offsets``: every constant after the flatbuffer, found by ``Buffer.offset`` / ``size``
        (schema.fbs: from the start of the file, valid above 1), each 16-byte aligned, then 16 zero bytes (XNNPACK
        reads past a buffer's end), as the official converter lays such a file out (flatbuffer_export.cc); the
        metadata stays inline, with ``buffer_location`` = "outside flatbuffers" as it writes.

        Layout first, then one copy of the constants: the builder reserves each inline buffer's space without
        writing it, the file is allocated once at its final size, and each constant is copied into it and its
        value rebound to a view of the file (``_fill``), so the module's arrays are freed one by one as the file
        fills: the constants are held about once, not twice (the builder, then the file). ``progress``: told how
        much of a large file (from PROGRESS_FROM bytes) is written, as it is."""
        for name in self.order:
            self.model.subgraphs.append(self._subgraph(self.module.functions[name]))
        self._signatures()
        self._metadata()
        outside = []
        if buffer_offsets:
            self._add_metadata(BUFFER_LOCATION, b"outside flatbuffers")
            for index, buf in enumerate(self.model.buffers):
                if index not in self._metadata_buffers and buf.nbytes:
                    buf.outside = True
                    outside.append(index)
        inline = sum(b.nbytes + BUFFER_ALIGNMENT for b in self.model.buffers if not b.outside)
        builder = _reserved_builder(inline + _GRAPH_ALLOWANCE)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        self._digests.clear()  # (it holds the arrays: they go as the file fills)
        head, end = builder.Head(), len(builder.Bytes)
        flat = end - head
        places = {i: flat - b.from_end for i, b in enumerate(self.model.buffers) if b.from_end is not None}
        if outside and flat > MAX_FLATBUFFER_BYTES:
            raise ConversionError(f"the model's graph alone takes {flat / 2**30:.2f} GiB: a flatbuffer holds "
                                  "under 2 GiB even with its constants outside it")
        at = flat
        for index in outside:
            at += -at % BUFFER_ALIGNMENT
            places[index] = at
            at += self.model.buffers[index].nbytes
        size = at + (BUFFER_ALIGNMENT + (-at % BUFFER_ALIGNMENT) if outside else 0)  # read past the last one
        data, out = _new_file(size)
        start = 0  # the flatbuffer's own bytes, between the reserved spaces (never read: they stay unresident)
        for place, n in sorted((places[i], self.model.buffers[i].nbytes) for i in places if places[i] < flat):
            out[start:place] = np.frombuffer(builder.Bytes, np.uint8, place - start, head + start)
            start = place + n
        out[start:flat] = np.frombuffer(builder.Bytes, np.uint8, flat - start, head + start)
        del builder  # (its anonymous memory unmapped)
        if outside:
            self._patch_offsets(out, outside, places)
        self._fill(data, out, places, progress if size >= PROGRESS_FROM else None)
        return data

    def _patch_offsets(self, out: np.ndarray, outside: list[int], places: dict[int, int]) -> None:
        """The outside buffers' ``offset`` / ``size`` placeholders (1 / 1) set to where they are."""
        model = schema.Model.GetRootAs(out, 0)
        for index in outside:
            table = model.Buffers(index)._tab
            for slot, value in ((_BUFFER_OFFSET_SLOT, places[index]),
                                (_BUFFER_SIZE_SLOT, self.model.buffers[index].nbytes)):
                field = table.Offset(slot)
                if not field:
                    raise ConversionError(f"buffer {index}: its offset placeholder is missing from the flatbuffer")
                struct.pack_into("<Q", out, table.Pos + field, value)

    def _fill(self, data: bytes, out: np.ndarray, places: dict[int, int],
              progress: Callable[[str], None] | None = None) -> None:
        """Each buffer's bytes into the file at its place; its constants then view the file, and the buffer lets
        go of its array (freed here where nothing else holds it)."""
        done, shown = 0, time.perf_counter()
        for index, place in places.items():
            buf = self.model.buffers[index]
            _put(out, place, buf.data)
            for v in buf.owners:
                v.const = _view(data, place, v.const)
            done += buf.nbytes
            if progress is not None and time.perf_counter() - shown > PROGRESS_EVERY:
                progress(f"export: {done / 2**20:,.0f} of {len(data) / 2**20:,.0f} MiB written")
                shown = time.perf_counter()
            large = buf.nbytes >= _TRIM_ABOVE
            buf.data, buf.owners = None, []
            if large:
                return_freed_memory()

    # -- pieces ------------------------------------------------------------------
    def _digest(self, arr: np.ndarray) -> bytes:
        """``digest``, once per array (the tensor and its buffer both key on it; a weight's bytes are read once)."""
        key = id(arr)
        if key not in self._digests:
            self._digests[key] = (digest(arr), arr)  # (held: its id stays its own while the writer runs)
        return self._digests[key][0]

    def _buffer(self, arr: np.ndarray, owner: Value | None = None) -> int:
        """The buffer holding ``arr``'s bytes (equal constants share one). ``owner``: the constant value
        whose array this is, rebound to a view of the file once written (see :class:`_AlignedBuffer`)."""
        strings = arr.dtype.kind in ("S", "O", "U")
        raw = _string_tensor_bytes(arr) if strings else pack_int4(arr) if arr.dtype.name == "int4" else arr
        key = self._digest(raw) + str(arr.dtype).encode()
        if key not in self._buffer_index:
            self.model.buffers.append(_AlignedBuffer(raw))
            self._buffer_index[key] = len(self.model.buffers) - 1
        index = self._buffer_index[key]
        if owner is not None and raw is arr:
            self.model.buffers[index].owners.append(owner)
        return index

    def _opcode(self, kind: str, version: int, custom: str | None = None) -> int:
        key = (kind, version, custom)
        if key not in self._opcode_index:
            code = schema.OperatorCodeT()
            builtin = getattr(schema.BuiltinOperator, kind)
            code.builtinCode = builtin
            code.deprecatedBuiltinCode = min(builtin, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
            code.version = version
            if custom:
                code.customCode = custom
            self.model.operatorCodes.append(code)
            self._opcode_index[key] = len(self.model.operatorCodes) - 1
        return self._opcode_index[key]

    def _subgraph(self, fn) -> schema.SubGraphT:
        sg = schema.SubGraphT()
        sg.name = self.names(fn.name)
        sg.tensors, sg.operators = [], []
        index: dict[int, int] = {}

        shared: dict[tuple, int] = {}  # equal constants -> one tensor
        # an entry function's inputs and outputs carry the signature's names
        given = {v.uid: n for v, n in zip(fn.outputs, fn.output_names) if not v.is_const}
        given.update((v.uid, n) for v, n in zip(fn.inputs, fn.input_names))

        def name_of(v: Value, user) -> str:
            if v.uid in given:
                return self.names(given[v.uid])
            name = readable(self.names(v.name))
            if v.is_const and "/" not in name and user is not None:  # a rule's constant: its user's layer
                scope = readable(self.names(user.name)).rpartition("/")[0]
                name = f"{scope}/{name}" if scope else name
            return name

        def tensor(v: Value, user=None) -> int:
            if v.uid in index:
                return index[v.uid]
            key = None
            if v.is_const and not v.meta.get("is_variable") and v.const.dtype.kind not in "SOU":
                key = (v.const.dtype.str, v.const.shape, self._digest(v.const), v.quant)
                if key in shared:
                    index[v.uid] = shared[key]
                    return index[v.uid]
            t = schema.TensorT()
            t.name = self._unique(name_of(v, user), sg.name)
            self.tensor_names[v.uid] = t.name
            t.type = tensor_type(v.dtype)
            shape = v.shape if v.shape is not None else ()
            if v.is_const:
                shape = v.const.shape
                t.buffer = self._buffer(v.const, v)
            t.shape = [1 if d is None else int(d) for d in shape]
            if any(d is None for d in shape):
                t.shapeSignature = [-1 if d is None else int(d) for d in shape]
            t.hasRank = v.shape is not None
            t.isVariable = bool(v.meta.get("is_variable", False))
            if isinstance(v.quant, BlockwiseQuantization):
                t.quantization = self._blockwise(sg, t.name, v.quant)
            elif v.quant is not None:
                t.quantization = _quantization(v.quant, self._zero_points)
            sg.tensors.append(t)
            index[v.uid] = len(sg.tensors) - 1
            if key is not None:
                shared[key] = index[v.uid]
            return index[v.uid]

        sg.inputs = [tensor(v) for v in fn.inputs]
        debug: list[str] = []
        for op in fn.ops:
            if op.dialect != "tfl":
                raise ConversionError(f"internal: op {op.describe()} reached export without being lowered")
            o = schema.OperatorT()
            o.inputs = [-1 if v is None else tensor(v, op) for v in op.inputs]
            o.outputs = [tensor(v) for v in op.outputs]
            specs = op.attrs.get("_intermediates")
            if specs:  # tensors only the kernel reads (the integer LSTM's scales): (dtype, shape, quantization)
                o.intermediates = [self._intermediate(sg, f"{op.name}/intermediate_{i}", *spec)
                                   for i, spec in enumerate(specs)]
            custom = op.attrs.get("custom_code") if op.kind == "CUSTOM" else None
            o.opcodeIndex = self._opcode(op.kind, op_version(op), custom)
            if custom:
                o.customOptions = op.attrs.get("custom_options", b"") if "custom_tf_attrs" not in op.attrs else \
                    encode_tf_attrs(op.attrs["custom_tf_attrs"], tensor_type)
                o.customOptionsFormat = schema.CustomOptionsFormat.FLEXBUFFERS
            else:
                self._set_options(o, op)
            if not op.outputs:  # named through debug metadata (see export/debug_metadata.py)
                o.debugMetadataIndex = len(debug)
                debug.append(readable(self.names(op.name)) or op.kind.lower())
            sg.operators.append(o)
        sg.outputs = [tensor(v) for v in fn.outputs]
        self._debug.append(debug)
        return sg

    def _blockwise(self, sg, name: str, q: BlockwiseQuantization) -> schema.QuantizationParametersT:
        """A blockwise int4 weight's quantization: its scales a FLOAT16 tensor of their own in ``sg`` (a buffer
        shared by equal scales), named by index in the details; no zero points (``zeroPoints`` -1: 0 would name
        tensor 0)."""
        scales = schema.TensorT()
        scales.name = self._unique(f"{name}_scales", sg.name)
        scales.type = schema.TensorType.FLOAT16
        scales.shape = [int(d) for d in q.scales.shape]
        scales.buffer = self._buffer(np.ascontiguousarray(q.scales, np.float16))
        sg.tensors.append(scales)
        details = schema.BlockwiseQuantizationT()
        details.scales, details.zeroPoints, details.blockSize = len(sg.tensors) - 1, -1, int(q.block_size)
        out = schema.QuantizationParametersT()
        out.detailsType, out.details = schema.QuantizationDetails.BlockwiseQuantization, details
        out.quantizedDimension = int(q.axis)
        return out

    def _unique(self, name: str, subgraph: str) -> str:
        """``name``, or where another subgraph has it (a variable read by the reset and init subgraphs too),
        ``<subgraph>/<name>`` (then ``_2``, ``_3``, ...): tensor names are unique in the whole model."""
        unique = name if name not in self._used else f"{subgraph}/{name}"
        n = 2
        while unique in self._used:
            unique, n = f"{subgraph}/{name}_{n}", n + 1
        self._used.add(unique)
        return unique

    def _intermediate(self, sg, name: str, dtype: str, shape, quant: dict | None) -> int:
        t = schema.TensorT()
        t.name = self._unique(self.names(name), sg.name)
        t.type = tensor_type(np.dtype(dtype))
        t.shape = [int(d) for d in shape]
        if quant is not None:
            t.quantization = _quantization(Quantization(tuple(quant["scale"]), tuple(quant["zero_point"]),
                                                        quant.get("axis", 0)), self._zero_points)
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    def _set_options(self, o, op) -> None:
        table = options_table(op.kind)
        if table is None:
            return
        cls = getattr(schema, table + "T")
        opts = cls()
        for key, val in op.attrs.items():
            if key.startswith("_") or key == "custom_code":
                continue
            attr = _camel(key)
            if not hasattr(opts, attr):
                raise ConversionError(f"internal: option '{key}' is not in {table} (op {op.describe()})")
            if key in _ENUMS:
                val = getattr(_ENUMS[key], val)
            elif key in _DTYPE_OPTIONS:
                val = tensor_type(val)
            elif isinstance(val, str) and val.startswith("@"):
                val = self.subgraph_index[val[1:]]
            setattr(opts, attr, val)
        o.builtinOptionsType = getattr(schema.BuiltinOptions, table)
        o.builtinOptions = opts

    def _signatures(self) -> None:
        self.model.signatureDefs = []
        for key, fname in self.module.signatures.items():
            fn = self.module.functions[fname]
            sg_index = self.subgraph_index[fname]
            sg = self.model.subgraphs[sg_index]
            sig = schema.SignatureDefT()
            sig.signatureKey = key
            sig.subgraphIndex = sg_index
            sig.inputs = [_tensor_map(n, i) for n, i in zip(fn.input_names, sg.inputs)]
            sig.outputs = [_tensor_map(n, i) for n, i in zip(fn.output_names, sg.outputs)]
            self.model.signatureDefs.append(sig)

    def _metadata(self) -> None:
        self.model.metadata = []
        self._add_metadata("min_runtime_version", min_runtime_version(self.module).encode().ljust(16, b"\0"))
        if self.provenance is not None:
            self._add_metadata("CONVERSION_METADATA", self.provenance.conversion_metadata(self.module))
        if any(self._debug):
            for i, sg in enumerate(self.model.subgraphs):
                sg.debugMetadataIndex = i
            self._add_metadata(DEBUG_METADATA, debug_metadata(self._debug))

    def _add_metadata(self, name: str, data: bytes) -> None:
        self.model.buffers.append(_AlignedBuffer(np.frombuffer(data, dtype=np.uint8)))
        self._metadata_buffers.add(len(self.model.buffers) - 1)
        meta = schema.MetadataT()
        meta.name = name
        meta.buffer = len(self.model.buffers) - 1
        self.model.metadata.append(meta)


class _QuantizationParameters(schema.QuantizationParametersT):
    """Scales and zero points; equal zero-point vectors are written once and shared.

    A per-channel int8 weight has one int64 zero point (all 0) per channel: 8 bytes per
    channel that would otherwise outweigh its float32 scales. Flatbuffers lets tables
    share a vector, and LiteRT reads each tensor's through its own offset.
    """

    shared: dict  # zero-point bytes -> vector offset, one dict per writer (and so per builder)

    def Pack(self, builder):
        shared = self.shared
        scale = builder.CreateNumpyVector(np.asarray(self.scale, np.float32))
        zeros = np.asarray(self.zeroPoint, np.int64)
        key = zeros.tobytes()
        if key not in shared:
            shared[key] = builder.CreateNumpyVector(zeros)
        schema.QuantizationParametersStart(builder)
        schema.QuantizationParametersAddScale(builder, scale)
        schema.QuantizationParametersAddZeroPoint(builder, shared[key])
        schema.QuantizationParametersAddQuantizedDimension(builder, self.quantizedDimension)
        return schema.QuantizationParametersEnd(builder)


def _quantization(q, shared: dict) -> schema.QuantizationParametersT:
    out = _QuantizationParameters()
    out.shared = shared
    out.scale = [float(x) for x in q.scale]
    out.zeroPoint = [int(x) for x in q.zero_point]
    out.quantizedDimension = int(q.axis)
    return out


def _tensor_map(name: str, index: int):
    tm = schema.TensorMapT()
    tm.name = re.sub(r":\d+$", "", name)
    tm.tensorIndex = index
    return tm


def _string_tensor_bytes(arr: np.ndarray) -> np.ndarray:
    """LiteRT string tensor layout: count, offsets, then the bytes."""
    items = [x if isinstance(x, bytes) else str(x).encode() for x in np.asarray(arr).reshape(-1)]
    n = len(items)
    header = 4 * (n + 2)
    offsets, pos = [], header
    for s in items:
        offsets.append(pos)
        pos += len(s)
    offsets.append(pos)
    out = np.array([n] + offsets, dtype=np.int32).tobytes() + b"".join(items)
    return np.frombuffer(out, dtype=np.uint8)


MAX_FLATBUFFER_BYTES = 2**31 - 1  # a flatbuffer's offsets are 32-bit signed: one is under 2 GiB
_GRAPH_ALLOWANCE = 64 << 20  # room kept for the graph itself (tensors, ops, names)
BUFFER_ALIGNMENT = 16  # each constant after the flatbuffer starts at a multiple of this (flatbuffer_export.cc)
BUFFER_LOCATION = "buffer_location"  # the metadata the official converter writes in a file with buffer offsets
_BUFFER_OFFSET_SLOT, _BUFFER_SIZE_SLOT = 6, 8  # Buffer's fields 1 and 2 (data, offset, size): vtable slots


def constant_bytes(module: Module) -> int:
    """The bytes of the module's distinct constant arrays (what the file's buffers hold, before deduplication)."""
    seen, total = set(), 0
    for fn in module.functions.values():
        for op in fn.ops:
            for v in op.inputs:
                if v is not None and v.is_const and id(v.const) not in seen:
                    seen.add(id(v.const))
                    total += v.const.nbytes
    return total


def buffer_offsets_of(model: bytes) -> bool:
    """Whether a .tflite file keeps constants after its flatbuffer (a buffer with an offset above 1)."""
    m = schema.Model.GetRootAs(model, 0)
    return any(m.Buffers(i).Offset() > 1 for i in range(m.BuffersLength()))


def needs_buffer_offsets(module: Module, buffer_offsets: bool | None) -> bool:
    """Whether the file keeps its constants after the flatbuffer: as asked, or (None) where they would not fit
    in one; asked not to, a model that does not fit is a clear error before any byte is built."""
    if buffer_offsets:
        return True
    total = constant_bytes(module)
    if total + _GRAPH_ALLOWANCE <= MAX_FLATBUFFER_BYTES:
        return False
    if buffer_offsets is None:
        return True
    raise ConversionError(
        f"the model's constants take {total / 2**30:.2f} GiB: a flatbuffer holds under 2 GiB, and buffer_offsets="
        "False keeps them inside it (leave buffer_offsets unset, or True, to write them after it, as LiteRT reads "
        "them; or quantize the weights, optimizations=[tf.lite.Optimize.DEFAULT], 4x smaller)")


def write_flatbuffer(module: Module, tensor_names: dict[int, str] | None = None,
                     provenance: Provenance | None = None, buffer_offsets: bool | None = None,
                     progress: Callable[[str], None] | None = None) -> bytes:
    """Serialise a fully lowered module to ``.tflite`` bytes.

    ``tensor_names``, when given, is filled with the name each value was written under
    (``value.uid`` -> tensor name), so a tool can find a value's tensor in the file.
    ``provenance``: what made it (the description and ``CONVERSION_METADATA``).
    ``buffer_offsets``: the constants after the flatbuffer (``Buffer.offset`` / ``size``): True, False, or None
    (where they pass 2 GiB). ``progress``: a progress line's callable, told how much of a large file is written.
    """
    offsets = needs_buffer_offsets(module, buffer_offsets)
    writer = FlatbufferWriter(module, provenance)
    data = writer.write(offsets, progress)
    if tensor_names is not None:
        tensor_names.update(writer.tensor_names)
    return data
