"""The ``schema.ModelT`` a lowered module becomes, before any byte is laid out: buffers (identical constants share
one), operator codes at the lowest op versions that express them, one subgraph per function (entry functions first,
in signature order) with its tensors, operators and their options, signature defs carrying the user's input/output
names, and the metadata (``min_runtime_version``, ``CONVERSION_METADATA``, debug metadata).
``flatbuffer.FlatbufferWriter`` builds on it and writes the file."""

from __future__ import annotations

import re

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from fuselite.errors import ConversionError
from fuselite.ir import BlockwiseQuantization, Module, Quantization, Value
from fuselite.ir.arrays import digest
from fuselite.tflite.buffers import AlignedBuffer
from fuselite.tflite.debug_metadata import METADATA_NAME as DEBUG_METADATA
from fuselite.tflite.debug_metadata import debug_metadata
from fuselite.tflite.flexbuffer import encode_tf_attrs
from fuselite.tflite.names import StableNames, readable
from fuselite.tflite.op_options import DTYPE_OPTIONS, ENUMS, camel, options_table
from fuselite.tflite.provenance import Provenance
from fuselite.tflite.tensors import pack_int4, quantization_of, string_tensor_bytes, tensor_type
from fuselite.tflite.versions import min_runtime_version, op_version


class ModelBuilder:
    """``module`` as a ``schema.ModelT`` (``self.model``): its subgraphs, tensors, buffers, operator codes,
    signature defs and metadata, added by the methods below; ``FlatbufferWriter.write`` calls them and lays out
    the file."""

    def __init__(self, module: Module, provenance: Provenance | None = None):
        self.module = module
        self.provenance = provenance
        self.model = schema.ModelT()
        self.model.version = 3
        self.model.description = provenance.description() if provenance else "fuselite"
        self.model.buffers = [AlignedBuffer()]
        self.model.operatorCodes = []
        self.model.subgraphs = []
        self._buffer_index: dict[bytes, int] = {}
        self._opcode_index: dict[tuple, int] = {}
        self._zero_points: dict[bytes, int] = {}  # shared zero-point vectors (see tensors._QuantizationParameters)
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

    # -- pieces ------------------------------------------------------------------
    def _digest(self, arr: np.ndarray) -> bytes:
        """``digest``, once per array (the tensor and its buffer both key on it; a weight's bytes are read once)."""
        key = id(arr)
        if key not in self._digests:
            self._digests[key] = (digest(arr), arr)  # (held: its id stays its own while the writer runs)
        return self._digests[key][0]

    def _buffer(self, arr: np.ndarray, owner: Value | None = None) -> int:
        """The buffer holding ``arr``'s bytes (equal constants share one). ``owner``: the constant value
        whose array this is, rebound to a view of the file once written (see :class:`AlignedBuffer`)."""
        strings = arr.dtype.kind in ("S", "O", "U")
        raw = string_tensor_bytes(arr) if strings else pack_int4(arr) if arr.dtype.name == "int4" else arr
        key = self._digest(raw) + str(arr.dtype).encode()
        if key not in self._buffer_index:
            self.model.buffers.append(AlignedBuffer(raw))
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
                t.quantization = quantization_of(v.quant, self._zero_points)
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
            if not op.outputs:  # named through debug metadata (see tflite/debug_metadata.py)
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
            t.quantization = quantization_of(Quantization(tuple(quant["scale"]), tuple(quant["zero_point"]),
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
            attr = camel(key)
            if not hasattr(opts, attr):
                raise ConversionError(f"internal: option '{key}' is not in {table} (op {op.describe()})")
            if key in ENUMS:
                val = getattr(ENUMS[key], val)
            elif key in DTYPE_OPTIONS:
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
        self.model.buffers.append(AlignedBuffer(np.frombuffer(data, dtype=np.uint8)))
        self._metadata_buffers.add(len(self.model.buffers) - 1)
        meta = schema.MetadataT()
        meta.name = name
        meta.buffer = len(self.model.buffers) - 1
        self.model.metadata.append(meta)


def _tensor_map(name: str, index: int):
    tm = schema.TensorMapT()
    tm.name = re.sub(r":\d+$", "", name)
    tm.tensorIndex = index
    return tm
