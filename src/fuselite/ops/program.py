"""The program's plumbing: quantize / dequantize, casts, control flow, variables, complex values: one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import CAST_TYPES, both, either, in_, input_type, out, per_channel_on_axis
from fuselite.ops.facts import Facts

add_entries({
    "ASSIGN_VARIABLE": Facts(runtime=("2.6.0",), micro_op="AddAssignVariable"),
    "CALL_ONCE": Facts(runtime=("2.5.0",), micro_op="AddCallOnce"),
    "CAST": Facts(
        no_integer="LiteRT's CAST converts values, not quantized reals (cast.cc)",
        versions=[(either(in_(0, *t), out(0, *t)), v) for t, v in CAST_TYPES],
        runtime=("1.5.0", "2.7.0", "2.8.0", "2.9.0", "2.12.0", "2.15.0", "2.17.0"),
        micro_op="AddCast"),
    "COMPLEX_ABS": Facts(no_integer="COMPLEX_ABS reads complex values (complex_support.cc)", runtime=("2.5.0",)),
    # tensorflow/lite/tools/versioning/op_version.cc: float16 / int16 input 3, int8 2
    "DEQUANTIZE": Facts(
        versions=[(in_(0, "int4"), 6), (both(in_(0, "int8"), per_channel_on_axis(0)), 5),
            (in_(0, "float16", "int16"), 3),
            (in_(0, "int8"), 2)],
        runtime=("1.13.1", "1.14.0", "1.15.0", "2.2.0", "2.7.0"),
        micro_op="AddDequantize",
        micro_limits=((input_type(0, "float16"), "TFLite Micro's DEQUANTIZE takes int8, int16 and uint8 only (no float16 weights)"),)),
    # kernels/hashtable*.cc: string -> int64 or int64 -> string tables (the resource shared by every subgraph of
    # the interpreter), filled once by HASHTABLE_IMPORT in an init subgraph; TFLite Micro has none of them
    "HASHTABLE": Facts(runtime=("2.5.0",)),
    "HASHTABLE_FIND": Facts(runtime=("2.5.0",)),
    "HASHTABLE_IMPORT": Facts(runtime=("2.5.0",)),
    "HASHTABLE_SIZE": Facts(runtime=("2.5.0",)),
    "IF": Facts(runtime=("1.15.0",), micro_op="AddIf"),
    "IMAG": Facts(no_integer="IMAG reads complex values", runtime=("2.5.0",)),
    "QUANTIZE": Facts(micro_op="AddQuantize"),
    "READ_VARIABLE": Facts(runtime=("2.6.0",), micro_op="AddReadVariable"),
    "REAL": Facts(no_integer="REAL reads complex values", runtime=("2.5.0",)),
    "RFFT2D": Facts(no_integer="LiteRT's RFFT2D takes float32 only (rfft2d.cc)", runtime=("2.5.0",)),
    "VAR_HANDLE": Facts(runtime=("2.6.0",), micro_op="AddVarHandle"),
    "WHILE": Facts(runtime=("1.15.0",), micro_op="AddWhile"),
})

# bitcast.cc: the bytes reinterpreted (version 1, not in runtime_version.cc); random_ops.cc: float32 draws (int32
# or int64 class indices for MULTINOMIAL), seeded from RandomOptions at prepare (version 1, runtime 2.8.0); none
# of them has a TFLite Micro kernel
add_entries({
    "BITCAST": Facts(no_integer="BITCAST reinterprets bytes: a quantized value's bits are not another real"),
    "MULTINOMIAL": Facts(no_integer="MULTINOMIAL reads float32 logits (random_ops.cc)", runtime=("2.8.0",)),
    "RANDOM_STANDARD_NORMAL": Facts(no_integer="RANDOM_STANDARD_NORMAL writes float32 (random_ops.cc)",
                                    runtime=("2.8.0",)),
    "RANDOM_UNIFORM": Facts(no_integer="RANDOM_UNIFORM writes float32 (random_ops.cc)", runtime=("2.8.0",)),
})
