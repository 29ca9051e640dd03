"""Loading what the command line names (a Keras model file or a SavedModel) into a ``Converter``, for
``fuselite convert`` and ``fuselite compare`` (``cli.py``, ``compare.py``).

Example::

    conv = load_source("model.keras", args)  # args: the CLI's parsed options
"""

from __future__ import annotations

import os
import sys

from fuselite.keras_files import check_keras_file, keras_load_error


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

    from fuselite.converter import Converter
    from fuselite.requirements import require_tensorflow

    require_tensorflow()  # before Keras, which needs it as its backend here
    if keras_file:
        import keras

        try:
            model = keras.models.load_model(src, compile=False)
        except Exception as e:
            raise keras_load_error(src, e) from None
        return Converter.from_keras_model(model, batch_size=args.batch_size, **converter_options(args))
    keys = args.signature_keys.split(",") if args.signature_keys else None
    tags = set(args.tags.split(",")) if args.tags else None
    return Converter.from_saved_model(src, signature_keys=keys, tags=tags, batch_size=args.batch_size,
                                               **converter_options(args))




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
