"""``fuselite convert-lm`` and ``fuselite generate``: keras-hub decoders for LiteRT-LM."""

from __future__ import annotations

import contextlib
import sys
import time

from fuselite.cli.common import UsageError, native_logs_hidden, progress_line, say, sigterm_as_exit
from fuselite.cli.convert import apply_quantization

WEIGHTS = {"float32": None, "float16": "float16", "int8": "dynamic", "int4": "int4"}  # convert-lm --weights: --quantize's mode


def cmd_convert_lm(args) -> int:
    """A keras-hub CausalLM (.keras) as LiteRT-LM's prefill / decode model: a .tflite, or a .litertlm bundle with
    its tokenizer. The options, the output's folder and ``--tokenizer`` are checked before any work."""
    with sigterm_as_exit():
        return _convert_lm(args)


def _convert_lm(args) -> int:
    from fuselite.errors import InputError

    t0 = time.perf_counter()
    bundle = args.output.endswith(".litertlm")
    if not bundle and not args.output.endswith(".tflite"):
        raise UsageError("-o is a .litertlm bundle (model, tokenizer, metadata) or a .tflite (the model alone)")
    try:
        lengths = [int(n) for n in args.prefill.split(",")]
    except ValueError:
        raise UsageError(f"--prefill is a comma-separated list of token counts, got {args.prefill!r}") from None
    if any(n < 1 for n in lengths) or args.cache_length < 1:
        raise UsageError("--prefill lengths and --cache-length are positive numbers of tokens")
    if args.block_size is not None and args.block_size < 1:
        raise UsageError("--block-size is a positive number of weights")
    if args.tokenizer and not bundle:
        raise UsageError("--tokenizer is for a .litertlm bundle (a .tflite holds the model alone)")
    from fuselite.paths import output_problem

    problem = output_problem(args.output, [args.src])
    if problem:
        raise InputError(problem)
    tokenizer_of_file = None
    if args.tokenizer:
        from fuselite.generative import tokenizer_file

        tokenizer_of_file = tokenizer_file(args.tokenizer)  # read and checked before the model is converted
    from fuselite.converter import Converter, write_atomic
    from fuselite.load import load_causal_lm

    with native_logs_hidden(args.verbose), _no_bytecode_written():
        lm = load_causal_lm(args.src)
        tokenizer = tokenizer_of_file or getattr(getattr(lm, "preprocessor", None), "tokenizer", None)
        if bundle and tokenizer is None:
            raise InputError(f"{args.src} has no preprocessor with a tokenizer: pass --tokenizer FILE (a "
                             "SentencePiece model or a tokenizer.json)")
        conv = Converter.from_causal_lm(lm, prefill_lengths=lengths, cache_length=args.cache_length,
                                        block_size=args.block_size)
        args.quantize, args.calibration_data = WEIGHTS[args.weights], None
        apply_quantization(conv, args)
        progress = progress_line(args)
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
        say(args, str(conv.report) if args.verbose else conv.report.summary())
        say(args, f"wrote {args.output} ({written['bytes']:,} bytes) in {time.perf_counter() - t0:.2f} s")
    return 0


@contextlib.contextmanager
def _no_bytecode_written():
    """No ``.pyc`` written while the decoder is traced: AutoGraph's generated modules live in the temporary
    directory, and their ``__pycache__`` would be left there."""
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = previous


def cmd_generate(args) -> int:
    """Greedy text from a .litertlm bundle through LiteRT-LM's own runtime (in a child process, the bundle's
    structure checked first). ``--threads`` is at most the machine's CPUs. LiteRT-LM's cache of packed weights
    goes to ``$XDG_CACHE_HOME/fuselite/litert-lm/`` (``~/.cache/fuselite/litert-lm/``, folders 0700), never
    beside the bundle."""
    from fuselite.generative.run import generate, max_threads

    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens is a positive number of tokens, got {args.max_new_tokens}")
    if args.threads > max_threads():
        raise UsageError(f"--threads is at most {max_threads()} (the CPUs of this machine), got {args.threads}")
    with sigterm_as_exit(), native_logs_hidden(args.verbose):
        text, stats = generate(args.bundle, args.prompt, args.max_new_tokens, args.threads)
    if args.json:
        import json

        print(json.dumps({"text": text, **stats}, indent=2))
        return 0
    print(text)
    say(args, f"prefill {stats['prefill_tokens']} tokens at {stats['prefill_tokens_per_s']:,.0f} tokens/s, "
               f"decode {stats['decode_tokens']} tokens at {stats['decode_tokens_per_s']:,.1f} tokens/s "
               f"({args.threads} thread(s), LiteRT-LM's CPU backend)")
    return 0
