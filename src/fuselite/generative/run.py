"""Generating text from a ``.litertlm`` bundle with LiteRT-LM's own runtime (``litert-lm-api``): what an app on a
phone runs, here on the CPU.

Example::

    text, stats = fuselite.generate("model.litertlm", "the cat sat", max_new_tokens=64)
"""

from __future__ import annotations

import os

from fuselite.errors import ConversionError, InputError
from fuselite.requirements import require_lm


class GenerationError(ConversionError):
    """LiteRT-LM's runtime refused the bundle or failed while generating (its own log says why, on stderr)."""


def generate(bundle, prompt: str, max_new_tokens: int = 64, threads: int = 1,
             max_num_tokens: int | None = None) -> tuple[str, dict]:
    """Greedy text from ``bundle`` after ``prompt`` (the tokenizer's start token first, no prompt template),
    at most ``max_new_tokens`` tokens, stopping at a stop token; LiteRT-LM's CPU backend at ``threads`` threads,
    float32 activations. Returns the text and LiteRT-LM's own timings (prefill / decode tokens per second)."""
    litert_lm = require_lm("litert_lm", "running a LiteRT-LM bundle")
    path = os.fspath(bundle)
    if not os.path.isfile(path):
        raise InputError(f"no bundle at '{path}'")
    if max_new_tokens < 1 or threads < 1:
        raise InputError("max_new_tokens and threads are positive numbers")
    try:
        engine = litert_lm.Engine(path, backend=litert_lm.Backend.CPU(thread_count=threads),
                                  max_num_tokens=max_num_tokens,
                                  activation_data_type=litert_lm.ActivationDataType.FLOAT32, enable_benchmark=True)
    except RuntimeError as e:
        raise GenerationError(f"LiteRT-LM cannot load '{path}': {e} (LiteRT-LM's own log says why: on stderr, "
                              "or with fuselite generate -v)") from None
    with engine:
        session = engine.create_session(apply_prompt_template=False, max_output_tokens=max_new_tokens,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1))
        with session:
            try:
                session.run_prefill([prompt])
                texts = session.run_decode().texts
            except RuntimeError as e:
                raise GenerationError(f"LiteRT-LM failed to generate from '{path}': {e} (LiteRT-LM's own log "
                                      "says why: on stderr, or with fuselite generate -v)") from None
            info = session.get_benchmark_info()
    stats = {"prefill_tokens": info.last_prefill_token_count,
             "prefill_tokens_per_s": info.last_prefill_tokens_per_second,
             "decode_tokens": info.last_decode_token_count,
             "decode_tokens_per_s": info.last_decode_tokens_per_second,
             "init_s": info.init_time_in_second}
    return (texts[0] if texts else ""), stats


def greedy_tokens(model: bytes, prompt, max_new_tokens: int, threads: int = 1, builtin_kernels: bool = False,
                  stop_tokens=()) -> list[int]:
    """Greedy generation on the stock LiteRT interpreter from a prefill / decode model's bytes, as LiteRT-LM's
    executor drives it: the prompt's ids but the last through the shortest prefill that holds them (padded with
    token 0 at position 0), then decode one token at a time from the last prompt token, the caches carried from
    each call to the next. Returns the generated ids (stopping after a stop token)."""
    import numpy as np

    from fuselite.frontend.causal_lm import DECODE, LOGITS, POSITIONS, TOKENS, cache_names
    from fuselite.runtime.interpreters import interpreter
    from fuselite.runtime.signatures import kernel_set

    interp = interpreter(model, threads, **kernel_set(builtin_kernels))
    runners = {key: interp.get_signature_runner(key) for key in interp.get_signature_list()}
    prefills = sorted((int(k.rsplit("_", 1)[1]), k) for k in runners if k.startswith("prefill_"))
    decode = runners[DECODE]
    details = decode.get_input_details()
    layers = sum(1 for name in details if name.startswith("kv_cache_k_"))
    caches = {name: np.zeros(details[name]["shape"], details[name]["dtype"]) for name in cache_names(layers)}
    ids = [int(t) for t in prompt]
    if not ids:
        raise InputError("the prompt has no token")
    held = ids[:-1]
    done = 0
    while done < len(held):  # the prompt in chunks of the longest prefill, the last in the shortest that holds it
        rest = len(held) - done
        length, key = next(((n, k) for n, k in prefills if n >= rest), prefills[-1])
        chunk = held[done:done + length]
        tokens = np.zeros((1, length), np.int32)
        positions = np.zeros((length,), np.int32)
        tokens[0, :len(chunk)] = chunk
        positions[:len(chunk)] = np.arange(done, done + len(chunk))
        out = runners[key](**{TOKENS: tokens, POSITIONS: positions}, **caches)
        caches = {name: out[name] for name in caches}
        done += len(chunk)
    token, position, generated = ids[-1], len(ids) - 1, []
    for _ in range(max_new_tokens):
        out = decode(**{TOKENS: np.array([[token]], np.int32), POSITIONS: np.array([position], np.int32)}, **caches)
        caches = {name: out[name] for name in caches}
        token, position = int(np.argmax(out[LOGITS][0, -1])), position + 1
        generated.append(token)
        if token in stop_tokens:
            break
    return generated
