"""What the verbs share: usage errors, native log lines hidden, the progress line, reading a model and inputs."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager


class UsageError(Exception):
    """Options that do not go together: exit code 2, as argparse's own usage errors."""


@contextmanager
def sigterm_as_exit():
    """SIGTERM raises SystemExit(143) while the block runs: the ``finally`` blocks and temporary folders on the
    way out are cleaned up (an atomic write's temporary file, a child's folder), as on Ctrl-C."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # (signal handlers are the main thread's)
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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


MAX_MODEL_BYTES = 16 << 30  # 16 GiB: the largest .tflite files (generative models, their weights stored after the
# flatbuffer by offset) are a few GiB; a flatbuffer alone is at most 2 GiB


def read_model(path: str) -> bytes:
    """The bytes of the ``.tflite`` at ``path``: a regular file (or a link to one) of at most
    :data:`MAX_MODEL_BYTES`, read in one go at the size the file system gives it. A device, a pipe or a socket
    (``/dev/zero``, a FIFO) is refused before a byte is read; an :class:`InputError` says why."""
    import stat

    from fuselite.errors import InputError

    if not os.path.exists(path):
        raise InputError(f"model not found: '{path}'")
    if os.path.isdir(path):
        raise InputError(f"'{path}' is a directory, not a .tflite file")
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then says what was opened
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError(f"cannot read model '{path}': {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno())
        if not stat.S_ISREG(size.st_mode):
            raise InputError(f"'{path}' is not a regular file (a device, a pipe or a socket): a .tflite model is "
                             "read from a file")
        if size.st_size > MAX_MODEL_BYTES:
            raise InputError(f"'{path}' is {size.st_size:,} bytes, more than the {MAX_MODEL_BYTES >> 30} GiB "
                             "fuselite reads as a .tflite model")
        try:
            data = f.read(size.st_size + 1)
        except MemoryError:
            raise InputError(f"not enough memory to read '{path}' ({size.st_size:,} bytes)") from None
        except OSError as e:
            raise InputError(f"cannot read model '{path}': {e.strerror}") from None
    if len(data) != size.st_size:
        raise InputError(f"'{path}' changed size while it was read ({size.st_size:,} bytes, then {len(data):,}): "
                         "a file being written, or not a plain file")
    return data


def inputs(args):
    from fuselite.verify import load_inputs

    return load_inputs(args.inputs) if args.inputs else None
