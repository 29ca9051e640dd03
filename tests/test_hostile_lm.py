"""Hostile inputs to ``fuselite convert-lm`` and ``fuselite generate`` (issue 65, LiteRT-LM): every bad bundle,
prompt, tokenizer, option or output path is one line on stderr (exit 1; usage errors exit 2), no crash, no
traceback, no hang, nothing left behind, nothing written outside what the user named. One tiny real bundle is
built in-process for the module (a 2-layer Gemma of random weights, a SentencePiece tokenizer trained here) and
copies of it are mutated; each command runs in a subprocess under a memory limit and a timeout, with its own
temporary directory and cache directory."""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import stat
import struct
import subprocess
import sys
import time

import pytest

pytest.importorskip("keras_hub")
pytest.importorskip("litert_lm")
pytest.importorskip("litert_lm_builder")

import fuselite  # noqa: E402
from fuselite.errors import InputError  # noqa: E402
from fuselite.generative import check_litertlm, max_threads  # noqa: E402
from fuselite.generative.bundle import HEADER_BEGIN, _FlatBuffer  # noqa: E402
from fuselite.generative.tokenizers import tokenizer_file  # noqa: E402

FUSELITE = [sys.executable, "-m", "fuselite.cli"]
MEMORY = 4 << 30  # RLIMIT_AS of each command
GENERATE_S = 120  # a generate run, Python's start and imports included
CONVERT_S = 600  # a convert-lm run that converts (TensorFlow's import and the conversion, on a loaded machine)
CACHE = 32


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tiny model's ``.keras``, its ``.tflite`` bytes, its tokenizer and its bundle (read-only: copy it)."""
    from test_generative import build, gpt2_tokenizer, sentencepiece_tokenizer

    root = tmp_path_factory.mktemp("lm")
    lm = build("gemma", sentencepiece_tokenizer())
    lm.save(root / "lm.keras")
    data = fuselite.Converter.from_causal_lm(lm, prefill_lengths=[8], cache_length=CACHE).convert()
    fuselite.write_litertlm(data, root / "model.litertlm", lm.preprocessor.tokenizer)
    hf = tokenizer_file(gpt2_tokenizer()).data
    return {"root": root, "keras": root / "lm.keras", "model": data, "bundle": (root / "model.litertlm").read_bytes(),
            "tokenizer": tokenizer_file(lm.preprocessor.tokenizer), "hf_json": hf}


@pytest.fixture
def place(tmp_path):
    """A folder for the model (and nothing else), the command's TMPDIR and its XDG_CACHE_HOME."""
    folders = {name: tmp_path / name for name in ("here", "tmp", "cache", "home")}
    for folder in folders.values():
        folder.mkdir()
    return folders


def _env(place, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(TMPDIR=str(place["tmp"]), XDG_CACHE_HOME=str(place["cache"]), HOME=str(place["home"]), **extra)
    return env


def _cli(place, *args, timeout=GENERATE_S, umask=None):
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
        if umask is not None:
            os.umask(umask)

    argv = [*FUSELITE, *(a if isinstance(a, bytes) else str(a) for a in args)]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                         preexec_fn=limited, env=_env(place), cwd=place["here"], stdin=subprocess.DEVNULL)
    return out, time.monotonic() - t0


def _one_line(out, code: int = 1, message: str = "") -> str:
    assert out.returncode == code, (out.returncode, out.stdout[-2000:], out.stderr[-3000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    if code == 2:  # argparse's own usage errors come after its usage lines
        lines = [line for line in lines if not line.startswith(("usage:", " "))]
    assert len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("fuselite: error:" if code == 1 else "fuselite "), lines[0]
    assert message in lines[0], lines[0]
    return lines[0]


def _nothing_left(place, *expected):
    """The model's folder holds what the test put there, the temporary directory nothing."""
    assert sorted(os.listdir(place["here"])) == sorted(expected), os.listdir(place["here"])
    assert os.listdir(place["tmp"]) == [], os.listdir(place["tmp"])


def _bundle(place, content: bytes, name="model.litertlm"):
    path = place["here"] / name
    path.write_bytes(content)
    return path


def _generate(place, path, *extra, prompt="the cat"):
    return _cli(place, "generate", path, prompt, "--max-new-tokens", "4", *extra)


def _header(content: bytes):
    """(the header's FlatBuffer reader, its section tables) of a bundle's bytes."""
    (end,) = struct.unpack_from("<Q", content, 24)

    def fail(why):
        raise AssertionError(why)

    fb = _FlatBuffer(content[HEADER_BEGIN:end], fail)
    root = fb.table(fb.read("<I", 0))
    return fb, fb.tables(fb.child(root, 1), 0)


def _with_section_field(content: bytes, section: int, slot: int, fmt: str, value) -> bytes:
    """``content`` with one field of one section's header entry rewritten (1: begin, 2: end, 3: type)."""
    fb, sections = _header(content)
    at = HEADER_BEGIN + fb.field(sections[section], slot, struct.calcsize(fmt))
    changed = bytearray(content)
    struct.pack_into(fmt, changed, at, value)
    return bytes(changed)


def _section_index(content: bytes, kind: int) -> int:
    fb, sections = _header(content)
    return next(i for i, s in enumerate(sections) if fb.scalar(s, 3, "<B") == kind)


def _built(place, made, metadata: bytes, tokenizer: bool = True) -> bytes:
    """A bundle of the tiny model with ``metadata`` as its LlmMetadataProto section, built with litert_lm_builder
    (as write_litertlm builds it, which refuses such metadata)."""
    import contextlib
    import io

    from litert_lm_builder import litertlm_builder as builder

    work = place["home"]
    (work / "model.tflite").write_bytes(made["model"])
    (work / "metadata.pb").write_bytes(metadata)
    (work / "tokenizer.model").write_bytes(made["tokenizer"].data)
    fb = builder.LitertLmFileBuilder()
    fb.add_llm_metadata(str(work / "metadata.pb"))
    if tokenizer:
        fb.add_sentencepiece_tokenizer(str(work / "tokenizer.model"))
    with contextlib.redirect_stdout(io.StringIO()):
        fb.add_tflite_model(str(work / "model.tflite"), builder.TfLiteModelType.PREFILL_DECODE,
                            prefer_activation_type="fp32")
    out = io.BytesIO()
    fb.build(out)
    for name in ("model.tflite", "metadata.pb", "tokenizer.model"):
        (work / name).unlink()
    return out.getvalue()


def _metadata(start=2, stops=(1,), limit=CACHE) -> bytes:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    meta = llm_metadata_pb2.LlmMetadata()
    if start is not None:
        meta.start_token.token_ids.ids.append(start)
    for token in stops:
        meta.stop_tokens.add().token_ids.ids.append(token)
    meta.max_num_tokens = limit
    meta.llm_model_type.generic_model.SetInParent()
    return meta.SerializeToString()


# --- generate: the bundle itself ---------------------------------------------------------------------------------


def test_the_bundle_generates_and_leaves_nothing_beside_it(made, place):
    """The unmutated bundle generates (exit 0); LiteRT-LM's XNNPACK cache goes to XDG_CACHE_HOME/fuselite (folders
    0700), not beside the model; nothing is left in the temporary directory."""
    path = _bundle(place, made["bundle"])
    out, _ = _generate(place, path, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["decode_tokens"] >= 1
    _nothing_left(place, "model.litertlm")
    ours = place["cache"] / "fuselite"
    for folder in [ours, *(p for p in ours.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(folder.lstat().st_mode) == 0o700, folder
    assert [p.name for p in ours.rglob("*.xnnpack_cache")], list(ours.rglob("*"))
    out, _ = _generate(place, path)  # again: the cache is used, and the folder still holds only the model
    assert out.returncode == 0, out.stderr[-3000:]
    _nothing_left(place, "model.litertlm")


def test_a_symlink_planted_at_the_cache_name_is_not_followed(made, place):
    """LiteRT-LM's default cache name beside the model (MODEL_<mtime>_<size>.xnnpack_cache) planted as a symlink
    to a file of the user's: generate never writes through it; a planted XDG_CACHE_HOME/fuselite symlink is not
    used either (the cache is off then), and the folder it points to stays empty."""
    path = _bundle(place, made["bundle"])
    st = path.stat()
    victim = place["home"] / "precious.txt"
    victim.write_text("keep me")
    planted = place["here"] / f"model.litertlm_{int(st.st_mtime)}_{st.st_size}.xnnpack_cache"
    planted.symlink_to(victim)
    elsewhere = place["home"] / "elsewhere"
    elsewhere.mkdir()
    (place["cache"] / "fuselite").symlink_to(elsewhere)
    out, _ = _generate(place, path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert victim.read_text() == "keep me"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert os.listdir(elsewhere) == []
    _nothing_left(place, "model.litertlm", planted.name)


@pytest.mark.parametrize("header_end", [2 ** 63 + 5, 33, 2 ** 64 - 1, 0])
def test_a_header_end_outside_the_file_or_inside_its_header(made, place, header_end):
    """The header's end (u64 at byte 24) past the file (LiteRT-LM aborted) or inside the 32-byte file header
    (LiteRT-LM crashed): refused before LiteRT-LM reads it."""
    content = bytearray(made["bundle"])
    struct.pack_into("<Q", content, 24, header_end)
    out, _ = _generate(place, _bundle(place, bytes(content)))
    _one_line(out, message="its header ends at byte")
    _nothing_left(place, "model.litertlm")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes_after_the_magic(made, place, seed):
    """LITERTLM and then random bytes (the size of the real bundle): refused in one line."""
    rng = random.Random(seed)
    content = b"LITERTLM" + bytes(rng.randrange(256) for _ in range(len(made["bundle"]) - 8))
    out, _ = _generate(place, _bundle(place, content))
    _one_line(out, message="not a bundle LiteRT-LM can run")
    _nothing_left(place, "model.litertlm")


def test_random_bytes_after_the_version(made, place):
    """The magic and version 1.7.0 kept, the rest random: the header's end or its FlatBuffer refused."""
    rng = random.Random(7)
    content = made["bundle"][:20] + bytes(rng.randrange(256) for _ in range(len(made["bundle"]) - 20))
    out, _ = _generate(place, _bundle(place, content))
    _one_line(out, message="not a bundle LiteRT-LM can run")


@pytest.mark.parametrize("case", ["model past the end", "model before the header", "overlapping sections",
                                  "unknown section type", "no model", "truncated file", "not a bundle", "empty"])
def test_sections_outside_the_file_or_of_unknown_kinds(made, place, case):
    content = made["bundle"]
    model = _section_index(content, 3)
    tokenizer = _section_index(content, 4)
    _, sections = _header(content)
    if case == "model past the end":
        content = _with_section_field(content, model, 2, "<Q", len(content) + 4096)
    elif case == "model before the header":
        content = _with_section_field(content, model, 1, "<Q", 8)
    elif case == "overlapping sections":
        fb, sections = _header(content)
        content = _with_section_field(content, model, 1, "<Q", fb.scalar(sections[tokenizer], 1, "<Q"))
    elif case == "unknown section type":
        content = _with_section_field(content, tokenizer, 3, "<B", 200)
    elif case == "no model":
        content = _with_section_field(content, model, 3, "<B", 1)  # GenericBinaryData
    elif case == "truncated file":
        content = content[:20]
    elif case == "not a bundle":
        content = b"PK\x03\x04" + content[4:]
    else:
        content = b""
    out, _ = _generate(place, _bundle(place, content))
    _one_line(out)
    _nothing_left(place, "model.litertlm")


@pytest.mark.parametrize("seed", range(6))
def test_mutated_headers_never_crash(made, place, seed):
    """A few random bytes of the header (its FlatBuffer of sections and key-value pairs) changed: whatever the
    bytes, generate ends in at most one line, exit 0 or 1, never a signal or a traceback."""
    rng = random.Random(seed)
    content = bytearray(made["bundle"])
    (end,) = struct.unpack_from("<Q", content, 24)
    for _ in range(rng.choice([1, 3, 8])):
        content[rng.randrange(HEADER_BEGIN, end)] = rng.randrange(256)
    out, _ = _generate(place, _bundle(place, bytes(content)))
    assert out.returncode in (0, 1), (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= out.returncode, out.stderr
    _nothing_left(place, "model.litertlm")


@pytest.mark.parametrize("what", ["a folder", "/dev/zero", "a FIFO", "missing"])
def test_a_bundle_that_is_no_regular_file(made, place, what):
    if what == "a folder":
        path = place["here"] / "dir.litertlm"
        path.mkdir()
    elif what == "a FIFO":
        path = place["here"] / "fifo.litertlm"
        os.mkfifo(path)
    elif what == "missing":
        path = place["here"] / "missing.litertlm"
    else:
        path = "/dev/zero"
    out, seconds = _generate(place, path)
    _one_line(out)
    assert seconds < GENERATE_S


# --- generate: the metadata, the prompt, the options ----------------------------------------------------------------


@pytest.mark.parametrize("case, message", [("empty", "LLM metadata section is empty"),
                                           ("no stop token", "names no stop token"),
                                           ("no proto", "not an LlmMetadata proto")])
def test_metadata_without_stop_tokens(made, place, case, message):
    """An empty LlmMetadataProto section, one naming no stop token (LiteRT-LM: "Failed to create session") or one
    that is no proto: one line saying what is missing."""
    content = _built(place, made, b"" if case == "empty" else _metadata(stops=()))
    if case == "no proto":  # (the builder refuses bytes that are no proto): 0xff over the whole section
        fb, sections = _header(content)
        meta = sections[_section_index(content, 5)]
        begin, end = fb.scalar(meta, 1, "<Q"), fb.scalar(meta, 2, "<Q")
        content = content[:begin] + b"\xff" * (end - begin) + content[end:]
    out, _ = _generate(place, _bundle(place, content))
    _one_line(out, message=message)
    _nothing_left(place, "model.litertlm")


@pytest.mark.parametrize("case, message", [("no content", "'content'"), ("not zlib", "not a zlib stream"),
                                           ("a bomb", "past the")])
def test_a_bundles_tokenizer_json_is_checked(made, place, case, message):
    """An HF_Tokenizer_Zlib section (the tokenizer.json's size, then its zlib stream) whose JSON lacks an added
    token's 'content', whose stream is no zlib or which claims a size past the bound: one line."""
    from fuselite.generative.tokenizers import TokenizerFile

    spec = json.loads(made["hf_json"])
    if case == "no content":
        del spec["added_tokens"][0]["content"]
    path = place["here"] / "model.litertlm"
    fuselite.write_litertlm(made["model"], path, TokenizerFile("hf", json.dumps(spec).encode(), 2, [1]))
    content = path.read_bytes()
    fb, sections = _header(content)
    begin = fb.scalar(sections[_section_index(content, 6)], 1, "<Q")
    if case == "not zlib":
        content = content[:begin + 8] + b"\x00" * 16 + content[begin + 24:]
    elif case == "a bomb":
        content = content[:begin] + struct.pack("<Q", 2 ** 62) + content[begin + 8:]
    out, _ = _generate(place, _bundle(place, content))
    _one_line(out, message=message)
    _nothing_left(place, "model.litertlm")


def test_a_bundle_without_a_tokenizer(made, place):
    out, _ = _generate(place, _bundle(place, _built(place, made, _metadata(), tokenizer=False)))
    _one_line(out, message="holds no tokenizer")


def test_a_start_token_past_the_vocabulary_is_one_line(made, place):
    """LiteRT-LM refuses the prefill: its own reason, in the one line."""
    out, _ = _generate(place, _bundle(place, _built(place, made, _metadata(start=99999))))
    _one_line(out, message="LiteRT-LM failed to generate")
    _nothing_left(place, "model.litertlm")


def test_a_prompt_past_the_cache_says_why(made, place):
    out, _ = _generate(place, _bundle(place, made["bundle"]), prompt="the cat sat on a mat " * 40)
    _one_line(out, message="too long")


@pytest.mark.parametrize("prompt", [b"the \xff cat", b"\xed\xa0\x80 surrogate", b"cut \xe2\x82"])
def test_a_prompt_that_is_not_utf8(made, place, prompt):
    """Bytes that are no UTF-8 on the command line (surrogate escapes in sys.argv): one line, not
    UnicodeEncodeError."""
    out, _ = _generate(place, _bundle(place, made["bundle"]), prompt=prompt)
    _one_line(out, message="not valid UTF-8")


def test_generate_api_refuses_a_lone_surrogate(made, tmp_path):
    path = tmp_path / "model.litertlm"
    path.write_bytes(made["bundle"])
    with pytest.raises(InputError, match="lone surrogate U\\+D800"):
        fuselite.generate(path, "a \ud800 b")


@pytest.mark.parametrize("option, value", [("--threads", 1024), ("--threads", "MAX+1"), ("--threads", 0),
                                           ("--max-new-tokens", 0), ("--max-new-tokens", -3)])
def test_threads_and_token_counts_are_bounded(made, place, option, value):
    """--threads past the machine's CPUs (1024 under a memory limit hung LiteRT-LM's thread pool) and token counts
    below 1: usage errors (exit 2), before LiteRT-LM starts."""
    if value == "MAX+1":
        value = max_threads() + 1
    if option == "--threads" and value == 1024 and max_threads() >= 1024:
        pytest.skip("a machine of 1024 CPUs")
    out, seconds = _cli(place, "generate", _bundle(place, made["bundle"]), "the cat", option, value)
    _one_line(out, code=2)
    _nothing_left(place, "model.litertlm")
    assert seconds < GENERATE_S


def test_all_the_cpus_under_a_memory_limit(made, place):
    """--threads at its bound (up to 8 here) under the memory limit: an answer, not a hang."""
    out, _ = _generate(place, _bundle(place, made["bundle"]), "--threads", min(max_threads(), 8))
    assert out.returncode == 0, out.stderr[-3000:]


def test_a_native_crash_is_one_line_naming_the_signal(made, tmp_path, monkeypatch):
    """Where LiteRT-LM's native code still crashes on a bundle that passed the checks, the crash is its child
    process's: a GenerationError naming the signal, this process unharmed (the child is a stand-in that
    crashes as LiteRT-LM did)."""
    from fuselite.generative import run

    path = tmp_path / "model.litertlm"
    path.write_bytes(made["bundle"])
    monkeypatch.setattr(run, "_CHILD", "import json, os, signal, sys\nprint(json.dumps({'stage': 'load'}), "
                                       "flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    with pytest.raises(fuselite.generative.GenerationError, match="ended with signal SIGSEGV while loading"):
        fuselite.generate(path, "the cat", 4, cache=False)
    assert sorted(os.listdir(tmp_path)) == ["model.litertlm"]


# --- convert-lm ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["/dev/zero", "a FIFO", "a folder", "empty", "missing"])
def test_convert_lm_refuses_a_tokenizer_that_is_no_file(made, place, tokenizer):
    """--tokenizer /dev/zero read to the end was a MemoryError; a FIFO would block: refused before any work."""
    if tokenizer == "a FIFO":
        tokenizer = place["home"] / "tok.json"
        os.mkfifo(tokenizer)
    elif tokenizer == "a folder":
        tokenizer = place["home"]
    elif tokenizer == "empty":
        tokenizer = place["home"] / "tokenizer.json"
        tokenizer.write_bytes(b"")
    elif tokenizer == "missing":
        tokenizer = place["home"] / "missing.model"
    out, seconds = _cli(place, "convert-lm", made["keras"], "-o", place["here"] / "out.litertlm",
                        "--tokenizer", tokenizer, timeout=GENERATE_S)
    _one_line(out)
    _nothing_left(place)


@pytest.mark.parametrize("damage, field", [
    (lambda spec: spec["added_tokens"][0].pop("content"), "'content'"),
    (lambda spec: spec["added_tokens"][0].pop("id"), "'id'"),
    (lambda spec: spec["added_tokens"][0].update(id="7"), "'id'"),
    (lambda spec: spec.update(added_tokens={"a": 1}), "'added_tokens'"),
    (lambda spec: spec.pop("model"), "'model'"),
    (lambda spec: spec["added_tokens"].append(5), "added_tokens[1]"),
])
def test_convert_lm_names_the_missing_field_of_a_tokenizer_json(made, place, damage, field):
    """A tokenizer.json whose added token has no 'content' was a KeyError: one line naming the field."""
    spec = json.loads(made["hf_json"])
    damage(spec)
    tokenizer = place["home"] / "tokenizer.json"
    tokenizer.write_text(json.dumps(spec))
    out, _ = _cli(place, "convert-lm", made["keras"], "-o", place["here"] / "out.litertlm", "--tokenizer", tokenizer)
    _one_line(out, message=field)
    _nothing_left(place)


def test_convert_lm_refuses_a_tokenizer_json_that_is_no_json(made, place):
    tokenizer = place["home"] / "tokenizer.json"
    tokenizer.write_bytes(b"\xff[" * 10)
    out, _ = _cli(place, "convert-lm", made["keras"], "-o", place["here"] / "out.litertlm", "--tokenizer", tokenizer)
    _one_line(out, message="not a tokenizer.json")


@pytest.mark.parametrize("output", ["missing/out.litertlm", "a folder", "bad suffix"])
def test_convert_lm_checks_the_output_before_any_work(made, place, output):
    """-o in a folder that is not there was a FileNotFoundError after the whole conversion: refused first (well
    before a conversion's time), nothing made."""
    code = 1
    if output == "a folder":
        output = place["here"] / "dir.litertlm"
        output.mkdir()
    elif output == "bad suffix":
        output, code = place["here"] / "out.bin", 2
    elif output.startswith("missing"):
        output = place["here"] / output
    out, seconds = _cli(place, "convert-lm", made["keras"], "-o", output)
    _one_line(out, code=code)
    assert not (place["here"] / "missing").exists()
    assert seconds < 60, seconds  # TensorFlow was not imported, nothing was converted


def test_convert_lm_usage_errors(made, place):
    for args in (["--prefill", "0"], ["--prefill", "8,x"], ["--cache-length", "-1"],
                 ["-o", place["here"] / "m.tflite", "--tokenizer", place["home"]]):
        extra = args if "-o" in args else ["-o", place["here"] / "m.litertlm", *args]
        out, _ = _cli(place, "convert-lm", made["keras"], *extra)
        _one_line(out, code=2)
    _nothing_left(place)


def test_convert_lm_bundle_follows_the_umask_and_sigterm_leaves_nothing(made, place):
    """A bundle convert-lm writes has the umask's mode (0640 under umask 027), as a .tflite has, not mkstemp's
    0600. Then SIGTERM while the bundle is being put together (its parts in TMPDIR/fuselite-litertlm-*): exit
    143, and neither that folder nor a partial bundle is left."""
    target = place["here"] / "lm.litertlm"
    out, _ = _cli(place, "convert-lm", made["keras"], "-o", target, "--prefill", "8", "--cache-length", CACHE, "-q",
                  timeout=CONVERT_S, umask=0o027)
    assert out.returncode == 0, out.stderr[-3000:]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert check_litertlm(target)["stop_tokens"]
    target.unlink()
    _nothing_left(place)
    for _ in range(2):  # the parts' folder lives for milliseconds: a run may finish before the signal
        proc = subprocess.Popen([*FUSELITE, "convert-lm", str(made["keras"]), "-o", str(target), "--prefill", "8",
                                 "--cache-length", str(CACHE), "-q"], env=_env(place), cwd=place["here"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY)))
        deadline = time.monotonic() + CONVERT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if any(n.startswith("fuselite-litertlm-") for n in os.listdir(place["tmp"])):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.0005)
        _, err = proc.communicate(timeout=CONVERT_S)
        if proc.returncode == 128 + signal.SIGTERM:
            assert "Traceback" not in err, err
            _nothing_left(place)
            return
        assert proc.returncode == 0, (proc.returncode, err[-3000:])
        target.unlink()
    pytest.fail("the SIGTERM never fell while the bundle was being put together")


def test_write_litertlm_keeps_an_existing_files_mode(made, tmp_path):
    """An existing bundle replaced keeps its mode; a new one gets the umask's; the folder holds nothing else."""
    path = tmp_path / "m.litertlm"
    path.write_bytes(b"old")
    os.chmod(path, 0o604)
    fuselite.write_litertlm(made["model"], path, made["tokenizer"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o604 and path.read_bytes()[:8] == b"LITERTLM"
    previous = os.umask(0o077)
    try:
        fuselite.write_litertlm(made["model"], tmp_path / "new.litertlm", made["tokenizer"])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.litertlm").stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["m.litertlm", "new.litertlm"]
    with pytest.raises(InputError, match="does not exist"):
        fuselite.write_litertlm(made["model"], tmp_path / "missing" / "m.litertlm", made["tokenizer"])


def test_check_litertlm_reads_what_write_litertlm_wrote(made):
    info = check_litertlm(made["root"] / "model.litertlm")
    assert info["stop_tokens"] == [made["tokenizer"].stop_tokens]
    assert info["start_token"] == [made["tokenizer"].start_token]
    assert info["max_num_tokens"] == CACHE and info["tokenizer"] == "sentencepiece"
    assert sorted(s["type"] for s in info["sections"]) == ["LlmMetadataProto", "SP_Tokenizer", "TFLiteModel"]


def test_the_lm_verbs_import_no_code_from_the_working_directory(made, place):
    """convert-lm and generate (and generate's LiteRT-LM child) run from a folder of shadowing modules, with the
    `fuselite` command a user runs: none is imported, and both work (as tests/test_safety.py does for the rest)."""
    from test_safety import FUSELITE as COMMAND
    from test_safety import SHADOWED

    cwd, marks = place["here"], place["home"] / "marks"
    marks.mkdir()
    for name in (*SHADOWED, "litert_lm", "keras_hub", "sentencepiece", "tokenizers"):
        (cwd / name).mkdir()
        (cwd / name / "__init__.py").write_text(f"open({str(marks / name)!r}, 'w').write('imported')\n"
                                                "raise SystemExit(97)\n")
    bundle = place["tmp"].parent / "out.litertlm"

    def run(*args, timeout):
        return subprocess.run([COMMAND, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY)),
                              env=_env(place), cwd=cwd, stdin=subprocess.DEVNULL)

    out = run("convert-lm", made["keras"], "-o", bundle, "--prefill", "8", "--cache-length", CACHE, "-q",
              timeout=CONVERT_S)
    assert sorted(p.name for p in marks.iterdir()) == [] and out.returncode == 0, out.stderr[-2000:]
    out = run("generate", bundle, "the cat", "--max-new-tokens", "4", timeout=GENERATE_S)
    assert sorted(p.name for p in marks.iterdir()) == [] and out.returncode == 0, out.stderr[-2000:]
