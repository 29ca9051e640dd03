"""Conversion targets, one module each (``litert``, ``micro``, ``ethos_u``), registered by name in
``base.TARGETS``: the converter, the CLI and the pipeline read the registry. Adding a target is one module
here with a :class:`~fuselite.targets.base.Target` subclass it registers (every module of this package is
imported below; docs/architecture.md, "a target")."""

import importlib
import pkgutil

from fuselite.targets import litert, micro  # noqa: F401  (registered first, in this order: the default first)
from fuselite.targets.base import TARGETS, Target, check_directory, register, target_named

for _module in pkgutil.iter_modules(__path__):  # every other target registers itself when imported
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TARGETS", "Target", "check_directory", "register", "target_named"]
