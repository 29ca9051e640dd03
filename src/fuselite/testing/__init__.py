"""Helpers shared by the test suite, the benchmarks and ``fuselite demo``."""
