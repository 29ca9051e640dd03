"""The verbs that read a model or a source: inspect, verify, compare, bench, pipeline, demo."""

from __future__ import annotations

import sys

from fuselite.cli.common import inputs, native_logs_hidden, read_model, say, sigterm_as_exit
from fuselite.cli.convert import verify_with_progress


def cmd_inspect(args) -> int:
    import json

    from fuselite.inspect import describe, format_description

    with native_logs_hidden(args.verbose):
        info = describe(read_model(args.model))
    print(json.dumps(info, indent=2) if args.json else format_description(info))
    return 0


def cmd_verify(args) -> int:
    import json


    with native_logs_hidden(args.verbose):
        result = verify_with_progress(args, read_model(args.model), args.tolerance, args.signature_key)
    if args.json:
        print(json.dumps({"passed": result.passed, "stateless": result.stateless, "tolerance": result.tolerance,
                          "inputs": result.inputs, "outputs": result.outputs}, indent=2))
    else:
        say(args, str(result))
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
    with sigterm_as_exit(), native_logs_hidden(args.verbose):  # its temporary folder goes on SIGTERM too
        rows = compare(args.src, args.seconds, args.tolerance)
    print(json.dumps(rows, indent=2) if args.json else format_comparison(rows))
    return 0


def cmd_bench(args) -> int:
    from fuselite.verify import bench

    models = [args.model] + ([args.other] if args.other else [])
    with native_logs_hidden(args.verbose):
        results = bench([read_model(m) for m in models], args.seconds, args.threads, inputs(args))
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


def cmd_demo(args) -> int:
    from fuselite.demo import main as demo_main

    with native_logs_hidden(args.verbose):  # TensorFlow's import logs (CUDA, oneDNN): shown with --verbose
        return demo_main()
