"""Generative decoders on device: a keras-hub CausalLM as LiteRT-LM's prefill / decode model
(:meth:`fuselite.Converter.from_causal_lm`), its ``.litertlm`` bundle (:func:`write_litertlm`) and text from it
through LiteRT-LM's own runtime (:func:`generate`, in a child process, after :func:`check_litertlm`
checked the bundle's structure; its caches in :func:`cache_dir`). See docs/generative.md."""

from fuselite.generative.bundle import check_litertlm, decode_cache_length, write_litertlm
from fuselite.generative.run import GenerationError, cache_dir, generate, max_threads
from fuselite.generative.tokenizers import tokenizer_file

__all__ = ["GenerationError", "cache_dir", "check_litertlm", "decode_cache_length", "generate", "max_threads",
           "tokenizer_file", "write_litertlm"]
