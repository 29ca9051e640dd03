"""Checks of a ``.keras`` file before and after Keras reads it: the errors a damaged or foreign file gives
(``fuselite convert`` / ``compare`` through ``load.py``, ``fuselite verify``)."""

from __future__ import annotations

import os
import stat
import zipfile

_ZIP_MAGIC = b"PK\x03\x04"  # a zip archive's first local file header

# A .keras file's members inflated: Keras writes them stored (1:1), and DEFLATE cannot pass ~1032:1. An archive
# whose members together declare more than MAX_KERAS_EXPANSION times the file's size (beyond a floor, for tiny
# files), or more than MAX_KERAS_BYTES, is refused before Keras opens it: a zip bomb (overlapping members, a forged
# size) would otherwise fill memory. Raise either (fuselite.keras_files.MAX_KERAS_BYTES = ...) for a larger model.
MAX_KERAS_EXPANSION = 100
KERAS_EXPANSION_FLOOR = 64 << 20  # 64 MiB: below it, any ratio (a small model's compressed config)
MAX_KERAS_BYTES = 64 << 30  # 64 GiB


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def check_regular_file(src: str) -> None:
    """An :class:`~fuselite.InputError` where the model file ``src`` is not a regular file (a FIFO or a device,
    which Keras and h5py would block on or read without end)."""
    from fuselite.errors import InputError

    try:
        mode = os.stat(src).st_mode
    except OSError:
        return  # missing or unreadable: the caller's own checks say so
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise InputError(f"'{src}' is not a regular file (a FIFO or a device): give the model file itself")


def check_inflated_size(src: str, archive: zipfile.ZipFile) -> None:
    """An :class:`~fuselite.InputError` naming the largest member and the sizes where the members of ``archive``
    (the ``.keras`` file ``src``) declare more than the limits above allow, read from its central directory."""
    from fuselite.errors import InputError

    infos = archive.infolist()
    if not infos:
        return
    total = sum(i.file_size for i in infos)
    on_disk = os.path.getsize(src)
    largest = max(infos, key=lambda i: i.file_size)
    said = (f"its members inflate to {_size(total)} ('{largest.filename}': {_size(largest.file_size)}, stored in "
            f"{_size(largest.compress_size)}) from a file of {_size(on_disk)}")
    if total > MAX_KERAS_BYTES:
        raise InputError(f"'{src}' is refused: {said}, more than the {_size(MAX_KERAS_BYTES)} fuselite reads "
                         "(fuselite.keras_files.MAX_KERAS_BYTES)")
    if total > KERAS_EXPANSION_FLOOR and total > MAX_KERAS_EXPANSION * on_disk:
        raise InputError(f"'{src}' is refused as a zip bomb: {said}, more than {MAX_KERAS_EXPANSION}x (Keras "
                         "stores its members uncompressed)")


def check_keras_file(src: str) -> None:
    """An :class:`~fuselite.InputError` unless ``src`` (a ``.keras`` file) is a readable zip archive, as
    ``model.save('name.keras')`` writes: one that starts as a zip but cannot be read as one is damaged or
    truncated (an interrupted download or copy); one that does not is not a Keras model file; one whose members
    inflate far beyond its size is a zip bomb (:func:`check_inflated_size`), refused before Keras opens it."""
    from fuselite.errors import InputError

    check_regular_file(src)
    try:
        with zipfile.ZipFile(src) as archive:
            archive.namelist()
            check_inflated_size(src, archive)
        return
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        pass
    try:
        with open(src, "rb") as f:
            head = f.read(len(_ZIP_MAGIC))
    except OSError:  # a directory, no permission
        head = b""
    if head == _ZIP_MAGIC:
        raise InputError(f"'{src}' is damaged or truncated: it starts as a zip archive (as a .keras file does) but "
                         "cannot be read as one; copy or save it again")
    raise InputError(f"'{src}' is not a Keras model file: a .keras file is a zip archive "
                     "(saved with model.save('name.keras'))")


def keras_load_error(src: str, e: Exception):
    """The :class:`~fuselite.InputError` for ``keras.models.load_model(src)`` failing with ``e``: a member of
    the archive that cannot be decompressed says the file is damaged."""
    import zlib

    from fuselite.errors import InputError

    if isinstance(e, (zipfile.BadZipFile, zlib.error, EOFError)):
        return InputError(f"'{src}' is damaged or truncated: {type(e).__name__}: {e}; copy or save it again")
    return InputError(f"cannot load Keras model '{src}': {str(e).splitlines()[0] if str(e) else e}")
