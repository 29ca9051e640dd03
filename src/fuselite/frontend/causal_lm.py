"""A keras-hub ``CausalLM`` as LiteRT-LM's signatures: ``prefill_<L>`` for each prefill length and ``decode``.

LiteRT-LM's executor (google-ai-edge/LiteRT-LM, ``runtime/executor/llm_litert_compiled_model_executor.cc`` and
``litert_compiled_model_executor_utils.cc``) finds a model's parts by name: the signature ``decode``, every
signature whose key starts with ``prefill`` (keyed by the length of its positions), the inputs ``tokens``
(int32 [1, T]) and ``input_pos`` (int32 [T]), one key and one value cache per layer, ``kv_cache_k_N`` /
``kv_cache_v_N`` (N from 0; [1, cache length, key-value heads, head size]), given back under the same names
once updated, and decode's ``logits`` (float32 [1, 1, vocabulary]). A prefill shorter than its signature is
padded with token 0 at position 0; the cache is written from ``input_pos[0]`` on, and what the padding writes
past the prompt is written over by the decode steps before anything attends to it (keras-hub's attention masks
what lies past each token's own position).

Each signature is the model's own ``call_with_cache(token_ids, cache, cache_update_index)`` traced at its
length, the cache assembled from the per-layer inputs as the model takes it: one tensor [1, layers, 2, length,
heads, head size] (GPT-2, Gemma, Llama, Mistral, ...) or a tuple of (key, value) pairs per layer (Gemma 3). The
assembling and taking apart fold away (``passes.fold``: a slice of a PACK is its operand).
"""

from __future__ import annotations

from fuselite.errors import InputError

TOKENS = "tokens"
POSITIONS = "input_pos"
LOGITS = "logits"
DECODE = "decode"


def prefill_key(length: int) -> str:
    """The signature key of the prefill of ``length`` tokens (litert-torch's naming, which LiteRT-LM reads)."""
    return f"prefill_{length}"


def cache_names(layers: int) -> list[str]:
    """The per-layer cache inputs (and outputs) in order: kv_cache_k_0, kv_cache_v_0, kv_cache_k_1, ..."""
    return [f"kv_cache_{kind}_{i}" for i in range(layers) for kind in "kv"]


# LiteRT-LM's layout (litert-torch's KV_LAYOUT_TRANSPOSED, which its CPU executor reads the cache length from:
# the key cache's dimension 2): keys [1, heads, length, size], values [1, heads, size, length]; keras-hub's
# [1, length, heads, size] and back
_TO_KERAS = {"k": (0, 2, 1, 3), "v": (0, 3, 1, 2)}
_FROM_KERAS = {"k": (0, 2, 1, 3), "v": (0, 2, 3, 1)}


def cache_shape(name: str, length: int, heads: int, head_dim: int) -> tuple[int, int, int, int]:
    """The shape of the cache input ``name`` (``kv_cache_k_N``: [1, heads, length, size]; ``kv_cache_v_N``:
    [1, heads, size, length])."""
    return (1, heads, length, head_dim) if name[9] == "k" else (1, heads, head_dim, length)


def cache_layout(lm) -> tuple[int, int, int]:
    """(layers, key-value heads, head size) of a keras-hub CausalLM, from its backbone's configuration."""
    backbone = getattr(lm, "backbone", None)
    if backbone is None or not hasattr(lm, "call_with_cache"):
        raise InputError(f"{type(lm).__name__} is not a keras-hub CausalLM (one with a backbone and "
                         "call_with_cache): build the prefill and decode tf.functions yourself and pass them to "
                         "Converter.from_concrete_functions({'prefill_<L>': ..., 'decode': ...})")
    config = backbone.get_config()
    query_heads = config.get("num_query_heads", config.get("num_heads"))
    kv_heads = config.get("num_key_value_heads") or query_heads
    head_dim = config.get("head_dim") or (config["hidden_dim"] // query_heads if query_heads else None)
    layers = config.get("num_layers")
    if not (layers and kv_heads and head_dim):
        raise InputError(f"{type(lm).__name__}: its backbone's configuration does not give the number of layers, "
                         "key-value heads and the head size (num_layers, num_key_value_heads or num_heads, "
                         "head_dim or hidden_dim)")
    return layers, kv_heads, head_dim


def causal_lm_entries(lm, prefill_lengths, cache_length: int, prefill_logits: bool = False) -> list:
    """The entries ``prefill_<L>`` (one per length, ascending) and ``decode`` of a keras-hub CausalLM with a cache of
    ``cache_length`` positions. ``prefill_logits``: a prefill gives its logits too (LiteRT-LM's executor binds
    every output of a signature and gives prefill none: off for a bundle)."""
    layers, heads, head_dim = cache_layout(lm)
    lengths = sorted({_length(n, "prefill length") for n in prefill_lengths})
    cache_length = _length(cache_length, "cache_length")
    if not lengths:
        raise InputError("prefill_lengths names no length")
    if lengths[-1] > cache_length:
        raise InputError(f"a prefill of {lengths[-1]} tokens does not fit a cache of {cache_length} positions")
    limit = getattr(lm.backbone, "max_sequence_length", None)  # learned positions (GPT-2)
    if limit and cache_length > limit:
        raise InputError(f"cache_length {cache_length} is past the model's max_sequence_length ({limit})")
    dtype = getattr(lm, "compute_dtype", "float32")
    entries = [_entry(lm, prefill_key(n), n, (layers, heads, head_dim), cache_length, dtype, prefill_logits)
               for n in lengths]
    return entries + [_entry(lm, DECODE, 1, (layers, heads, head_dim), cache_length, dtype, True)]


def _length(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{what} is a positive number of tokens, got {value!r}")
    return value


def _entry(lm, key: str, length: int, layout: tuple, cache_length: int, dtype, logits: bool):
    import tensorflow as tf

    from fuselite.frontend.sources import traced_in_layers

    layers, heads, head_dim = layout
    names = cache_names(layers)
    specs = [tf.TensorSpec((1, length), tf.int32, name=TOKENS), tf.TensorSpec((length,), tf.int32, name=POSITIONS)]
    specs += [tf.TensorSpec(cache_shape(name, cache_length, heads, head_dim), dtype, name=name) for name in names]

    def step(tokens, positions, *caches):
        caches = [tf.transpose(c, _TO_KERAS[name[9]]) for c, name in zip(caches, names)]  # [1, length, heads, size]
        pairs = list(zip(caches[0::2], caches[1::2]))
        index = positions[0]
        try:  # a tuple of (key, value) per layer (Gemma 3)
            out, _, cache = lm.call_with_cache(tokens, tuple(pairs), index)
            flat = [t for pair in cache for t in pair]
        except (TypeError, ValueError, IndexError):  # one tensor [batch, layers, 2, length, heads, head size]
            out, _, cache = lm.call_with_cache(tokens, tf.stack([tf.stack(p, axis=1) for p in pairs], axis=1), index)
            flat = [cache[:, i][:, j] for i in range(layers) for j in (0, 1)]
        result = {name: tf.transpose(c, _FROM_KERAS[name[9]]) for name, c in zip(names, flat)}
        if logits:
            result[LOGITS] = out
        return result

    cf = traced_in_layers(lm, tf.function(step), specs)
    for name in names:
        shape, want = tuple(cf.structured_outputs[name].shape), cache_shape(name, cache_length, heads, head_dim)
        if shape != want:
            raise InputError(f"{type(lm).__name__}.call_with_cache gave {name} the shape {shape}, not {want}: its "
                             "cache is not laid out as keras-hub's CausalLMs lay theirs out")
    return key, cf, [s.name for s in specs], sorted(cf.structured_outputs)
