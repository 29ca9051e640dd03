"""Command line: ``fuselite convert SRC -o OUT.tflite``, ``fuselite pipeline`` and ``fuselite demo``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import zipfile
from contextlib import contextmanager

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _load_source(src: str, args):
    import fuselite
    from fuselite.errors import InputError

    if src.endswith(".keras") or src.endswith(".h5"):
        if not os.path.exists(src):
            raise InputError(f"Keras model file not found: '{src}'")
        if args.signature_keys:
            raise InputError("--signature-keys is for SavedModels; a .keras file has one signature")
        if src.endswith(".keras") and not zipfile.is_zipfile(src):
            raise InputError(f"'{src}' is not a Keras model file: a .keras file is a zip archive "
                             "(saved with model.save('name.keras'))")
        import keras

        try:
            model = keras.models.load_model(src, compile=False)
        except Exception as e:
            raise InputError(f"cannot load Keras model '{src}': {str(e).splitlines()[0] if str(e) else e}") from None
        return fuselite.Converter.from_keras_model(model, batch_size=args.batch_size, **_options(args))
    keys = args.signature_keys.split(",") if args.signature_keys else None
    return fuselite.Converter.from_saved_model(src, signature_keys=keys, batch_size=args.batch_size,
                                               **_options(args))


def _options(args) -> dict:
    return {"strict_fusion": args.strict_fusion, "verify_ir": args.verify_ir or None,
            "print_after": args.print_after or (), "target": args.target, "micro_sources": args.micro_sources,
            "bidirectional": args.bidirectional}


def _calibration_samples(path: str):
    """A representative_dataset from an .npz: one array per input (by name), samples on the first axis."""
    import numpy as np

    from fuselite.errors import InputError

    try:
        with np.load(path) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read calibration data '{path}': {e}") from None
    counts = {len(a) for a in arrays.values()}
    if not arrays or len(counts) != 1:
        raise InputError(f"calibration data '{path}' needs one array per input with the same number of samples "
                         f"on the first axis, got {({k: a.shape for k, a in arrays.items()})}")

    n = next(iter(counts))

    def samples():
        for i in range(n):
            yield {k: a[i:i + 1] for k, a in arrays.items()}

    return samples


def _apply_quantization(conv, args) -> None:
    """``--quantize MODE``: the tf.lite.TFLiteConverter settings that mean that mode."""
    if args.calibration_data and args.quantize not in ("int8", "int16x8"):
        from fuselite.errors import InputError

        raise InputError("--calibration-data is for --quantize int8 or int16x8")
    if args.keep_float and not args.quantize:
        from fuselite.errors import InputError

        raise InputError("--keep-float is for use with --quantize")
    if args.max_error is not None and args.quantize not in ("int8", "int16x8"):
        from fuselite.errors import InputError

        raise InputError("--max-error is for --quantize int8 or int16x8")
    if not args.quantize:
        return
    conv.optimizations = ["DEFAULT"]
    conv.keep_float = args.keep_float or []
    if args.max_error is not None:
        conv.max_quantization_error = args.max_error
    if args.quantize == "float16":
        conv.target_spec.supported_types = ["float16"]
    elif args.quantize == "int8":
        conv.target_spec.supported_ops = ["TFLITE_BUILTINS_INT8"]
    elif args.quantize == "int16x8":
        conv.target_spec.supported_ops = ["EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"]
    if args.calibration_data:
        conv.representative_dataset = _calibration_samples(args.calibration_data)


@contextmanager
def _native_logs_hidden(verbose: bool):
    """TensorFlow's and LiteRT's C++ log lines (written to fd 2 on import and on first use) hidden,
    unless ``--verbose``: what the user needs is in the report and in fuselite's own error line."""
    if verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    python_stderr = sys.stderr  # Python's own writes (--print-after, warnings) still reach the terminal
    sys.stderr = open(os.dup(saved), "w", buffering=1, encoding=getattr(python_stderr, "encoding", None))
    try:
        yield
    finally:
        sys.stderr.close()
        sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)


def _check_output(args) -> None:
    """Before any work: the output must be a file path fuselite may write, and not the input."""
    from fuselite.errors import InputError

    out = args.output
    if os.path.isdir(out):
        raise InputError(f"cannot write '{out}': it is a directory (give a file name, e.g. model.tflite)")
    if os.path.exists(out) and os.path.exists(args.src) and os.path.samefile(out, args.src):
        raise InputError(f"the output '{out}' is the input model: choose another path")
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise InputError(f"cannot write '{out}': directory '{directory}' does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"cannot write '{out}': no permission to write in '{directory}'")


def cmd_convert(args) -> int:
    from fuselite.errors import ConversionError

    t0 = time.perf_counter()
    # SIGTERM as an exception: the atomic write removes its temporary file on the way out
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        _check_output(args)
        with _native_logs_hidden(args.verbose):
            conv = _load_source(args.src, args)
            _apply_quantization(conv, args)
            data = conv.convert_to(args.output)
    except ConversionError as e:
        print(f"fuselite: error: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(conv.report.to_json(indent=2))
    else:
        print(conv.report)
        print(f"wrote {args.output} ({len(data):,} bytes) in {time.perf_counter() - t0:.2f} s")
    return 0


def cmd_pipeline(args) -> int:
    from fuselite.passes.manager import format_pipeline
    from fuselite.pipeline import PIPELINE

    print(format_pipeline(PIPELINE))
    return 0


def cmd_demo(args) -> int:
    from fuselite.demo import main as demo_main

    return demo_main()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fuselite", description="TensorFlow / Keras -> LiteRT converter")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="convert a SavedModel directory or a .keras file")
    c.add_argument("src", help="SavedModel directory or .keras file")
    c.add_argument("-o", "--output", required=True, help="output .tflite path (written only on success)")
    c.add_argument("--signature-keys", help="comma-separated SavedModel signature keys (default: serving_default)")
    c.add_argument("--batch-size", type=int, help="fix unknown batch dimensions to this size")
    c.add_argument("--strict-fusion", action="store_true",
                   help="fail if a composite (experimental_implements / api_implements) is not fused")
    c.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    c.add_argument("--verbose", action="store_true",
                   help="show TensorFlow's and LiteRT's own log lines (hidden by default)")
    c.add_argument("--print-after", action="append", metavar="PASS",
                   help="print the IR (text form) to stderr after this pass; repeatable ('fuselite pipeline' "
                        "lists the passes)")
    c.add_argument("--verify-ir", action="store_true", help="check the IR's invariants after every pass")
    c.add_argument("--quantize", choices=["float16", "dynamic", "int8", "int16x8"],
                   help="quantize as tf.lite.TFLiteConverter's options would: float16 weights, dynamic (int8 "
                        "weights, float activations), int8 (full integer, needs --calibration-data), int16x8 "
                        "(int16 activations, int8 weights; needs --calibration-data)")
    c.add_argument("--keep-float", action="append", metavar="OP",
                   help="keep this op in float when quantizing: an op kind (FULLY_CONNECTED), a node name or a "
                        "name scope as the report lists them; repeatable")
    c.add_argument("--max-error", type=float, metavar="FRACTION",
                   help="int8 / int16x8: the largest error you accept, as a fraction of each output's range (0.01 "
                        "= 1%%); the fewest layers are made wider (16x8, or float) to meet it")
    c.add_argument("--calibration-data", metavar="FILE.npz",
                   help="calibration samples for int8 / int16x8: one array per input, samples on the first axis")
    c.add_argument("--target", choices=["litert", "micro"], default="litert",
                   help="micro: only ops and operand types TFLite Micro's kernels take (an op it cannot run is an "
                        "error); default litert")
    c.add_argument("--micro-sources", metavar="DIR",
                   help="also write the TFLite Micro op resolver (C++), the model as a C array and the tensor-arena "
                        "size measured with TFLite Micro's interpreter to DIR (needs tflite-micro)")
    c.add_argument("--bidirectional", choices=["split", "fused"], default="split",
                   help="Bidirectional LSTM / SimpleRNN: split (two unidirectional ops; opens in Model Explorer and "
                        "TensorFlow's importer) or fused (LiteRT's bidirectional op, LiteRT only; as fast); default split")
    c.set_defaults(func=cmd_convert)
    p = sub.add_parser("pipeline", help="print the conversion pipeline: every pass in order, with what it does")
    p.set_defaults(func=cmd_pipeline)
    d = sub.add_parser("demo", help="convert a small Keras model built in-process and run it on LiteRT")
    d.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (the output file was not written)
        print("fuselite: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
