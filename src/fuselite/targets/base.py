"""What a conversion target decides, and the registry the converter, the CLI and the pipeline read.

A target is one object (:class:`Target`) in one module of this package, registered by name: the
pipeline groups it selects (``pipeline.py`` declares the groups; ``selects`` says which run), the
options it refuses or forces before anything is traced, and whether the model runs on TFLite Micro.
Its own pass bodies (a check before writing, a run after export) sit in its module beside it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fuselite.errors import InputError


class Target:
    """A conversion target. Subclass it, set ``name`` and ``help``, and :func:`register` an instance."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""  # one line for ``fuselite convert --target``'s help
    what: ClassVar[str] = ""  # a few words for messages: what the target's own options are for
    runs_on_micro: ClassVar[bool] = False  # the model runs on TFLite Micro (its forms, kernels and limits)
    groups: ClassVar[frozenset[str]] = frozenset()  # the pipeline groups this target selects
    options: ClassVar[tuple[str, ...]] = ()  # Converter options that are this target's alone
    cli_quantize: ClassVar[str | None] = None  # ``--quantize`` when none is given (a full-integer target's)
    cli_refused_quantize: ClassVar[tuple[str, ...]] = ()  # ``--quantize`` modes the target cannot take
    # an accelerator that runs static shapes and no WHILE (every recurrent layer unrolled, a fixed batch): the words
    # for it in the report, "" for none
    unrolls_for: ClassVar[str] = ""
    int16_tensors: ClassVar[bool] = True  # an integer model may carry int16 tensors (16x8 steps of unrolled cells)

    def selects(self, group: str, ctx: Any) -> bool:
        """Whether the pipeline group ``group`` runs for this target in conversion ``ctx``."""
        return group in self.groups

    def check_options(self, conv: Any) -> None:
        """Refuse the converter's options this target cannot take, before anything is traced."""

    def quantization_settings(self, conv: Any, settings: tuple) -> tuple:
        """(optimizations, target_spec, representative_dataset, input type, output type) as this target takes
        them (a full-integer target forces them)."""
        return settings

    def check_mode(self, mode: str | None) -> None:
        """Refuse a quantization mode (as resolved from the options, before import) this target cannot run."""

    def accelerator(self, conv: Any) -> str | None:
        """The accelerator configuration the conversion is for (None: none)."""
        return None


TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add ``target`` to the registry under its name (a second one of the same name is an error)."""
    if not target.name or target.name in TARGETS:
        raise ValueError(f"a target needs a name of its own; {target.name!r} is empty or taken")
    TARGETS[target.name] = target
    return target


def target_named(name: str) -> Target:
    """The registered target ``name``; an :class:`~fuselite.errors.InputError` listing them otherwise."""
    if name not in TARGETS:
        raise InputError(f"target must be one of {', '.join(map(repr, TARGETS))}, got {name!r}")
    return TARGETS[name]


def refuse_other_targets_options(conv: Any, target: Target) -> None:
    """An option of another target, set for this one, is an error naming that target."""
    for other in TARGETS.values():
        given = [n for n in other.options if other is not target and n not in target.options
                 and getattr(conv, n, None) is not None]
        if given:
            takers = [t for t in TARGETS.values() if all(n in t.options for n in given)]
            named = " or ".join(f"target={t.name!r} ({t.what})" for t in takers)
            raise InputError(f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} for {named}, not "
                             f"target={target.name!r}")


def check_directory(directory, option: str = "micro_sources") -> None:
    """Before converting: ``option`` names a directory that is there or can be made (a target's output
    directory: TFLite Micro's sources, Vela's compiled model)."""
    from fuselite.paths import directory_problem

    problem = directory_problem(directory, what=option)
    if problem:
        raise InputError(problem)
