"""Generative decoders on device: a keras-hub CausalLM as LiteRT-LM's prefill / decode model
(:meth:`fuselite.Converter.from_causal_lm`), its ``.litertlm`` bundle (:func:`write_litertlm`) and text from it
through LiteRT-LM's own runtime (:func:`generate`). See docs/generative.md."""

from fuselite.generative.bundle import decode_cache_length, write_litertlm
from fuselite.generative.run import GenerationError, generate
from fuselite.generative.tokenizers import tokenizer_file

__all__ = ["GenerationError", "decode_cache_length", "generate", "tokenizer_file", "write_litertlm"]
