"""The fusion registry: Python rules keyed by composite interface name.

A rule is a plain function that receives a :class:`~fuselite.fusion.composite.Composite`
and returns the values that replace the composite's results (or declines)::

    @fuselite.fusion("my.interface")
    def fuse_mine(c):
        x, w = c.args
        if w.const is None:
            c.decline("the weights must be constant")
        return c.op("FULLY_CONNECTED", [x, w.const.T, None], like=c.results[0])

Rules come from three places, looked up in this order: the ``fusions=[...]`` given to
one conversion, rules registered globally with ``@fuselite.fusion``, and rules shipped
by installed packages under the ``fuselite.fusions`` entry-point group. Interface
names may be glob patterns (``"lstm_*"``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

FusionRule = Callable[[Any], Any]
_GLOBAL: dict[str, FusionRule] = {}
_ENTRY_POINTS_LOADED = False
ENTRY_POINT_GROUP = "fuselite.fusions"


def fusion(interface: str, *, register: bool = True):
    """Declare the decorated function as the fusion rule for composites named ``interface``.

    With ``register=False`` the rule is not global; pass it to one conversion with
    ``Converter.from_...(..., fusions=[rule])``.
    """

    def decorate(rule: FusionRule) -> FusionRule:
        rule.interface = interface
        if register:
            _GLOBAL[interface] = rule
        return rule

    return decorate


def unregister(interface: str) -> None:
    """Remove a globally registered rule (mostly for tests)."""
    _GLOBAL.pop(interface, None)


def _load_entry_points() -> list[str]:
    """Import rules shipped by installed packages; returns load errors (for the report)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return []
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points

    errors = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin must not break every conversion
            errors.append(f"fusion plugin '{ep.name}' ({ep.value}) failed to load: {e}")
            continue
        for rule in obj if isinstance(obj, (list, tuple)) else [obj]:
            if callable(rule) and hasattr(rule, "interface"):
                _GLOBAL.setdefault(rule.interface, rule)
    return errors


def _normalise(rules: Iterable | None) -> dict[str, FusionRule]:
    out: dict[str, FusionRule] = {}
    for item in rules or ():
        if isinstance(item, tuple) and len(item) == 2:
            name, rule = item
        elif callable(item) and hasattr(item, "interface"):
            name, rule = item.interface, item
        else:
            raise TypeError(f"fusions=[...] takes @fuselite.fusion rules or (interface, rule) pairs, got {item!r}")
        out[name] = rule
    return out


class RuleSet:
    """The rules one conversion uses (per-conversion first, then global and plugins)."""

    def __init__(self, per_conversion: Iterable | None = None):
        self.load_errors = _load_entry_points()
        self.local = _normalise(per_conversion)

    def lookup(self, interface: str) -> FusionRule | None:
        for table in (self.local, _GLOBAL):
            if interface in table:
                return table[interface]
        for table in (self.local, _GLOBAL):
            for pattern, rule in table.items():
                if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(interface, pattern):
                    return rule
        return None
