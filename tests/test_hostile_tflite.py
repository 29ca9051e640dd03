"""Hostile ``.tflite`` files (issue 65): every verb that reads one (``inspect``, ``verify SRC MODEL``, ``bench``)
says what is wrong in one line and exits 1: no crash, no traceback, no read outside the file, in bounded time and
memory. Each file is a small valid model (converted here) mutated with LiteRT's object API and written again,
or a flatbuffer written by hand; the command line runs in a subprocess under a memory limit."""

from __future__ import annotations

import copy
import importlib.util
import os
import resource
import subprocess
import sys
import time

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from fuselite.errors import InputError
from fuselite.tflite.validate import SUBGRAPH_REFERENCES, schema_tables, validate_model

keras = pytest.importorskip("keras")

FUSELITE = [sys.executable, "-m", "fuselite.cli"]
LIMIT_S = 120  # each command, all of it (Python's start and fuselite's imports included)
MEMORY = 4 << 30  # RLIMIT_AS of each command
VERBS = ("inspect", "verify", "bench")


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _cli(*args):
    t0 = time.monotonic()
    out = subprocess.run([*FUSELITE, *map(str, args)], capture_output=True, text=True, timeout=LIMIT_S,
                         preexec_fn=_limited)
    return out, time.monotonic() - t0


def _verb(verb: str, model, root, *extra):
    if verb == "verify":
        return _cli("verify", root / "dense.keras", model, *extra)
    if verb == "bench":
        return _cli("bench", model, "--seconds", "0.1", *extra)
    return _cli("inspect", model, *extra)


def _refused(out, seconds: float, message: str):
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fuselite: error:"), out.stderr
    assert message in lines[0], lines[0]
    assert seconds < LIMIT_S


def _model(data: bytes):
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))


def _pack(m) -> bytes:
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(folder, the .tflite of a Dense layer): dense.keras and dense.tflite in the folder."""
    import fuselite

    root = tmp_path_factory.mktemp("hostile")
    keras.utils.set_random_seed(0)
    i = keras.Input((4,), batch_size=1, name="x")
    model = keras.Model(i, keras.layers.Dense(3, name="y")(i))
    model.save(root / "dense.keras")
    data = fuselite.Converter.from_keras_model(model).convert()
    (root / "dense.tflite").write_bytes(data)
    return root, data


def _code(m, op: int) -> int:
    """The index of an operator code for the builtin ``op`` (added to the model)."""
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = op, min(op, 127), 1
    m.operatorCodes.append(code)
    return len(m.operatorCodes) - 1


def _add_while(m, s: int, cond: int, body: int) -> None:
    """A WHILE op first in subgraph ``s``, on its first input, running subgraphs ``cond`` and ``body``."""
    sg = m.subgraphs[s]
    sg.tensors.append(copy.deepcopy(sg.tensors[int(sg.inputs[0])]))
    sg.tensors[-1].name = "loop"
    op = schema.OperatorT()
    op.opcodeIndex = _code(m, schema.BuiltinOperator.WHILE)
    op.inputs, op.outputs = [int(sg.inputs[0])], [len(sg.tensors) - 1]
    op.builtinOptionsType = schema.BuiltinOptions.WhileOptions
    op.builtinOptions = schema.WhileOptionsT()
    op.builtinOptions.condSubgraphIndex, op.builtinOptions.bodySubgraphIndex = cond, body
    sg.operators.insert(0, op)


def _constant(m) -> int:
    """The index of the first tensor of subgraph 0 with data in the file (the Dense layer's kernel)."""
    return next(i for i, t in enumerate(m.subgraphs[0].tensors)
                if t.buffer and m.buffers[t.buffer].data is not None and len(m.buffers[t.buffer].data))


def missing_signature_subgraph(m):
    m.signatureDefs[0].subgraphIndex = 3
    return "signature 0 'serving_default' names subgraph 3"


def while_body_is_itself(m):
    _add_while(m, 0, 0, 0)
    return "is the subgraph itself"


def subgraphs_call_each_other(m):
    m.subgraphs.append(copy.deepcopy(m.subgraphs[0]))
    m.subgraphs[1].name = "other"
    _add_while(m, 0, 1, 1)
    _add_while(m, 1, 0, 0)
    return "subgraphs 0 -> 1 -> 0 call each other in a cycle"


def string_offsets_past_buffer(m):
    held = np.frombuffer(np.array([2, 16, 18, 4000], "<i4").tobytes() + b"abcd", np.uint8)
    buffer = schema.BufferT()
    buffer.data = held
    m.buffers.append(buffer)
    t = schema.TensorT()
    t.name, t.type, t.shape, t.buffer = "words", schema.TensorType.STRING, [2], len(m.buffers) - 1
    m.subgraphs[0].tensors.append(t)
    return "is a string constant whose buffer of 20 bytes has string offsets outside it"


def opcode_index_out_of_range(m):
    m.subgraphs[0].operators[0].opcodeIndex = 7
    return "operator 0: opcode_index 7 is out of range"


def signature_tensor_out_of_range(m):
    m.signatureDefs[0].inputs[0].tensorIndex = 99
    return "names tensor 99 of subgraph 0"


def buffer_offset_wraps_around(m):
    b = m.buffers[m.subgraphs[0].tensors[_constant(m)].buffer]
    b.size, b.data, b.offset = len(b.data), None, 2**64 - 8
    return f"is stored at byte offset {2**64 - 8:,}"


MUTATIONS = [missing_signature_subgraph, while_body_is_itself, subgraphs_call_each_other, string_offsets_past_buffer,
             opcode_index_out_of_range, signature_tensor_out_of_range, buffer_offset_wraps_around]


def shared_tensor_table(n: int = 3000) -> bytes:
    """A 24 KB file of ``n`` subgraphs that are one table, whose ``n`` tensors are one table: n x n tensors."""
    b = flatbuffers.Builder(1 << 16)
    name = b.CreateString("t")
    schema.TensorStart(b)
    schema.TensorAddName(b, name)
    tensor = schema.TensorEnd(b)
    schema.SubGraphStartTensorsVector(b, n)
    for _ in range(n):
        b.PrependUOffsetTRelative(tensor)
    tensors = b.EndVector()
    schema.SubGraphStart(b)
    schema.SubGraphAddTensors(b, tensors)
    subgraph = schema.SubGraphEnd(b)
    schema.ModelStartSubgraphsVector(b, n)
    for _ in range(n):
        b.PrependUOffsetTRelative(subgraph)
    subgraphs = b.EndVector()
    schema.ModelStart(b)
    schema.ModelAddVersion(b, 3)
    schema.ModelAddSubgraphs(b, subgraphs)
    b.Finish(schema.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def shared_shape_vector(n: int = 3000) -> bytes:
    """``n`` tensors whose shapes are one vector of ``n`` dimensions."""
    b = flatbuffers.Builder(1 << 16)
    shape = b.CreateNumpyVector(np.ones(n, np.int32))
    made = []
    for _ in range(n):
        schema.TensorStart(b)
        schema.TensorAddShape(b, shape)
        made.append(schema.TensorEnd(b))
    schema.SubGraphStartTensorsVector(b, n)
    for t in reversed(made):
        b.PrependUOffsetTRelative(t)
    tensors = b.EndVector()
    schema.SubGraphStart(b)
    schema.SubGraphAddTensors(b, tensors)
    subgraph = schema.SubGraphEnd(b)
    schema.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(subgraph)
    subgraphs = b.EndVector()
    schema.ModelStart(b)
    schema.ModelAddVersion(b, 3)
    schema.ModelAddSubgraphs(b, subgraphs)
    b.Finish(schema.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _files(root, data: bytes) -> dict[str, tuple[object, str]]:
    """name -> (path, what the error line says) of every hostile file."""
    files = {}
    for mutate in MUTATIONS:
        m = _model(data)
        message = mutate(m)
        path = root / f"{mutate.__name__}.tflite"
        path.write_bytes(_pack(m))
        files[mutate.__name__] = (path, message)
    many = "parts of the flatbuffer are named many times over"
    for name, made in (("shared_tensor_table", shared_tensor_table()), ("shared_shape_vector", shared_shape_vector())):
        (root / f"{name}.tflite").write_bytes(made)
        files[name] = (root / f"{name}.tflite", many)
    (root / "truncated.tflite").write_bytes(data[:len(data) // 2])
    files["truncated"] = (root / "truncated.tflite", "points outside the file")
    (root / "random.tflite").write_bytes(np.random.default_rng(0).bytes(4096))
    files["random"] = (root / "random.tflite", "not a TFLite model")
    identified = bytearray(np.random.default_rng(1).bytes(4096))
    identified[4:8] = b"TFL3"
    (root / "random_identified.tflite").write_bytes(bytes(identified))
    files["random_identified"] = (root / "random_identified.tflite", "not a valid TFLite model")
    files["dev_zero"] = ("/dev/zero", "'/dev/zero' is not a regular file")
    return files


CASES = [mutate.__name__ for mutate in MUTATIONS] + ["shared_tensor_table", "shared_shape_vector", "truncated",
                                                     "random", "random_identified", "dev_zero"]


@pytest.fixture(scope="module")
def hostile(base):
    root, data = base
    return root, _files(root, data)


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("case", CASES)
def test_a_hostile_file_is_one_line_and_exit_1(hostile, case, verb):
    root, files = hostile
    path, message = files[case]
    out, seconds = _verb(verb, path, root)
    _refused(out, seconds, message)


def test_the_mutations_start_from_a_file_every_verb_takes(base, tmp_path):
    """The object API's round trip alone changes nothing: the mutations are what the verbs refuse."""
    root, data = base
    (tmp_path / "same.tflite").write_bytes(_pack(_model(data)))
    for verb in ("inspect", "bench"):
        out, _ = _verb(verb, tmp_path / "same.tflite", root)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


def _sentencepiece_on_garbage() -> bytes:
    """tensorflow-text's FastSentencepieceTokenize (as fuselite and the official converter write it) with 4 KB of
    random bytes for its sentencepiece model: a file that passes every check, whose kernel crashes LiteRT."""
    m = schema.ModelT()
    m.version = 3
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode, code.version = "TFText>FastSentencepieceTokenize", 1
    m.operatorCodes = [code]
    datas = [None, np.random.default_rng(0).bytes(4096), bytes(4), bytes(4), bytes(1)]
    m.buffers = []
    for d in datas:
        b = schema.BufferT()
        b.data = None if d is None else np.frombuffer(d, np.uint8)
        m.buffers.append(b)
    tt = schema.TensorType
    specs = [("s", tt.STRING, [1], 0), ("sp_model", tt.UINT8, [4096], 1), ("nbest_size", tt.INT32, [], 2),
             ("alpha", tt.FLOAT32, [], 3), ("add_bos", tt.BOOL, [], 4), ("ids", tt.INT32, [1], 0),
             ("splits", tt.INT32, [1], 0)]
    sg = schema.SubGraphT()
    sg.name, sg.tensors = "serving_default", []
    for name, kind, shape, buffer in specs:
        t = schema.TensorT()
        t.name, t.type, t.shape, t.buffer = name, kind, shape, buffer
        if name in ("s", "ids", "splits"):
            t.shapeSignature = [-1]
        sg.tensors.append(t)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [1, 0, 2, 3, 4, 4, 4], [5, 6]
    op.customOptions = np.frombuffer(b"Tsplits\x00out_type\x00\x02\x12\x0b\x02\x01\x02\x02\x02\x04\x04\x04$\x01",
                                     np.uint8)
    sg.operators, sg.inputs, sg.outputs = [op], [0], [5, 6]
    m.subgraphs = [sg]
    sig = schema.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0
    sig.inputs, sig.outputs = [], []
    for where, name, t in ((sig.inputs, "s", 0), (sig.outputs, "ids", 5), (sig.outputs, "splits", 6)):
        entry = schema.TensorMapT()
        entry.name, entry.tensorIndex = name, t
        where.append(entry)
    m.signatureDefs = [sig]
    return _pack(m)


@pytest.mark.skipif(importlib.util.find_spec("tensorflow_text") is None, reason="needs tensorflow-text's kernels")
@pytest.mark.parametrize("verb", ["verify", "bench"])
def test_a_kernel_that_crashes_on_garbage_is_one_line(base, tmp_path, verb):
    """The file is valid; tensorflow-text's kernel crashes (SIGSEGV) on its garbage sentencepiece model, in the
    child process LiteRT runs in."""
    root, _ = base
    data = _sentencepiece_on_garbage()
    validate_model(data)
    (tmp_path / "sp.tflite").write_bytes(data)
    np.savez(tmp_path / "s.npz", s=np.array([b"the cat sat", b"dogs"]))
    out, seconds = _verb(verb, tmp_path / "sp.tflite", root, "--inputs", tmp_path / "s.npz")
    _refused(out, seconds, "LiteRT crashed running the model (signal SIGSEGV)")


def test_a_fifo_is_refused_without_waiting_for_a_writer(base, tmp_path):
    root, _ = base
    os.mkfifo(tmp_path / "pipe.tflite")
    out, seconds = _cli("inspect", tmp_path / "pipe.tflite")
    _refused(out, seconds, "is not a regular file")


# -- in this process: the checks themselves --------------------------------------------------------------------

def test_the_schema_is_read_whole_from_the_generated_accessors():
    tables, unions = schema_tables()
    model = {f.key: (slot, f.kind, f.target) for slot, f in tables["Model"].items()}
    assert model["Subgraphs"] == (8, "tables", "SubGraph") and model["Buffers"] == (12, "tables", "Buffer")
    operator = {f.key: (slot, f.kind, f.fmt) for slot, f in tables["Operator"].items()}
    assert operator["OpcodeIndex"] == (4, "scalar", "<I") and operator["Inputs"] == (6, "vector", "<i")
    assert unions["BuiltinOptions"][schema.BuiltinOptions.WhileOptions] == "WhileOptions"
    for _, (union, table, fields) in SUBGRAPH_REFERENCES.items():  # every control-flow op's fields exist
        assert table in unions[union].values()
        assert set(fields) <= {f.key for f in tables[table].values()}, table


def test_bit_flips_pass_or_are_an_input_error_and_inspect_never_raises_anything_else(base):
    """The Dense model with bytes changed at random: validate_model passes it or raises InputError, and inspect's
    describe of a file that passes raises nothing."""
    from fuselite.inspect import describe

    _, data = base
    rng = np.random.default_rng(0)
    passed = 0
    for _ in range(300):
        damaged = bytearray(data)
        for at in rng.integers(8, len(data), rng.integers(1, 4)):
            damaged[at] = int(rng.integers(0, 256))
        try:
            validate_model(bytes(damaged))
        except InputError as e:
            assert "\n" not in str(e)
            continue
        passed += 1
        describe(bytes(damaged))
    assert passed  # some bytes are values (weights), not structure


def test_valid_models_pass_quickly(base):
    _, data = base
    t0 = time.perf_counter()
    validate_model(data)
    validate_model(shared_tensor_table(30))  # 900 tensors named from 60 entries: within the budget
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(InputError, match="many times over"):
        validate_model(shared_tensor_table())
