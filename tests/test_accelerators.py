"""LiteRT's accelerators: every default file loads in the CompiledModel API (its loader refuses variable tensors),
and target="gpu" runs fully on LiteRT's GPU accelerator (Mesa's software Vulkan here: scripts/install-vulkan.sh).

CompiledModel runs in a child process in these tests (a native runtime: a crash is a failure, not a lost run);
the GPU accelerator runs in one in fuselite itself (fuselite.runtime.accelerators)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.errors import ConversionError, InputError
from fuselite.runtime import run
from fuselite.runtime.accelerators import parse_placement, vulkan_problem
from fuselite.runtime.compiled import loader_problems
from fuselite.testing import models as zoo

FLOAT_MODELS = list(zoo.ACCELERATOR_BUILDERS)
INT8_MODELS = list(zoo.INTEGER_ACCELERATOR_MODELS)
NO_VULKAN = vulkan_problem()
needs_vulkan = pytest.mark.skipif(NO_VULKAN is not None, reason=f"LiteRT's GPU accelerator: {NO_VULKAN}")

_COMPILED_CHILD = r"""
import json, sys
import numpy as np
from fuselite.runtime.compiled import run_compiled
feed = dict(np.load(sys.argv[2], allow_pickle=False))
out = run_compiled(open(sys.argv[1], "rb").read(), feed, signature_key=sys.argv[3] or None)
np.savez(sys.argv[4], **out)
"""


def compiled_model_outputs(model: bytes, inputs: dict, signature: str | None = None) -> dict:
    """``model``'s outputs in LiteRT's CompiledModel API (CPU), run in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        path, feed, out = (os.path.join(tmp, n) for n in ("m.tflite", "in.npz", "out.npz"))
        open(path, "wb").write(model)
        np.savez(feed, **inputs)
        proc = subprocess.run([sys.executable, "-c", _COMPILED_CHILD, path, feed, signature or "", out],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with np.load(out) as z:
            return {k: z[k] for k in z.files}


_built: dict = {}


def _model(name: str):
    if name not in _built:
        _built[name] = zoo.build(name, zoo.keras3())
    return _built[name]


def _feed(data: bytes, xs: list[np.ndarray]) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    key = next(iter(interp.get_signature_list()))
    details = interp.get_signature_runner(key).get_input_details()
    names = sorted(details, key=lambda k: details[k]["index"])
    return dict(zip(names, xs))


def _representative(model, count: int = 16):
    samples = [zoo.sample_inputs(model, seed=s) for s in range(count)]
    return lambda: iter(samples)


def _int8(name: str, **options):
    model = _model(name)
    conv = fuselite.Converter.from_keras_model(model, optimizations=[tf.lite.Optimize.DEFAULT],
                                               representative_dataset=_representative(model), **options)
    return conv, conv.convert()


def _reset(model) -> None:
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_state()


def _span(a: np.ndarray) -> float:
    return float(np.ptp(a)) or 1.0


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_default_float_files_load_and_run_in_compiled_model(name):
    """fuselite's default file of each accelerator model loads in CompiledModel on the CPU and gives Keras'
    numbers within 1e-5 (stateful: the state passes from one run to the next as Keras' does)."""
    model = _model(name)
    conv = fuselite.Converter.from_keras_model(model)
    data = conv.convert()
    assert loader_problems(data) == []
    assert conv.report.litert_api["apis"] == ["Interpreter", "CompiledModel"]
    assert conv.report.litert_api["compiled_model_error"] <= 1e-5
    xs = zoo.sample_inputs(model, seed=3)
    got = compiled_model_outputs(data, _feed(data, xs))
    _reset(model)
    want = np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False))
    out = next(v for v in got.values() if v.shape == want.shape)
    assert float(np.abs(out - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max())), name


@pytest.mark.parametrize("name", INT8_MODELS)
def test_default_int8_files_load_in_compiled_model_with_the_interpreters_numbers(name):
    """The int8 files (an LSTM's too: unrolled into integer builtins, not LiteRT's integer LSTM op with its
    variable tensors) load in CompiledModel and give the Interpreter's numbers."""
    conv, data = _int8(name)
    assert loader_problems(data) == [], conv.report.warnings
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in conv.report.ops_after
    model = _model(name)
    feed = _feed(data, zoo.sample_inputs(model, seed=5))
    got, want = compiled_model_outputs(data, feed), run(data, feed)
    for k in want:
        assert float(np.abs(got[k].astype(np.float64) - want[k]).max()) <= 1e-6 * _span(want[k]), (name, k)
    error = max(o["relative_error"] for o in conv.report.quantization["outputs"])
    assert error < 0.03, (name, error)  # against the float model, as the report measures it


def test_an_asked_fused_form_is_for_the_interpreter_and_says_so():
    model = _model("lstm_last_step")
    conv = fuselite.Converter.from_keras_model(model, rnn_form="fused")
    data = conv.convert()
    problems = loader_problems(data)
    assert problems and "UNIDIRECTIONAL_SEQUENCE_LSTM" in problems[0]
    assert conv.report.litert_api["apis"] == ["Interpreter"]
    assert "rnn_form='fused'" in conv.report.litert_api["why"]
    assert any("Interpreter API alone" in w for w in conv.report.warnings)
    assert "LiteRT API: the Interpreter alone" in str(conv.report)


def test_litert_api_interpreter_keeps_the_fused_defaults_and_the_reset_witness():
    """litert_api='interpreter': the forms and the witness that keep state in variable tensors, as before."""
    import keras

    i = keras.Input((200, 8), name="x")
    model = keras.Model(i, keras.layers.SimpleRNN(16)(i))  # the size rule's fused row
    both = fuselite.Converter.from_keras_model(model)
    both.convert()
    only = fuselite.Converter.from_keras_model(model, litert_api="interpreter")
    only.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" not in both.report.ops_after
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" in only.report.ops_after
    stateful = _model("stateful_gru")
    kept = fuselite.Converter.from_keras_model(stateful, litert_api="interpreter")
    kept_data = kept.convert()
    default = fuselite.Converter.from_keras_model(stateful)
    default_data = default.convert()
    assert any("reset_witness" in p for p in loader_problems(kept_data))
    assert loader_problems(default_data) == []
    assert any("reset_variables" in w and "CompiledModel" in w for w in default.report.warnings)


def test_an_int8_lstm_of_unknown_length_keeps_the_integer_op_and_says_which_api():
    import keras

    i = keras.Input((None, 8), name="x")
    model = keras.Model(i, keras.layers.LSTM(8)(i))
    samples = [[np.random.default_rng(s).standard_normal((1, 10, 8)).astype(np.float32)] for s in range(8)]
    conv = fuselite.Converter.from_keras_model(model, optimizations=[tf.lite.Optimize.DEFAULT],
                                               representative_dataset=lambda: iter(samples))
    conv.convert()
    assert conv.report.litert_api["apis"] == ["Interpreter"]
    assert "input_shapes" in conv.report.litert_api["why"]


def test_placement_is_read_from_each_subgraph_report():
    stderr = ("ERROR: Following operations are not supported by GPU delegate:\nEXPAND_DIMS: Operation is not "
              "supported.\nWHILE: Operation is not supported.\n2 operations will run on the GPU, and the remaining 10 "
              "operations will run on the CPU.\nI0000 ...\nERROR: Following operations are not supported by GPU "
              "delegate:\nGATHER: Only support 1D indices\n13 operations will run on the GPU, and the remaining 1 "
              "operations will run on the CPU.\n@@fuselite gpu+cpu\nERROR: Following operations are not supported "
              "by GPU delegate:\nFILL: Operation is not supported.\n")
    ops, gpu, cpu = parse_placement(stderr)
    assert ops == [("EXPAND_DIMS", "Operation is not supported."), ("WHILE", "Operation is not supported."),
                   ("GATHER", "Only support 1D indices")]
    assert (gpu, cpu) == (15, 11)


def test_without_vulkan_the_gpu_target_says_so_in_one_line(monkeypatch):
    import fuselite.runtime.accelerators as accelerators

    monkeypatch.setattr(accelerators.ctypes.util, "find_library", lambda name: None)
    conv = fuselite.Converter.from_keras_model(_model("mlp"), target="gpu")
    conv.convert()
    assert conv.report.gpu["ran"] is False and "mesa-vulkan-drivers" in conv.report.gpu["why"]
    assert any(w.startswith("not run on LiteRT's GPU accelerator before writing") for w in conv.report.warnings)


# -- target="gpu" on LiteRT's GPU accelerator --------------------------------------------------------------


def _gpu_against(data: bytes, model, samples: int = 4) -> float:
    """The GPU file's first output on the CPU (Interpreter) against Keras over ``samples`` inputs: the largest
    error as a fraction of Keras' range over them."""
    from fuselite.runtime.samples import relative_error

    got, want = [], []
    for s in range(samples):
        xs = zoo.sample_inputs(model, seed=10 + s)
        feed = _feed(data, xs)
        out = run(data, feed)
        ref = np.asarray(model(xs[0] if len(xs) == 1 else xs, training=False))
        got.append({"y": next(v for v in out.values() if v.shape == ref.shape)})
        want.append({"y": ref})
    return relative_error(got, want)["y"]


@needs_vulkan
@pytest.mark.parametrize("name", [n for n in FLOAT_MODELS if n != "stateful_gru"])
def test_gpu_target_float_models_run_fully_on_the_gpu(name):
    model = _model(name)
    conv = fuselite.Converter.from_keras_model(model, target="gpu")
    data = conv.convert()
    gpu = conv.report.gpu
    assert gpu["ran"] and gpu["fully_on_gpu"] and gpu["cpu_ops"] == [], gpu
    assert max(gpu["error_against_cpu"].values()) < 0.05, gpu  # fp16 arithmetic, 4 samples (docs/accelerators.md)
    assert _gpu_against(data, model) <= 1e-5  # the file itself is exact on the CPU
    assert not {"WHILE", "SHAPE", "FILL", "EXPAND_DIMS", "SQUEEZE"} & set(conv.report.ops_after)


@needs_vulkan
def test_gpu_target_stateful_layer_passes_its_state_in_and_out():
    """A stateful GRU's state is a signature input and output (no resource variable op: the GPU runs none);
    fed back, two calls give the stateful Keras layer's two outputs."""
    model = _model("stateful_gru")
    conv = fuselite.Converter.from_keras_model(model, target="gpu")
    data = conv.convert()
    assert conv.report.gpu["fully_on_gpu"]
    (state,) = conv.report.state_io
    assert not {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"} & set(conv.report.ops_after)
    _reset(model)
    h = np.zeros(state["shape"], np.float32)
    for s in range(2):
        x = zoo.sample_inputs(model, seed=20 + s)[0]
        out = run(data, {"sequence": x, state["name"]: h})
        want = np.asarray(model(x))
        y = next(v for k, v in out.items() if k != state["name"])
        assert float(np.abs(y - want).max()) <= 1e-5
        h = out[state["name"]]


@needs_vulkan
@pytest.mark.parametrize("name", INT8_MODELS)
def test_gpu_target_int8_models_run_fully_on_the_gpu_with_the_cpus_numbers_at_fp32(name):
    """accelerator_config="fp32": the check runs the GPU as GpuOptions(enforce_f32=True) does; an int8 file there
    gives the CPU file's numbers (within 1% of the range; at fp16 it rounds its quantization in float16)."""
    conv, data = _int8(name, target="gpu", accelerator_config="fp32")
    gpu = conv.report.gpu
    assert gpu["ran"] and gpu["fully_on_gpu"] and gpu["cpu_ops"] == [], gpu
    assert gpu["precision"] == "fp32" and "error_against_cpu_fp32" not in gpu
    assert max(gpu["error_against_cpu"].values()) <= 0.01, gpu
    assert not any(t == "int16" for t in _tensor_types(data))


@needs_vulkan
def test_gpu_target_int8_at_the_default_fp16_measures_fp32_where_it_is_off():
    """No precision given: the check runs the GPU's default (fp16); where an output is over 1% of its range from
    the CPU's, it runs fp32 as well and the warning says how to get it."""
    conv, _ = _int8("mlp", target="gpu")
    gpu = conv.report.gpu
    assert gpu["precision"] == "fp16"
    worst = max(gpu["error_against_cpu"].values())
    if worst <= 0.01:
        assert "error_against_cpu_fp32" not in gpu
        return
    assert max(gpu["error_against_cpu_fp32"].values()) <= 0.01, gpu
    (warning,) = [w for w in conv.report.warnings if "GPU accelerator at fp16" in w]
    assert "accelerator_config='fp32'" in warning and "enforce_f32=True" in warning
    assert "at fp32" in str(conv.report)


def test_gpu_target_takes_a_precision_and_refuses_others():
    with pytest.raises(InputError, match="target='gpu': accelerator_config is the precision"):
        fuselite.Converter.from_keras_model(_model("mlp"), target="gpu", accelerator_config="ethos-u55-128").convert()
    with pytest.raises(InputError, match="or the GPU's precision: fp16, fp32"):
        fuselite.Converter.from_keras_model(_model("mlp"), target="gpu", accelerator_config="fp64").convert()
    with pytest.raises(InputError, match="one of Vela's configurations"):
        fuselite.Converter.from_keras_model(_model("mlp"), target="ethos-u", accelerator_config="fp32").convert()


def _tensor_types(data: bytes) -> set[str]:
    from ai_edge_litert import schema_py_generated as schema

    from fuselite.inspect import load_model

    names = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    return {names[t.type] for sg in load_model(data).subgraphs for t in sg.tensors}


@needs_vulkan
def test_gpu_target_embedding_and_a_gru_of_unknown_length():
    """A Keras Embedding gathers 1-D indices; a GRU of unknown length is refused naming input_shapes, and converts
    with it."""
    import keras

    model = _model("text_bilstm")
    conv = fuselite.Converter.from_keras_model(model, target="gpu")
    conv.convert()
    assert conv.report.gpu["fully_on_gpu"]
    i = keras.Input((None, 8), name="frames")
    gru = keras.Model(i, keras.layers.GRU(8)(i))
    with pytest.raises(ConversionError, match=r"input_shapes=\{'frames': \[None, <size>, 8\]\}"):
        fuselite.Converter.from_keras_model(gru, target="gpu").convert()
    fixed = fuselite.Converter.from_keras_model(gru, target="gpu", input_shapes={"frames": [None, 12, 8]})
    fixed.convert()
    assert fixed.report.gpu["fully_on_gpu"]


@needs_vulkan
def test_gpu_target_stateful_lstm():
    model = _model("stateful_lstm")
    conv = fuselite.Converter.from_keras_model(model, target="gpu")
    conv.convert()
    assert conv.report.gpu["fully_on_gpu"] and len(conv.report.state_io) == 2


def test_gpu_target_refuses_modes_the_gpu_takes_no_kernel_for():
    from fuselite.quantize import QuantizationOptionError

    conv = fuselite.Converter.from_keras_model(_model("mlp"), target="gpu", optimizations=[tf.lite.Optimize.DEFAULT])
    conv.target_spec.supported_types = ["int4"]
    with pytest.raises(QuantizationOptionError, match="int4 weights"):
        conv.convert()


@needs_vulkan
@pytest.mark.parametrize("mode", ["dynamic", "float16"])
def test_gpu_target_takes_int8_and_float16_weights(mode):
    conv = fuselite.Converter.from_keras_model(_model("lstm_last_step"), target="gpu",
                                               optimizations=[tf.lite.Optimize.DEFAULT])
    if mode == "float16":
        conv.target_spec.supported_types = [tf.float16]
    conv.convert()
    assert conv.report.quantization["mode"] == mode and conv.report.gpu["fully_on_gpu"]
    assert max(conv.report.gpu["error_against_cpu"].values()) < 0.01


def test_report_json_names_the_api():
    conv = fuselite.Converter.from_keras_model(_model("mlp"))
    conv.convert()
    assert json.loads(conv.report.to_json())["litert_api"]["apis"] == ["Interpreter", "CompiledModel"]


# -- target="npu" through LiteRT's vendor plugins ----------------------------------------------------------------

from fuselite.runtime.npu import openvino_libs  # noqa: E402

needs_openvino = pytest.mark.skipif(openvino_libs() is None, reason="Intel's NPU plugin needs openvino (fuselite[npu])")


@needs_openvino
@pytest.mark.parametrize("name, mode", [("cnn", "float"), ("mobilenet_v2", "float"), ("cnn", "int8"),
                                        ("mobilenet_v2", "int8"), ("lstm_last_step", "float"),
                                        ("keyword_spotter", "int8")])
def test_npu_target_intel_openvino_compiles_in_one_partition(name, mode):
    """Intel OpenVINO's plugin (OpenVINO's CPU device) takes every op of these in one partition (SPLIT_V, NEG and
    the shape-less RESHAPE written in forms it takes); the compiled model's outputs against the CPU's."""
    options = {"target": "npu"}
    if mode == "int8":
        conv, _ = _int8(name, **options)
    else:
        conv = fuselite.Converter.from_keras_model(_model(name), **options)
        conv.convert()
    npu = conv.report.npu
    assert npu["compiled"] and npu["partitions"] == 1 and npu["npu_ops"] == npu["ops"] and npu["cpu_ops"] == [], npu
    assert max(npu["error_against_cpu"].values()) < 0.05, npu
    assert f"NPU (intel_openvino LNL): 1 partition(s), {npu['ops']} of {npu['ops']} ops offloaded" in str(conv.report)


def test_npu_target_without_the_vendor_sdk_says_what_to_install_in_one_line():
    conv = fuselite.Converter.from_keras_model(_model("mlp"), target="npu", accelerator_config="qualcomm:SM8650")
    with pytest.raises(ConversionError) as e:
        conv.convert()
    message = str(e.value)
    assert "\n" not in message and "libQnnHtp.so" in message and "ai-edge-litert-sdk-qualcomm" in message


def test_npu_target_names_its_vendors():
    from fuselite.errors import InputError

    with pytest.raises(InputError, match="an NPU vendor.*: intel_openvino, qualcomm, mediatek, google_tensor, samsung"):
        fuselite.Converter.from_keras_model(_model("mlp"), target="npu", accelerator_config="nvidia").convert()
    with pytest.raises(InputError, match="Vela's configurations"):
        fuselite.Converter.from_keras_model(_model("mlp"), target="ethos-u", accelerator_config="qualcomm").convert()


@needs_vulkan
def test_cli_convert_for_the_gpu_prints_its_placement(tmp_path):
    model = _model("mlp")
    src, out = tmp_path / "m.keras", tmp_path / "m.tflite"
    model.save(src)
    proc = subprocess.run([sys.executable, "-m", "fuselite.cli", "convert", str(src), "-o", str(out), "--target",
                           "gpu"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "every op on its GPU accelerator" in proc.stdout + proc.stderr
    assert out.exists()


def test_the_report_predicts_gpu_placement_from_the_file():
    """Without running the GPU: a Keras Embedding's 2-D gather and the loop form's WHILE are named, with what to
    change; the GPU target's file of the same model has neither."""
    conv = fuselite.Converter.from_keras_model(_model("keyword_spotter"))
    conv.convert()
    problems = conv.report.gpu["problems"]
    assert conv.report.gpu["predicted"] is False and "WHILE: Operation is not supported." in problems
    assert "target='gpu' writes forms it runs" in str(conv.report)
    text = fuselite.Converter.from_keras_model(_model("text_bilstm"))
    text.convert()
    assert "GATHER: Only support 1D indices" in text.report.gpu["problems"]


@pytest.mark.parametrize("mode", ["float16", "dynamic", "int8", "int16x8"])
def test_every_quantization_mode_of_an_lstm_loads_in_compiled_model(mode):
    """float16, dynamic range, int8 and 16x8 LSTMs by default: files CompiledModel loads and runs with the
    Interpreter's numbers (the check before writing: report.litert_api)."""
    model = _model("lstm_last_step")
    conv = fuselite.Converter.from_keras_model(model, optimizations=[tf.lite.Optimize.DEFAULT])
    if mode == "float16":
        conv.target_spec.supported_types = [tf.float16]
    if mode in ("int8", "int16x8"):
        conv.representative_dataset = _representative(model, 8)
    if mode == "int16x8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    data = conv.convert()
    assert conv.report.quantization["mode"] == mode
    assert loader_problems(data) == [] and conv.report.litert_api["apis"] == ["Interpreter", "CompiledModel"]
    assert conv.report.litert_api["compiled_model_error"] <= 1e-6


def test_gpu_target_refuses_an_error_budget_it_could_not_spend():
    """max_quantization_error widens layers to 16x8, which the GPU takes no tensors of: refused, not ignored."""
    from fuselite.errors import InputError

    conv = fuselite.Converter.from_keras_model(_model("mlp"), target="gpu", max_quantization_error=0.01)
    with pytest.raises(InputError, match="max_quantization_error"):
        conv.convert()
