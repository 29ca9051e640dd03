"""Math ops LiteRT has no builtin for, composed from builtins (DivNoNan, Xlogy, Lgamma, ...), and the bitwise ops."""

from __future__ import annotations
