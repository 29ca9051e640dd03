"""A keras-hub tokenizer as LiteRT-LM takes it: SentencePiece's model proto (Gemma, Llama, Mistral, ...) or a
Hugging Face ``tokenizer.json`` for a byte-level BPE (GPT-2's vocabulary and merges, as keras-hub holds them).

LiteRT-LM's bundle holds one tokenizer section, ``SP_Tokenizer`` or ``HF_Tokenizer_Zlib``
(``litert_lm_builder``'s ``add_sentencepiece_tokenizer`` / ``add_hf_tokenizer``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass

from fuselite.errors import InputError


@dataclass
class TokenizerFile:
    """A tokenizer's file for the bundle: ``kind`` "sentencepiece" (``data``: the model proto) or "hf"
    (``data``: tokenizer.json's text, UTF-8), and the ids generation starts with and stops at."""

    kind: str
    data: bytes
    start_token: int | None
    stop_tokens: list[int]


MAX_TOKENIZER_BYTES = 256 << 20  # a tokenizer file past this is refused: the largest (256k-token vocabularies) are ~35 MB


def tokenizer_file(tokenizer) -> TokenizerFile:
    """The file LiteRT-LM reads for a keras-hub tokenizer (``lm.preprocessor.tokenizer``), a SentencePiece model
    file's path (``.model`` / ``.spm``) or a Hugging Face ``tokenizer.json``'s path (a regular file of at most
    :data:`MAX_TOKENIZER_BYTES`); a :class:`TokenizerFile` as it is."""
    if isinstance(tokenizer, TokenizerFile):
        return tokenizer
    if isinstance(tokenizer, (str, bytes)) or hasattr(tokenizer, "__fspath__"):
        return _from_path(tokenizer)
    proto = getattr(tokenizer, "proto", None)
    start, stop = _special_ids(tokenizer)
    if isinstance(proto, bytes) and proto:
        return TokenizerFile("sentencepiece", proto, start, stop)
    vocabulary, merges = getattr(tokenizer, "vocabulary", None), getattr(tokenizer, "merges", None)
    if isinstance(vocabulary, dict) and merges is not None:
        return TokenizerFile("hf", byte_level_bpe_json(vocabulary, merges, tokenizer).encode(), start, stop)
    raise InputError(f"{type(tokenizer).__name__} is neither a SentencePiece tokenizer (one with a proto) nor a "
                     "byte-level BPE tokenizer (one with a vocabulary and merges): pass the tokenizer's "
                     "SentencePiece model or tokenizer.json file instead")


def _special_ids(tokenizer) -> tuple[int | None, list[int]]:
    start = getattr(tokenizer, "start_token_id", None)
    end = getattr(tokenizer, "end_token_id", None)
    return (int(start) if start is not None else None), ([int(end)] if end is not None else [])


def _from_path(path) -> TokenizerFile:
    path = os.fsdecode(path)
    try:
        with open_regular(path, "the tokenizer", "a SentencePiece model or a tokenizer.json") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_TOKENIZER_BYTES:
                raise InputError(f"the tokenizer file '{path}' has {st.st_size:,} bytes, past the "
                                 f"{MAX_TOKENIZER_BYTES:,} a tokenizer may have")
            data = f.read(MAX_TOKENIZER_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read the tokenizer file '{path}': {e.strerror or e}") from None
    if len(data) > MAX_TOKENIZER_BYTES:
        raise InputError(f"the tokenizer file '{path}' has more than the {MAX_TOKENIZER_BYTES:,} bytes a tokenizer "
                         "may have")
    if not data:
        raise InputError(f"the tokenizer file '{path}' is empty")
    if path.endswith(".json"):
        spec = check_tokenizer_json(data, f"'{path}'")
        special = {t["content"]: t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
        return TokenizerFile("hf", data, None, sorted(special.values())[:1])
    from fuselite.requirements import require_lm

    spm = require_lm("sentencepiece", "a SentencePiece tokenizer in a LiteRT-LM bundle")
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except Exception as e:  # sentencepiece's own parse error
        raise InputError(f"'{path}' is not a SentencePiece model: {e}") from None
    bos, eos = processor.bos_id(), processor.eos_id()
    return TokenizerFile("sentencepiece", data, bos if bos >= 0 else None, [eos] if eos >= 0 else [])


def open_regular(path: str, what: str, kind: str):
    """``path`` opened for reading (binary) where it is a regular file; an InputError saying "``what`` '...' is not
    a regular file (``kind``)" where it is a device, a pipe or a folder (opened without blocking: a FIFO with no
    writer does not hang). OSErrors as ``open`` raises them."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{what} '{path}' is not a regular file ({kind})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_tokenizer_json(data: bytes, where: str) -> dict:
    """The parsed ``tokenizer.json`` in ``data``; an InputError naming the first field the tokenizers library
    (which LiteRT-LM's runtime reads it with) would refuse: its JSON, ``model`` (an object with a ``type``),
    ``added_tokens`` (objects with an integer ``id`` and a string ``content``)."""
    try:
        spec = json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise InputError(f"{where} is not a tokenizer.json: {e}") from None
    except MemoryError:
        raise InputError(f"{where} ({len(data):,} bytes of JSON) does not fit in memory") from None
    if not isinstance(spec, dict):
        raise InputError(f"{where} is not a tokenizer.json: it holds a JSON {type(spec).__name__}, not an object")
    model = spec.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("type"), str):
        raise InputError(f"{where} is not a tokenizer.json: it has no 'model' object with a 'type' (BPE, "
                         "WordPiece, Unigram, ...)")
    added = spec.get("added_tokens", [])
    if added is None:
        added = spec["added_tokens"] = []
    if not isinstance(added, list):
        raise InputError(f"{where} is not a tokenizer.json: 'added_tokens' is a list of tokens, got a JSON "
                         f"{type(added).__name__}")
    for i, token in enumerate(added):
        if not isinstance(token, dict):
            raise InputError(f"{where}: added_tokens[{i}] is not an object")
        for field, kind in (("id", int), ("content", str)):
            value = token.get(field)
            if not isinstance(value, kind) or isinstance(value, bool) or (field == "id" and value < 0):
                why = "has none" if field not in token else f"has {json.dumps(value)[:40]}"
                raise InputError(f"{where}: added_tokens[{i}] needs '{field}' ("
                                 f"{'a token id, an integer >= 0' if field == 'id' else 'the token, a string'}), "
                                 f"it {why}")
    return spec


def byte_level_bpe_json(vocabulary: dict, merges, tokenizer=None) -> str:
    """A Hugging Face ``tokenizer.json`` for a byte-level BPE (GPT-2's): keras-hub's ``BytePairTokenizer`` holds
    the same vocabulary (byte-level symbols, ``Ġ`` for a space) and merges ("a b", by rank) that the tokenizers
    library's BPE model takes; its special tokens (``<|endoftext|>``) are added tokens."""
    special = list(dict.fromkeys(getattr(tokenizer, "unsplittable_tokens", None) or []))
    prefix = bool(getattr(tokenizer, "add_prefix_space", False))
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": int(vocabulary[t]), "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for t in special if t in vocabulary],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {str(k): int(v) for k, v in vocabulary.items()},
                  "merges": [str(m) for m in merges]},
    }
    return json.dumps(spec, ensure_ascii=False)
