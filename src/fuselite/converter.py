"""The public entry point: ``fuselite.Converter``.

Example::

    conv = fuselite.Converter.from_keras_model(model)
    tflite_bytes = conv.convert()
    print(conv.report)
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

from fuselite import frontend
from fuselite.context import ConversionContext
from fuselite.errors import InputError, NeedsStaticBatch
from fuselite.frontend.keras_quantized import int4_kernels
from fuselite.ir import Module
from fuselite.options import OPTIONS, settled, unknown_option
from fuselite.options import keywords as option_keywords
from fuselite.passes.manager import run_pipeline
from fuselite.paths import directory_problem, output_problem, write_atomic
from fuselite.pipeline import PIPELINE
from fuselite.quantize import QuantizationOptionError, resolve_mode
from fuselite.quantize.int4 import DEFAULT_BLOCK_SIZE
from fuselite.quantize.options import integer_only, io_type
from fuselite.report import Report
from fuselite.requirements import require_tensorflow
from fuselite.rnn.forms.policy import DEFAULT_THREADS
from fuselite.targets import target_named
from fuselite.targets.base import refuse_other_targets_options
from fuselite.tflite.flatbuffer import PROGRESS_FROM
from fuselite.tflite.micro import micro_sources
from fuselite.tflite.provenance import Provenance

_NOT_GIVEN: Any = object()  # from_keras_model's batch_size when the caller gave none (None: a dynamic batch)


class UnknownOptionError(InputError, AttributeError):
    """An attribute the converter does not have was set (``tf.lite.TFLiteConverter`` has more)."""


class Converter:
    """Converts a TensorFlow program to a LiteRT flatbuffer. Build it with a ``from_*`` method.

    Quantization is set as on ``tf.lite.TFLiteConverter`` (``optimizations``,
    ``target_spec.supported_types`` / ``supported_ops``, ``representative_dataset``,
    ``inference_input_type`` / ``inference_output_type``; see ``fuselite.quantize.options``);
    ``keep_float = [op kind, node name or name scope, ...]`` keeps those ops in float
    (``fuselite.quantize.select``). ``progress`` (a callable, default ``None``) is given
    each pass's name as it starts, and for a large file how much of it is written (the command line shows it
    on a terminal).
    Setting an attribute the converter does not have raises :class:`UnknownOptionError`
    listing those it has: an option is never ignored silently.
    """

    _STATE = ("source", "report", "module")

    def __init__(self, trace, source: str, keep_alive=None, batch_size: int | None = None, **options):
        self._trace = trace  # ctx -> entries
        self._keep_alive = keep_alive  # objects owning the variables (SavedModel, tf.Module)
        self._input_paths = ()  # the files / folders read (a SavedModel's): no output goes into them
        self._model_type = "TF_CONCRETE_FUNCTIONS"  # what CONVERSION_METADATA says the source was
        self.source = source
        self.report = Report(source=source)
        self.module = None
        given = {"batch_size": batch_size, **options}
        by_keyword = option_keywords()
        unknown = sorted(set(given) - set(by_keyword))
        if unknown:
            raise UnknownOptionError(unknown_option(unknown[0]))
        for name, option in OPTIONS.items():  # fuselite/options/ declares each: default, check, help, flag
            setattr(self, name, option.initial())
        for keyword, value in given.items():
            option = by_keyword[keyword]
            if value is not None:  # None: the option's default
                setattr(self, option.name, option.checked(value) if option.eager else value)
        self._output_name = "model"  # the name Vela's kept files take (convert_to: the output file's)
        self._generative = ()  # from_causal_lm: (layers, key-value heads, head size, cache length) for the report
        self._settings = ()  # the quantization settings of the conversion under way (_quantization_settings)
        self._options = {}  # the options of the conversion under way, checked (options.settled)

    @property
    def _experimental_use_buffer_offset(self):
        """The official converter's name for :attr:`buffer_offsets` (the same option)."""
        return self.buffer_offsets

    @_experimental_use_buffer_offset.setter
    def _experimental_use_buffer_offset(self, value):
        self.buffer_offsets = value

    def __setattr__(self, key, value):
        if not key.startswith("_") and key not in OPTIONS and key not in self._STATE:
            raise UnknownOptionError(unknown_option(key))
        object.__setattr__(self, key, value)

    # -- constructors ------------------------------------------------------------
    @classmethod
    def from_keras_model(cls, model, batch_size: int | None = _NOT_GIVEN, input_signature=None,
                         **options) -> Converter:
        """A Keras 3 or tf-keras model (functional, sequential or subclassed and built).

        ``input_signature``: the model's call as Keras' ``export`` takes it, one structure (a spec, or a list,
        tuple or dict of them: ``tf.TensorSpec``, ``keras.InputSpec``, a Keras tensor) per positional argument;
        default: the model's inputs, or the structure of the call that built a subclassed model.

        ``options`` (every ``from_*`` takes them): ``fusions=[rule, ...]`` (extra fusion
        rules for this conversion), ``strict_fusion=True`` (a composite that is not fused
        is an error), ``verify_ir=True`` (check the IR after every pass),
        ``print_after=["lower", ...]`` (print the IR after these passes to
        ``print_stream``, default stderr; ``fuselite pipeline`` lists the pass names),
        ``target="micro"`` (only ops, versions and operand types TFLite Micro's kernels take;
        an op it cannot run is a conversion error; see docs/micro.md), ``target="ethos-u"`` (full integer,
        int8 or 16x8, with integer input and output, in forms an Arm Ethos-U NPU takes; compiled with Vela, whose
        NPU / CPU split and estimates are in the report; ``accelerator_config="ethos-u55-128"`` as Vela names
        them, ``vela_output="dir"`` keeps the compiled model; see docs/ethos-u.md),
        ``micro_sources="dir"`` (write the TFLite Micro op resolver, the model as a C array and
        the measured tensor-arena size there), ``bidirectional="fused"`` (keep LiteRT's
        bidirectional LSTM / RNN ops, no faster on LiteRT, and TensorFlow's flatbuffer importer
        and Model Explorer reject them; default "split": two unidirectional ops, docs/rnn.md),
        ``rnn_form="fused" | "unrolled" | "loop" | "auto"`` (the form of LSTM, SimpleRNN and GRU layers:
        LiteRT's sequence op, builtins step by step, or a WHILE loop over the steps without TensorLists;
        "auto" converts each, times them on this machine's LiteRT at ``threads`` and keeps the fastest;
        default: for float models the loop at one and two threads (tf-keras LSTMs fused at two), LSTM and
        SimpleRNN fused at three or more; the fused ops for integer quantization and TFLite Micro,
        docs/rnn.md#thread-count), ``threads=N`` (the LiteRT
        ``num_threads`` the model will run with, default 1: what LiteRT uses when an app leaves it unset).

        A ``Sequential`` model built by ``fit`` (or a call) without a ``keras.Input`` took its first batch's shape;
        converting it needs a ``batch_size`` (``None``: a dynamic batch), else it is an InputError saying so.
        """
        batch_given = batch_size is not _NOT_GIVEN
        batch_size = batch_size if batch_given else None
        require_tensorflow()
        if not callable(model) or not hasattr(model, "layers"):  # functional, sequential or subclassed
            raise InputError(f"from_keras_model expects a Keras model, got {type(model).__name__}")
        def trace(ctx):
            ctx.keras_int4 = int4_kernels(model)  # read before tracing: the kernels folding will produce
            return frontend.keras_entries(model, ctx.report.warnings, ctx.zero_initial, input_signature,
                                          ctx.input_shapes, batch_given=batch_given)

        conv = cls(trace, f"Keras model '{model.name}'", model, batch_size, **options)
        conv._model_type = "KERAS_MODEL"
        return conv

    @classmethod
    def from_saved_model(cls, path, signature_keys=None, tags=None, batch_size: int | None = None,
                         **options) -> Converter:
        """A SavedModel directory (``tf.saved_model.save`` or Keras ``model.export()``)."""
        require_tensorflow()
        entries, loaded = frontend.saved_model_entries(path, signature_keys, tags)
        conv = cls(lambda ctx: entries, f"SavedModel '{os.fspath(path)}'", loaded, batch_size, **options)
        conv._model_type = "TF_SAVED_MODEL"
        conv._input_paths = (os.fspath(path),)
        return conv

    @classmethod
    def from_concrete_functions(cls, funcs, trackable_obj=None, batch_size: int | None = None,
                                **options) -> Converter:
        """``tf.function(...).get_concrete_function(...)`` results (one signature each), in a list, or in a dict
        {signature key: concrete function} that names the signatures (``{"prefill_32": ..., "decode": ...}``)."""
        require_tensorflow()
        entries = frontend.concrete_function_entries(funcs)
        return cls(lambda ctx: entries, f"{len(entries)} concrete function(s)", trackable_obj, batch_size,
                   **options)

    @classmethod
    def from_causal_lm(cls, lm, prefill_lengths=(32,), cache_length: int = 512, prefill_logits: bool = False,
                       **options) -> Converter:
        """A keras-hub ``CausalLM`` (GPT-2, Gemma, Gemma 3, Llama, ... built from a preset or a configuration) as
        LiteRT-LM runs it: a signature ``prefill_<L>`` for each of ``prefill_lengths`` and ``decode``, their inputs
        ``tokens``, ``input_pos`` and the per-layer caches ``kv_cache_k_N`` / ``kv_cache_v_N`` of ``cache_length``
        positions, given back updated under the same names, and decode's ``logits``; the weights are constants
        the signatures share (``fuselite.frontend.causal_lm``; docs/generative.md). ``prefill_logits``: the
        prefills give their logits too (LiteRT-LM's executor takes none from a prefill: leave it off for a
        bundle)."""
        require_tensorflow()
        from fuselite.frontend.causal_lm import cache_layout, causal_lm_entries

        entries = causal_lm_entries(lm, prefill_lengths, cache_length, prefill_logits)

        def trace(ctx):
            ctx.keras_int4 = int4_kernels(lm)  # Keras' own quantize("int4"): kept int4, or refused, never float32
            return entries

        conv = cls(trace, f"{type(lm).__name__} '{lm.name}' (prefill and decode)", lm, None, **options)
        conv._model_type = "KERAS_MODEL"
        conv._generative = (*cache_layout(lm), cache_length)
        return conv

    # -- conversion ----------------------------------------------------------------
    def convert(self) -> bytes:
        """Run the pipeline (``fuselite.pipeline.PIPELINE``); return the ``.tflite`` bytes (and write the
        TFLite Micro sources, named ``model_*``, when ``micro_sources`` is set).

        Raises :class:`ConversionError`. A model that needs a static batch (fused RNN
        state tensors, tensor lists whose element shape depends on the batch) is
        converted again with batch size 1 (or the batch size of a stateful RNN's state
        variables) unless ``batch_size`` was given; the report says so.
        """
        data = self._convert()
        self._write_micro_sources(data, "model")
        return data

    def _convert(self) -> bytes:
        data = self._convert_once()
        if self._generative:  # from_causal_lm: the signatures, the KV cache and the weights' bytes
            from fuselite.generative.summary import lm_summary

            self.report.generative = lm_summary(data, *self._generative)
        return data

    def _convert_once(self) -> bytes:
        self.report = Report(source=self.source)
        target = target_named(self.target)
        self._options = settled(self)  # each option's own check (options.py), before anything is traced
        refuse_other_targets_options(self, target)
        target.check_options(self)
        self._settings = self._quantization_settings()
        mode, notes = resolve_mode(*self._settings)
        keep_float = self._options["keep_float"]
        if keep_float and mode is None:
            raise QuantizationOptionError("keep_float names ops to keep float when quantizing, but no quantization "
                                          "is set (optimizations=[tf.lite.Optimize.DEFAULT])")
        if self._options["block_size"] is not None and mode != "int4":
            raise QuantizationOptionError(f"block_size is the block of int4 weights; this conversion is "
                                          f"{mode or 'not quantized'} (int4: optimizations=[tf.lite.Optimize.DEFAULT], "
                                          "target_spec.supported_types=['int4'])")
        if self.max_quantization_error is not None and mode not in ("int8", "int16x8"):
            raise QuantizationOptionError("max_quantization_error is for full-integer quantization (int8 or 16x8, "
                                          "with a representative_dataset)")
        target.check_mode(mode)
        if self.rnn_form == "loop" and mode in ("int8", "int16x8"):
            raise QuantizationOptionError("rnn_form='loop' cannot be quantized to integers: the calibration and the "
                                          "integer rules do not enter a WHILE loop's body; leave rnn_form at its "
                                          "default (the fused ops for int8 and 16x8) or pass 'fused' or 'unrolled'")
        for note in notes:
            self.report.warn(note)
        if self.rnn_form == "auto":
            return self._fastest_form(mode, keep_float)
        return self._run_with_batch(mode, keep_float, self.rnn_form)

    def _fastest_form(self, mode, keep_float) -> bytes:
        """rnn_form="auto": each form converted, timed on this machine's LiteRT at ``threads`` and the fastest kept
        (``verify.fastest_form``: each form's fastest block of interleaved invokes in fresh interpreters, as
        benchmarks/rnn_forms.py times them). The report gives each form's fastest block, the median of its blocks
        and its slowest block. Forms that come out as the same model are timed once."""
        from fuselite.verify import fastest_form

        report, models = self.report, {}
        forms = ("fused", "unrolled") if mode in ("int8", "int16x8") else ("fused", "unrolled", "loop")
        for form in forms:
            self.report = Report(source=self.source)
            data = self._run_with_batch(mode, keep_float, form)
            if all(data != other[0] for other in models.values()):
                models[form] = (data, self.report, self.module)
        timed = fastest_form({form: m[0] for form, m in models.items()}, self.threads)
        chosen = timed["chosen"]  # "fused" where no layer has another form
        data, self.report, self.module = models[chosen]
        self.report.warnings[:0] = report.warnings
        self.report.recurrent["auto"] = {"threads": self.threads, **timed}
        if timed["blocks"]:
            fastest, times, worst = timed["fastest_block_us"], timed["median_us"], timed["slowest_block_us"]
            measured = ", ".join(f"{form} {fastest[form]:.1f} us ({times[form]:.1f}, {worst[form]:.1f})"
                                 for form in times)
            self.report.warn(f"rnn_form='auto': the {chosen} form is the fastest here ({measured} per invoke: "
                             f"fastest of {timed['blocks']} blocks (median, slowest); LiteRT, "
                             f"{self.threads} thread{'s' if self.threads > 1 else ''})")
        return data

    def _accelerator(self) -> str | None:
        return target_named(self.target).accelerator(self)

    def _quantization_settings(self) -> tuple:
        """(optimizations, target_spec, representative_dataset, input type, output type) as the conversion takes
        them: as set, or as the target forces them (target="ethos-u" is full integer with integer input and
        output, which Vela needs)."""
        settings = (self.optimizations, self.target_spec, self.representative_dataset,
                    self.inference_input_type, self.inference_output_type)
        return target_named(self.target).quantization_settings(self, settings)

    def _run_with_batch(self, mode, keep_float, rnn_form: str) -> bytes:
        try:
            return self._run(self.batch_size, mode, keep_float, rnn_form)
        except NeedsStaticBatch as e:
            if self.batch_size is not None:
                raise
            batch = e.batch or 1
            implied = " (the batch size of the model's state)" if e.batch else ""
            self.report.warn(f"converted with a fixed batch size of {batch}{implied}: {e} "
                             "(pass batch_size=N to choose another)")
            return self._run(batch, mode, keep_float, rnn_form)

    def _run(self, batch_size: int | None, mode: str | None, keep_float: tuple[str, ...],
             rnn_form: str = "default") -> bytes:
        # the integer settings are kept for every mode: a quantization-aware-trained model (FakeQuant ops) that
        # asked for optimizations becomes full integer, which the pipeline decides once it has imported it
        run = dict(self._options, batch_size=batch_size, rnn_form=rnn_form, keep_float=keep_float,
                   block_size=self._options["block_size"] or DEFAULT_BLOCK_SIZE if mode == "int4" else None)
        if mode is None:
            run.update(representative_dataset=None, max_quantization_error=None, inference_input_type="float32",
                       inference_output_type="float32")
        else:
            run.update(inference_input_type=io_type(self._settings[3]), inference_output_type=io_type(self._settings[4]))
        accelerator = self._accelerator()
        ctx = ConversionContext(trace=self._trace, report=self.report, options=run, quantization=mode,
                                integer_only=mode is not None and integer_only(self._settings[1]),
                                accelerator=accelerator, output_name=self._output_name,
                                provenance=Provenance(f"fuselite {_version()}", self._model_type, tuple(
                                    (k, str(v)) for k, v in (("target", self.target),
                                                             ("accelerator_config", accelerator),
                                                             ("bidirectional", self.bidirectional),
                                                             ("rnn_form", None if self.rnn_form == "default" else self.rnn_form),
                                                             ("threads", None if self.threads == DEFAULT_THREADS else self.threads),
                                                             ("batch_size", batch_size),
                                                             ("block_size", run["block_size"])) if v is not None),
                                    mode))
        if self._generative:  # a decoder's error on decode: one token, where a prefill is L (minutes at 1B params
            ctx.error_signature = "decode"  # on the builtin kernels a large model's error is measured with)
        module = Module()
        run_pipeline(PIPELINE, module, ctx)
        self.module = module
        return ctx.output

    def check_outputs(self, path) -> None:
        """Before any work: every path a conversion to ``path`` writes (the model; the TFLite Micro sources; Vela's
        kept files) is a regular file fuselite may write — not an input, nor inside one (a SavedModel's folder),
        nor a device, FIFO or folder (:func:`fuselite.paths.output_problem`). Raises :class:`InputError`."""
        from fuselite.tflite.micro import micro_source_names

        problem = output_problem(path, self._input_paths)
        name = os.path.splitext(os.path.basename(os.fspath(path)))[0] or "model"
        folders = {"micro_sources": (self.micro_sources, micro_source_names(name)),
                   "vela_output": (self.vela_output, [f"{name}_vela.tflite"])}
        for option, (folder, files) in folders.items():  # (a folder to be made holds nothing yet)
            if folder is None or problem:
                continue
            problem = directory_problem(folder, self._input_paths, option)
            if problem or not os.path.isdir(os.fspath(folder)):
                continue
            for file in files:
                problem = problem or output_problem(os.path.join(os.fspath(folder), file), self._input_paths,
                                                    f"{option}'s file")
        if problem:
            raise InputError(problem)

    def convert_to(self, path, check=None) -> bytes:
        """Convert and write ``path`` atomically (nothing is written if conversion fails, or if ``check``, called
        with the converter once the model is converted, raises)."""
        self.check_outputs(path)
        self._output_name = os.path.splitext(os.path.basename(os.fspath(path)))[0] or "model"
        try:
            data = self._convert()
        finally:
            self._output_name = "model"
        if check is not None:
            check(self)
        if self.progress is not None and len(data) >= PROGRESS_FROM:
            self.progress(f"writing {os.fspath(path)} ({len(data) / 2**20:,.0f} MiB)")
        write_atomic(path, data)
        self._write_micro_sources(data, os.path.splitext(os.path.basename(os.fspath(path)))[0])
        return data

    def _write_micro_sources(self, data: bytes, name: str) -> None:
        """The TFLite Micro sources next to the model (each file written atomically); listed in the report."""
        if self.micro_sources is None:
            return
        kinds = [k for k in self.report.ops_after if k != "CUSTOM"]
        files = micro_sources(data, kinds, name, self.report.micro["arena_bytes"])
        directory = os.fspath(self.micro_sources)
        os.makedirs(directory, exist_ok=True)
        written = []
        for file, text in files.items():
            write_atomic(os.path.join(directory, file), text.encode())
            written.append(os.path.join(directory, file))
        self.report.micro["sources"] = written


def _version() -> str:
    try:
        return metadata.version("fuselite")
    except metadata.PackageNotFoundError:  # run from a source tree that was not installed
        return "(not installed)"
