"""Loading what the command line names (a Keras model file or a SavedModel) into a ``Converter``, for
``fuselite convert`` and ``fuselite compare`` (``cli.py``, ``compare.py``).

Example::

    conv = load_source("model.keras", args)  # args: the CLI's parsed options
"""

from __future__ import annotations

import os
import sys
import zipfile


def load_source(src: str, args):
    """A Converter for ``src`` (a .keras / .h5 file or a SavedModel directory) with the options in ``args`` (the
    CLI's namespace: ``signature_keys``, ``tags``, ``batch_size`` and :func:`converter_options`'). A missing or
    unreadable path is an :class:`~fuselite.InputError` before TensorFlow is imported (a second, not ten)."""
    from fuselite.errors import InputError

    keras_file = src.endswith((".keras", ".h5"))
    if keras_file:
        if not os.path.exists(src):
            raise InputError(f"Keras model file not found: '{src}'")
        if args.signature_keys:
            raise InputError("--signature-keys is for SavedModels; a .keras file has one signature")
        if src.endswith(".keras"):
            check_keras_file(src)
    elif not os.path.exists(src):
        raise InputError(f"SavedModel not found: '{src}' does not exist")

    import fuselite
    from fuselite.requirements import require_tensorflow

    require_tensorflow()  # before Keras, which needs it as its backend here
    if keras_file:
        import keras

        try:
            model = keras.models.load_model(src, compile=False)
        except Exception as e:
            raise keras_load_error(src, e) from None
        return fuselite.Converter.from_keras_model(model, batch_size=args.batch_size, **converter_options(args))
    keys = args.signature_keys.split(",") if args.signature_keys else None
    tags = set(args.tags.split(",")) if args.tags else None
    return fuselite.Converter.from_saved_model(src, signature_keys=keys, tags=tags, batch_size=args.batch_size,
                                               **converter_options(args))


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


def converter_options(args) -> dict:
    """The Converter options of a CLI namespace."""
    return {"strict_fusion": args.strict_fusion, "verify_ir": args.verify_ir or None,
            "print_after": args.print_after or (), "target": args.target, "micro_sources": args.micro_sources,
            "bidirectional": args.bidirectional, "rnn_form": args.rnn_form,
            "threads": args.threads, "accelerator_config": args.accelerator_config,
            "vela_output": args.vela_output, "fusions": rule_modules(args.rules or []),
            "input_shapes": _input_shapes(getattr(args, "input_shape", None) or [])}


def _input_shapes(pairs: list) -> dict | None:
    """``--input-shape`` (repeatable) as the ``input_shapes`` option; an input named twice is an InputError."""
    from fuselite.errors import InputError

    twice = sorted({name for name, _ in pairs if [n for n, _ in pairs].count(name) > 1})
    if twice:
        raise InputError(f"--input-shape gives input {', '.join(map(repr, twice))} more than once")
    return dict(pairs) or None


def rule_modules(modules: list[str]) -> list:
    """``--rules MODULE``: the fusion rules (``@fuselite.fusion`` functions) a module defines, imported by its
    dotted path from the current directory or the installed packages."""
    import importlib

    from fuselite.errors import InputError

    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    rules = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as e:
            raise InputError(f"cannot import fusion rules module '{name}': {type(e).__name__}: {e}") from None
        found = [v for v in vars(module).values() if callable(v) and isinstance(getattr(v, "interface", None), str)]
        if not found:
            raise InputError(f"module '{name}' defines no fusion rules (functions decorated with @fuselite.fusion)")
        rules += found
    return rules
