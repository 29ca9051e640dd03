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
import shutil
import signal
import stat
import struct
import tempfile
import zlib

from fuselite.errors import InputError
from fuselite.frontend.causal_lm import DECODE, POSITIONS, TOKENS, cache_names
from fuselite.generative.tokenizers import MAX_TOKENIZER_BYTES, check_tokenizer_json, open_regular, tokenizer_file
from fuselite.requirements import require_lm


def write_litertlm(model, path, tokenizer, *, start_token: int | None = None, stop_tokens=None,
                   max_num_tokens: int | None = None) -> dict:
    """Write the bundle of ``model`` (a ``.tflite``'s bytes or path, from :meth:`Converter.from_causal_lm`) and
    ``tokenizer`` (a keras-hub tokenizer, a SentencePiece model's path or a ``tokenizer.json``'s path) to
    ``path``; nothing is written unless the whole bundle is. ``start_token`` / ``stop_tokens``: default the
    tokenizer's start and end tokens; ``max_num_tokens``: default the model's cache length. Returns what was
    written (the metadata and the sizes)."""
    path = os.fspath(path)
    directory, mode = _output_place(path)  # before any work: where the bundle goes, the mode it gets
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
    with temporary_folder("fuselite-litertlm-") as work:
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
        partial = None
        try:
            with signals_held():  # the partial file and its removal on the way out, as one step
                fd, partial = tempfile.mkstemp(prefix=".fuselite-", suffix=".litertlm", dir=directory)
            os.fchmod(fd, mode)  # as a file the user creates (the umask), or the mode of the one it replaces
            with os.fdopen(fd, "wb") as out:
                fb.build(out)
            os.replace(partial, path)
            partial = None
        except OSError as e:
            raise InputError(f"cannot write '{path}': {e.strerror or e}") from None
        finally:
            if partial is not None and os.path.lexists(partial):
                os.unlink(partial)
    return {"path": path, "bytes": os.path.getsize(path), "model_bytes": len(data), "tokenizer": tok.kind,
            "start_token": start, "stop_tokens": stops, "max_num_tokens": limit}


@contextlib.contextmanager
def signals_held():
    """SIGTERM and SIGINT held while the block runs, delivered as it ends: a temporary file or folder is made and
    its removal set up as one step (a SIGTERM turned into SystemExit cannot fall between the two)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def temporary_folder(prefix: str):
    """A temporary folder of fuselite's own (mode 0700, in the temporary directory), removed on the way out
    (SIGTERM and Ctrl-C included: :func:`signals_held` while it is made)."""
    folder = None
    try:
        with signals_held():
            folder = tempfile.mkdtemp(prefix=prefix)
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _output_place(path: str) -> tuple[str, int]:
    """The folder a bundle is written in and the mode it gets: the umask's (0666 less it), as ``.tflite`` files
    get (``paths.write_atomic``), or the mode of the file it replaces. An InputError where ``path`` cannot be
    written (``paths.output_problem``: a folder, a device or FIFO, in a folder that is missing or not writable)."""
    from fuselite.paths import output_problem

    problem = output_problem(path)
    if problem:
        raise InputError(problem)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        return directory, stat.S_IMODE(st.st_mode)
    umask = os.umask(0o022)
    os.umask(umask)
    return directory, 0o666 & ~umask


def _model_bytes(model) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    try:
        with open_regular(os.fspath(model), "the model", "a .tflite") as f:
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


# Reading a bundle: its structure checked before LiteRT-LM's native loader sees it (which trusts every offset and
# size in the file: a header's end past the file aborts it, one inside its own fields crashes it).

MAGIC = b"LITERTLM"
FORMAT_MAJOR = 1  # litert_lm_builder's LITERTLM_MAJOR_VERSION: the layout this runtime reads
HEADER_BEGIN = 32  # magic (8), major / minor / patch (3 x u32), padding, the header's end (u64 at byte 24)
MAX_HEADER_BYTES = 1 << 20  # the header (a FlatBuffer of section offsets and key-value pairs) is a few KB
MAX_METADATA_BYTES = 16 << 20
SECTION_TYPES = {1: "GenericBinaryData", 2: "Deprecated", 3: "TFLiteModel", 4: "SP_Tokenizer", 5: "LlmMetadataProto",
                 6: "HF_Tokenizer_Zlib", 7: "TFLiteWeights", 8: "EmbeddingMetadataProto", 9: "ExecutorMetadataProto",
                 10: "TtsMetadataProto", 11: "AsrMetadataProto"}  # the header schema's AnySectionDataType
_VALUE_FORMATS = {1: "<B", 2: "<b", 3: "<H", 4: "<h", 5: "<I", 6: "<i", 7: "<f", 8: "<B", 9: "string", 10: "<Q",
                  11: "<q", 12: "<d"}  # VData: the key-value pairs' value types


class _FlatBuffer:
    """Bounds-checked reads of a FlatBuffer: every offset, table, vector and string inside the buffer, else
    ``fail`` (a function raising) with what points outside. The header's schema is small and fixed, so its tables
    are read by slot (litert_lm_builder's litertlm_header_schema: LiteRTLMMetaData, SectionObject, KeyValuePair)."""

    def __init__(self, buf: bytes, fail):
        self.buf, self.fail = buf, fail

    def read(self, fmt: str, pos: int):
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.buf):
            self.fail(f"an offset in its header points outside it (byte {pos} of {len(self.buf)})")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def table(self, pos: int) -> tuple[int, int, int, int]:
        """``(position, vtable's position, vtable's size, table's size)`` of the table at ``pos``."""
        vtable = pos - self.read("<i", pos)
        vsize, size = self.read("<H", vtable), self.read("<H", vtable + 2)
        if vsize < 4 or vsize % 2 or size < 4:
            self.fail(f"a table of its header (at byte {pos}) is malformed")
        self.read("<B", vtable + vsize - 1)
        self.read("<B", pos + size - 1)
        return pos, vtable, vsize, size

    def field(self, table, slot: int, width: int) -> int | None:
        pos, vtable, vsize, size = table
        if 4 + 2 * slot + 2 > vsize:
            return None
        offset = self.read("<H", vtable + 4 + 2 * slot)
        if offset == 0:
            return None
        if offset + width > size:
            self.fail(f"a field of its header (at byte {pos + offset}) lies outside its table")
        return pos + offset

    def scalar(self, table, slot: int, fmt: str, default=0):
        at = self.field(table, slot, struct.calcsize(fmt))
        return default if at is None else self.read(fmt, at)

    def child(self, table, slot: int):
        at = self.field(table, slot, 4)
        return None if at is None else self.table(at + self.read("<I", at))

    def tables(self, table, slot: int) -> list:
        at = self.field(table, slot, 4)
        if at is None:
            return []
        start = at + self.read("<I", at)
        count = self.read("<I", start)
        if start + 4 + 4 * count > len(self.buf):
            self.fail(f"a list in its header (at byte {start}, {count:,} entries) runs past its end")
        return [self.table(p + self.read("<I", p)) for p in range(start + 4, start + 4 + 4 * count, 4)]

    def string(self, table, slot: int) -> str | None:
        at = self.field(table, slot, 4)
        if at is None:
            return None
        start = at + self.read("<I", at)
        length = self.read("<I", start)
        if start + 4 + length + 1 > len(self.buf):  # and its terminating zero
            self.fail(f"a string in its header (at byte {start}, {length:,} bytes) runs past its end")
        try:
            return self.buf[start + 4:start + 4 + length].decode()
        except UnicodeDecodeError:
            self.fail(f"a string in its header (at byte {start}) is not UTF-8")


def _key_values(fb: _FlatBuffer, table, slot: int) -> dict:
    """The key-value pairs (KeyValuePair: key, value type, value) of a list in the header."""
    pairs = {}
    for pair in fb.tables(table, slot):
        key = fb.string(pair, 0)
        if key is None:
            fb.fail("a key-value pair of its header has no key")
        kind = fb.scalar(pair, 1, "<B")
        if kind == 0:
            pairs[key] = None
            continue
        fmt = _VALUE_FORMATS.get(kind)
        value = fb.child(pair, 2)
        if fmt is None or value is None:
            fb.fail(f"the value of '{key}' in its header is " + (f"of an unknown type ({kind})" if fmt is None
                                                                   else "missing"))
        pairs[key] = fb.string(value, 0) if fmt == "string" else fb.scalar(value, 0, fmt)
    return pairs


def check_litertlm(path) -> dict:
    """The structure of the ``.litertlm`` bundle at ``path``, checked as LiteRT-LM's loader (which trusts it) reads
    it: the magic and format version, the header's end inside the file, every offset of the header (a FlatBuffer)
    inside the header, every section inside the file after the header and apart from the others, a model, a
    tokenizer (a tokenizer.json's ``id`` / ``content`` fields) and LLM metadata naming a stop token. Returns
    ``{"version", "sections": [{"type", "begin", "end", "items"}], "start_token", "stop_tokens",
    "max_num_tokens", "tokenizer"}``; an :class:`InputError` naming the first problem.

    Example::

        fuselite.generative.check_litertlm("model.litertlm")["stop_tokens"]   # [[1]]
    """
    path = os.fspath(path)
    try:
        f = open_regular(path, "the bundle", "a .litertlm file")
    except FileNotFoundError:
        raise InputError(f"no bundle at '{path}'") from None
    except OSError as e:
        raise InputError(f"cannot read the bundle '{path}': {e.strerror or e}") from None

    def fail(why: str):
        raise InputError(f"'{path}' is not a bundle LiteRT-LM can run: {why}")

    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_BEGIN)
        if len(head) < len(MAGIC) or head[:len(MAGIC)] != MAGIC:
            raise InputError(f"'{path}' is not a LiteRT-LM bundle (a .litertlm file starts with "
                             f"{MAGIC.decode()}): write one with fuselite convert-lm or write_litertlm")
        if len(head) < HEADER_BEGIN:
            fail(f"it ends at byte {size}, inside its {HEADER_BEGIN}-byte file header")
        version = struct.unpack_from("<III", head, 8)
        if version[0] != FORMAT_MAJOR:
            fail(f"its format version is {'.'.join(map(str, version))}, this LiteRT-LM reads {FORMAT_MAJOR}.x "
                 "(or the file is not one)")
        (header_end,) = struct.unpack_from("<Q", head, 24)
        if header_end > size:
            fail(f"its header ends at byte {header_end:,}, past the end of the file ({size:,} bytes)")
        if header_end <= HEADER_BEGIN + 4:
            fail(f"its header ends at byte {header_end}, before it holds anything (it begins at byte "
                 f"{HEADER_BEGIN})")
        if header_end - HEADER_BEGIN > MAX_HEADER_BYTES:
            fail(f"its header claims {header_end - HEADER_BEGIN:,} bytes, past the {MAX_HEADER_BYTES:,} a header "
                 "may have")
        fb = _FlatBuffer(f.read(header_end - HEADER_BEGIN), fail)
        root = fb.table(fb.read("<I", 0))
        system = fb.child(root, 0)
        if system is not None:
            _key_values(fb, system, 0)
        listing = fb.child(root, 1)
        sections = [{"type": SECTION_TYPES.get(fb.scalar(obj, 3, "<B"), fb.scalar(obj, 3, "<B")),
                     "begin": fb.scalar(obj, 1, "<Q"), "end": fb.scalar(obj, 2, "<Q"),
                     "items": _key_values(fb, obj, 0)} for obj in ([] if listing is None else fb.tables(listing, 0))]
        for i, section in enumerate(sections):
            if not isinstance(section["type"], str):
                fail(f"section {i} is of an unknown type ({section['type']})")
            if not header_end <= section["begin"] <= section["end"] <= size:
                fail(f"section {i} ({section['type']}) spans bytes {section['begin']:,}..{section['end']:,}, not "
                     f"inside the file after its header ({header_end:,}..{size:,})")
        ordered = sorted(sections, key=lambda s: (s["begin"], s["end"]))
        for a, b in zip(ordered, ordered[1:]):
            if b["begin"] < a["end"]:
                fail(f"its sections {a['type']} and {b['type']} overlap (bytes {b['begin']:,}..{a['end']:,})")

        def content(section, limit: int) -> bytes:
            length = section["end"] - section["begin"]
            if length > limit:
                fail(f"its {section['type']} section has {length:,} bytes, past the {limit:,} it may have")
            f.seek(section["begin"])
            return f.read(length)

        kinds = [s["type"] for s in sections]
        models = [s for s in sections if s["type"] == "TFLiteModel"]
        if not models:
            fail("it holds no model (a TFLiteModel section)")
        for section in models:
            if section["end"] - section["begin"] < 8 or content({**section, "end": section["begin"] + 8},
                                                                 8)[4:] != b"TFL3":
                fail(f"its TFLiteModel section (bytes {section['begin']:,}..{section['end']:,}) is not a .tflite "
                     "model")
        tokenizers = [s for s in sections if s["type"] in ("SP_Tokenizer", "HF_Tokenizer_Zlib")]
        if not tokenizers:
            fail("it holds no tokenizer (an SP_Tokenizer or HF_Tokenizer_Zlib section)")
        tokenizer = tokenizers[0]
        if tokenizer["end"] == tokenizer["begin"]:
            fail(f"its {tokenizer['type']} section is empty")
        if tokenizer["type"] == "HF_Tokenizer_Zlib":
            _check_hf_tokenizer(content(tokenizer, MAX_TOKENIZER_BYTES), fail)
        if "LlmMetadataProto" not in kinds:
            fail("it holds no LLM metadata (an LlmMetadataProto section: the start and stop tokens)")
        meta = _llm_metadata(content(next(s for s in sections if s["type"] == "LlmMetadataProto"),
                                      MAX_METADATA_BYTES), fail)
    return {"version": ".".join(map(str, version)), "sections": sections, **meta,
            "tokenizer": "hf" if tokenizer["type"] == "HF_Tokenizer_Zlib" else "sentencepiece"}


def _check_hf_tokenizer(data: bytes, fail) -> None:
    """An HF_Tokenizer_Zlib section: the tokenizer.json's size (u64), then its zlib stream."""
    if len(data) < 8:
        fail("its HF_Tokenizer_Zlib section is shorter than its own size field")
    (length,) = struct.unpack_from("<Q", data, 0)
    if length > MAX_TOKENIZER_BYTES:
        fail(f"its tokenizer.json claims {length:,} bytes, past the {MAX_TOKENIZER_BYTES:,} a tokenizer may have")
    stream = zlib.decompressobj()
    try:
        text = stream.decompress(data[8:], length + 1)
    except zlib.error as e:
        fail(f"its tokenizer.json is not a zlib stream ({e})")
    except MemoryError:
        fail(f"its tokenizer.json ({length:,} bytes) does not fit in memory")
    if len(text) != length or not stream.eof:
        fail(f"its tokenizer.json has not the {length:,} bytes its section says")
    try:
        check_tokenizer_json(text, "its tokenizer.json")
    except InputError as e:
        fail(str(e))


def _llm_metadata(data: bytes, fail) -> dict:
    """The LlmMetadataProto section's start and stop tokens and token limit; LiteRT-LM cannot start a session
    without a stop token."""
    from google.protobuf.message import DecodeError

    proto = require_lm("litert_lm_builder.runtime.proto.llm_metadata_pb2", "reading a LiteRT-LM bundle")
    meta = proto.LlmMetadata()
    try:
        meta.ParseFromString(data)
    except (DecodeError, RecursionError) as e:
        fail(f"its LLM metadata is not an LlmMetadata proto ({e})")

    def token(t):
        return list(t.token_ids.ids) if t.HasField("token_ids") else t.token_str or None

    stops = [token(t) for t in meta.stop_tokens if token(t)]
    if not stops:
        fail(("its LLM metadata section is empty: it names no stop token" if not data else
              "its LLM metadata names no stop token") + ", and LiteRT-LM cannot start a session without one (write "
             "the bundle with write_litertlm(stop_tokens=...), or from a tokenizer that names its end token)")
    return {"start_token": token(meta.start_token) if meta.HasField("start_token") else None,
            "stop_tokens": stops, "max_num_tokens": meta.max_num_tokens or None}
