"""Running models with CUSTOM ops on the stock LiteRT interpreter (fuselite.runtime.custom_ops)."""

from __future__ import annotations

import ctypes
import gc
import shutil
import struct
import subprocess
import textwrap

import numpy as np
import pytest
from flatbuffers import flexbuffers

from fuselite.errors import ConversionError
from fuselite.ir import Function, Module
from fuselite.runtime import custom_ops
from fuselite.runtime.custom_ops import KernelError, MissingKernelError, NativeKernel, PythonKernel
from fuselite.tflite.flatbuffer import write_flatbuffer

F32 = np.float32


def _module(fn: Function, inputs: list[str], outputs: list[str]) -> bytes:
    fn.input_names, fn.output_names = inputs, outputs
    m = Module()
    m.add(fn)
    m.signatures["serving_default"] = fn.name
    return write_flatbuffer(m)


def _custom(fn, inputs, outputs, code, options=b""):
    if not isinstance(options, bytes):
        options = flexbuffers.Dumps(options)
    return fn.add_op("tfl.CUSTOM", inputs, outputs, {"custom_code": code, "custom_options": options})


def fused_model() -> bytes:
    """x, y (2, 3) -> my_custom_fused_op -> (x * scale + y + offset, x - y)."""
    fn = Function("serving_default")
    x = fn.add_input("x", F32, (2, 3))
    y = fn.add_input("y", F32, (2, 3))
    op = _custom(fn, [x, y], [(F32, (2, 3)), (F32, (2, 3))], "my_custom_fused_op",
                 {"scale": 3.0, "offset": 10, "mode": "fast"})
    fn.outputs = list(op.outputs)
    return _module(fn, ["x", "y"], ["fused", "diff"])


def fused_kernel(calls: list):
    def kernel(inputs, options):
        calls.append(options)
        x, y = inputs
        return x * options["scale"] + y + options["offset"], x - y

    return kernel


# --------------------------------------------------------------------------------------------
# NumPy kernels
# --------------------------------------------------------------------------------------------
def test_numpy_kernel_two_inputs_two_outputs_called_twice():
    calls = []
    interp = custom_ops.interpreter(fused_model(), kernels={"my_custom_fused_op": fused_kernel(calls)}, num_threads=1)
    assert interp.custom_op_nodes == [
        {"custom_code": "my_custom_fused_op", "node_index": 0, "subgraph": 0, "kind": "python"}
    ]
    runner = interp.get_signature_runner()
    rng = np.random.default_rng(0)
    for _ in range(2):  # two runs with different inputs
        x, y = rng.normal(size=(2, 3)).astype(F32), rng.normal(size=(2, 3)).astype(F32)
        out = runner(x=x, y=y)
        np.testing.assert_allclose(out["fused"], x * 3.0 + y + 10, rtol=1e-6)
        np.testing.assert_allclose(out["diff"], x - y, rtol=1e-6)
    assert len(calls) == 2
    assert calls[0] == {"scale": 3.0, "offset": 10, "mode": "fast"}  # decoded flexbuffer options

    # The low-level API works too (a live SignatureRunner blocks invoke() in stock LiteRT).
    del runner
    ins = {d["name"]: d["index"] for d in interp.get_input_details()}
    interp.set_tensor(ins["x"], np.full((2, 3), 2, F32))
    interp.set_tensor(ins["y"], np.ones((2, 3), F32))
    interp.invoke()
    outs = sorted(float(interp.get_tensor(d["index"])[0, 0]) for d in interp.get_output_details())
    assert outs == [1.0, 17.0]  # x - y, x * 3 + y + 10
    assert len(calls) == 3


def test_run_helper_and_kernel_object_with_dtype_cast():
    class Kernel:  # any object with invoke(inputs, options)
        def invoke(self, inputs, options):
            x, y = inputs
            return (x * options["scale"] + y).astype(np.float64), (x - y).tolist()  # cast back to float32

    x, y = np.arange(6, dtype=F32).reshape(2, 3), np.ones((2, 3), F32)
    out = custom_ops.run(fused_model(), [x, y], kernels={"my_custom_fused_op": Kernel()})
    assert out["fused"].dtype == F32
    np.testing.assert_allclose(out["fused"], x * 3 + 1)
    np.testing.assert_allclose(out["diff"], x - 1)


def test_shape_function_resizes_outputs_at_prepare_time():
    fn = Function("serving_default")
    x = fn.add_input("x", F32, (2, 3))
    op = _custom(fn, [x], [(F32, (2,))], "row_sum", {})
    fn.outputs = [op.outputs[0]]
    model = _module(fn, ["x"], ["s"])
    seen = []

    def shape(input_shapes, options):
        seen.append(input_shapes)
        return (input_shapes[0][0],)

    kernel = PythonKernel(lambda inputs, options: inputs[0].sum(axis=1), shape=shape)
    interp = custom_ops.interpreter(model, kernels={"row_sum": kernel})
    runner = interp.get_signature_runner()
    x = np.arange(20, dtype=F32).reshape(4, 5)  # not the model's (2, 3): the runner resizes the input
    out = runner(x=x)
    np.testing.assert_allclose(out["s"], x.sum(axis=1))
    assert seen[-1] == [(4, 5)]
    assert tuple(interp.get_output_details()[0]["shape"]) == (4,)


def test_result_shape_not_in_model_makes_output_dynamic():
    fn = Function("serving_default")
    x = fn.add_input("x", F32, (None, 3))
    op = _custom(fn, [x], [(F32, (None, 3))], "tile2", {"times": 2})
    fn.outputs = [op.outputs[0]]
    model = _module(fn, ["x"], ["t"])
    interp = custom_ops.interpreter(model, kernels={"tile2": lambda ins, o: np.concatenate([ins[0]] * o["times"])})
    runner = interp.get_signature_runner()
    for n in (1, 4):
        x = np.arange(n * 3, dtype=F32).reshape(n, 3)
        np.testing.assert_array_equal(runner(x=x)["t"], np.concatenate([x, x]))


def test_kernel_exception_is_a_clear_error_and_interpreter_survives():
    def kernel(inputs, options):
        if (inputs[0] < 0).any():
            raise ValueError("negative input")
        return inputs[0] * 2, inputs[1]

    interp = custom_ops.interpreter(fused_model(), kernels={"my_custom_fused_op": kernel})
    runner = interp.get_signature_runner()
    with pytest.raises(KernelError, match=r"my_custom_fused_op.*ValueError: negative input") as info:
        runner(x=-np.ones((2, 3), F32), y=np.ones((2, 3), F32))
    assert isinstance(info.value.__cause__, ValueError)
    out = runner(x=np.ones((2, 3), F32), y=np.zeros((2, 3), F32))
    np.testing.assert_array_equal(out["fused"], np.full((2, 3), 2, F32))


def test_wrong_number_of_results_is_reported():
    interp = custom_ops.interpreter(fused_model(), kernels={"my_custom_fused_op": lambda ins, o: ins[0]})
    with pytest.raises(KernelError, match="returned 1 array.*2 output"):
        interp.get_signature_runner()(x=np.ones((2, 3), F32), y=np.ones((2, 3), F32))


# --------------------------------------------------------------------------------------------
# Missing kernels
# --------------------------------------------------------------------------------------------
def two_op_model() -> bytes:
    fn = Function("serving_default")
    x = fn.add_input("x", F32, (2, 3))
    a = _custom(fn, [x], [(F32, (2, 3))], "op_a", {"k": 1})
    b = _custom(fn, [a.outputs[0]], [(F32, (2, 3))], "op_b", {"k": 2})
    fn.outputs = [b.outputs[0]]
    return _module(fn, ["x"], ["y"])


def test_missing_kernel_error_names_every_op_and_the_fix():
    with pytest.raises(MissingKernelError) as info:
        custom_ops.interpreter(two_op_model())
    err = info.value
    assert isinstance(err, ConversionError) and isinstance(err, RuntimeError)
    assert err.custom_ops == ["op_a", "op_b"]
    text = str(err)
    assert "'op_a'" in text and "'op_b'" in text
    assert "kernels=" in text and "Register_OP_A" in text and "custom-ops.md" in text
    assert "Encountered unresolved custom op" not in text

    with pytest.raises(MissingKernelError) as info:
        custom_ops.run(two_op_model(), [np.ones((2, 3), F32)], kernels={"op_a": lambda ins, o: ins[0]})
    assert info.value.custom_ops == ["op_b"]
    assert "subgraph 0, node 1" in str(info.value)


def test_two_python_kernels_in_a_chain():
    kernels = {"op_a": lambda ins, o: ins[0] + o["k"], "op_b": lambda ins, o: ins[0] * o["k"]}
    x = np.arange(6, dtype=F32).reshape(2, 3)
    out = custom_ops.run(two_op_model(), {"x": x}, kernels=kernels)
    np.testing.assert_allclose(out["y"], (x + 1) * 2)


def test_model_without_custom_ops_is_unaffected():
    fn = Function("serving_default")
    x = fn.add_input("x", F32, (2, 3))
    add = fn.add_op("tfl.ADD", [x, x], [(F32, (2, 3))], {"fused_activation_function": "NONE"})
    fn.outputs = [add.outputs[0]]
    out = custom_ops.run(_module(fn, ["x"], ["y"]), [np.ones((2, 3), F32)], kernels={"unused": lambda i, o: i})
    np.testing.assert_array_equal(out["y"], np.full((2, 3), 2, F32))


# --------------------------------------------------------------------------------------------
# Compiled C kernel
# --------------------------------------------------------------------------------------------
C_KERNEL = textwrap.dedent(
    r"""
    #include <string.h>
    #include "fuselite_tflite_kernel.h"

    /* y = a * scale + b (shape of a); n = number of invokes of this node (int32[1]).
       scale: the float32 stored in the op's custom_options. */
    typedef struct { float scale; int calls; } OpData;
    static int live = 0;
    int my_c_op_live_instances(void) { return live; }

    static void* Init(TfLiteContext* ctx, const char* buffer, size_t length) {
      OpData* d = (OpData*)calloc(1, sizeof(OpData));
      d->scale = 1.0f;
      if (length >= 4) memcpy(&d->scale, buffer, 4);
      live++;
      return d;
    }

    static void Free(TfLiteContext* ctx, void* buffer) { free(buffer); live--; }

    static TfLiteStatus Prepare(TfLiteContext* ctx, TfLiteNode* node) {
      if (node->inputs->size != 2 || node->outputs->size != 2) {
        ctx->ReportError(ctx, "my_c_op: expected 2 inputs and 2 outputs");
        return kTfLiteError;
      }
      const TfLiteTensor* a = &ctx->tensors[node->inputs->data[0]];
      const TfLiteTensor* b = &ctx->tensors[node->inputs->data[1]];
      if (a->type != kTfLiteFloat32 || b->type != kTfLiteFloat32 || a->bytes != b->bytes) {
        ctx->ReportError(ctx, "my_c_op: inputs must be float32 of one shape");
        return kTfLiteError;
      }
      TfLiteIntArray* one = TfLiteIntArrayCreate(1);
      one->data[0] = 1;
      if (ctx->ResizeTensor(ctx, &ctx->tensors[node->outputs->data[1]], one) != kTfLiteOk) return kTfLiteError;
      return ctx->ResizeTensor(ctx, &ctx->tensors[node->outputs->data[0]], TfLiteIntArrayCopy(a->dims));
    }

    static TfLiteStatus Invoke(TfLiteContext* ctx, TfLiteNode* node) {
      OpData* d = (OpData*)node->user_data;
      const TfLiteTensor* a = &ctx->tensors[node->inputs->data[0]];
      const TfLiteTensor* b = &ctx->tensors[node->inputs->data[1]];
      TfLiteTensor* y = &ctx->tensors[node->outputs->data[0]];
      TfLiteTensor* n = &ctx->tensors[node->outputs->data[1]];
      size_t count = a->bytes / sizeof(float);
      for (size_t i = 0; i < count; ++i) y->data.f[i] = a->data.f[i] * d->scale + b->data.f[i];
      n->data.i32[0] = ++d->calls;
      return kTfLiteOk;
    }

    TfLiteRegistration* Register_MY_C_OP(void) {
      static TfLiteRegistration r = {
          .init = Init, .free = Free, .prepare = Prepare, .invoke = Invoke,
          .builtin_code = 32, .custom_name = "my_c_op", .version = 1};
      return &r;
    }
    """
)


@pytest.fixture(scope="module")
def c_kernel_lib(tmp_path_factory):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc/cc) on PATH: cannot build the test kernel")
    d = tmp_path_factory.mktemp("c_kernel")
    custom_ops.write_c_header(d)
    (d / "my_c_op.c").write_text(C_KERNEL)
    lib = d / "libmy_c_op.so"
    subprocess.run(
        [gcc, "-std=c11", "-O2", "-Wall", "-Werror", "-Wno-unused-parameter", "-shared", "-fPIC",
         f"-I{d}", str(d / "my_c_op.c"), "-o", str(lib)],
        check=True, capture_output=True, text=True,
    )
    return lib


def c_model() -> bytes:
    """a, b -> my_c_op (scale 2.5) -> y, n; z = builtin ADD(y, a) -> py_neg (Python kernel)."""
    fn = Function("serving_default")
    a = fn.add_input("a", F32, (2, 3))
    b = fn.add_input("b", F32, (2, 3))
    op = _custom(fn, [a, b], [(F32, (2, 3)), (np.int32, (1,))], "my_c_op", struct.pack("<f", 2.5))
    add = fn.add_op("tfl.ADD", [op.outputs[0], a], [(F32, (2, 3))], {"fused_activation_function": "NONE"})
    neg = _custom(fn, [add.outputs[0]], [(F32, (2, 3))], "py_neg", {"k": 3})
    fn.outputs = [op.outputs[0], op.outputs[1], neg.outputs[0]]
    return _module(fn, ["a", "b"], ["y", "n", "z"])


def test_compiled_c_kernel(c_kernel_lib):
    lib = ctypes.CDLL(str(c_kernel_lib))
    kernels = {"my_c_op": NativeKernel(c_kernel_lib), "py_neg": lambda ins, o: -ins[0] * o["k"]}
    interp = custom_ops.interpreter(c_model(), kernels=kernels)
    assert [(n["custom_code"], n["kind"]) for n in interp.custom_op_nodes] == [
        ("my_c_op", "native"), ("py_neg", "python")
    ]
    assert lib.my_c_op_live_instances() == 1  # init ran once for the node
    runner = interp.get_signature_runner()
    rng = np.random.default_rng(1)
    for call in (1, 2):
        a, b = rng.normal(size=(2, 3)).astype(F32), rng.normal(size=(2, 3)).astype(F32)
        out = runner(a=a, b=b)
        np.testing.assert_allclose(out["y"], a * 2.5 + b, rtol=1e-6)
        np.testing.assert_array_equal(out["n"], [call])
        np.testing.assert_allclose(out["z"], -(a * 2.5 + b + a) * 3, rtol=1e-5)

    # The C prepare resizes its output when the inputs change shape.
    a = np.arange(20, dtype=F32).reshape(4, 5)
    out = runner(a=a, b=np.ones((4, 5), F32))
    np.testing.assert_allclose(out["y"], a * 2.5 + 1)
    np.testing.assert_allclose(out["z"], -(a * 3.5 + 1) * 3)

    del runner, interp, out
    gc.collect()
    assert lib.my_c_op_live_instances() == 0  # the interpreter called the kernel's free


def test_compiled_kernel_by_path_and_explicit_symbol(c_kernel_lib):
    fn = Function("serving_default")
    a = fn.add_input("a", F32, (3,))
    op = _custom(fn, [a, a], [(F32, (3,)), (np.int32, (1,))], "OtherName", struct.pack("<f", -1.0))
    fn.outputs = list(op.outputs)
    model = _module(fn, ["a"], ["y", "n"])
    a = np.array([1, 2, 3], F32)

    out = custom_ops.run(model, [a], kernels={"OtherName": NativeKernel(c_kernel_lib, symbol="Register_MY_C_OP")})
    np.testing.assert_allclose(out["y"], np.zeros(3))  # a * -1 + a

    with pytest.raises(KernelError, match="Register_OTHER_NAME"):
        custom_ops.interpreter(model, kernels={"OtherName": str(c_kernel_lib)})  # derived symbol is absent


# --------------------------------------------------------------------------------------------
# End to end: a composite converted by fuselite runs with a NumPy kernel
# --------------------------------------------------------------------------------------------
def test_converted_composite_runs_with_numpy_kernel():
    tf = pytest.importorskip("tensorflow")
    import fuselite

    class TestModel(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32), tf.TensorSpec([1, 4], tf.float32)])
        def __call__(self, input_1, input_2):
            return self.my_custom_fused_op(input_1 * 2.0, input_2)

        @tf.function(experimental_implements=fuselite.implements(
            "my_custom_fused_op", tfl_fusable_op=True, example_option=10))
        def my_custom_fused_op(self, input_1, input_2):
            return input_1 + input_2 + 10.0

    model = TestModel()
    data = fuselite.Converter.from_concrete_functions([model.__call__.get_concrete_function()], model).convert()
    with pytest.raises(MissingKernelError, match="my_custom_fused_op"):
        custom_ops.interpreter(data)

    def kernel(inputs, options):
        a, b = inputs
        return a + b + options["example_option"]

    runner = custom_ops.interpreter(data, kernels={"my_custom_fused_op": kernel}).get_signature_runner()
    x1, x2 = np.ones((1, 4), F32), np.arange(4, dtype=F32)[None]
    (out,) = runner(input_1=x1, input_2=x2).values()
    np.testing.assert_allclose(out, model(x1, x2).numpy())
