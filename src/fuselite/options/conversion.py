"""The converter's own options, declared (``base.Option``): name, default, help, check, flag."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fuselite.errors import InputError
from fuselite.options.base import Option, boolean, one_of, register


def _batch_size(value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31):
        raise InputError(f"batch_size must be a positive integer below 2**31 (TFLite dims are int32), got {value!r}")
    return value


def _threads(value):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise InputError(f"threads is the LiteRT num_threads the model will run with, an integer from 1 to 1024, "
                         f"got {value!r}")
    return value


def _print_after(value):
    from fuselite.passes.manager import pass_names
    from fuselite.pipeline import PIPELINE

    value = frozenset(value or ())
    unknown = sorted(value - set(pass_names(PIPELINE)))
    if unknown:
        raise InputError(f"print_after: no pass named {', '.join(map(repr, unknown))}; "
                         f"passes: {', '.join(pass_names(PIPELINE))}")
    return value


def _rules(value):
    from fuselite.fusion import RuleSet

    return value if isinstance(value, RuleSet) else RuleSet(value)


def _keep_float(value):
    from fuselite.quantize import KeepFloat

    return tuple(KeepFloat(value).entries)


def _max_error(value):
    from fuselite.quantize import QuantizationOptionError

    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1):
        raise QuantizationOptionError("max_quantization_error is the largest error you accept as a fraction of "
                                      f"each output's range, between 0 and 1 (0.01 = 1%), got {value!r}")
    return None if value is None else float(value)


def _block_size(value):
    from fuselite.quantize.int4 import check_block_size

    return None if value is None else check_block_size(value)


def _input_shapes(value) -> dict[str, tuple]:
    """The ``input_shapes`` option as {input name: (dim or None, ...)}, or an :class:`InputError` saying what it
    takes: a dict of input names to shapes (lists or tuples of positive ints, None for a dimension left unknown).
    Example: ``{"frames": [None, 50, 40]}`` fixes a sequence input's length to 50 steps, its batch left dynamic."""
    if value is None:
        return {}
    what = ("input_shapes is a dict of input names to shapes, e.g. {'x': [None, 20, 8]} (None: a dimension left "
            "unknown)")
    if not isinstance(value, dict):
        raise InputError(f"{what}; got {type(value).__name__}")
    shapes = {}
    for name, shape in value.items():
        if not isinstance(name, str) or isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise InputError(f"{what}; got {name!r}: {shape!r}")
        dims = list(shape)
        bad = [d for d in dims if d is not None and (isinstance(d, bool) or not isinstance(d, int)
                                                     or not 1 <= d < 2**31)]
        if bad:
            raise InputError(f"input_shapes['{name}']: each dimension is a positive integer below 2**31 or None, "
                             f"got {shape!r}")
        shapes[name] = tuple(dims)
    return shapes


def _micro_sources(value):
    if value is not None:
        from fuselite.runtime.micro import micro_available
        from fuselite.targets import check_directory

        check_directory(value)
        if not micro_available():
            raise InputError("micro_sources: the tensor arena is measured with TFLite Micro's interpreter, "
                             "which is not installed (pip install 'fuselite[micro]')")
    return value


def _target_spec():
    from fuselite.quantize import TargetSpec

    return TargetSpec()


def _target_names():
    from fuselite.targets import TARGETS

    return TARGETS


def _rnn_forms():
    from fuselite.rnn.forms.policy import RNN_FORMS

    return RNN_FORMS


def _accelerators():
    from fuselite.runtime.vela import ACCELERATORS

    return ACCELERATORS


def _default_threads():
    from fuselite.rnn.forms.policy import DEFAULT_THREADS

    return DEFAULT_THREADS


def _accelerator_config(value):
    """One of Vela's configurations (target="ethos-u"), an NPU vendor, optionally with its SoC (target="npu"), or
    the GPU's precision (target="gpu"); the target checks which of them it takes."""
    from fuselite.targets.gpu import GPU_PRECISIONS

    if value is None:
        return value
    vendor = value.partition(":")[0] if isinstance(value, str) else None
    if value not in _accelerators() and vendor not in _npu_vendors() and value not in GPU_PRECISIONS:
        raise InputError(f"accelerator_config must be one of Vela's configurations: {', '.join(_accelerators())}; "
                         f"or an NPU vendor, optionally with its SoC ('qualcomm:SM8650'): "
                         f"{', '.join(_npu_vendors())}; or the GPU's precision: {', '.join(GPU_PRECISIONS)}; "
                         f"got {value!r}")
    return value


def _npu_vendors():
    from fuselite.runtime.npu import VENDORS

    return VENDORS


def _default_accelerator():
    from fuselite.runtime.vela import DEFAULT_ACCELERATOR

    return DEFAULT_ACCELERATOR


def _integer_text(text: str):
    """A flag's text as an int where it is one (the check says what is wrong otherwise)."""
    return int(text) if text.lstrip("-").isdigit() else text


def _number_text(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def _input_shape_flag(text: str) -> tuple[str, tuple]:
    """``--input-shape NAME:DIMS``: (name, shape), DIMS comma-separated sizes or '?'."""
    name, sep, dims = text.rpartition(":")
    parts = dims.split(",") if dims else []
    if not sep or not name or not parts or not all(p == "?" or p.isdigit() and int(p) > 0 for p in parts):
        raise InputError(f"an input shape is NAME:DIMS, DIMS comma-separated positive sizes or '?' "
                         f"for an unknown one (frames:?,50,40), got {text!r}")
    return name, tuple(None if p == "?" else int(p) for p in parts)


def _input_shapes_flags(pairs: list) -> dict:
    twice = sorted({name for name, _ in pairs if [n for n, _ in pairs].count(name) > 1})
    if twice:
        raise InputError(f"--input-shape gives input {', '.join(map(repr, twice))} more than once")
    return dict(pairs)


def _rule_modules(modules: list[str]) -> list:
    """``--rules MODULE``: the fusion rules (``@fuselite.fusion`` functions) a module defines, imported by its
    dotted path: an installed module, or one in the current directory — looked up after the installed packages,
    and only while the modules named are imported (a ``json.py`` beside them never shadows a package later)."""
    cwd = os.getcwd()
    added = bool(modules) and cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        rules = []
        for name in modules:
            try:
                module = importlib.import_module(name)
            except Exception as e:
                raise InputError(f"cannot import fusion rules module '{name}': {type(e).__name__}: {e}") from None
            found = [v for v in vars(module).values() if callable(v) and isinstance(getattr(v, "interface", None), str)]
            if not found:
                raise InputError(f"module '{name}' defines no fusion rules (functions decorated with @fuselite.fusion)")
            rules += found
        return rules
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _buffer_offsets(value):
    if value is not None and not isinstance(value, bool):
        raise InputError(f"buffer_offsets is True, False or None (by size), got {value!r}")
    return value


def _max_calibration_samples(value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"max_calibration_samples is the most representative_dataset samples calibration uses, a "
                         f"positive integer (or None: all of them, as the official converter), got {value!r}")
    return value


def _default_calibration_samples():
    from fuselite.runtime.calibrate import DEFAULT_MAX_SAMPLES

    return DEFAULT_MAX_SAMPLES


def _fold_memory_budget(value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"fold_memory_budget is the most bytes constant folding may allocate for its results, a "
                         f"positive integer ('64G', '512M' on the command line), or None: 4 times the model's "
                         f"weights, at least 256 MiB; got {value!r}")
    return value


def _bytes_text(text: str):
    """A flag's size as bytes: an integer, or a number with a K, M, G or T suffix (powers of 1024)."""
    shift = {"K": 10, "M": 20, "G": 30, "T": 40}.get(text[-1:].upper()) if text else None
    try:
        return int(float(text[:-1]) * (1 << shift)) if shift else int(text)
    except (ValueError, OverflowError):  # the check says what it takes
        return text


def _target_help() -> str:
    return "; ".join(t.help for t in _target_names().values())


# -- the declarations ------------------------------------------------------------------------------
_IO_TYPES = ["float32", "int8", "uint8", "int16"]
BIDIRECTIONAL_FORMS = ("split", "fused")
LITERT_APIS = ("any", "interpreter")
for _option in (
    Option("batch_size", None, "fix unknown batch dimensions to this size", _batch_size, "--batch-size",
           {"metavar": "N"}, parse=_integer_text, eager=True),
    Option("input_shapes", None, "fix an input's unknown dimensions, e.g. frames:?,50,40 (a sequence length of 50; "
           "'?' leaves a dimension unknown); repeatable, one per input", _input_shapes, "--input-shape",
           {"action": "append", "metavar": "NAME:DIMS"}, parse=_input_shape_flag, from_cli=_input_shapes_flags),
    Option("rules", lambda: _rules(None), "import fusion rules (@fuselite.fusion functions) from this Python module, by dotted path "
           "from the current directory or installed packages; repeatable", _rules, "--rules",
           {"action": "append", "metavar": "MODULE"}, from_cli=_rule_modules, keyword="fusions", eager=True),
    Option("strict_fusion", False, "fail if a composite (experimental_implements / api_implements) is not fused",
           boolean("strict_fusion"), "--strict-fusion", {"action": "store_true"}),
    Option("check_fusions", True, "skip running each fusion against its composite's own TensorFlow body first "
           "(faster; a wrong rule is then not caught at conversion)", boolean("check_fusions"),
           "--no-check-fusions", {"action": "store_false"}),
    Option("verify_ir", lambda: os.environ.get("FUSELITE_VERIFY_IR") == "1",  # the tests set it
           "check the IR's invariants after every pass", boolean("verify_ir"), "--verify-ir",
           {"action": "store_true"}),
    Option("print_after", frozenset, "print the IR (text form) to stderr after this pass; repeatable ('fuselite "
           "pipeline' lists the passes)", _print_after, "--print-after", {"action": "append", "metavar": "PASS"},
           eager=True),
    Option("print_stream", None, "where print_after prints (default stderr)"),
    Option("progress", None, "a callable given each pass's name as it starts, and for a large file how much of "
           "it is written (the command line shows it on a terminal)"),
    Option("optimizations", list, "as tf.lite.TFLiteConverter's: [tf.lite.Optimize.DEFAULT] quantizes"),
    Option("target_spec", _target_spec, "as tf.lite.TFLiteConverter's: supported_types, supported_ops"),
    Option("representative_dataset", None, "int8 / 16x8: the calibration samples, as tf.lite.TFLiteConverter "
           "takes them"),
    Option("inference_input_type", None, "int8 / int16x8: the model's input tensors' type (default float32: "
           "QUANTIZE inside)", None, "--inference-input-type", {"choices": _IO_TYPES}),
    Option("inference_output_type", None, "int8 / int16x8: the model's output tensors' type (default float32: "
           "DEQUANTIZE inside)", None, "--inference-output-type", {"choices": _IO_TYPES}),
    Option("keep_float", list, "keep this op in float when quantizing: an op kind (FULLY_CONNECTED), a node name or "
           "a name scope as the report lists them; repeatable", _keep_float, "--keep-float",
           {"action": "append", "metavar": "OP"}),
    Option("block_size", None, "int4 (supported_types=['int4'], --quantize int4): the inputs each float16 scale of a "
           "FULLY_CONNECTED weight covers, a multiple of 32 (default 32: 4.5 bits a weight; 128: 4.125, less exact)",
           _block_size, "--block-size", {"metavar": "N"}, parse=_integer_text),
    Option("max_quantization_error", None, "int8 / int16x8: the largest error you accept, as a fraction of each "
           "output's range (0.01 = 1%%); the fewest layers are made wider (16x8, or float) to meet it", _max_error,
           "--max-error", {"metavar": "FRACTION"}, parse=_number_text),
    Option("target", "litert", _target_help, one_of("target", _target_names), "--target",
           {"choices": _target_names}),
    Option("accelerator_config", None, lambda: f"--target ethos-u: the NPU configuration, as Vela names it: "
           f"{', '.join(_accelerators())} (default {_default_accelerator()}); --target npu: the vendor of LiteRT's "
           f"compiler plugin, optionally :SOC ({', '.join(_npu_vendors())}; default intel_openvino); --target gpu: the "
           f"precision the app runs the GPU at, fp16 (its default) or fp32 (GpuOptions(enforce_f32=True)), which the "
           f"check before writing runs",
           _accelerator_config, "--accelerator-config", {"metavar": "CONFIG"}),
    Option("vela_output", None, "--target ethos-u: keep Vela's compiled model (NAME_vela.tflite) and its summary CSV "
           "in DIR", None, "--vela-output", {"metavar": "DIR"}),
    Option("micro_sources", None, "also write the TFLite Micro op resolver (C++), the model as a C array and the "
           "tensor-arena size measured with TFLite Micro's interpreter to DIR (needs tflite-micro)", _micro_sources,
           "--micro-sources", {"metavar": "DIR"}),
    Option("bidirectional", "split", "Bidirectional LSTM / SimpleRNN: split (two unidirectional ops; opens in Model "
           "Explorer and TensorFlow's importer) or fused (LiteRT's bidirectional op, LiteRT only; as fast); default "
           "split", one_of("bidirectional", lambda: BIDIRECTIONAL_FORMS), "--bidirectional",
           {"choices": BIDIRECTIONAL_FORMS}),
    Option("litert_api", "any", "the LiteRT API the file is for (target litert): any (default: the Interpreter and "
           "CompiledModel, the API of LiteRT's GPU and NPU accelerators, whose loader refuses variable tensors: "
           "recurrent layers in forms without them, checked in both before writing) or interpreter (the Interpreter "
           "alone: LiteRT's fused sequence ops where they are the fastest form, its integer LSTM kernel for int8 "
           "and the reset witness, which keep state in variable tensors; docs/accelerators.md)",
           one_of("litert_api", lambda: LITERT_APIS), "--litert-api", {"choices": LITERT_APIS}),
    Option("rnn_form", "default", "LSTM / SimpleRNN / GRU: fused (LiteRT's sequence op; the Interpreter API only), "
           "unrolled (builtins step by step), loop (a WHILE over the steps, no TensorLists), auto (each timed on this "
           "machine at --threads, the fastest kept); default: for float models each layer's form by its size and "
           "--threads, for int8 / 16x8 LSTMs unrolled (the fused ops where --litert-api interpreter, for TFLite Micro "
           "and Ethos-U) (docs/rnn.md#forms)", one_of("rnn_form", _rnn_forms), "--rnn-form", {"choices": _rnn_forms}),
    Option("buffer_offsets", None, "write the constants after the flatbuffer (the schema's Buffer.offset / size, "
           "which LiteRT reads from a path and from bytes): unset, where they pass 2 GiB (a flatbuffer holds less); "
           "True, always; False, never (a larger model is then an error). The official converter's "
           "_experimental_use_buffer_offset sets it too", _buffer_offsets, "--buffer-offsets",
           {"action": lambda: argparse.BooleanOptionalAction}, keyword="_experimental_use_buffer_offset"),  # (a callable: read when asked)
    Option("threads", _default_threads, "the LiteRT num_threads the model will run with: the recurrent forms are chosen for it "
           "(default 1, what LiteRT uses when an app leaves num_threads unset)", _threads, "--threads",
           {"metavar": "N"}, parse=_integer_text),
    Option("max_calibration_samples", _default_calibration_samples, lambda: f"int8 / int16x8: calibrate on at "
           f"most N representative_dataset samples (default {_default_calibration_samples()}; the report says when "
           f"the limit stopped a dataset that has more, or never ends). None (Python): all, as the official "
           f"converter", _max_calibration_samples,
           "--max-calibration-samples", {"metavar": "N"}, parse=_integer_text),
    Option("fold_memory_budget", None, "the most bytes constant folding may allocate for its results (a result "
           "past it is an error naming the op; default 4 times the model's weights, at least 256 MiB; "
           "docs/security.md)", _fold_memory_budget, "--fold-memory-budget", {"metavar": "BYTES"},
           parse=_bytes_text),
):
    register(_option)


