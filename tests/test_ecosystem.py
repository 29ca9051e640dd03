"""The LiteRT ecosystem's tools accept fuselite's output: Model Explorer's two TFLite adapters, TensorFlow's
flatbuffer importer and ai-edge-quantizer's dynamic-range recipe.

Each tool is native code that may crash the process, so every model is opened in a subprocess: a crash is
a failure of that model's test, not a lost run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import flatbuffers
import numpy as np
import pytest
import tensorflow as tf
from conftest import keras_flavour

import fuselite
from fuselite.testing import models as zoo

_OPEN = """
import json, sys
import ai_edge_model_explorer_adapter as me

def said(out):  # the adapters answer a list of graph collections, or an object with an error
    return (out.get("error") if isinstance(out, dict) else None) or "ok"

def verdict(path, adapter):
    if adapter == "mlir":  # Model Explorer's default TFLite adapter (MLIR-based)
        return said(json.loads(me.ConvertFlatbufferToJson(me.VisualizeConfig(), path, True)))
    if adapter == "flatbuffer":  # its flatbuffer adapter
        return said(json.loads(me.ConvertFlatbufferDirectlyToJson(me.VisualizeConfig(), path)))
    if adapter == "tf_importer":  # TensorFlow's flatbuffer -> MLIR importer
        from tensorflow.compiler.mlir.lite.python import _pywrap_converter_api as api
        return "ok" if "func.func" in api.FlatBufferToMlir(open(path, "rb").read(), False) else "no module"
    if adapter == "quantizer":  # ai-edge-quantizer, dynamic range (int8 weights)
        from ai_edge_quantizer import quantizer, recipe
        q = quantizer.Quantizer(path)
        q.load_quantization_recipe(recipe.dynamic_wi8_afp32())
        return "ok" if len(q.quantize().quantized_model) > 0 else "empty"

for path, adapter in json.loads(sys.stdin.read()):
    print(json.dumps([path, adapter, verdict(path, adapter)]), flush=True)
"""

TOOLS = ("mlir", "flatbuffer", "tf_importer", "quantizer")


def open_all_in_tools(paths: list, tools=TOOLS) -> dict[str, dict[str, str]]:
    """Each file's verdict from each tool ("ok" or what it said, "crashed ..." for a crash in that tool), by path:
    every file and tool in one process (it imports TensorFlow: seconds), and after a crash the ones it did not
    reach in a fresh one."""
    verdicts: dict[str, dict[str, str]] = {str(p): {} for p in paths}
    pending = [(str(p), t) for p in paths for t in tools]
    while pending:
        out = subprocess.run([sys.executable, "-c", _OPEN], input=json.dumps(pending), capture_output=True,
                             text=True, timeout=1800)
        for line in out.stdout.splitlines():
            if line.startswith("["):
                path, tool, said = json.loads(line)
                verdicts[path][tool] = said
        pending = [(p, t) for p, t in pending if t not in verdicts[p]]
        if out.returncode != 0 and pending:  # the first one not answered crashed the process
            said = out.stderr.strip().splitlines()[-1:] if out.stderr.strip() else ""
            path, tool = pending.pop(0)
            verdicts[path][tool] = f"crashed (exit {out.returncode}) {said}"
        elif out.returncode != 0 or pending:
            raise AssertionError(f"tools process: exit {out.returncode}, {out.stderr[-2000:]}")
    return verdicts


def open_in_tools(data: bytes, tmp_path, tools=TOOLS) -> dict[str, str]:
    """Each tool's verdict on one model (``open_all_in_tools``)."""
    path = tmp_path / "m.tflite"
    path.write_bytes(data)
    return open_all_in_tools([path], tools)[str(path)]


def _bidirectional(cell: str, merge_mode, sequences: bool):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((12, 8))
    return k.Model(i, k.layers.Bidirectional(getattr(k.layers, cell)(16, return_sequences=sequences),
                                             merge_mode=merge_mode)(i))


def _stateful(cell: str):
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((6, 3), batch_size=2)
    return k.Model(i, getattr(k.layers, cell)(16, stateful=True)(i))


def _int8(model):
    conv = fuselite.Converter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    samples = [zoo.sample_inputs(model, seed=i) for i in range(10)]
    conv.representative_dataset = lambda: iter(samples)
    return conv.convert()


CASES = {
    **{f"float/{n}": (lambda n=n: zoo.build(n, keras_flavour("keras3")), None) for n in [*zoo.BUILDERS,
                                                                                        *zoo.RNN_BUILDERS]},
    **{f"bidirectional/{c}/{m}/{'sequence' if s else 'last'}": (lambda c=c, m=m, s=s: _bidirectional(c, m, s), None)
       for c in ("LSTM", "SimpleRNN") for m in ("concat", "sum", "ave", "mul", None) for s in (True, False)},
    **{f"stateful/{c}": (lambda c=c: _stateful(c), None) for c in ("LSTM", "GRU", "SimpleRNN")},
    **{f"int8/stateful/{c}": (lambda c=c: _stateful(c), _int8) for c in ("LSTM", "GRU")},
    **{f"int8/{n}": (lambda n=n: zoo.build(n, keras_flavour("keras3")), _int8)
       for n in ("mlp", "cnn", "lstm_64", "bidirectional_lstm", "simple_rnn", "gru", "text_lstm")},
}


@pytest.fixture(scope="module")
def case_verdicts(tmp_path_factory):
    """Every case of CASES converted and opened in the tools, all files in one tools process: (each case's
    verdicts, each case's conversion error where its conversion failed)."""
    folder = tmp_path_factory.mktemp("cases")
    files, errors = {}, {}
    for n, (case, (build, convert)) in enumerate(sorted(CASES.items())):
        try:
            model = build()
            data = convert(model) if convert else fuselite.Converter.from_keras_model(model).convert()
        except Exception as e:  # noqa: BLE001 -- that case's test raises it
            errors[case] = e
            continue
        files[case] = folder / f"{n}.tflite"
        files[case].write_bytes(data)
    said = open_all_in_tools(list(files.values()))
    return {case: said[str(path)] for case, path in files.items()}, errors


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_output_opens_in_model_explorer_tensorflow_and_the_quantizer(case, case_verdicts):
    verdicts, errors = case_verdicts
    if case in errors:
        raise errors[case]
    assert all(v == "ok" for v in verdicts[case].values()), verdicts[case]


def _counter() -> bytes:
    """A tf.Variable assigned in a tf.function (resource variables, no RNN)."""
    v = tf.Variable(0.0)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def bump(x):
        v.assign_add(x)
        return v.read_value() * 2.0

    return fuselite.Converter.from_concrete_functions([bump.get_concrete_function()], v).convert()


def test_ops_without_outputs_do_not_crash_model_explorer(tmp_path):
    """Model Explorer's MLIR adapter dereferences a null name for an op with no outputs (ASSIGN_VARIABLE,
    CALL_ONCE) unless the op has a named location: fuselite writes one in the model's debug_metadata. Without
    it the same model crashes the adapter (as the official converter's output with variables does)."""
    from ai_edge_litert import schema_py_generated as schema

    data = _counter()
    assert open_in_tools(data, tmp_path) == dict.fromkeys(TOOLS, "ok")
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    assert any(m.name == b"debug_metadata" for m in model.metadata)
    model.metadata = [m for m in model.metadata if m.name != b"debug_metadata"]
    b = flatbuffers.Builder(0)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    assert open_in_tools(bytes(b.Output()), tmp_path, ("mlir",))["mlir"].startswith("crashed")


def test_the_fused_bidirectional_form_is_the_one_tensorflows_importer_rejects(tmp_path):
    """Why the default splits: LiteRT's BIDIRECTIONAL_SEQUENCE_LSTM without peephole and projection operands
    crashes TensorFlow's op verifier (and Model Explorer's MLIR adapter with it); merged it has one output,
    where TensorFlow's op definition has two. bidirectional="fused" keeps it for LiteRT-only users."""
    model = _bidirectional("LSTM", "sum", True)
    fused = fuselite.Converter.from_keras_model(model, bidirectional="fused", rnn_form="fused").convert()
    verdicts = open_in_tools(fused, tmp_path, ("tf_importer", "flatbuffer"))
    assert verdicts["tf_importer"].startswith("crashed") and verdicts["flatbuffer"] == "ok"


def _names(data: bytes) -> list[str]:
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    return [t.name.decode() for sg in m.subgraphs for t in sg.tensors]


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "SimpleRNN"])
def test_tensor_names_are_unique_in_the_whole_model(cell):
    """A stateful RNN's variable is read in the main, reset and init subgraphs: still one name each."""
    data = fuselite.Converter.from_keras_model(_stateful(cell)).convert()
    names = _names(data)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert any(n.startswith("reset_variables/") for n in names)


def _loop_model():
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((5, 8, 8, 2), name="frames")
    y = k.layers.ConvLSTM2D(4, 3, activation="softsign", name="encoder")(i)  # no unrolled form: a WHILE loop
    y = k.layers.Dense(3, name="classes")(k.layers.Flatten()(y))
    return k.Model(i, y)  # the WHILE loop's functions carry TF's trace counters


@pytest.mark.parametrize("build", [_loop_model, lambda: _stateful("LSTM"),
                                   lambda: zoo.build("stacked_lstm", keras_flavour("tf_keras"))])
def test_the_same_model_twice_in_one_process_gives_the_same_bytes(build):
    model = build()
    first = fuselite.Converter.from_keras_model(model).convert()
    assert fuselite.Converter.from_keras_model(model).convert() == first


def test_tensor_names_are_readable():
    """Inputs and outputs carry the signature's names; the others the layer and op, without TensorFlow's call
    plumbing (PartitionedCall, the composite function) or trace counters."""
    from ai_edge_litert import schema_py_generated as schema

    data = fuselite.Converter.from_keras_model(_loop_model()).convert()
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    sg, sig = m.subgraphs[0], m.signatureDefs[0]
    assert [sg.tensors[i].name for i in sg.inputs] == [t.name for t in sig.inputs] == [b"frames"]
    assert [sg.tensors[i].name for i in sg.outputs] == [t.name for t in sig.outputs] == [b"classes"]
    names = _names(data)
    assert any(sg.name.decode().endswith(("while_body", "while_cond")) for sg in m.subgraphs)  # loops written
    assert not [n for n in names if "PartitionedCall" in n or "__inference" in n or "composite" in n]
    assert not [n for n in names if re.search(r"while_(body|cond)_\d{3,}", n)], names  # no trace counters


def test_split_bidirectional_is_as_keras_and_fused_agrees(tmp_path):
    """The two forms give the same numbers on LiteRT (and Keras')."""
    from fuselite.runtime import run

    model = _bidirectional("LSTM", "concat", True)
    x = np.random.default_rng(0).standard_normal((1, 12, 8)).astype(np.float32)
    want = np.asarray(model(x))
    for form in ("split", "fused"):
        got = list(run(fuselite.Converter.from_keras_model(model, bidirectional=form).convert(), [x]).values())[0]
        assert np.abs(got - want).max() <= 1e-5


_CONVERT = """
import sys
import keras
import fuselite
from fuselite.testing import models as zoo
sys.stdout.buffer.write(fuselite.Converter.from_keras_model(zoo.build(sys.argv[1], keras)).convert())
"""


@pytest.mark.parametrize("name", ["stacked_lstm", "bidirectional_lstm"])
def test_the_same_model_gives_the_same_bytes_in_two_processes(name):
    """No trace counters, process ids or times in the file: two processes write byte-identical models."""
    runs = [subprocess.run([sys.executable, "-c", _CONVERT, name], capture_output=True, timeout=600) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout) > 1000


@pytest.mark.parametrize("mode, optimization", [(None, []), ("dynamic", [1002]), ("int8", [1003])])
def test_conversion_metadata_says_what_made_the_file(mode, optimization):
    """CONVERSION_METADATA in the schema's own format (read back with TensorFlow's reader) and the model's
    description: the tool and its version, the kind of source, the options, the quantization."""
    from ai_edge_litert import schema_py_generated as schema
    from tensorflow.lite.python import util

    model = zoo.build("lstm_64", keras_flavour("keras3"))
    conv = fuselite.Converter.from_keras_model(model, target="litert")
    if mode:
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "int8":
        samples = [zoo.sample_inputs(model, seed=i) for i in range(5)]
        conv.representative_dataset = lambda: iter(samples)
    data = conv.convert()
    meta = util.get_conversion_metadata(data)
    assert meta.environment.tensorflowVersion.decode() == tf.__version__ and meta.environment.modelType == 2
    assert list(meta.options.modelOptimizationModes) == optimization
    description = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0)).description.decode()
    assert description.startswith(f"fuselite {fuselite.__version__} (keras_model, quantization={mode or 'none'}")
    assert "target=litert" in description and "bidirectional=split" in description
