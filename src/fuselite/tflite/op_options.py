"""An op's options in a TFLite flatbuffer: the BuiltinOptions table of each ``tfl.`` op kind (``options_table``),
whether an op's attributes fit it (``check_op``, asked before export), and the options written as enums or tensor
types and the camelCase field names (``model_builder.ModelBuilder._set_options``). The names are importable from
``flatbuffer`` too."""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema

# Options tables whose name does not follow the op name.
_OPTIONS_OVERRIDES = {
    "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "RNN": "RNNOptions",
    "RANDOM_UNIFORM": "RandomOptions", "RANDOM_STANDARD_NORMAL": "RandomOptions", "MULTINOMIAL": "RandomOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
}
ENUMS = {
    "fused_activation_function": schema.ActivationFunctionType,
    "padding": schema.Padding,
    "weights_format": schema.FullyConnectedOptionsWeightsFormat,
    "mode": schema.MirrorPadMode,
    "kernel_type": schema.LSTMKernelType,
    "combiner": schema.CombinerType,
}
DTYPE_OPTIONS = {"out_type", "output_type", "in_data_type", "out_data_type", "idx_out_type", "key_dtype", "value_dtype"}


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


_OPTION_NAMES = {_norm(k): k for k in vars(schema.BuiltinOptions) if not k.startswith("_")}


def options_table(kind: str) -> str | None:
    """Name of the BuiltinOptions table for op ``kind`` (None if the op has none)."""
    if kind in _OPTIONS_OVERRIDES:
        return _OPTIONS_OVERRIDES[kind]
    return _OPTION_NAMES.get(_norm(kind) + "options")


def check_op(op) -> str | None:
    """Why ``op`` (a ``tfl.`` op) cannot be written, in a sentence; None if it can: an op kind that is no
    LiteRT builtin, an option its options table lacks, an enum option with an unknown value."""
    kind = op.kind
    if kind != "CUSTOM" and not hasattr(schema.BuiltinOperator, kind):
        return f"'{kind}' is not a LiteRT builtin op"
    table = options_table(kind) if kind != "CUSTOM" else None
    fields = set(vars(getattr(schema, table + "T")())) if table else set()
    for key, val in op.attrs.items():
        if key.startswith("_") or key in ("custom_code", "custom_options", "custom_tf_attrs"):
            continue
        if camel(key) not in fields:
            known = ", ".join(sorted(_snake(f) for f in fields)) or "none"
            return f"{kind} has no option '{key}' (its options: {known})"
        if key in ENUMS and not (isinstance(val, str) and hasattr(ENUMS[key], val)):
            names = ", ".join(k for k in vars(ENUMS[key]) if not k.startswith("_"))
            return f"{kind} option {key}={val!r} is not one of {names}"
    return None


def _snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)
