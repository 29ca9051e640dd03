"""Command line: ``fuselite convert | convert-lm | generate | inspect | verify | compare | bench | pipeline | demo``
(docs/cli.md).

Exit codes: 0 success; 1 the conversion or check failed, or an input could not be read
(one line on stderr: ``fuselite: error: ...``); 2 a usage error (an unknown option, a
missing argument, options that do not go together); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys

from fuselite.cli.common import UsageError, sigterm_as_exit
from fuselite.cli.convert import cmd_convert
from fuselite.cli.lm import WEIGHTS, cmd_convert_lm, cmd_generate
from fuselite.cli.models import cmd_bench, cmd_compare, cmd_demo, cmd_inspect, cmd_pipeline, cmd_verify
from fuselite.options import OPTIONS, add_flags, flag_type, unknown_option

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__all__ = ["UsageError", "main"]

def main(argv=None) -> int:
    from fuselite import __version__

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", help="print only errors (and what --json asks for)")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="show TensorFlow's and LiteRT's own log lines (hidden by default); convert: the whole "
                             "report (every op, variable, rule and problem), not its one-screen summary")
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
                   help="CPU threads (default 1; at most this machine's CPUs). LiteRT-LM's XNNPACK cache goes to "
                        "$XDG_CACHE_HOME/fuselite/litert-lm (or ~/.cache/fuselite/litert-lm), never beside the bundle")
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
        with sigterm_as_exit():  # every verb: its temporary files and children's folders go on SIGTERM too
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
