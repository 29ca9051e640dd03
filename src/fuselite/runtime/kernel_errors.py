"""What can go wrong when running custom ops: a kernel is missing, fails, or cannot be attached."""

from __future__ import annotations

from collections.abc import Sequence

from fuselite.errors import ConversionError
from fuselite.runtime.kernel_symbols import c_identifier, registration_symbols

_DOC = "docs/custom-ops.md"


class MissingKernelError(ConversionError, RuntimeError):
    """The model has CUSTOM ops for which no kernel was provided.

    ``custom_ops`` lists the custom codes (sorted, unique). ``hints``: code -> why fuselite could not register
    its kernel itself (``runtime.text_kernels.why_not``). Also a ``RuntimeError``, so code that
    caught LiteRT's raw "unresolved custom op" error keeps working.
    """

    def __init__(self, custom_ops: Sequence[str], nodes: Sequence[str] = (), hints: dict[str, str] | None = None):
        self.custom_ops = sorted(set(custom_ops))
        names = ", ".join(repr(n) for n in self.custom_ops)
        first = self.custom_ops[0] if self.custom_ops else "my_op"
        symbol = registration_symbols(first)[0]
        flex = any(n.startswith("Flex") for n in self.custom_ops)
        message = (
            f"the model has {len(self.custom_ops)} custom op(s) with no kernel: {names}. "
            "The LiteRT interpreter can only run a CUSTOM op whose custom code has a registered kernel. "
            "Provide one per custom code:\n"
            f"  * a Python/NumPy kernel: fuselite.runtime.custom_ops.interpreter(model, kernels={{{first!r}: fn}}) "
            "where fn(inputs, options) returns the output array(s);\n"
            f"  * a compiled kernel: a shared library exporting `TfLiteRegistration* {symbol}(void)`, passed as "
            f"kernels={{{first!r}: NativeKernel('lib{c_identifier(first).lower()}.so')}}.\n"
            f"See {_DOC}."
        )
        if flex:
            message += " ('Flex*' ops are TensorFlow ops that need the Flex delegate, not a custom kernel.)"
        text = {code: why for code, why in (hints or {}).items() if code in self.custom_ops}
        if text:  # kernels fuselite registers itself where it can (tensorflow-text's): why it could not
            message = (f"the model has {len(text)} tensorflow-text op(s) with no kernel here: "
                       f"{', '.join(map(repr, text))}: {next(iter(text.values()))}"
                       + ("" if len(text) == len(self.custom_ops) else f". And: {message}"))
        super().__init__(message, list(nodes))


class KernelError(RuntimeError):
    """A custom-op kernel failed, or cannot be bound (bad shared library, bad result...)."""


class BridgeUnavailableError(RuntimeError):
    """The installed ai-edge-litert does not match the TFLite C ABI declared in ``fuselite.runtime.abi``."""
