"""Per-op facts, one catalog entry per op kind (``catalog.py``), in one module per op family; every module of
this package is imported here, so a family's entries are in the catalog once ``fuselite.ops`` is."""

import importlib
import pkgutil

from fuselite.ops import catalog

for _module in pkgutil.iter_modules(__path__):  # each family module adds its entries when imported
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["catalog"]
