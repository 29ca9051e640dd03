"""Generating text from a ``.litertlm`` bundle with LiteRT-LM's own runtime (``litert-lm-api``): what an app on a
phone runs, here on the CPU.

Example::

    text, stats = fuselite.generate("model.litertlm", "the cat sat", max_new_tokens=64)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat

from fuselite.errors import ConversionError, InputError
from fuselite.runtime.child import exit_description


class GenerationError(ConversionError):
    """LiteRT-LM's runtime refused the bundle or failed while generating (its own log says why, on stderr)."""


def max_threads() -> int:
    """The most CPU threads :func:`generate` takes: the machine's CPUs (``os.cpu_count()``). More only slows
    LiteRT-LM down, and under a memory limit its thread pool can fail to start and hang."""
    return os.cpu_count() or 1


def generate(bundle, prompt: str, max_new_tokens: int = 64, threads: int = 1,
             max_num_tokens: int | None = None, *, cache: bool = True) -> tuple[str, dict]:
    """Greedy text from ``bundle`` after ``prompt`` (the tokenizer's start token first, no prompt template),
    at most ``max_new_tokens`` tokens, stopping at a stop token; LiteRT-LM's CPU backend at ``threads`` threads
    (1 to :func:`max_threads`), float32 activations. Returns the text and LiteRT-LM's own timings (prefill /
    decode tokens per second).

    The bundle's structure is checked first (:func:`~fuselite.generative.check_litertlm`); LiteRT-LM then runs in
    a child process (``python -I`` in a folder of its own), so that a bundle its native code crashes on is a
    :class:`GenerationError` naming the signal. LiteRT-LM's cache of the packed weights (XNNPACK's) goes to
    :func:`cache_dir` (``$XDG_CACHE_HOME/fuselite/litert-lm/`` or ``~/.cache/fuselite/litert-lm/``), never beside
    the bundle; ``cache=False`` (or no usable cache folder) runs without one."""
    import importlib.util

    from fuselite.generative.bundle import check_litertlm

    if importlib.util.find_spec("litert_lm") is None:  # imported by the child only
        raise InputError("running a LiteRT-LM bundle needs litert_lm (litert-lm-api): pip install 'fuselite[lm]'")
    path = os.fspath(bundle)
    if not isinstance(prompt, str):
        raise InputError(f"the prompt is text (a str), got {type(prompt).__name__}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = ord(prompt[e.start])  # a byte the command line could not decode, or a lone surrogate
        what = f"byte 0x{bad - 0xDC00:02x}" if 0xDC80 <= bad <= 0xDCFF else f"a lone surrogate U+{bad:04X}"
        raise InputError(f"the prompt is not valid UTF-8 text ({what} at character {e.start + 1})") from None
    for name, value, top in (("max_new_tokens", max_new_tokens, None), ("threads", threads, max_threads()),
                             ("max_num_tokens", max_num_tokens, None)):
        if value is None and name == "max_num_tokens":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (top and value > top):
            raise InputError(f"{name} is an integer from 1" + (f" to {top} (the CPUs of this machine)" if top else
                                                                "") + f", got {value!r}")
    check_litertlm(path)
    request = {"path": os.path.abspath(path), "prompt": prompt, "max_new_tokens": max_new_tokens,
               "threads": threads, "max_num_tokens": max_num_tokens,
               "cache_dir": (cache and cache_dir(path)) or NO_CACHE}
    answer, log, code = _run_child(request)
    if "text" in answer:
        return answer["text"], answer["stats"]
    reason = _log_reason(log)
    if reason is None and code > 0 and log.strip():  # a Python error in the child: its last line
        reason = log.strip().splitlines()[-1][:400]
    said = f" (LiteRT-LM: {reason})" if reason else " (LiteRT-LM's own log says why: fuselite generate -v shows it)"
    if "error" in answer:
        what = {"load": "cannot load", "session": "cannot start a session on",
                "generate": "failed to generate from"}.get(answer["error"], "failed on")
        raise GenerationError(f"LiteRT-LM {what} '{path}': {answer['message']}{said}")
    stage = {"load": "while loading", "session": "while starting a session on",
             "generate": "while generating from"}.get(answer.get("stage"), "on")
    raise GenerationError(f"LiteRT-LM ended with {exit_description(code)} {stage} '{path}' (run in a child "
                          f"process){said}")


NO_CACHE = ":nocache"  # LiteRT-LM's cache_dir that turns its caches off

_CHILD = r"""
import json, os, sys
request = json.loads(sys.stdin.read())
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # the runtime's own prints go with its log, not into the answer

def say(**fields):
    answer.write(json.dumps(fields) + "\n")
    answer.flush()

def failed(stage, e):
    say(error=stage, message=" ".join(str(e).split()) or type(e).__name__)
    sys.exit(0)

say(stage="load")
import litert_lm
try:
    engine = litert_lm.Engine(request["path"], backend=litert_lm.Backend.CPU(thread_count=request["threads"]),
                              max_num_tokens=request["max_num_tokens"], cache_dir=request["cache_dir"],
                              activation_data_type=litert_lm.ActivationDataType.FLOAT32, enable_benchmark=True)
except Exception as e:
    failed("load", e)
with engine:
    say(stage="session")
    try:
        session = engine.create_session(apply_prompt_template=False, max_output_tokens=request["max_new_tokens"],
                                        sampler_config=litert_lm.SamplerConfig(top_k=1))
    except Exception as e:
        failed("session", e)
    with session:
        say(stage="generate")
        try:
            session.run_prefill([request["prompt"]])
            texts = session.run_decode().texts
            info = session.get_benchmark_info()
        except Exception as e:
            failed("generate", e)
        say(text=texts[0] if texts else "",
            stats={"prefill_tokens": info.last_prefill_token_count,
                   "prefill_tokens_per_s": info.last_prefill_tokens_per_second,
                   "decode_tokens": info.last_decode_token_count,
                   "decode_tokens_per_s": info.last_decode_tokens_per_second,
                   "init_s": info.init_time_in_second})
"""


def _run_child(request: dict) -> tuple[dict, str, int]:
    """LiteRT-LM on ``request`` in a child process: its last answer (``{"text", "stats"}``, ``{"error",
    "message"}`` or the ``{"stage"}`` it was in), the end of its log and its return code. The log is passed on to
    fd 2 as it comes (hidden there unless ``-v``); the child is killed if this process is interrupted."""
    import subprocess
    import threading

    from fuselite.generative.bundle import temporary_folder
    from fuselite.runtime.child import isolated_argv, isolated_env

    with temporary_folder("fuselite-generate-") as folder:
        # (a child this process leaves reads the end of its input and ends)
        proc = subprocess.Popen(isolated_argv(["-c", _CHILD]), cwd=folder, env=isolated_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tail = bytearray()

        def relay():
            for line in iter(proc.stderr.readline, b""):
                tail.extend(line)
                del tail[:-65536]
                try:
                    os.write(2, line)
                except OSError:
                    pass

        relay_thread = threading.Thread(target=relay, daemon=True)
        relay_thread.start()
        try:
            try:
                proc.stdin.write(json.dumps(request).encode())
                proc.stdin.close()
            except OSError:  # it ended before reading: its return code says how
                pass
            out = proc.stdout.read()
            proc.wait()
        except BaseException:  # SIGTERM (as SystemExit), Ctrl-C: the child goes too
            proc.kill()
            proc.wait()
            raise
        finally:
            relay_thread.join(5)
            proc.stdout.close()
            proc.stderr.close()
    answer = {}
    for line in out.decode(errors="replace").splitlines():  # the last answer: the result, an error or a stage
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict):
            answer = fields
    return answer, tail.decode(errors="replace"), proc.returncode


def _log_reason(log: str) -> str | None:
    """The last error line of LiteRT-LM's log (``E0000 ... file.cc:123] why``), without its prefix."""
    reasons = [m.group(1).strip() for m in re.finditer(r"^[EF]\d{4} [^\]]*\] (.+)$", log, re.M)]
    return reasons[-1][:400] if reasons else None


def cache_dir(bundle) -> str | None:
    """The folder of LiteRT-LM's caches for ``bundle`` (XNNPACK's packed weights, ``<name>_<mtime>_<size>
    .xnnpack_cache``): ``$XDG_CACHE_HOME/fuselite/litert-lm/<hash of the bundle's real path>/`` (``~/.cache``
    where XDG_CACHE_HOME is unset or relative). Each folder of fuselite's is created 0700 and used only where it
    is a folder (not a symlink) of this user's, open to no one else; the caches of older versions of the bundle
    and anything but plain files are removed from it. None where there is no such folder (the cache is then off)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    real = os.path.realpath(os.fspath(bundle))
    try:
        st = os.stat(real)
        if not os.path.isdir(base):
            os.mkdir(base, 0o700)  # (in a folder that is there: a missing home is not made)
        folder = base
        for name in ("fuselite", "litert-lm", hashlib.sha256(os.fsencode(real)).hexdigest()[:24]):
            folder = _private_folder(folder, name)
            if folder is None:
                return None
        current = f"{os.path.basename(os.path.abspath(bundle))}_{int(st.st_mtime)}_{st.st_size}."  # LiteRT-LM's
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.startswith(current) or not entry.is_file(follow_symlinks=False):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
    except OSError:
        return None
    return folder


def _private_folder(parent: str, name: str) -> str | None:
    """``parent/name``, created 0700 where missing; None where it is not a folder of this user's (a symlink, a
    file, someone else's). Made 0700 where it is open to others."""
    path = os.path.join(parent, name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return None
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


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
