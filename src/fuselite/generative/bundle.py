"""A LiteRT-LM bundle (``.litertlm``): the prefill / decode model, its tokenizer and the LLM metadata (start and
stop tokens, the most tokens a session holds), built with ``litert_lm_builder`` as LiteRT-LM's runtime loads it.

Example::

    conv = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[32], cache_length=512)
    fuselite.write_litertlm(conv.convert(), "model.litertlm", lm.preprocessor.tokenizer)
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile

from fuselite.errors import InputError
from fuselite.frontend.causal_lm import DECODE, POSITIONS, TOKENS, cache_names
from fuselite.generative.tokenizers import tokenizer_file
from fuselite.requirements import require_lm


def write_litertlm(model, path, tokenizer, *, start_token: int | None = None, stop_tokens=None,
                   max_num_tokens: int | None = None) -> dict:
    """Write the bundle of ``model`` (a ``.tflite``'s bytes or path, from :meth:`Converter.from_causal_lm`) and
    ``tokenizer`` (a keras-hub tokenizer, a SentencePiece model's path or a ``tokenizer.json``'s path) to
    ``path``; nothing is written unless the whole bundle is. ``start_token`` / ``stop_tokens``: default the
    tokenizer's start and end tokens; ``max_num_tokens``: default the model's cache length. Returns what was
    written (the metadata and the sizes)."""
    builder = require_lm("litert_lm_builder.litertlm_builder", "a LiteRT-LM bundle")
    data = _model_bytes(model)
    cache_length = decode_cache_length(data)
    tok = tokenizer_file(tokenizer)
    start = tok.start_token if start_token is None else int(start_token)
    stops = tok.stop_tokens if stop_tokens is None else [int(t) for t in stop_tokens]
    if start is None or not stops:
        raise InputError("the bundle needs the token generation starts with and at least one it stops at: the "
                         "tokenizer names none, pass start_token= and stop_tokens=")
    limit = cache_length if max_num_tokens is None else int(max_num_tokens)
    if not 0 < limit <= cache_length:
        raise InputError(f"max_num_tokens {limit} is not in 1..{cache_length} (the model's cache length)")
    meta = builder.llm_metadata_pb2.LlmMetadata()
    meta.start_token.token_ids.ids.append(start)
    for token in stops:
        meta.stop_tokens.add().token_ids.ids.append(token)
    meta.max_num_tokens = limit
    meta.llm_model_type.generic_model.SetInParent()
    path = os.fspath(path)
    with tempfile.TemporaryDirectory(prefix="fuselite-litertlm-") as work:
        files = {"model.tflite": data, "metadata.pb": meta.SerializeToString(),
                 "tokenizer.json" if tok.kind == "hf" else "tokenizer.model": tok.data}
        for name, content in files.items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(content)
        fb = builder.LitertLmFileBuilder()
        fb.add_llm_metadata(os.path.join(work, "metadata.pb"))
        if tok.kind == "hf":
            fb.add_hf_tokenizer(os.path.join(work, "tokenizer.json"))
        else:
            fb.add_sentencepiece_tokenizer(os.path.join(work, "tokenizer.model"))
        with contextlib.redirect_stdout(io.StringIO()):  # the builder prints what it adds
            fb.add_tflite_model(os.path.join(work, "model.tflite"), builder.TfLiteModelType.PREFILL_DECODE,
                                prefer_activation_type="fp32")
        fd, partial = tempfile.mkstemp(prefix=".fuselite-", suffix=".litertlm", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "wb") as out:
                fb.build(out)
            os.replace(partial, path)
        except BaseException:
            os.unlink(partial)
            raise
    return {"path": path, "bytes": os.path.getsize(path), "model_bytes": len(data), "tokenizer": tok.kind,
            "start_token": start, "stop_tokens": stops, "max_num_tokens": limit}


def _model_bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    try:
        with open(os.fspath(model), "rb") as f:
            return f.read()
    except (OSError, TypeError) as e:
        raise InputError(f"model is a .tflite's bytes or path, got {model!r} ({e})") from None


def decode_cache_length(data: bytes) -> int:
    """The cache length of a prefill / decode model: dimension 2 of decode's ``kv_cache_k_0`` (LiteRT-LM reads
    it there). An InputError where the model is not one LiteRT-LM runs (no ``decode`` signature with ``tokens``,
    ``input_pos`` and the caches, or no ``prefill_*`` signature)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    signatures = {}
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        inputs = {sig.Inputs(j).Name().decode(): sig.Inputs(j).TensorIndex() for j in range(sig.InputsLength())}
        signatures[sig.SignatureKey().decode()] = (sig.SubgraphIndex(), inputs)
    decode = signatures.get(DECODE)
    needed = [TOKENS, POSITIONS, cache_names(1)[0]]
    if decode is None or any(n not in decode[1] for n in needed) \
            or not any(k.startswith("prefill") for k in signatures):
        raise InputError(f"the model is not a prefill / decode model LiteRT-LM runs (signatures: "
                         f"{', '.join(sorted(signatures)) or 'none'}; it needs 'decode' with inputs "
                         f"{', '.join(needed)} and a 'prefill_<L>'): convert it with Converter.from_causal_lm")
    tensor = model.Subgraphs(decode[0]).Tensors(decode[1][needed[2]])
    return int(tensor.ShapeAsNumpy()[2])
