"""Reading an ``.npz`` the user names (``fuselite verify / bench --inputs``, ``fuselite convert
--calibration-data``): an untrusted file, so every array's header is read from the zip before the array is,
and checked against what the file holds and :data:`MAX_NPZ_BYTES`; pickled (object) arrays are refused, as
``np.load(..., allow_pickle=False)`` does. Whatever is wrong is one :class:`~fuselite.InputError` line.

Example::

    arrays = read_npz("inputs.npz", "inputs")   # {"x": array(...)}, or InputError("cannot read inputs ...")
"""

from __future__ import annotations

import math
import os
import stat
import zipfile

import numpy as np

from fuselite.errors import InputError

MAX_NPZ_BYTES = 8 << 30  # the most an .npz's arrays may take in memory together (8 GiB)
_NPY_MAGIC = b"\x93NUMPY"


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def _header(fp) -> tuple[tuple, np.dtype]:
    """(shape, dtype) from an .npy header, the array itself not read."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
    else:  # 3.0 (utf-8 field names): numpy's own reader, which has no public name
        from numpy.lib import _format_impl

        shape, _, dtype = _format_impl._read_array_header(fp, version)
    return tuple(int(n) for n in shape), np.dtype(dtype)


def read_npz(path: str, what: str = "inputs", max_bytes: int = MAX_NPZ_BYTES) -> dict[str, np.ndarray]:
    """{name: array} of the ``.npz`` at ``path`` (``what`` it is, for the message: "inputs", "calibration data"),
    or an :class:`~fuselite.InputError` ``cannot read {what} '{path}': ...`` before anything large is read: a
    file that is not an .npz, an array that is pickled, one whose header claims more data than the file holds,
    arrays larger than ``max_bytes`` together."""

    def refuse(reason: str) -> InputError:
        return InputError(f"cannot read {what} '{path}': {reason}")

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise refuse(e.strerror or str(e)) from None
    if not stat.S_ISREG(mode):  # a directory, a FIFO (which would block), a device
        raise refuse("not a regular file (an .npz written by numpy.savez)")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        try:
            with open(path, "rb") as f:
                head = f.read(len(_NPY_MAGIC))
        except OSError:
            head = b""
        if head == _NPY_MAGIC:
            raise refuse("it is a single .npy array; give an .npz (numpy.savez(path, name=array))") from None
        raise refuse(f"not an .npz (a zip of .npy arrays, as numpy.savez writes): {e}") from None
    arrays: dict[str, np.ndarray] = {}
    with archive:
        total = 0
        members = []
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            try:
                with archive.open(info) as fp:
                    if fp.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                        raise refuse(f"'{info.filename}' is not a NumPy array (.npy)")
                with archive.open(info) as fp:
                    shape, dtype = _header(fp)
                    start = fp.tell()
            except InputError:
                raise
            except Exception as e:  # a damaged member or header: zlib.error, BadZipFile, ValueError ...
                said = " ".join(str(e).split())
                raise refuse(f"array '{name}' cannot be read ({type(e).__name__}: {said})") from None
            if dtype.hasobject:
                raise refuse(f"array '{name}' holds Python objects (dtype {dtype.str}), which only a pickle can "
                             "load; fuselite does not unpickle files (save numbers or strings)")
            nbytes = math.prod(shape) * dtype.itemsize
            held = info.file_size - start
            if nbytes > held:
                raise refuse(f"array '{name}': its header claims shape {list(shape)} {dtype.name} "
                             f"({_size(nbytes)}), the file holds {_size(max(held, 0))} of it (damaged or forged)")
            total += nbytes
            if total > max_bytes:
                raise refuse(f"its arrays take more than {_size(max_bytes)} in memory (array '{name}': shape "
                             f"{list(shape)} {dtype.name}, {_size(nbytes)}; the most fuselite reads is "
                             f"fuselite.npz.MAX_NPZ_BYTES)")
            members.append((name, info))
        for name, info in members:
            try:
                with archive.open(info) as fp:
                    arrays[name] = np.lib.format.read_array(fp, allow_pickle=False)
            except Exception as e:
                said = " ".join(str(e).split())
                raise refuse(f"array '{name}' cannot be read ({type(e).__name__}: {said})") from None
    if not arrays:
        raise refuse("it holds no arrays")
    return arrays
