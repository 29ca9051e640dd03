"""On-device training: the optimizer ops of a train signature and what it needs of its resource variables."""

from __future__ import annotations
