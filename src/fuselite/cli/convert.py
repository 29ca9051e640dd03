"""``fuselite convert``: the options checked before any work, the quantization flags, the output's path."""

from __future__ import annotations

import os
import sys
import time

from fuselite.cli.common import UsageError, inputs, native_logs_hidden, progress_line, say, sigterm_as_exit
from fuselite.load import load_source
from fuselite.options import OPTIONS


def calibration_samples(path: str):
    """A representative_dataset from an .npz: one array per input (by name), samples on the first axis."""
    from fuselite.errors import InputError
    from fuselite.npz import read_npz

    arrays = read_npz(path, "calibration data")  # each array's header checked before it is read
    scalars = [k for k, a in arrays.items() if a.ndim == 0]
    if scalars:
        raise InputError(f"calibration data '{path}': array '{scalars[0]}' is a scalar; each array holds the "
                         "samples of one input on its first axis")
    counts = {len(a) for a in arrays.values()}
    if not arrays or len(counts) != 1:
        raise InputError(f"calibration data '{path}' needs one array per input with the same number of samples "
                         f"on the first axis, got {({k: a.shape for k, a in arrays.items()})}")

    n = next(iter(counts))

    def samples():
        for i in range(n):
            yield {k: a[i:i + 1] for k, a in arrays.items()}

    return samples


def check_usage(args) -> None:
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


def apply_quantization(conv, args) -> None:
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
        conv.representative_dataset = calibration_samples(args.calibration_data)


def check_output(args) -> None:
    """Before any work (TensorFlow is not imported yet): every file the run writes — the model, the report — is a
    path fuselite may write (``paths.output_problem``: not the input nor inside it, not a device, FIFO or folder,
    in a folder that is there), and no two are the same file; the target's folders are checked with its options,
    and every file in them before the model is converted (``Converter.check_outputs``)."""
    from fuselite.errors import InputError
    from fuselite.paths import distinct_outputs, output_problem

    problem = (output_problem(args.output, [args.src]) or
               (args.report is not None and output_problem(args.report, [args.src], "--report")) or
               distinct_outputs({"-o": args.output, "--report": args.report}))
    if problem:
        raise InputError(problem)


def cmd_convert(args) -> int:
    t0 = time.perf_counter()
    with sigterm_as_exit():  # the atomic write removes its temporary file on the way out
        check_usage(args)
        check_output(args)
        with native_logs_hidden(args.verbose):
            progress = progress_line(args)
            if progress:
                progress(f"loading {args.src}")
            conv = load_source(args.src, args)
            apply_quantization(conv, args)
            conv.progress = progress
            try:
                data = conv.convert_to(args.output)
            finally:
                if progress:
                    progress.done()
    if args.report:
        from fuselite.converter import write_atomic

        text = (conv.report.to_json(indent=2) if args.report.endswith(".json") else
                conv.report.to_html() if args.report.endswith(".html") else str(conv.report))
        write_atomic(args.report, (text + "\n").encode())
    if args.json:
        print(conv.report.to_json(indent=2))
    else:
        say(args, str(conv.report) if args.verbose else conv.report.summary())
        say(args, f"wrote {args.output} ({len(data):,} bytes) in {time.perf_counter() - t0:.2f} s")
    if args.verify:

        with native_logs_hidden(args.verbose):
            result = verify_with_progress(args, data, 1e-4 if args.tolerance is None else args.tolerance,
                                           (args.signature_keys or "").split(",")[0] or None)
        say(args, f"verify against {args.src}:\n{result}")
        if not result.passed:
            print(f"fuselite: error: {args.output} does not match {args.src} (see above)", file=sys.stderr)
            return 1
    return 0


def verify_with_progress(args, data: bytes, tolerance: float, signature_key):
    from fuselite.verify import verify

    progress = progress_line(args)
    if progress:
        progress(f"running {args.src} on TensorFlow and the model on LiteRT")
    try:
        return verify(args.src, data, inputs(args), tolerance, signature_key)
    finally:
        if progress:
            progress.done()
