"""What the verbs share: usage errors, native log lines hidden, the progress line, reading a model and inputs."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager


class UsageError(Exception):
    """Options that do not go together: exit code 2, as argparse's own usage errors."""


@contextmanager
def native_logs_hidden(verbose: bool):
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


def progress_line(args):
    """A progress line when stderr is a terminal (and not -q / --json); None otherwise."""
    if args.quiet or getattr(args, "json", False) or not sys.stderr.isatty():
        return None
    return _Progress(sys.stderr)


def say(args, text: str) -> None:
    if not args.quiet:
        print(text)


def read_model(path: str) -> bytes:
    from fuselite.errors import InputError

    if not os.path.exists(path):
        raise InputError(f"model not found: '{path}'")
    if os.path.isdir(path):
        raise InputError(f"'{path}' is a directory, not a .tflite file")
    with open(path, "rb") as f:
        return f.read()


def inputs(args):
    from fuselite.verify import load_inputs

    return load_inputs(args.inputs) if args.inputs else None
