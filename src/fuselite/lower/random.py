"""Random ops: RandomUniform, RandomStandardNormal, Multinomial (LiteRT's RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL, MULTINOMIAL)."""

from __future__ import annotations
