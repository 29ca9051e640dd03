"""Errors raised by fuselite. Every problem names the op, the node and the user's line."""

from __future__ import annotations


class ConversionError(Exception):
    """A program could not be converted. ``problems`` lists every issue found in one pass."""

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(problems or [])
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


class UnsupportedOpsError(ConversionError):
    """One or more TensorFlow ops have no lowering rule."""


class InputError(ConversionError):
    """The source program (path, signature key, dtype...) is unusable."""


class MutableVariableError(ConversionError):
    """A mutable (assigned) variable is used in a way LiteRT resource variables cannot express.

    Reads, ``assign``, ``assign_add`` and ``assign_sub`` convert (see docs/variables.md);
    scatters, optimizer updates and other resource ops on an assigned variable do not.
    """


class NeedsStaticLength(ConversionError):
    """A layer's form needs a static number of time steps (it is written step by step: TFLite Micro, an
    integer-only model), and its input's length is unknown. Fixing the batch cannot help; the message says how
    to give the length (a static ``keras.Input`` shape, or the ``input_shapes`` option)."""


class NeedsStaticBatch(ConversionError):
    """Part of the model (a tensor list, a fused RNN's state) needs a static batch size.

    The converter retries with ``batch`` (a batch size the model itself implies, such as
    the one of a stateful RNN's state variables) or else 1, unless the user chose one.
    """

    def __init__(self, message: str, batch: int | None = None):
        super().__init__(message)
        self.batch = batch
