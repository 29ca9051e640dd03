"""What a prefill / decode model holds, for the report: its signatures, the KV cache (per token and in all) and
the bytes of its weights (the constants every signature shares)."""

from __future__ import annotations


def lm_summary(data: bytes, layers: int, heads: int, head_dim: int, cache_length: int, cache_itemsize: int = 4) -> dict:
    """``{"signatures", "cache_length", "layers", "kv_heads", "head_dim", "cache_bytes_per_token", "cache_bytes",
    "weight_bytes", "weight_bytes_read_per_token"}`` of a model from :meth:`fuselite.Converter.from_causal_lm`
    (read per token: by one decode call, the physical floor of decode's time with the memory bandwidth)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    keys = [model.SignatureDefs(i).SignatureKey().decode() for i in range(model.SignatureDefsLength())]
    sizes = [_buffer_bytes(model.Buffers(i)) for i in range(model.BuffersLength())]
    per_token = layers * 2 * heads * head_dim * cache_itemsize
    decode = next((model.SignatureDefs(i).SubgraphIndex() for i in range(model.SignatureDefsLength())
                   if model.SignatureDefs(i).SignatureKey() == b"decode"), None)
    return {"signatures": keys, "cache_length": cache_length, "layers": layers, "kv_heads": heads,
            "head_dim": head_dim, "cache_bytes_per_token": per_token, "cache_bytes": per_token * cache_length,
            "weight_bytes": sum(sizes),
            "weight_bytes_read_per_token": None if decode is None else _read_per_call(model, decode, sizes)}


def _buffer_bytes(buffer) -> int:
    return buffer.Size() if buffer.Offset() > 1 else buffer.DataLength()  # offsets: the data after the file


def _read_per_call(model, index: int, sizes: list[int]) -> int:
    """The constant bytes one call of subgraph ``index`` reads: every constant operand of every op (a weight two
    ops read counts twice), a lookup table's one row per token (GATHER, EMBEDDING_LOOKUP)."""
    from ai_edge_litert import schema_py_generated as schema

    tables = {schema.BuiltinOperator.GATHER: 0, schema.BuiltinOperator.EMBEDDING_LOOKUP: 1}  # the table operand
    graph = model.Subgraphs(index)
    total = 0
    for j in range(graph.OperatorsLength()):
        op = graph.Operators(j)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        for slot, t in enumerate(op.InputsAsNumpy()):
            if t < 0:
                continue
            tensor = graph.Tensors(int(t))
            size = sizes[tensor.Buffer()] if tensor.Buffer() < len(sizes) else 0
            if size and tables.get(kind) == slot:
                rows = int(tensor.ShapeAsNumpy()[0]) if tensor.ShapeLength() else 1
                size //= max(rows, 1)
            total += size + _blockwise_scales(graph, tensor, sizes)
    return total


def _blockwise_scales(graph, tensor, sizes: list[int]) -> int:
    """The bytes of a blockwise int4 weight's scales (a tensor of their own, not an op input), else 0."""
    from ai_edge_litert import schema_py_generated as schema

    quant = tensor.Quantization()
    if quant is None or quant.DetailsType() != schema.QuantizationDetails.BlockwiseQuantization:
        return 0
    details = schema.BlockwiseQuantization()
    table = quant.Details()
    details.Init(table.Bytes, table.Pos)
    buffer = graph.Tensors(details.Scales()).Buffer()
    return sizes[buffer] if buffer < len(sizes) else 0
