"""Python child processes that run no code but fuselite's own: ``python -I`` (no working directory or script
folder on ``sys.path``, no ``PYTHON*`` variables, no user site-packages) started in a folder of fuselite's own,
so a ``json.py`` or ``tensorflow.py`` in the user's working directory is never imported by a child (a tool that
can crash the process — TFLite Micro, Vela, LiteRT's accelerators, the official converter — runs in one).

Example::

    proc = run_isolated(["-c", SCRIPT, path], cwd=tmp, timeout=600, capture_output=True, text=True)
"""

from __future__ import annotations

import os
import subprocess
import sys


def exit_description(code: int) -> str:
    """A child process's return code in words: "signal SIGSEGV", "exit status 1"."""
    import signal

    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def isolated_env(**extra: str) -> dict[str, str]:
    """The environment without ``PYTHON*`` variables (``-I`` ignores them; a child's own children may not),
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(extra)
    return env


def isolated_argv(args: list[str]) -> list[str]:
    """``[python, -I, *args]``: this interpreter, isolated."""
    return [sys.executable, "-I", *args]


def run_isolated(args: list[str], cwd: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` of ``python -I *args`` in ``cwd`` (a folder of fuselite's own, never the user's working
    directory) with :func:`isolated_env` unless ``env`` is given; ``kwargs`` as ``subprocess.run`` takes them."""
    return subprocess.run(isolated_argv(args), cwd=cwd, env=isolated_env() if env is None else env, **kwargs)
