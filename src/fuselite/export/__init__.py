"""Flatbuffer export."""
