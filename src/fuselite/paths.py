"""The paths a conversion writes, checked before any work: a file the user named (never one of the inputs or inside
one, a device, a FIFO or a directory), in a folder that is there and writable; several outputs of one run are
distinct. ``write_atomic`` (converter.py) writes each through a temporary file and a rename, keeping an existing
file's mode.

Example::

    problem = output_problem("model.tflite", inputs=["saved_model_dir"])   # None, or why not, in one line
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable

from fuselite.errors import ConversionError, InputError


def _inside(path: str, parent: str) -> bool:
    try:
        return os.path.commonpath([path, parent]) == parent
    except ValueError:  # different drives
        return False


def output_problem(path, inputs: Iterable = (), what: str = "the output") -> str | None:
    """Why ``path`` may not be written as ``what`` (None where it may): empty, a folder (or a name ending in a
    separator), an existing device, FIFO or socket, in a folder that is missing or not writable, or one of
    ``inputs`` (files or folders: a SavedModel directory) or inside one."""
    text = os.fspath(path) if path is not None else ""
    if not text:
        return f"{what} is an empty path: give a file name, e.g. model.tflite"
    if os.path.isdir(text):
        return f"cannot write '{text}': it is a directory (give a file name, e.g. model.tflite)"
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        return f"cannot write '{text}': it names a folder (it ends with '{text[-1]}'); give a file name, e.g. model.tflite"
    try:
        st = os.stat(text)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"cannot write '{text}': {e.strerror or e}"
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else
                "not a regular file")
        return f"cannot write '{text}': it is {kind}; fuselite writes regular files only (a new one, or one it replaces)"
    real = os.path.realpath(text)
    for source in inputs:
        if source is None:
            continue
        src = os.path.realpath(os.fspath(source))
        if real == src or (os.path.isdir(src) and _inside(real, src)):
            where = "the input model" if real == src else f"inside the input '{os.fspath(source)}'"
            return f"{what} '{text}' is {where}: choose a path outside it (converting never overwrites its input)"
    directory = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(directory):
        return f"cannot write '{text}': directory '{directory}' does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"cannot write '{text}': no permission to write in '{directory}'"
    return None


def directory_problem(path, inputs: Iterable = (), what: str = "the folder") -> str | None:
    """Why ``path`` may not be used as a folder the run writes into (None where it may): a file, or inside an
    input; a missing folder is made (its parent must be writable)."""
    text = os.fspath(path) if path is not None else ""
    if not text:
        return f"{what} is an empty path"
    if os.path.exists(text) and not os.path.isdir(text):
        return f"{what}: '{os.path.abspath(text)}' is a file, not a directory"
    real = os.path.realpath(text)
    for source in inputs:
        if source is not None and os.path.isdir(os.fspath(source)) and _inside(real, os.path.realpath(os.fspath(source))):
            return f"{what} '{text}' is inside the input '{os.fspath(source)}': choose a path outside it"
    existing = os.path.abspath(text)  # the nearest folder that is there: the missing ones are made in it
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(text) and not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write into '{text}': no permission to write in '{existing}'"
    return None


def distinct_outputs(paths: dict[str, object]) -> str | None:
    """Two outputs of one run that are the same file (``-o`` and ``--report``), said by their names; None if
    none are."""
    seen: dict[str, str] = {}
    for name, path in paths.items():
        if path is None:
            continue
        real = os.path.realpath(os.fspath(path))
        if real in seen:
            return f"{seen[real]} and {name} are the same file '{os.fspath(path)}': give each its own path"
        seen[real] = name
    return None


def write_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename: never half a file, never
    into a device, FIFO or folder (``paths.output_problem``); a new file follows the umask, an existing one keeps
    its mode."""
    path = os.fspath(path) if path is not None else ""
    problem = output_problem(path)
    if problem:
        raise InputError(problem)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # (a regular file: output_problem said so)
    except FileNotFoundError:
        mode = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fuselite-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise ConversionError(f"cannot write '{path}': {e.strerror or e} in '{directory}'") from None
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # like a normally created file, not mkstemp's 0600
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
