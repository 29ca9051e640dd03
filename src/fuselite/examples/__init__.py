"""Worked examples from the docs that are also run by the tests (see docs/byo-rnn.md)."""
