"""Loading what the command line names (a Keras model file or a SavedModel) into a ``Converter``, for
``fuselite convert`` and ``fuselite compare`` (``cli/``, ``compare.py``).

Example::

    conv = load_source("model.keras", args)  # args: the CLI's parsed options
"""

from __future__ import annotations

import os

from fuselite.keras_files import check_keras_file, check_regular_file, keras_load_error


def load_source(src: str, args):
    """A Converter for ``src`` (a .keras / .h5 file or a SavedModel directory) with the options in ``args`` (the
    CLI's namespace: ``signature_keys``, ``tags`` and the converter's options, :func:`converter_options`). A missing or
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
        else:  # .h5: h5py would block on a FIFO
            check_regular_file(src)
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
        return Converter.from_keras_model(model, **converter_options(args))
    keys = args.signature_keys.split(",") if args.signature_keys else None
    tags = set(args.tags.split(",")) if args.tags else None
    return Converter.from_saved_model(src, signature_keys=keys, tags=tags, **converter_options(args))




def load_causal_lm(src: str):
    """A keras-hub CausalLM from a ``.keras`` file (keras-hub imported first: its classes are registered then); an
    :class:`~fuselite.InputError` where the file is missing, unreadable or holds another kind of model."""
    from fuselite.errors import InputError

    if not src.endswith(".keras"):
        raise InputError(f"convert-lm reads a .keras file of a keras-hub CausalLM, got '{src}'")
    if not os.path.exists(src):
        raise InputError(f"Keras model file not found: '{src}'")
    check_keras_file(src)
    from fuselite.requirements import require_tensorflow

    require_tensorflow()
    try:
        import keras_hub  # noqa: F401  (registers keras-hub's classes with Keras)
    except ImportError:
        raise InputError("convert-lm needs keras-hub to load a CausalLM: pip install keras-hub") from None
    import keras

    try:
        model = keras.models.load_model(src, compile=False)
    except Exception as e:
        raise keras_load_error(src, e) from None
    if not hasattr(model, "call_with_cache") or not hasattr(model, "backbone"):
        raise InputError(f"'{src}' holds a {type(model).__name__}, not a keras-hub CausalLM (a model with a backbone "
                         "and call_with_cache): convert it with 'fuselite convert'")
    return model


def converter_options(args) -> dict:
    """The Converter options a CLI namespace gives, as ``from_*`` keywords (``options.from_flags``: each option's
    flag as ``fuselite/options.py`` declares it)."""
    from fuselite.options import from_flags

    return from_flags(args)
