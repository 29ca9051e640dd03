"""Conversion options: what one is (:class:`Option`), the registry, and what follows from it.

An :class:`Option` says an option's name, default, check and help text, and how the command line
spells it. From the declarations follow: the ``Converter``'s attributes and the keywords of its
``from_*`` constructors (an unknown one is an :class:`~fuselite.converter.UnknownOptionError`), the
checks before a conversion (:func:`settled`), the conversion context's values (``ctx.<name>``),
``fuselite convert``'s flags (:func:`add_flags`) and ``load.converter_options``. A check gives the
same message whether the value came from the API or from a flag.

Example (a new option: one module in this package; ``docs/architecture.md``, "an option")::

    from fuselite.options.base import Option, boolean, register

    register(Option("fold_twice", False, "fold constants twice", check=boolean("fold_twice"),
                    flag="--fold-twice", cli={"action": "store_true"}))
    # then: Converter.from_keras_model(model, fold_twice=True), conv.fold_twice,
    # fuselite convert ... --fold-twice, and ctx.fold_twice in a pass
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuselite.errors import InputError


@dataclass(frozen=True)
class Option:
    """One conversion option (see the module docstring)."""

    name: str  # the Converter attribute, the from_* keyword and the context's name for it
    default: Any  # a callable (a class, a lambda) is a factory: a fresh value per converter
    help: str | Callable[[], str]  # what it is for (the command line's help; a callable: read when asked)
    check: Callable[[Any], Any] | None = None  # value -> the value the conversion takes; InputError if bad
    flag: str | None = None  # the command line's flag ("--rnn-form"); None: set from Python only
    cli: dict = field(default_factory=dict)  # argparse keywords (choices, metavar, action, nargs)
    parse: Callable[[str], Any] | None = None  # a flag's text -> the value the check takes (default: the text)
    from_cli: Callable[[Any], Any] | None = None  # the parsed flag (a list for "append") -> the option's value
    keyword: str | None = None  # the from_* keyword where it differs from the name (rules: fusions)
    eager: bool = False  # checked as soon as it is given to a constructor, not only at convert()

    def initial(self) -> Any:
        """The option's value on a new converter."""
        return self.default() if callable(self.default) else self.default

    def checked(self, value: Any) -> Any:
        """``value`` as the conversion takes it, or the option's :class:`InputError`."""
        return value if self.check is None else self.check(value)


OPTIONS: dict[str, Option] = {}


def register(option: Option) -> Option:
    """Add ``option`` to the declarations (a second one of the same name is an error)."""
    if not option.name.isidentifier() or option.name in OPTIONS:
        raise ValueError(f"an option needs a name of its own; {option.name!r} is not an identifier or is taken")
    OPTIONS[option.name] = option
    return option


def unknown_option(name: str) -> str:
    """What the API (a keyword or an attribute) and the command line (a flag) say of an option fuselite lacks."""
    return f"fuselite.Converter has no option '{name}'; its options: {', '.join(OPTIONS)}"


def keywords() -> dict[str, Option]:
    """{constructor keyword: option}: each option's name, and its other keyword where it has one (fusions)."""
    return {**{o.name: o for o in OPTIONS.values()}, **{o.keyword: o for o in OPTIONS.values() if o.keyword}}


def settled(conv: Any) -> dict[str, Any]:
    """Every option of ``conv`` checked, as the conversion takes it (a dict by option name)."""
    return {name: option.checked(getattr(conv, name)) for name, option in OPTIONS.items()}


# -- checks -----------------------------------------------------------------------------------------
def boolean(name: str) -> Callable[[Any], bool]:
    def check(value):
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise InputError(f"{name} is True or False, got {value!r}")
        return bool(value)
    return check


def one_of(name: str, choices: Callable[[], Any]) -> Callable[[Any], Any]:
    """A check that the value is one of ``choices()`` (read when checking: registries grow)."""
    def check(value):
        names = list(choices())
        if value not in names:
            raise InputError(f"{name} must be one of {', '.join(map(repr, names))}, got {value!r}")
        return value
    return check


# -- the command line ------------------------------------------------------------------------------
def flag_type(option: Option) -> Callable[[str], Any]:
    """argparse's ``type`` for ``option``'s flag: the text parsed and checked, the check's message a usage
    error (the same message as from the API). An ``append`` flag's list is checked whole, by the option."""
    def convert(text: str):
        try:
            value = option.parse(text) if option.parse else text
            if option.cli.get("action") != "append" and not option.from_cli:
                value = option.checked(value)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    convert.__name__ = option.name  # argparse names the type in some messages
    return convert


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every option with a flag, on ``parser`` (dest: the option's name; not given: None)."""
    for option in OPTIONS.values():
        if option.flag is None:
            continue
        cli = {k: (v() if callable(v) else v) for k, v in option.cli.items()}
        if "choices" in cli and option.check is not None:  # the option's check says what it takes
            cli.setdefault("metavar", "{" + ",".join(cli.pop("choices")) + "}")
        elif "choices" in cli:
            cli["choices"] = list(cli["choices"])
        if cli.get("action") not in ("store_true", "store_false"):
            cli["type"] = flag_type(option)
        help_text = option.help() if callable(option.help) else option.help
        parser.add_argument(option.flag, dest=option.name, default=None, help=help_text, **cli)


def from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The options a command line gave (its flags), as ``from_*`` keywords: {keyword: value}."""
    out = {}
    for option in OPTIONS.values():
        value = getattr(args, option.name, None) if option.flag else None
        if value is not None:
            out[option.keyword or option.name] = option.from_cli(value) if option.from_cli else value
    return out
