"""Checks of a ``.keras`` file before and after Keras reads it: the errors a damaged or foreign file gives
(``fuselite convert`` / ``compare`` through ``load.py``, ``fuselite verify``)."""

from __future__ import annotations

import zipfile

_ZIP_MAGIC = b"PK\x03\x04"  # a zip archive's first local file header


def check_keras_file(src: str) -> None:
    """An :class:`~fuselite.InputError` unless ``src`` (a ``.keras`` file) is a readable zip archive, as
    ``model.save('name.keras')`` writes: one that starts as a zip but cannot be read as one is damaged or
    truncated (an interrupted download or copy); one that does not is not a Keras model file."""
    from fuselite.errors import InputError

    try:
        with zipfile.ZipFile(src) as archive:
            archive.namelist()
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
