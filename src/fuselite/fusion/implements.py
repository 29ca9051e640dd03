"""``fuselite.implements(name, **attrs)``: build an ``experimental_implements`` string.

    @tf.function(experimental_implements=fuselite.implements(
        "my_custom_fused_op", tfl_fusable_op=True, example_option=10, scales=[0.5, 2.0]))
    def f(x): ...
"""

from __future__ import annotations

import numbers


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _scalar(key: str, v) -> tuple[str, str]:
    if isinstance(v, bool):
        return "b", "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return "i", str(int(v))
    if isinstance(v, numbers.Real):
        return "f", repr(float(v))
    if isinstance(v, str):
        return "s", _quote(v)
    raise TypeError(f"implements(): attribute '{key}' has unsupported type {type(v).__name__} "
                    "(use int, float, bool, str or a list of one of them)")


def _value(key: str, v) -> str:
    if isinstance(v, (list, tuple)):
        if not v:
            return "list { }"
        kinds = {_scalar(key, x)[0] for x in v}
        if len(kinds) != 1:
            if kinds == {"i", "f"}:
                v, kinds = [float(x) for x in v], {"f"}
            else:
                raise TypeError(f"implements(): list attribute '{key}' mixes types")
        kind = kinds.pop()
        return "list { " + " ".join(f"{kind}: {_scalar(key, x)[1]}" for x in v) + " }"
    kind, text = _scalar(key, v)
    return f"{kind}: {text}"


def implements(name: str, **attrs) -> str:
    """The ``experimental_implements`` text for interface ``name`` with attributes ``attrs``."""
    if not isinstance(name, str) or not name:
        raise ValueError("implements(): name must be a non-empty string")
    if not attrs:
        return name
    parts = [f"name: {_quote(name)}"]
    for key in attrs:
        if not key.isidentifier():
            raise ValueError(f"implements(): attribute name {key!r} is not an identifier")
        parts.append(f"attr {{ key: {_quote(key)} value {{ {_value(key, attrs[key])} }} }}")
    return " ".join(parts)
