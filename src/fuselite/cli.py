"""Command line: ``fuselite convert | convert-lm | generate | inspect | verify | compare | bench | pipeline | demo``
(docs/cli.md).

Exit codes: 0 success; 1 the conversion or check failed, or an input could not be read
(one line on stderr: ``fuselite: error: ...``); 2 a usage error (an unknown option, a
missing argument, options that do not go together); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import contextmanager

from fuselite.load import load_source
from fuselite.options import OPTIONS, add_flags, flag_type, unknown_option

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


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


class UsageError(Exception):
    """Options that do not go together: exit code 2, as argparse's own usage errors."""


def _check_usage(args) -> None:
    from fuselite.targets import TARGETS

    target = TARGETS[args.target or OPTIONS["target"].default]
    if args.quantize in target.cli_refused_quantize:
        if target.cli_quantize:
            raise UsageError(f"--target {target.name} is full integer: --quantize {target.cli_quantize} (its default) "
                             f"or int16x8, not {args.quantize}")
        raise UsageError(f"--target {target.name} takes no --quantize {args.quantize} ({target.what} has no kernels "
                         "for it)")
    if target.cli_quantize and not args.quantize:
        args.quantize = target.cli_quantize  # the target's default, so that every quantization option goes with it
    if args.calibration_data and args.quantize not in ("int8", "int16x8"):
        integer = "".join(f" (or --target {t.name})" for t in TARGETS.values() if t.cli_quantize)
        raise UsageError(f"--calibration-data is for --quantize int8 or int16x8{integer}")
    for other in TARGETS.values():
        if other is not target and any(getattr(args, o, None) for o in other.options if o not in target.options):
            flags = " and ".join("--" + o.replace("_", "-") for o in other.options)
            raise UsageError(f"{flags} {'are' if len(other.options) > 1 else 'is'} for --target {other.name}")
    if args.keep_float and not args.quantize:
        raise UsageError("--keep-float is for use with --quantize")
    if args.max_quantization_error is not None and args.quantize not in ("int8", "int16x8"):
        raise UsageError("--max-error is for --quantize int8 or int16x8")
    if args.quantize in ("int8", "int16x8") and not args.calibration_data:
        what = f"--target {target.name} (--quantize {args.quantize})" if target.cli_quantize else \
            f"--quantize {args.quantize}"
        raise UsageError(f"{what} needs --calibration-data FILE.npz (the samples to calibrate on)")
    if (args.inputs or args.tolerance is not None) and not args.verify:
        raise UsageError("--inputs and --tolerance are for use with --verify")
    if args.tags and (args.src.endswith((".keras", ".h5"))):
        raise UsageError("--tags is for SavedModels; a .keras file has none")
    if args.report and not args.report.endswith((".json", ".txt", ".html")):
        raise UsageError(f"--report writes .json, .html or .txt, not '{os.path.basename(args.report)}'")


def _apply_quantization(conv, args) -> None:
    """``--quantize MODE``: the tf.lite.TFLiteConverter settings that mean that mode (the other options' flags
    are the converter's own: ``options.from_flags``)."""
    if not args.quantize:
        return
    conv.optimizations = ["DEFAULT"]
    if args.quantize in ("float16", "int4"):
        conv.target_spec.supported_types = [args.quantize]
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


class _Progress:
    """The stage now running, on one line of a terminal (``\r``), cleared when done."""

    def __init__(self, stream):
        self.stream, self.t0 = stream, time.perf_counter()

    def __call__(self, stage: str) -> None:
        self.stream.write(f"\r\033[K[fuselite {time.perf_counter() - self.t0:5.1f} s] {stage} ...")
        self.stream.flush()

    def done(self) -> None:
        self.stream.write("\r\033[K")
        self.stream.flush()


def _progress(args):
    """A progress line when stderr is a terminal (and not -q / --json); None otherwise."""
    if args.quiet or getattr(args, "json", False) or not sys.stderr.isatty():
        return None
    return _Progress(sys.stderr)


def _say(args, text: str) -> None:
    if not args.quiet:
        print(text)


def _read_model(path: str) -> bytes:
    from fuselite.errors import InputError

    if not os.path.exists(path):
        raise InputError(f"model not found: '{path}'")
    if os.path.isdir(path):
        raise InputError(f"'{path}' is a directory, not a .tflite file")
    with open(path, "rb") as f:
        return f.read()


def _inputs(args):
    from fuselite.verify import load_inputs

    return load_inputs(args.inputs) if args.inputs else None


def cmd_convert(args) -> int:
    t0 = time.perf_counter()
    # SIGTERM as an exception: the atomic write removes its temporary file on the way out
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        _check_usage(args)
        _check_output(args)
        with _native_logs_hidden(args.verbose):
            progress = _progress(args)
            if progress:
                progress(f"loading {args.src}")
            conv = load_source(args.src, args)
            _apply_quantization(conv, args)
            conv.progress = progress
            try:
                data = conv.convert_to(args.output)
            finally:
                if progress:
                    progress.done()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.report:
        from fuselite.converter import write_atomic

        text = (conv.report.to_json(indent=2) if args.report.endswith(".json") else
                conv.report.to_html() if args.report.endswith(".html") else str(conv.report))
        write_atomic(args.report, (text + "\n").encode())
    if args.json:
        print(conv.report.to_json(indent=2))
    else:
        _say(args, str(conv.report))
        _say(args, f"wrote {args.output} ({len(data):,} bytes) in {time.perf_counter() - t0:.2f} s")
    if args.verify:

        with _native_logs_hidden(args.verbose):
            result = _verify_with_progress(args, data, 1e-4 if args.tolerance is None else args.tolerance,
                                           (args.signature_keys or "").split(",")[0] or None)
        _say(args, f"verify against {args.src}:\n{result}")
        if not result.passed:
            print(f"fuselite: error: {args.output} does not match {args.src} (see above)", file=sys.stderr)
            return 1
    return 0


def _verify_with_progress(args, data: bytes, tolerance: float, signature_key):
    from fuselite.verify import verify

    progress = _progress(args)
    if progress:
        progress(f"running {args.src} on TensorFlow and the model on LiteRT")
    try:
        return verify(args.src, data, _inputs(args), tolerance, signature_key)
    finally:
        if progress:
            progress.done()


def cmd_inspect(args) -> int:
    import json

    from fuselite.inspect import describe, format_description

    with _native_logs_hidden(args.verbose):
        info = describe(_read_model(args.model))
    print(json.dumps(info, indent=2) if args.json else format_description(info))
    return 0


def cmd_verify(args) -> int:
    import json


    with _native_logs_hidden(args.verbose):
        result = _verify_with_progress(args, _read_model(args.model), args.tolerance, args.signature_key)
    if args.json:
        print(json.dumps({"passed": result.passed, "stateless": result.stateless, "tolerance": result.tolerance,
                          "inputs": result.inputs, "outputs": result.outputs}, indent=2))
    else:
        _say(args, str(result))
    if not result.passed:
        print(f"fuselite: error: {args.model} does not match {args.src}", file=sys.stderr)
        return 1
    return 0


def cmd_compare(args) -> int:
    import json

    from fuselite.compare import compare, format_comparison

    if not args.quiet and not args.json:
        print(f"converting {args.src} with fuselite and with tf.lite.TFLiteConverter (a child process), then "
              "checking and timing both ...", file=sys.stderr, flush=True)
    with _native_logs_hidden(args.verbose):
        rows = compare(args.src, args.seconds, args.tolerance)
    print(json.dumps(rows, indent=2) if args.json else format_comparison(rows))
    return 0


def cmd_bench(args) -> int:
    from fuselite.verify import bench

    models = [args.model] + ([args.other] if args.other else [])
    with _native_logs_hidden(args.verbose):
        results = bench([_read_model(m) for m in models], args.seconds, args.threads, _inputs(args))
    for path, r in zip(models, results):
        print(f"{path}: median {r['median_us']:.1f} µs (p10 {r['p10_us']:.1f}, p90 {r['p90_us']:.1f}; "
              f"{r['invokes']} invokes, {args.threads} thread(s))")
    if len(results) == 2:
        print(f"{models[1]} / {models[0]}: {results[1]['median_us'] / results[0]['median_us']:.3f}x "
              "(interleaved, invoke by invoke)")
    return 0


def cmd_pipeline(args) -> int:
    from fuselite.passes.manager import format_pipeline
    from fuselite.pipeline import PIPELINE

    print(format_pipeline(PIPELINE))
    return 0


WEIGHTS = {"float32": None, "float16": "float16", "int8": "dynamic", "int4": "int4"}  # convert-lm --weights: --quantize's mode


def cmd_convert_lm(args) -> int:
    """A keras-hub CausalLM (.keras) as LiteRT-LM's prefill / decode model: a .tflite, or a .litertlm bundle with
    its tokenizer."""
    from fuselite.converter import Converter, write_atomic
    from fuselite.errors import InputError
    from fuselite.load import load_causal_lm

    t0 = time.perf_counter()
    bundle = args.output.endswith(".litertlm")
    if not bundle and not args.output.endswith(".tflite"):
        raise UsageError("-o is a .litertlm bundle (model, tokenizer, metadata) or a .tflite (the model alone)")
    try:
        lengths = [int(n) for n in args.prefill.split(",")]
    except ValueError:
        raise UsageError(f"--prefill is a comma-separated list of token counts, got {args.prefill!r}") from None
    with _native_logs_hidden(args.verbose):
        lm = load_causal_lm(args.src)
        tokenizer = args.tokenizer or getattr(getattr(lm, "preprocessor", None), "tokenizer", None)
        if bundle and tokenizer is None:
            raise InputError(f"{args.src} has no preprocessor with a tokenizer: pass --tokenizer FILE (a "
                             "SentencePiece model or a tokenizer.json)")
        conv = Converter.from_causal_lm(lm, prefill_lengths=lengths, cache_length=args.cache_length,
                                        block_size=args.block_size)
        args.quantize, args.calibration_data = WEIGHTS[args.weights], None
        _apply_quantization(conv, args)
        progress = _progress(args)
        conv.progress = progress
        try:
            data = conv.convert()
        finally:
            if progress:
                progress.done()
        if bundle:
            from fuselite.generative import write_litertlm

            written = write_litertlm(data, args.output, tokenizer)
        else:
            write_atomic(args.output, data)
            written = {"path": args.output, "bytes": len(data)}
    if args.json:
        import json

        print(json.dumps({"report": conv.report.to_dict(), "written": written}, indent=2))
    else:
        _say(args, str(conv.report))
        _say(args, f"wrote {args.output} ({written['bytes']:,} bytes) in {time.perf_counter() - t0:.2f} s")
    return 0


def cmd_generate(args) -> int:
    """Greedy text from a .litertlm bundle through LiteRT-LM's own runtime."""
    from fuselite.generative import generate

    with _native_logs_hidden(args.verbose):
        text, stats = generate(args.bundle, args.prompt, args.max_new_tokens, args.threads)
    if args.json:
        import json

        print(json.dumps({"text": text, **stats}, indent=2))
        return 0
    print(text)
    _say(args, f"prefill {stats['prefill_tokens']} tokens at {stats['prefill_tokens_per_s']:,.0f} tokens/s, "
               f"decode {stats['decode_tokens']} tokens at {stats['decode_tokens_per_s']:,.1f} tokens/s "
               f"({args.threads} thread(s), LiteRT-LM's CPU backend)")
    return 0


def cmd_demo(args) -> int:
    from fuselite.demo import main as demo_main

    with _native_logs_hidden(args.verbose):  # TensorFlow's import logs (CUDA, oneDNN): shown with --verbose
        return demo_main()


def main(argv=None) -> int:
    from fuselite import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", help="print only errors (and what --json asks for)")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="show TensorFlow's and LiteRT's own log lines (hidden by default)")
    parser = argparse.ArgumentParser(prog="fuselite", description="TensorFlow / Keras -> LiteRT converter",
                                     epilog="exit codes: 0 ok, 1 conversion or check failed (or an input could "
                                            "not be read), 2 usage error, 130 interrupted; docs/cli.md")
    parser.add_argument("--version", action="version", version=f"fuselite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", parents=[common], help="convert a SavedModel directory or a .keras file")
    c.add_argument("src", help="SavedModel directory or .keras file")
    c.add_argument("-o", "--output", required=True, help="output .tflite path (written only on success)")
    c.add_argument("--signature-keys", help="comma-separated SavedModel signature keys (default: serving_default)")
    c.add_argument("--tags", help="comma-separated SavedModel tags (default: serve)")
    c.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    c.add_argument("--report", metavar="FILE", help="also write the conversion report to FILE: .json, .txt, or .html (one "
                        "self-contained page)")
    c.add_argument("--quantize", choices=["float16", "dynamic", "int4", "int8", "int16x8"],
                   help="quantize as tf.lite.TFLiteConverter's options would: float16 weights, dynamic (int8 "
                        "weights, float activations), int4 (blockwise int4 FULLY_CONNECTED weights, --block-size; float "
                        "activations), int8 (full integer, needs --calibration-data), int16x8 (int16 activations, "
                        "int8 weights; needs --calibration-data)")
    c.add_argument("--calibration-data", metavar="FILE.npz",
                   help="calibration samples for int8 / int16x8: one array per input, samples on the first axis")
    add_flags(c)  # every converter option's flag (fuselite/options.py declares them)
    c.add_argument("--verify", action="store_true",
                   help="after writing, run the source and the model on the same inputs and compare (as 'fuselite "
                        "verify'); exit 1 if they differ")
    c.add_argument("--inputs", metavar="FILE.npz", help="--verify: the inputs, one array per input name "
                                                         "(default: drawn from the input specs)")
    c.add_argument("--tolerance", type=float, help="--verify: allowed max abs error, times max(1, max |output|) "
                                                    "(default 1e-4)")
    c.set_defaults(func=cmd_convert)
    i = sub.add_parser("inspect", parents=[common], help="what is inside a .tflite: signatures, ops, sizes, "
                                                         "quantization, variables, metadata")
    i.add_argument("model", help=".tflite file (any converter's)")
    i.add_argument("--json", action="store_true", help="print it as JSON")
    i.set_defaults(func=cmd_inspect)
    v = sub.add_parser("verify", parents=[common], help="run a source model and its .tflite on the same inputs "
                                                        "and compare every output")
    v.add_argument("src", help="the source: SavedModel directory or .keras file")
    v.add_argument("model", help="the .tflite to check (any converter's)")
    v.add_argument("--inputs", metavar="FILE.npz", help="inputs, one array per input name (default: drawn from "
                                                         "the input specs)")
    v.add_argument("--tolerance", type=float, default=1e-4,
                   help="allowed max abs error per output, times max(1, max |output|) (default 1e-4)")
    v.add_argument("--signature-key", help="the signature to check (default serving_default)")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    v.set_defaults(func=cmd_verify)
    cm = sub.add_parser("compare", parents=[common], help="convert with fuselite and tf.lite.TFLiteConverter side "
                                                         "by side: converts, ops, size, error, latency")
    cm.add_argument("src", help="SavedModel directory or .keras file")
    cm.add_argument("--seconds", type=float, default=2.0, help="timed seconds for the latency (default 2)")
    cm.add_argument("--tolerance", type=float, default=1e-4, help="as for verify (default 1e-4)")
    cm.add_argument("--json", action="store_true", help="print the rows as JSON")
    cm.set_defaults(func=cmd_compare)
    b = sub.add_parser("bench", parents=[common], help="LiteRT invoke() latency of one .tflite, or two "
                                                       "interleaved")
    b.add_argument("model", help=".tflite file")
    b.add_argument("other", nargs="?", help="a second .tflite to compare with (interleaved invoke by invoke)")
    b.add_argument("--threads", type=flag_type(OPTIONS["threads"]), default=1, metavar="N",
                   help="LiteRT threads (default 1)")
    b.add_argument("--seconds", type=float, default=2.0, help="timed seconds, all models together (default 2)")
    b.add_argument("--inputs", metavar="FILE.npz", help="inputs (default: drawn from the input specs)")
    b.set_defaults(func=cmd_bench)
    p = sub.add_parser("pipeline", parents=[common],
                       help="print the conversion pipeline: every pass in order, with what it does")
    p.set_defaults(func=cmd_pipeline)
    lm = sub.add_parser("convert-lm", parents=[common], help="a keras-hub CausalLM (.keras) as LiteRT-LM's "
                                                             "prefill / decode model or .litertlm bundle")
    lm.add_argument("src", help=".keras file of a keras-hub CausalLM (model.save('lm.keras'))")
    lm.add_argument("-o", "--output", required=True, help="a .litertlm bundle (model, tokenizer, metadata) or a "
                                                         ".tflite (written only on success)")
    lm.add_argument("--prefill", default="32", metavar="L[,L...]",
                    help="prefill lengths, one signature prefill_<L> each (default 32)")
    lm.add_argument("--cache-length", type=int, default=512, metavar="N",
                    help="KV cache positions: the most tokens a session holds (default 512)")
    lm.add_argument("--weights", choices=sorted(WEIGHTS), default="float32",
                    help="float32, float16, int8 (per-channel int8 weights, float activations: dynamic range) or "
                         "int4 (blockwise int4 FULLY_CONNECTED weights, int8 embeddings, float activations)")
    lm.add_argument("--block-size", type=int, metavar="N", help=OPTIONS["block_size"].help)
    lm.add_argument("--tokenizer", metavar="FILE", help="the bundle's tokenizer: a SentencePiece model or a "
                                                       "tokenizer.json (default: the model's preprocessor's)")
    lm.add_argument("--json", action="store_true", help="print the report and what was written as JSON")
    lm.set_defaults(func=cmd_convert_lm)
    g = sub.add_parser("generate", parents=[common], help="greedy text from a .litertlm bundle (LiteRT-LM's own "
                                                         "runtime, CPU)")
    g.add_argument("bundle", help=".litertlm file (fuselite convert-lm)")
    g.add_argument("prompt", help="the text to continue (no prompt template)")
    g.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="at most N tokens (default 64)")
    g.add_argument("--threads", type=flag_type(OPTIONS["threads"]), default=1, metavar="N",
                   help="CPU threads (default 1)")
    g.add_argument("--json", action="store_true", help="print the text and LiteRT-LM's timings as JSON")
    g.set_defaults(func=cmd_generate)
    d = sub.add_parser("demo", parents=[common], help="convert a small Keras model built in-process and run it on "
                                                      "LiteRT")
    d.set_defaults(func=cmd_demo)
    args, extra = parser.parse_known_args(argv)
    if extra:  # an unknown option: convert says so as the API does (options.unknown_option)
        flag = next((x for x in extra if x.startswith("--")), None)
        if args.command == "convert" and flag:
            c.error(unknown_option(flag[2:].split("=")[0].replace("-", "_")))
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from fuselite.errors import ConversionError

    try:
        return args.func(args)
    except UsageError as e:
        print(f"fuselite {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ConversionError as e:
        print(f"fuselite: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (the output file was not written)
        print("fuselite: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
