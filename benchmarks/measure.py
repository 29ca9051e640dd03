"""Measuring one model: conversion time with each converter, then size, ops, accuracy and LiteRT latency.

Conversions of the same in-memory model alternate between fuselite and TF; latency is timed
in blocks, each with fresh interpreters, the two models interleaved (see ``run.py``). TensorFlow's
own output is silenced while measuring; :class:`LoadMeter` tells how busy the machine was.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import numpy as np
from cases import convert_fuselite, convert_tf, keras_module, reference_outputs
from results import Row, Side, short_error


@dataclass
class Settings:
    """How much to measure (from the command line)."""

    runs: int = 5
    latency_seconds: float = 3.0
    latency_blocks: int = 5
    control: bool = True  # also time TF's model against a second instance of itself (A/A)
    silence: bool = True
    threads: int = 1  # LiteRT num_threads of every timed interpreter
    burst: int = 1  # invokes of one model in a row when interleaving (measure.interleaved_latency)


def add_latency_arguments(p, seconds: float, blocks: int) -> None:
    """The latency and output options the side-by-side scripts share."""
    p.add_argument("--latency-seconds", type=float, default=seconds,
                   help=f"timed invokes per model, all models together (default {seconds:g} s)")
    p.add_argument("--latency-blocks", type=int, default=blocks,
                   help=f"latency blocks, each with fresh interpreters (default {blocks})")
    p.add_argument("--out", help="write the Markdown report here (atomically); default stdout")


def latency_settings(args) -> Settings:
    """Settings from those options (no A/A control), TensorFlow imported with its start-up chatter hidden."""
    settings = Settings(latency_seconds=args.latency_seconds, latency_blocks=args.latency_blocks, control=False)
    with quiet(settings.silence):
        import tensorflow  # noqa: F401
    return settings


@contextlib.contextmanager
def quiet(enabled: bool = True):
    """Send everything written to file descriptors 1 and 2 to a scratch file.

    TensorFlow's C++ converter and Keras' export write straight to the descriptors, so
    redirecting ``sys.stdout`` is not enough. Exceptions still carry their own text.
    """
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)


def silence_python_logging() -> None:
    """Quiet absl, TF's Python logger and warnings (call after importing TensorFlow)."""
    import tensorflow as tf
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
    tf.get_logger().setLevel(logging.ERROR)
    tf.autograph.set_verbosity(0)
    warnings.filterwarnings("ignore")


def timed_conversion(convert, model, side: Side, silence: bool) -> dict[str, float]:
    """Run ``convert(model)`` once, appending its wall time to ``side``; errors go to ``side.error``."""
    gc.collect()
    try:
        with quiet(silence):
            t0 = time.perf_counter()
            data, stages = convert(model)
            elapsed = time.perf_counter() - t0
    except Exception as e:  # the table reports it
        side.error = short_error(e)
        return {}
    side.times.append(elapsed)
    if side.data is None:
        side.data = data
    return stages


def measure_conversions(model, row: Row, settings: Settings) -> None:
    """``settings.runs`` conversions with each converter, alternating which goes first."""
    stage_runs: list[dict[str, float]] = []
    contenders = [("fl", convert_fuselite), ("tf", convert_tf)]
    for i in range(settings.runs):
        for name, convert in contenders if i % 2 == 0 else contenders[::-1]:
            side = getattr(row, name)
            if side.error:  # failed once: do not retry
                continue
            stages = timed_conversion(convert, model, side, settings.silence)
            if name == "fl" and stages:
                stage_runs.append(stages)
    if stage_runs:
        row.fl_stages = {k: statistics.median(s.get(k, 0.0) for s in stage_runs) for k in stage_runs[0]}


def op_names(data: bytes) -> list[str]:
    """Operator names of the main subgraph, without any delegate node."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(
        model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    return [d["op_name"] for d in interp._get_ops_details()]


def _input_order(details: list[dict], names: list[str]) -> list[int]:
    """For each interpreter input, the index of the Keras input it is (by name, else by position)."""
    order = []
    for pos, d in enumerate(details):
        match = [i for i, n in enumerate(names) if n and n in d["name"]]
        order.append(match[0] if len(match) == 1 else pos)
    return order if sorted(order) == list(range(len(names))) else list(range(len(details)))


def prepared_interpreter(data: bytes, inputs: list[np.ndarray], input_names: list[str], threads: int = 1):
    """A LiteRT interpreter (``threads`` threads) for ``data`` with ``inputs`` set and tensors allocated."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data, num_threads=threads)
    details = interp.get_input_details()
    if len(details) != len(inputs):
        raise ValueError(f"model has {len(details)} inputs, Keras model {len(inputs)}")
    order = _input_order(details, input_names)
    for d, i in zip(details, order, strict=True):
        if tuple(d["shape"]) != inputs[i].shape:
            interp.resize_tensor_input(d["index"], inputs[i].shape)
    interp.allocate_tensors()
    for d, i in zip(details, order, strict=True):
        interp.set_tensor(d["index"], inputs[i].astype(d["dtype"], copy=False))
    return interp


def max_abs_error(interp, reference: list[np.ndarray]) -> float:
    """Max abs difference between the interpreter's outputs (after invoke) and ``reference``."""
    outs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    if len(outs) != len(reference):
        raise ValueError(f"{len(outs)} outputs, Keras model has {len(reference)}")
    pending = list(reference)
    worst = 0.0
    for out in outs:  # pair each output with the first reference of the same shape
        j = next((j for j, r in enumerate(pending) if r.shape == out.shape), None)
        if j is None:
            raise ValueError(f"no Keras output of shape {out.shape}")
        ref = pending.pop(j)
        worst = max(worst, float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)), initial=0.0)))
    return worst


def _time_invoke(interp) -> float:
    t0 = time.perf_counter_ns()
    interp.invoke()
    return (time.perf_counter_ns() - t0) / 1e3


def interleaved_latency(interps: list, budget_s: float, warmup: int = 10,
                        min_iters: int = 50, max_iters: int = 5000, burst: int = 1) -> list[float]:
    """Median ``invoke()`` time in microseconds of each interpreter, timed in alternation, ``burst`` invokes of
    one before the next (a burst keeps a large model's weights in the caches, as in an app running one model).

    The number of timed rounds is chosen from the warm-up so that all of them take about
    ``budget_s`` seconds, within ``[min_iters, max_iters]``.
    """
    warm = [[_time_invoke(it) for _ in range(warmup)] for it in interps]
    per_round_s = sum(statistics.median(w) for w in warm) / 1e6
    iters = int(min(max_iters, max(min_iters, budget_s / max(per_round_s * burst, 1e-9))))
    samples: list[list[float]] = [[] for _ in interps]
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(iters):
            order = range(len(interps)) if i % 2 == 0 else reversed(range(len(interps)))
            for k in order:
                for _ in range(burst):
                    samples[k].append(_time_invoke(interps[k]))
    finally:
        if gc_was_enabled:
            gc.enable()
    return [statistics.median(s) for s in samples]


def measure_runtime(row: Row, inputs, input_names, reference, settings: Settings) -> None:
    """Op lists, accuracy and (interleaved, blockwise) latency of both converted models."""
    live = []
    for side in (row.fl, row.tf):
        if not side.ok:
            continue
        try:
            with quiet(settings.silence):  # "Created TensorFlow Lite XNNPACK delegate" on stderr
                side.ops = op_names(side.data)
                interp = prepared_interpreter(side.data, inputs, input_names)
                interp.invoke()
            side.max_err = max_abs_error(interp, reference)
            live.append(side)
        except Exception as e:
            side.error = f"LiteRT: {short_error(e)}"
    if not live:
        return
    fl_tf = blockwise_latency(live, inputs, input_names, settings)
    for k, side in enumerate(live):
        side.latency_us = statistics.median(m[k] for m in fl_tf)
    if len(live) == 2:
        row.latency_ratios = [m[0] / m[1] for m in fl_tf]
        if settings.control:  # TF's model against a separate copy of itself
            twin = Side(data=bytes(bytearray(row.tf.data)))
            row.control_ratios = [m[0] / m[1] for m in blockwise_latency([row.tf, twin], inputs, input_names,
                                                                          settings)]


def blockwise_latency(sides: list[Side], inputs, input_names, settings: Settings) -> list[list[float]]:
    """Per block, fresh interpreters for ``sides`` and their interleaved median latencies (µs)."""
    blocks = []
    for b in range(settings.latency_blocks):
        order = range(len(sides)) if b % 2 == 0 else reversed(range(len(sides)))  # creation order alternates
        interps: list = [None] * len(sides)
        with quiet(settings.silence):
            for k in order:
                interps[k] = prepared_interpreter(sides[k].data, inputs, input_names, settings.threads)
        blocks.append(interleaved_latency(interps, settings.latency_seconds / settings.latency_blocks,
                                          burst=settings.burst))
        del interps
    return blocks


def benchmark_model(flavour: str, name: str, settings: Settings) -> Row:
    """Build ``name`` in ``flavour`` and measure both converters on it."""
    from fuselite.testing import models

    row = Row(flavour, name)
    k = keras_module(flavour)
    try:
        with quiet(settings.silence):
            model = models.build(name, k)
            inputs = models.sample_inputs(model)
            reference = reference_outputs(model, inputs)
        input_names = [str(getattr(t, "name", "") or "").split(":")[0] for t in model.inputs]
    except Exception as e:
        row.error = f"building the model: {short_error(e)}"
        return row
    measure_conversions(model, row, settings)
    measure_runtime(row, inputs, input_names, reference, settings)
    del model
    with contextlib.suppress(Exception):
        k.backend.clear_session()
    gc.collect()
    return row


class LoadMeter:
    """Share of the machine's CPU time used by *other* processes between start and stop.

    Busy time comes from ``/proc/stat`` (all processes), our own from ``os.times()``; on a
    machine without ``/proc/stat`` the result is None.
    """

    def __init__(self):
        self._start = self._sample()

    @staticmethod
    def _sample():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        busy = sum(fields) - fields[3] - fields[4]  # minus idle and iowait
        own = os.times()
        return time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), own.user + own.system

    def other_share(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None:
            return None
        wall, busy, own = (e - s for e, s in zip(end, self._start, strict=True))
        if wall <= 0:
            return None
        return max(0.0, (busy - own) / (wall * (os.cpu_count() or 1)))
