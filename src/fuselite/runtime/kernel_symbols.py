"""The name of the registration function a compiled kernel exports for a custom code.

A shared library with a kernel for custom code ``"my_custom_fused_op"`` (or ``"MyCustomFusedOp"``)
exports ``TfLiteRegistration* Register_MY_CUSTOM_FUSED_OP(void)``; :func:`registration_symbols`
lists the names looked up, most conventional first.
"""

from __future__ import annotations

import re


def c_identifier(name: str) -> str:
    """``name`` as an upper-case C identifier: ``"MyCustomFusedOp"`` -> ``"MY_CUSTOM_FUSED_OP"``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[^0-9A-Za-z]+", "_", snake).strip("_").upper()


def registration_symbols(custom_code: str) -> list[str]:
    """Registration function names tried for ``custom_code``, most conventional first.

    ``"my_custom_fused_op"`` and ``"MyCustomFusedOp"`` -> ``["Register_MY_CUSTOM_FUSED_OP", ...]``.
    """
    out = ["Register_" + c_identifier(custom_code), "Register_" + re.sub(r"[^0-9A-Za-z]+", "_", custom_code).upper()]
    out.append("Register_" + re.sub(r"[^0-9A-Za-z]+", "_", custom_code))
    return list(dict.fromkeys(out))
