"""What a prefill / decode model holds, for the report: its signatures, the KV cache (per token and in all) and
the bytes of its weights (the constants every signature shares)."""

from __future__ import annotations


def lm_summary(data: bytes, layers: int, heads: int, head_dim: int, cache_length: int, cache_itemsize: int = 4) -> dict:
    """``{"signatures", "cache_length", "layers", "kv_heads", "head_dim", "cache_bytes_per_token", "cache_bytes",
    "weight_bytes"}`` of a model from :meth:`fuselite.Converter.from_causal_lm`."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    keys = [model.SignatureDefs(i).SignatureKey().decode() for i in range(model.SignatureDefsLength())]
    weight_bytes = 0
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        weight_bytes += buffer.Size() if buffer.Offset() > 1 else buffer.DataLength()  # offsets: after the file
    per_token = layers * 2 * heads * head_dim * cache_itemsize
    return {"signatures": keys, "cache_length": cache_length, "layers": layers, "kv_heads": heads,
            "head_dim": head_dim, "cache_bytes_per_token": per_token, "cache_bytes": per_token * cache_length,
            "weight_bytes": weight_bytes}
