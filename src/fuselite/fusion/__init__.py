"""Composite-operation fusion: registry, the prepare-composites stage, built-in rules."""

from fuselite.fusion import detection, embedding, perception  # noqa: F401  (register the built-in rules)
from fuselite.fusion.composite import Arg, Composite, FusionDeclined, Result
from fuselite.fusion.implements import implements
from fuselite.fusion.prepare import FusionError, is_composite, prepare_composites
from fuselite.fusion.registry import RuleSet, fusion, unregister

__all__ = ["Arg", "Composite", "FusionDeclined", "FusionError", "Result", "RuleSet", "fusion", "implements",
           "is_composite", "prepare_composites", "unregister"]
