"""target="micro": every model converts to forms TFLite Micro runs, checked on TFLM's interpreter against Keras.

TFLite Micro (the ``tflite-micro`` package) is a native runtime: it runs in a subprocess, so a crash is a
failure here, not a lost run. Float models must give Keras' numbers within 1e-5 on TFLM and on LiteRT.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import keras_flavour, litert_op_names

import fuselite
from fuselite.errors import InputError
from fuselite.quantize import QuantizationOptionError
from fuselite.testing import models as zoo

TOLERANCE = 1e-5  # max abs error against Keras (float), on TFLM and on LiteRT

_TFLM = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
data = open(sys.argv[1], "rb").read()
feeds = np.load(sys.argv[2])
n_inputs, n_outputs, arena = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
interp = runtime.Interpreter.from_bytes(data, arena_size=arena or None)
outs = {}
for run in range(len(feeds.files) // n_inputs):
    for i in range(n_inputs):
        interp.set_input(feeds[f"r{run}_i{i}"], i)
    interp.invoke()
    for o in range(n_outputs):
        outs[f"r{run}_o{o}"] = interp.get_output(o).copy()
np.savez(sys.argv[3], **outs)
"""


def run_on_tflm(data: bytes, runs: list[list[np.ndarray]], n_outputs: int, tmp_path, arena: int = 0):
    """Outputs of consecutive invokes on one TFLM interpreter ([run][output]); (None, stderr) if it failed."""
    (tmp_path / "m.tflite").write_bytes(data)
    np.savez(tmp_path / "x.npz", **{f"r{r}_i{i}": x for r, xs in enumerate(runs) for i, x in enumerate(xs)})
    out = subprocess.run([sys.executable, "-c", _TFLM, str(tmp_path / "m.tflite"), str(tmp_path / "x.npz"),
                          str(tmp_path / "y.npz"), str(len(runs[0])), str(n_outputs), str(arena)],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return None, out.stdout[-1000:] + out.stderr[-2000:]
    y = np.load(tmp_path / "y.npz")
    return [[y[f"r{r}_o{o}"] for o in range(n_outputs)] for r in range(len(runs))], ""


def run_on_litert(data: bytes, runs: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    from fuselite.runtime import interpreter

    interp = interpreter(data)
    got = []
    for xs in runs:
        for d, x in zip(interp.get_input_details(), xs):
            interp.set_tensor(d["index"], x)
        interp.invoke()
        got.append([interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()])
    return got


def keras_outputs(model, xs) -> list[np.ndarray]:
    return [np.asarray(o) for o in tf.nest.flatten(model(xs[0] if len(xs) == 1 else xs, training=False))]


def _by_shape(got: list[np.ndarray], want: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pair outputs (the runtimes' order may differ from Keras'): same shape, closest values."""
    pairs, rest = [], list(got)
    for w in want:
        same = [g for g in rest if g.shape == w.shape]
        assert same, (w.shape, [g.shape for g in rest])
        g = min(same, key=lambda g: float(np.abs(g - w).max()))
        rest = [r for r in rest if r is not g]
        pairs.append((g, w))
    return pairs


def check_micro(model, tmp_path, runs: list[list[np.ndarray]], want: list[list[np.ndarray]],
                **options) -> fuselite.Converter:
    """Convert for the micro target (and ``options``); TFLM and LiteRT each within TOLERANCE of Keras on every run."""
    conv = fuselite.Converter.from_keras_model(model, target="micro", **options)
    data = conv.convert()
    assert conv.report.micro["runs"] and conv.report.micro["ran"] and not conv.report.micro["problems"]
    n_outputs = len(want[0])
    tflm, stderr = run_on_tflm(data, runs, n_outputs, tmp_path)
    assert tflm is not None, stderr
    lit = run_on_litert(data, runs)
    for r, w in enumerate(want):
        for name, got in (("TFLM", tflm[r]), ("LiteRT", lit[r])):
            for g, ref in _by_shape(got, w):
                assert np.abs(g - ref).max() <= TOLERANCE, (name, r, float(np.abs(g - ref).max()))
    return conv


BENCHMARK_MODELS = [*zoo.BUILDERS, *zoo.RNN_BUILDERS]


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
@pytest.mark.parametrize("name", BENCHMARK_MODELS)
def test_every_benchmark_model_runs_on_tflite_micro_as_keras(built_models, tmp_path, flavour, name):
    """The benchmarks' models, both Keras flavours: on TFLM and LiteRT within 1e-5 of Keras, two inputs."""
    model, _, _ = built_models(flavour, name)
    runs = [zoo.sample_inputs(model, seed=s) for s in (0, 1)]
    conv = check_micro(model, tmp_path, runs, [keras_outputs(model, xs) for xs in runs])
    kinds = set(conv.report.ops_after)
    # the forms chosen: no op TFLM lacks (fused bidirectional or RNN sequence ops, GELU)
    assert not kinds & {"BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN",
                        "GELU"}
    if name in ("lstm_64", "lstm_sequence", "stacked_lstm", "bidirectional_lstm", "text_lstm"):
        assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in kinds  # the fused LSTM stays fused


@pytest.mark.parametrize("sequences", [True, False])
@pytest.mark.parametrize("cell", ["LSTM", "SimpleRNN"])
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "ave", "mul", None])
def test_bidirectional_every_merge_mode_runs_on_tflite_micro(tmp_path, cell, merge_mode, sequences):
    """Bidirectional LSTM / SimpleRNN, full sequences or last steps, each merge mode (None: two outputs): two
    unidirectional LSTMs (or unrolled steps) with reverse and merge ops, as Keras on TFLM and LiteRT."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(3)
    i = k.Input((12, 8))
    layer = k.layers.Bidirectional(getattr(k.layers, cell)(16, return_sequences=sequences), merge_mode=merge_mode)
    model = k.Model(i, layer(i))
    runs = [zoo.sample_inputs(model, seed=s) for s in (0, 1)]
    conv = check_micro(model, tmp_path, runs, [keras_outputs(model, xs) for xs in runs])
    if cell == "LSTM":
        assert conv.report.ops_after["UNIDIRECTIONAL_SEQUENCE_LSTM"] == 2


def test_stateful_lstm_carries_its_state_on_tflite_micro(tmp_path):
    """A stateful LSTM on TFLM: its state variables carry from one invoke to the next, as in Keras."""
    k = keras_flavour("keras3")
    model = zoo.build("stateful_lstm", k)
    runs = [zoo.sample_inputs(model, seed=s) for s in range(3)]
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()
    want = [keras_outputs(model, xs) for xs in runs]
    assert np.abs(want[0][0] - want[2][0]).max() > 1e-3  # the state matters
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()
    conv = check_micro(model, tmp_path, runs, want)
    assert conv.report.mutable_variables


class _Accumulator(tf.Module):
    """A resource variable assigned on every invoke: the LiteRT target gives it a reset witness."""

    def __init__(self):
        self.total = tf.Variable(tf.zeros([3]), name="total")

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def __call__(self, x):
        self.total.assign_add(x)
        return {"total": self.total.read_value()}


def test_the_litert_targets_reset_witness_is_not_a_micro_problem():
    """The static TFLM check of a LiteRT-target model does not count fuselite's own reset witness (a one-unit
    UNIDIRECTIONAL_SEQUENCE_RNN, no TFLM kernel, for LiteRT's reset_all_variables()): target='micro' leaves it
    out, and that model runs on TFLM. (The witness is the Interpreter's: litert_api="interpreter".)"""
    m = _Accumulator()
    conv = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m,
                                                      litert_api="interpreter")
    conv.convert()
    assert conv.report.ops_after.get("UNIDIRECTIONAL_SEQUENCE_RNN") == 1  # the witness is there
    assert conv.report.micro == {"target": "litert", "runs": True, "problems": []}
    assert "TFLite Micro: every op has a kernel there" in str(conv.report)
    assert "TFLite Micro: would not run" not in str(conv.report)
    micro = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m, target="micro")
    micro.convert()
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" not in micro.report.ops_after and micro.report.micro["runs"]
    assert set(micro.report.ops_after) == set(conv.report.ops_after) - {"UNIDIRECTIONAL_SEQUENCE_RNN", "EQUAL", "IF",
                                                                        "CAST"}
    assert micro.report.micro.get("ran") or any("not run on TFLite Micro" in w for w in micro.report.warnings)


def test_micro_sources_of_a_litert_target_model_name_its_reset_witness(tmp_path):
    """Firmware sources asked of a LiteRT-target model with a reset witness: an error before anything is written
    that names the witness and says to convert with target='micro' (not TFLite Micro's own missing-op line).
    (The witness is the Interpreter's: litert_api="interpreter"; by default there is none.)"""
    m = _Accumulator()
    conv = fuselite.Converter.from_concrete_functions([m.__call__.get_concrete_function()], m,
                                                      micro_sources=tmp_path / "src", litert_api="interpreter")
    with pytest.raises(fuselite.ConversionError) as e:
        conv.convert_to(tmp_path / "m.tflite")
    assert "reset witness" in str(e.value) and "target='micro'" in str(e.value), e.value
    assert not (tmp_path / "m.tflite").exists()


def test_the_micro_target_gelu_forms_are_exact_in_float():
    """GELU, approximate and exact, as elementwise builtins: float within 1e-5 of Keras over a wide range."""
    k = keras_flavour("keras3")
    for approximate in (False, True):
        i = k.Input((64,))
        model = k.Model(i, k.layers.Lambda(lambda x, a=approximate: k.activations.gelu(x, approximate=a))(i))
        data = fuselite.Converter.from_keras_model(model, target="micro").convert()
        assert "GELU" not in litert_op_names(data)
        x = np.linspace(-12, 12, 64, dtype=np.float32)[None]
        got = run_on_litert(data, [[x]])[0][0]
        assert np.abs(got - np.asarray(model(x))).max() <= TOLERANCE


def _unsupported_model():
    k = keras_flavour("keras3")
    i = k.Input((10,), dtype="int32")
    x = k.layers.LSTM(8)(k.layers.Embedding(50, 8)(i))
    x = k.layers.Lambda(lambda v: tf.math.sign(v), output_shape=(8,))(x)  # SIGN: no TFLM kernel
    top = k.layers.Lambda(lambda v: tf.math.top_k(v, 3).values, output_shape=(3,))(x)
    return k.Model(i, top)


def test_ops_tflite_micro_cannot_run_are_listed_together_before_anything_is_written(tmp_path):
    """Every op TFLM has no kernel for (kind, node, source line, why), in one error; no file written."""
    model = _unsupported_model()
    conv = fuselite.Converter.from_keras_model(model, target="micro")
    out = tmp_path / "m.tflite"
    with pytest.raises(fuselite.ConversionError) as e:
        conv.convert_to(out)
    message = str(e.value)
    assert "TFLite Micro cannot run this model (target='micro'): 2 problem(s)" in message
    assert re.search(r"TOPK_V2 '[^']*TopKV2' at .*test_micro.py:\d+: no TFLite Micro kernel", message), message
    assert re.search(r"SIGN '[^']*Sign' at .*test_micro.py:\d+: no TFLite Micro kernel", message), message
    assert not os.listdir(tmp_path)
    # the LiteRT target converts it, and its report says it would not run on TFLM, and why
    conv = fuselite.Converter.from_keras_model(model)
    conv.convert()
    assert not conv.report.micro["runs"] and "TOPK_V2" in str(conv.report)


def test_a_dynamic_sequence_length_is_an_error_for_the_micro_target():
    """TFLM runs the shapes written in the model: a dynamic time axis would silently run one step."""
    k = keras_flavour("keras3")
    i = k.Input((None, 4), name="frames")
    model = k.Model(i, k.layers.LSTM(8)(i))
    with pytest.raises(fuselite.ConversionError, match=r"input 'frames' has a dynamic dimension"):
        fuselite.Converter.from_keras_model(model, target="micro").convert()
    fuselite.Converter.from_keras_model(model).convert()  # LiteRT resizes inputs: fine there


def test_micro_target_options_are_checked_up_front(tmp_path):
    model = zoo.build("mlp", keras_flavour("keras3"))
    with pytest.raises(InputError, match="target must be one of 'litert', 'micro'"):
        fuselite.Converter.from_keras_model(model, target="tflm").convert()
    conv = fuselite.Converter.from_keras_model(model, target="micro")
    conv.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic range: TFLM has no hybrid kernels
    with pytest.raises(QuantizationOptionError, match="TFLite Micro has no kernels for dynamic"):
        conv.convert()
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file, not a directory"):
        fuselite.Converter.from_keras_model(model, micro_sources=tmp_path / "file").convert()
    # the LiteRT target's GELU does not run on TFLM: no sources for it (and none written)
    with pytest.raises(fuselite.ConversionError, match="micro_sources: this model would not run on TFLite Micro"):
        fuselite.Converter.from_keras_model(model, micro_sources=tmp_path / "fw").convert()
    assert not (tmp_path / "fw").exists()


def _resolver_ops(header: str) -> list[str]:
    return re.findall(r"resolver\.(Add\w+)\(\)", header)


def test_micro_sources_name_exactly_the_models_ops_and_the_arena_is_what_tflm_needs(tmp_path):
    """The op resolver registers exactly the model's ops (read back from the file by LiteRT), the C array is
    the model's bytes, and TFLM runs the model in the arena reported but not in 16 bytes less."""
    from fuselite.tflite.micro import RESOLVER

    model = zoo.build("bidirectional_lstm", keras_flavour("keras3"))
    conv = fuselite.Converter.from_keras_model(model, target="micro", micro_sources=tmp_path / "src")
    data = conv.convert_to(tmp_path / "bi_lstm.tflite")
    files = sorted(os.listdir(tmp_path / "src"))
    assert files == ["bi_lstm_model_data.cc", "bi_lstm_model_data.h", "bi_lstm_op_resolver.h"]
    header = (tmp_path / "src" / "bi_lstm_op_resolver.h").read_text()
    kinds = sorted(set(litert_op_names(data)))
    assert _resolver_ops(header) == [RESOLVER[k] for k in kinds]
    assert "MicroMutableOpResolver<kOpCount>" in header and f"kOpCount = {len(kinds)};" in header
    array = (tmp_path / "src" / "bi_lstm_model_data.cc").read_text()
    assert bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", array)) == data
    assert f"kModelSize = {len(data)};" in array and "alignas(16)" in array
    arena = conv.report.micro["arena_bytes"]
    assert f"kTensorArenaSize = {arena};" in (tmp_path / "src" / "bi_lstm_model_data.h").read_text()
    assert f"tensor arena {arena:,} bytes (measured)" in str(conv.report)
    runs = [zoo.sample_inputs(model, seed=0)]
    ok, stderr = run_on_tflm(data, runs, 1, tmp_path, arena=arena)
    assert ok is not None, stderr
    too_small, _ = run_on_tflm(data, runs, 1, tmp_path, arena=arena - 16)
    assert too_small is None


def test_cli_target_micro_writes_the_model_and_its_sources(tmp_path):
    model = zoo.build("simple_rnn", keras_flavour("keras3"))
    model.save(tmp_path / "rnn.keras")
    out = subprocess.run([sys.executable, "-m", "fuselite.cli", "convert", str(tmp_path / "rnn.keras"), "-o",
                          str(tmp_path / "kws.tflite"), "--target", "micro", "--micro-sources", str(tmp_path / "fw"),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["micro"]["target"] == "micro" and report["micro"]["arena_bytes"] > 0
    assert sorted(os.listdir(tmp_path / "fw")) == ["kws_model_data.cc", "kws_model_data.h", "kws_op_resolver.h"]
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" not in report["ops_after"]


@pytest.mark.skipif(not os.environ.get("TFLM_HEADERS"), reason="set TFLM_HEADERS to a tree with tflite-micro's "
                    "tensorflow/ and signal/, flatbuffers' include/ and gemmlowp's fixedpoint/ (docs/micro.md)")
def test_generated_sources_compile_against_tflite_micros_headers(tmp_path):
    """The resolver header, the model data and a MicroInterpreter using them compile (g++ -fsyntax-only)."""
    model = zoo.build("text_lstm", keras_flavour("keras3"))
    fuselite.Converter.from_keras_model(model, target="micro", micro_sources=tmp_path).convert_to(
        tmp_path / "text.tflite")
    (tmp_path / "use.cc").write_text(USE_CC.replace("NS", "text"))
    root = os.environ["TFLM_HEADERS"]
    for source in ("use.cc", "text_model_data.cc"):
        out = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", f"-I{root}",
                              f"-I{root}/include", f"-I{root}/gemmlowp", f"-I{tmp_path}", str(tmp_path / source)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]


USE_CC = """#include "NS_model_data.h"
#include "NS_op_resolver.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/schema/schema_generated.h"

alignas(16) static uint8_t tensor_arena[NS::kTensorArenaSize];

int RunModel() {
  const tflite::Model* model = tflite::GetModel(NS::kModel);
  NS::OpResolver resolver;
  if (NS::RegisterOps(resolver) != kTfLiteOk) return 1;
  tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, NS::kTensorArenaSize);
  return interpreter.AllocateTensors() == kTfLiteOk ? 0 : 2;
}
"""


def _int8_micro(model, calibration, **options):
    conv = fuselite.Converter.from_keras_model(model, target="micro", **options)
    conv.optimizations = ["DEFAULT"]
    conv.representative_dataset = lambda: iter(calibration)
    return conv


def test_a_collapsed_softmax_runs_on_tflite_micro(tmp_path):
    """Logits that calibrate to the minimum range (a model whose activations collapse: random weights, initial
    batch-norm statistics) would give the int8 SOFTMAX an input scale of 7.8e-9, below the 2^-26 at which TFLite
    Micro's PreprocessSoftmaxScaling aborts the process: the input is requantized to a scale it takes."""
    k = keras_flavour("keras3")
    i = k.Input((6,))
    dense = k.layers.Dense(5, activation="softmax", kernel_initializer=k.initializers.RandomNormal(stddev=1e-10))
    model = k.Model(i, dense(i))
    calibration = [[np.random.default_rng(s).standard_normal((1, 6)).astype(np.float32)] for s in range(4)]
    data = _int8_micro(model, calibration).convert()
    got, stderr = run_on_tflm(data, [calibration[0]], 1, tmp_path)  # float edges: QUANTIZE / DEQUANTIZE inside
    assert got is not None, stderr
    np.testing.assert_allclose(got[0][0], np.asarray(model(calibration[0][0])), atol=1 / 256)


def test_int8_mobilenet_v2_runs_on_tflite_micro():
    """The classic microcontroller model, as keras.applications builds it (alpha 0.35, 96x96, weights=None, its
    batch-norm statistics at their initial values): int8 for target='micro' runs on TFLite Micro, whose process
    aborted in the SOFTMAX's prepare before; TFLM's outputs against Keras'."""
    from fuselite.runtime.micro import run_samples_on_micro
    from fuselite.runtime.quantization_error import real_output, tensor_quantization, to_input

    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    model = k.applications.MobileNetV2(alpha=0.35, input_shape=(96, 96, 3), weights=None, classes=10)
    rng = np.random.default_rng(0)
    calibration = [[rng.uniform(-1, 1, (1, 96, 96, 3)).astype(np.float32)] for _ in range(4)]
    conv = _int8_micro(model, calibration)
    data = conv.convert()
    assert conv.report.micro["ran"] and not conv.report.micro["problems"]
    (q_in,), (q_out,) = tensor_quantization(data)
    xs = [rng.uniform(-1, 1, (1, 96, 96, 3)).astype(np.float32) for _ in range(2)]
    got = run_samples_on_micro(data, [[to_input(q_in, x)] for x in xs])
    for (g,), x in zip(got, xs):
        # the collapsed model's probabilities are 0.1 each: within a step of the fixed 1/256 scale
        assert np.abs(real_output(q_out, g) - np.asarray(model(x))).max() <= 1 / 256 + 1e-6


def test_the_static_check_names_a_softmax_input_scale_tflite_micro_aborts_on():
    """A model written elsewhere (or by hand) with an int8 SOFTMAX input scale below 2^-26: the TFLite Micro check
    names the op and why, instead of a process that ends with no word."""
    from fuselite.ir import Function, Module
    from fuselite.ir.core import Quantization
    from fuselite.tflite.micro import micro_problems

    fn = Function("main")
    x = fn.add_input("logits", np.dtype(np.int8), (1, 10))
    x.quant = Quantization((7.8e-9,), (0,))
    soft = fn.add_op("tfl.SOFTMAX", [x], [(np.dtype(np.int8), (1, 10))], {"beta": 1.0}, name="probabilities")
    fn.outputs = [soft.outputs[0]]
    module = Module()
    module.add(fn)
    module.signatures["serving_default"] = "main"
    (problem,) = micro_problems(module)
    assert "SOFTMAX 'probabilities'" in problem and "aborts the process" in problem and "2^-26" in problem
    x.quant = Quantization((1 / 16,), (0,))
    assert micro_problems(module) == []



@pytest.mark.parametrize("quantize", [False, True], ids=["float", "int8"])
def test_repeat_vector_runs_on_tflite_micro(tmp_path, quantize):
    """Keras' RepeatVector (a TILE, which TFLite Micro has no kernel for) as BROADCAST_TO: an encoder-decoder as
    Keras' examples write it runs on TFLM with Keras' numbers (float) or LiteRT's (int8)."""
    k = keras_flavour("keras3")
    k.utils.set_random_seed(0)
    i = k.Input((6,))
    x = k.layers.RepeatVector(4)(k.layers.Dense(5)(i))
    model = k.Model(i, k.layers.TimeDistributed(k.layers.Dense(2))(k.layers.LSTM(3, return_sequences=True)(x)))
    xs = [[np.random.default_rng(s).standard_normal((1, 6)).astype(np.float32)] for s in range(3)]
    if not quantize:
        conv = check_micro(model, tmp_path, xs, [keras_outputs(model, x) for x in xs])
    else:
        conv = fuselite.Converter.from_keras_model(model, target="micro")
        conv.optimizations = ["DEFAULT"]
        conv.representative_dataset = lambda: iter(xs)
        data = conv.convert()
        tflm, stderr = run_on_tflm(data, xs, 1, tmp_path)
        assert tflm is not None, stderr
        want = np.stack([keras_outputs(model, x)[0] for x in xs])
        span = float(want.max() - want.min())
        got, lit = np.stack([t[0] for t in tflm]), np.stack([t[0] for t in run_on_litert(data, xs)])
        # the two runtimes' integer LSTMs round some products differently (one int8 step, measured)
        assert np.abs(got - lit).max() <= 0.01 * span and np.abs(got - want).max() <= 0.05 * span
    assert "TILE" not in conv.report.ops_after and conv.report.ops_after.get("BROADCAST_TO") == 1


def test_a_tile_of_wide_dimensions_is_broadcast_between_reshapes(tmp_path):
    """tf.tile of dimensions larger than 1 ([2, 3] by [2, 3]) keeps tiling's order of values: a new axis of 1
    before each tiled dimension, broadcast to the multiple, reshaped back."""
    fn = tf.function(lambda v: tf.tile(v, [2, 3]) * 2.0, input_signature=[tf.TensorSpec([2, 3], tf.float32)])
    conv = fuselite.Converter.from_concrete_functions([fn.get_concrete_function()], target="micro")
    data = conv.convert()
    assert "TILE" not in conv.report.ops_after and conv.report.ops_after.get("BROADCAST_TO") == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tflm, stderr = run_on_tflm(data, [[x]], 1, tmp_path)
    assert tflm is not None, stderr
    np.testing.assert_array_equal(tflm[0][0], np.asarray(fn(x)))
