"""The public entry point: ``fuselite.Converter``.

Example::

    conv = fuselite.Converter.from_keras_model(model)
    tflite_bytes = conv.convert()
    print(conv.report)
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from contextlib import contextmanager

from fuselite import frontend
from fuselite.errors import ConversionError, InputError, NeedsStaticBatch
from fuselite.export.flatbuffer import write_flatbuffer
from fuselite.fusion import RuleSet, is_composite, prepare_composites
from fuselite.fusion.loops import fuse_lstm_loops
from fuselite.lower import lower_module
from fuselite.passes.control_flow import specialize_loop_invariants
from fuselite.passes.dce import dce
from fuselite.passes.fold_tf import fold_tf
from fuselite.passes.inline import inline_calls
from fuselite.passes.optimize import optimize
from fuselite.passes.patterns import rewrite_tf_patterns
from fuselite.passes.shapes import refine_shapes
from fuselite.passes.tensor_lists import lower_tensor_lists
from fuselite.passes.variables import clear_zero_initial_marks, freeze_variables, materialize_variables
from fuselite.report import Report


class Converter:
    """Converts a TensorFlow program to a LiteRT flatbuffer. Build it with a ``from_*`` method."""

    def __init__(self, trace, source: str, keep_alive=None, batch_size: int | None = None,
                 fusions=None, strict_fusion: bool = False):
        self._trace = trace  # () -> entries
        self._keep_alive = keep_alive  # objects owning the variables (SavedModel, tf.Module)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self.rules = RuleSet(fusions)
        self.strict_fusion = bool(strict_fusion)
        self.report = Report(source=source)
        self.module = None

    # -- constructors ------------------------------------------------------------
    @classmethod
    def from_keras_model(cls, model, batch_size: int | None = None, **options) -> Converter:
        """A Keras 3 or tf-keras model (functional, sequential or subclassed and built).

        ``options``: ``fusions=[rule, ...]`` (extra fusion rules for this conversion) and
        ``strict_fusion=True`` (a composite that is not fused is an error).
        """
        if not hasattr(model, "inputs") or not callable(model):
            raise InputError(f"from_keras_model expects a Keras model, got {type(model).__name__}")
        conv = cls(None, f"Keras model '{model.name}'", model, batch_size, **options)
        conv._trace = lambda: frontend.keras_entries(model, conv.report.warnings)
        return conv

    @classmethod
    def from_saved_model(cls, path, signature_keys=None, tags=None, batch_size: int | None = None,
                         **options) -> Converter:
        """A SavedModel directory (``tf.saved_model.save`` or Keras ``model.export()``)."""
        entries, loaded = frontend.saved_model_entries(path, signature_keys, tags)
        return cls(lambda: entries, f"SavedModel '{os.fspath(path)}'", loaded, batch_size, **options)

    @classmethod
    def from_concrete_functions(cls, funcs, trackable_obj=None, batch_size: int | None = None,
                                **options) -> Converter:
        """``tf.function(...).get_concrete_function(...)`` results (one signature each)."""
        entries = frontend.concrete_function_entries(funcs)
        return cls(lambda: entries, f"{len(entries)} concrete function(s)", trackable_obj, batch_size, **options)

    # -- conversion ----------------------------------------------------------------
    @contextmanager
    def _stage(self, name: str):
        t0 = time.perf_counter()
        yield
        self.report.stage_seconds[name] = self.report.stage_seconds.get(name, 0.0) + time.perf_counter() - t0

    def convert(self) -> bytes:
        """Run the pipeline; return the ``.tflite`` bytes. Raises :class:`ConversionError`.

        A model that needs a static batch (fused RNN state tensors, tensor lists whose
        element shape depends on the batch) is converted with batch size 1 (or the batch
        size of a stateful RNN's state variables) unless ``batch_size`` was given; the
        report says so.
        """
        self.report.stage_seconds.clear()
        self.report.warnings.clear()
        try:
            return self._convert(self.batch_size)
        except NeedsStaticBatch as e:
            if self.batch_size is not None:
                raise
            batch = e.batch or 1
            implied = " (the batch size of the model's state)" if e.batch else ""
            self.report.warn(f"converted with a fixed batch size of {batch}{implied}: {e} "
                             "(pass batch_size=N to choose another)")
            return self._convert(batch)

    def _convert(self, batch_size: int | None) -> bytes:
        report = self.report
        with self._stage("import"):
            clear_zero_initial_marks()  # marks are made while tracing, for this conversion only
            entries = self._trace()
            module = frontend.import_concrete_functions(entries, batch_size)
            report.signatures = list(module.signatures)
            report.ops_before = _count(module)
        with self._stage("inline"):
            inline_calls(module, keep=is_composite)  # composites stay calls until fused
            dce(module)
        with self._stage("variables"):
            specialize_loop_invariants(module)
            frozen = freeze_variables(module)
        with self._stage("fold"):
            self._fold(module)
        with self._stage("fuse"):
            report.composites, read = prepare_composites(module, self.rules, self.strict_fusion, batch_size)
            inline_calls(module)
            dce(module)
            frozen += freeze_variables(module)
            report.composites += fuse_lstm_loops(module, batch_size)
            dce(module)
            frozen += [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in read.items()]
            report.frozen_variables = sorted({v["name"]: v for v in frozen}.values(), key=lambda v: v["name"])
        with self._stage("fold"):
            self._fold(module)
            rewrite_tf_patterns(module)
            lower_tensor_lists(module, report)
            dce(module)
        with self._stage("variables"):  # assigned variables become LiteRT resource variables
            report.mutable_variables = materialize_variables(module)
            report.signatures = list(module.signatures)
        with self._stage("lower"):
            lower_module(module)
        with self._stage("optimize"):
            optimize(module)
            dce(module)
        with self._stage("export"):
            for fn in module.functions.values():
                fn.topo_sort()
            data = write_flatbuffer(module)
        self.module = module
        report.ops_after = _count(module)
        report.size_bytes = len(data)
        report.subgraphs = len(module.functions)
        return data

    @staticmethod
    def _fold(module) -> None:
        fold_tf(module)
        for _ in range(4):  # shapes and folded constants feed each other
            if not refine_shapes(module) or not fold_tf(module):
                break
        specialize_loop_invariants(module)

    def convert_to(self, path) -> bytes:
        """Convert and write ``path`` atomically (nothing is written if conversion fails)."""
        data = self.convert()
        write_atomic(path, data)
        return data


def _count(module) -> dict[str, int]:
    c: Counter = Counter()
    for fn in module.functions.values():
        c.update(op.kind for op in fn.ops)
    return dict(sorted(c.items()))


def write_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConversionError(f"cannot write '{path}': directory '{directory}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".fuselite-", suffix=".tmp", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # like a normally created file, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
