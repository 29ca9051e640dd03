"""Every conversion option, declared once (``base.Option``), registered by name in ``base.OPTIONS``: the
converter's attributes and ``from_*`` keywords, its checks, the conversion context (``ctx.<name>``), the CLI's
flags and ``load.converter_options`` read the registry. ``conversion`` declares the converter's own; adding an
option is one module here that registers it (every module of this package is imported below;
docs/architecture.md, "an option")."""

import importlib
import pkgutil

from fuselite.options import conversion  # noqa: F401  (registered first: the CLI's flags in its order)
from fuselite.options.base import (
    OPTIONS,
    Option,
    add_flags,
    boolean,
    flag_type,
    from_flags,
    keywords,
    one_of,
    register,
    settled,
    unknown_option,
)

for _module in pkgutil.iter_modules(__path__):  # every other option module registers its options when imported
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["OPTIONS", "Option", "add_flags", "boolean", "flag_type", "from_flags", "keywords", "one_of", "register",
           "settled", "unknown_option"]
