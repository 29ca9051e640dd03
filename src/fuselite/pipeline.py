"""The conversion pipeline, declared as data: one list of named passes, run by ``passes/manager.py``.

Read :data:`PIPELINE` top to bottom to know what a conversion does; ``fuselite pipeline``
prints it. Each pass is a function ``(module, ctx)`` (``ctx``: the
:class:`~fuselite.context.ConversionContext`) declared once here with a one-line doc;
its time goes into ``report.stage_seconds`` under its name, and ``--print-after NAME``
prints the IR after it. This file only declares: the bodies live in ``fuselite/stages/`` by
concern (and in ``fuselite/passes/``), the passes other stages run again in ``stages/groups.py``; a
group that depends on the target runs where the target (``fuselite/targets/``) ``selects`` it.
Adding a stage (quantization, a target check) is a body there and one entry here.
"""

from __future__ import annotations

from fuselite.lower import lower_module
from fuselite.lower.fft import fourier_forms
from fuselite.passes.accelerator_forms import (
    expand_and_squeeze_as_reshape,
    gathers_with_1d_indices,
    neg_as_mul,
    reshape_shape_options,
    split_v_as_slices,
    unused_parts_as_slices,
)
from fuselite.passes.ethos_u_forms import reverse_as_split_concat
from fuselite.passes.manager import Group, Pass, check_pipeline
from fuselite.passes.micro_forms import (
    expand_gelu,
    full_rank_strided_slices,
    int32_select_as_arithmetic,
    tile_as_broadcast_to,
)
from fuselite.passes.optimize import optimize
from fuselite.passes.pack_slices import slices_of_packs
from fuselite.passes.patterns import rewrite_tf_patterns
from fuselite.passes.reset_witness import add_reset_witnesses
from fuselite.stages.checks import check_on_compiled_model, check_on_litert, predict_gpu_placement
from fuselite.stages.export import export_flatbuffer
from fuselite.stages.graph import (
    freeze_read_only_variables,
    fuse_composites,
    fuse_recognised_loops,
    import_program,
    inline_composites,
    inline_plain_calls,
    lower_tensor_list_ops,
    materialize_lookup_tables,
    materialize_mutable_variables,
    record_text_kernels,
    split_bidirectional_ops,
    unroll_rnns,
    variables_as_signature_io,
)
from fuselite.stages.groups import DCE, SETTLE, SPECIALIZE
from fuselite.stages.quantization import (
    calibrate,
    keep_keras_int4_weights,
    measure_quantization_error,
    quantize_float16_weights,
    quantize_full_int8,
    quantize_int4_weights,
    quantize_int8_weights,
    settle_quantization_mode,
)
from fuselite.targets.ethos_u import compile_for_ethos_u
from fuselite.targets.gpu import check_static_gpu_inputs, run_on_the_gpu
from fuselite.targets.micro import check_micro_target, check_static_inputs, run_on_tflite_micro
from fuselite.targets.npu import compile_on_npu

# -- the declaration ---------------------------------------------------------------------

UNROLL_RNNS = Pass("unroll-sequence-rnns", unroll_rnns,
                   "SimpleRNN sequence ops become FULLY_CONNECTED / ADD / TANH steps (no integer or TFLite Micro "
                   "RNN kernel)")
FREEZE = Pass("freeze-variables", freeze_read_only_variables, "variables nothing assigns become constants")

PIPELINE = [
    Pass("import", import_program, "trace the program; import its graph and function library"),
    Group("micro-inputs", [
        Pass("check-static-inputs", check_static_inputs,
             "an input with a dynamic dimension besides the batch is an error (TFLite Micro runs static shapes)"),
    ], "the micro target's inputs", when=lambda m, ctx: ctx.selects("micro-inputs")),
    Group("static-inputs", [
        Pass("check-fixed-shapes", check_static_gpu_inputs,
             "an input with a dynamic dimension besides the batch is an error; a dynamic batch is converted as 1 "
             "(LiteRT's GPU accelerator runs static shapes)"),
    ], "the accelerator targets' static inputs", when=lambda m, ctx: ctx.selects("static-inputs")),
    Pass("settle-quantization-mode", settle_quantization_mode,
         "a quantization-aware-trained program (FakeQuant ops) asked to be optimized is made int8 from its ranges"),
    Pass("inline-calls", inline_plain_calls, "inline every call except to composite functions"),
    DCE,
    SPECIALIZE,
    FREEZE,
    SETTLE,
    Pass("fuse-composites", fuse_composites,
         "offer each composite function to its fusion rule; a fused body becomes the fused op (refining shapes)"),
    Pass("inline-composites", inline_composites, "inline the composites' bodies (fused or declined)"),
    DCE,
    FREEZE,
    Pass("fuse-recognised-loops", fuse_recognised_loops,
         "Keras LSTM / SimpleRNN / GRU while loops of SavedModels become fused ops (settling first)"),
    DCE,
    SETTLE,
    Pass("rewrite-tf-patterns", lambda m, ctx: rewrite_tf_patterns(m),
         "activations spelled as several TF ops (GELU, hard-swish) become one op"),
    Pass("slices-of-packs", lambda m, ctx: slices_of_packs(m),
         "a slice that takes one operand of a tf.stack back reads that operand (a stacked KV cache, no copy)"),
    Pass("lower-tensor-lists", lower_tensor_list_ops, "TensorLists of RNN loops become dense tensors"),
    DCE,
    Group("state-io", [
        Pass("variables-as-signature-io", variables_as_signature_io,
             "assigned variables become signature inputs and outputs (LiteRT's GPU accelerator runs no resource "
             "variable op; the app feeds the state back, as LiteRT-LM's KV cache)"),
    ], "the accelerator targets' state as signature inputs and outputs", when=lambda m, ctx: ctx.selects("state-io")),
    Pass("materialize-variables", materialize_mutable_variables,
         "assigned variables become LiteRT resource variables (init, reset signature)"),
    Pass("materialize-tables", materialize_lookup_tables,
         "finds in captured lookup tables become LiteRT's HASHTABLE ops (the contents imported once, in an init)"),
    Pass("lower", lambda m, ctx: lower_module(m), "TF ops become TFLite builtins, one rule per TF op type"),
    Pass("record-text-kernels", record_text_kernels,
         "the report names the tensorflow-text kernels the model's CUSTOM ops need (an app links them)"),
    Pass("optimize", lambda m, ctx: optimize(m), "fold bias, batch norm and activations; CSE; static reshapes"),
    DCE,
    Pass("keras-int4-weights", keep_keras_int4_weights,
         "a Keras int4 kernel (quantize('int4')) that folding made float32 is int4 again, behind a DEQUANTIZE"),
    Pass("split-bidirectional", split_bidirectional_ops,
         "bidirectional sequence ops become two unidirectional ones and reverses (the form TensorFlow's flatbuffer "
         "importer, LiteRT's integer kernels and TFLite Micro take; bidirectional='fused' keeps LiteRT's op)"),
    Pass("fourier-forms", lambda m, ctx: fourier_forms(m, micro=ctx.on_micro, report=ctx.report),
         "each Fourier transform's form for the target: TFLite Micro's RFFT2D as DFT matrix products (it has no FFT "
         "kernel); the report says each form and its cost"),
    Group("micro-forms", [
        UNROLL_RNNS,
        Pass("expand-gelu", lambda m, ctx: expand_gelu(m, integer=ctx.quantization in ("int8", "int16x8")),
             "GELU becomes elementwise builtins (erf polynomial in float, sigmoid form for integer models)"),
        Pass("int32-select-as-arithmetic", lambda m, ctx: int32_select_as_arithmetic(m),
             "an int32 SELECT_V2 becomes b + CAST(c) * (a - b)"),
        Pass("tile-as-broadcast-to", lambda m, ctx: tile_as_broadcast_to(m),
             "a TILE with constant multiples becomes BROADCAST_TO (between RESHAPEs where a tiled dim is not 1)"),
        Pass("full-rank-strided-slices", lambda m, ctx: full_rank_strided_slices(m),
             "a STRIDED_SLICE naming fewer dims than its input names them all (TFLite Micro reads every dim's)"),
        DCE,
    ], "the forms of ops TFLite Micro has kernels for", when=lambda m, ctx: ctx.selects("micro-forms")),
    Group("ethos-u-forms", [
        Pass("reverse-as-split-concat", lambda m, ctx: reverse_as_split_concat(m),
             "a REVERSE_V2 along a static axis becomes SPLIT + CONCATENATION in the reverse order (Vela maps "
             "REVERSE_V2 to the NPU on the Ethos-U85 only)"),
    ], "the forms of ops the Ethos-U55 / U65 NPU takes",
        when=lambda m, ctx: ctx.selects("ethos-u-forms")),
    Group("accelerator-forms", [
        Pass("expand-and-squeeze-as-reshape", lambda m, ctx: expand_and_squeeze_as_reshape(m),
             "EXPAND_DIMS and SQUEEZE (a Keras Conv1D's) become RESHAPE"),
    ], "the forms of ops LiteRT's GPU accelerator and NPU plugins take",
        when=lambda m, ctx: ctx.selects("accelerator-forms")),
    Group("gpu-forms", [
        Pass("gathers-with-1d-indices", lambda m, ctx: gathers_with_1d_indices(m),
             "a GATHER of indices not of rank 1 (a Keras Embedding) gathers them flattened, then reshapes"),
        Pass("unused-parts-as-slices", lambda m, ctx: unused_parts_as_slices(m),
             "a SPLIT / SPLIT_V / UNPACK with an unread output (int8 ones crash the GPU accelerator) becomes a "
             "STRIDED_SLICE per part read"),
        DCE,
    ], "the forms of ops LiteRT's GPU accelerator takes", when=lambda m, ctx: ctx.selects("gpu-forms")),
    Group("npu-forms", [
        Pass("split-v-as-slices", lambda m, ctx: split_v_as_slices(m),
             "SPLIT_V becomes a STRIDED_SLICE per part (Intel OpenVINO's plugin takes no SPLIT_V)"),
        Pass("neg-as-mul", lambda m, ctx: neg_as_mul(m), "a float NEG becomes MUL by -1 (Intel OpenVINO's plugin takes no "
             "NEG)"),
        DCE,
    ], "the forms of ops the NPU plugins take", when=lambda m, ctx: ctx.selects("npu-forms")),
    Group("quantize", [
        Group("float16", [
            Pass("quantize-float16", quantize_float16_weights,
                 "float32 constant operands become float16 + DEQUANTIZE (as TF's float16 mode)"),
        ], "float16 weights", when=lambda m, ctx: ctx.quantization == "float16"),
        Group("dynamic-range", [
            Pass("quantize-dynamic", quantize_int8_weights,
                 "weights of ops with a hybrid kernel become int8 (FC, conv, sequence ops, embedding lookup)"),
        ], "int8 weights, float activations", when=lambda m, ctx: ctx.quantization == "dynamic"),
        Group("int4-weights", [
            Pass("quantize-int4", quantize_int4_weights,
                 "FULLY_CONNECTED weights become blockwise int4 (float16 scales per block of inputs) where LiteRT's "
                 "kernels run it, int8 elsewhere; the other hybrid ops' weights int8"),
        ], "blockwise int4 weights, float activations", when=lambda m, ctx: ctx.quantization == "int4"),
        Group("full-integer", [
            UNROLL_RNNS,
            DCE,
            Pass("calibrate", calibrate, "run the float model on the representative dataset; record tensor ranges"),
            Pass("quantize-int8", quantize_full_int8,
                 "int8 (int16) activations, int8 weights, int32 (int64) biases; float ops between QUANTIZE / "
                 "DEQUANTIZE"),
        ], "int8 (or int16x8) activations, int8 weights", when=lambda m, ctx: ctx.quantization in ("int8", "int16x8")),
    ], "quantize as the converter's options ask", when=lambda m, ctx: ctx.quantization is not None),
    Group("reset-witness", [
        Pass("witness-reset-all-variables", lambda m, ctx: add_reset_witnesses(m),
             "a signature using variables resets them after interpreter.reset_all_variables() (an in-place RNN "
             "state marks it)"),
    ], "LiteRT's reset_all_variables() resets resource variables too",
        when=lambda m, ctx: ctx.selects("reset-witness")),
    Group("micro-target", [
        Pass("check-micro-target", check_micro_target,
             "every op TFLite Micro has no kernel (or no such operand types) for, listed together, is an error"),
    ], "the micro target's compatibility check", when=lambda m, ctx: ctx.selects("micro-target")),
    Group("npu-shapes", [
        Pass("reshape-shape-options", lambda m, ctx: reshape_shape_options(m),
             "a RESHAPE names its shape in its options too (Intel OpenVINO's plugin reads them)"),
    ], "RESHAPE options for the NPU plugins", when=lambda m, ctx: ctx.selects("on-npu")),
    Pass("export", export_flatbuffer, "order ops and write the schema-v3 flatbuffer"),
    Pass("check-on-litert", check_on_litert,
         "prepare the model on stock LiteRT and invoke it on zeros: an op or dtype its kernels reject is an error"),
    Pass("check-on-compiled-model", check_on_compiled_model,
         "load the model in LiteRT's CompiledModel API (CPU) and run it against the Interpreter; a file only the "
         "Interpreter loads (variable tensors) only where the conversion asked for such a form, said in the report "
         "(not for TFLite Micro's targets)"),
    Pass("predict-gpu-placement", predict_gpu_placement,
         "the report says whether the file would run fully on LiteRT's GPU accelerator (its op rules, read from "
         "the file), and what to change (not for TFLite Micro's targets)"),
    Group("on-gpu", [
        Pass("run-on-gpu", run_on_the_gpu,
             "load the model on LiteRT's GPU accelerator (a child process, where a Vulkan driver is present): an op "
             "left on the CPU is an error with LiteRT's reason; the GPU's outputs against the CPU's"),
    ], "run on LiteRT's GPU accelerator", when=lambda m, ctx: ctx.selects("on-gpu")),
    Group("on-npu", [
        Pass("compile-on-npu", compile_on_npu,
             "compile the model with the vendor's NPU plugin (a child process): partitions, ops offloaded, each op "
             "left to the CPU with the plugin's words; run where it compiles here (Intel OpenVINO), against the CPU"),
    ], "LiteRT's NPU compiler plugins", when=lambda m, ctx: ctx.selects("on-npu")),
    Group("on-micro", [
        Pass("run-on-tflite-micro", run_on_tflite_micro,
             "load and run the model on TFLite Micro's interpreter (a subprocess); for --micro-sources, measure "
             "its tensor arena"),
    ], "run on TFLite Micro", when=lambda m, ctx: ctx.selects("on-micro")),
    Group("ethos-u", [
        Pass("compile-with-vela", compile_for_ethos_u,
             "compile the model with Arm's Vela for the Ethos-U configuration (a subprocess): the NPU / CPU split "
             "with Vela's reasons, cycle and SRAM estimates"),
    ], "Arm's Vela compiler", when=lambda m, ctx: ctx.selects("ethos-u")),
    Group("quantization-error", [
        Pass("measure-quantization-error", measure_quantization_error,
             "run the float and the quantized model on LiteRT (the quantized one on TFLite Micro when only it has "
             "the kernels); report each output's error"),
    ], "what quantization cost, measured", when=lambda m, ctx: ctx.quantization is not None),
]

check_pipeline(PIPELINE)
