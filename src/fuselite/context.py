"""The conversion context: what one conversion knows besides the module.

Options come in (batch size, fusion rules, strict fusion, IR checking and printing), the
report and the state that passes hand to later passes (frozen variables, variables read
as constant arguments, zero-initial marks, the output bytes) go out. Nothing about a
conversion lives in a module global, so conversions in several threads of one process do
not see each other.

Example::

    ctx = ConversionContext(trace=lambda ctx: entries, report=Report(source="..."))
    run_pipeline(PIPELINE, Module(), ctx)
    data = ctx.output
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from fuselite.fusion import RuleSet
from fuselite.passes.variables import ZeroInitialVariables
from fuselite.report import Report
from fuselite.targets import target_named


@dataclass
class ConversionContext:
    """One conversion's options, report and cross-pass state (see the module docstring)."""

    # -- options ----------------------------------------------------------------------
    trace: Callable[[ConversionContext], list]  # ctx -> entries (traces the user's program)
    report: Report
    rules: RuleSet = field(default_factory=lambda: RuleSet(None))
    strict_fusion: bool = False
    check_fusions: bool = True  # run each fusion against the composite's body before trusting it
    batch_size: int | None = None  # the batch size this run converts with (None: keep dynamic)
    input_shapes: dict = field(default_factory=dict)  # {input name: shape}: dimensions fixed at conversion
    verify_ir: bool = False  # run the IR verifier after every pass
    print_after: frozenset[str] = frozenset()  # pass names after which the IR is printed
    print_stream: IO[str] | None = None  # where (default: stderr)
    print_elide: int | None = 16  # constants with more elements print elided
    progress: Any = None  # called with each pass's name as it starts (the CLI's progress line)
    quantization: str | None = None  # None (float) or a mode of fuselite.quantize.MODES
    keep_float: tuple[str, ...] = ()  # ops kept float when quantizing (kinds, node names, scopes)
    representative_dataset: Any = None  # int8: the calibration samples (as tf.lite.TFLiteConverter takes them)
    integer_only: bool = False  # int8: an op that stays float is an error (TFLITE_BUILTINS_INT8 alone)
    max_quantization_error: float | None = None  # full integer: the end-to-end relative error to meet
    inference_input_type: str = "float32"  # int8: the model's input / output tensors
    inference_output_type: str = "float32"
    provenance: Any = None  # export.flatbuffer.Provenance: written into the model (description, metadata)
    bidirectional: str = "split"  # "split": two unidirectional ops; "fused": LiteRT's bidirectional op (float)
    rnn_form: str = "default"  # LSTM / SimpleRNN / GRU: "default" (per family), "fused", "unrolled" or "loop"
    threads: int = 1  # the LiteRT thread count the model will run with (the default forms depend on it)
    target: str = "litert"  # a target of fuselite/targets/: "litert", "micro" (only ops, versions and types
    # TFLite Micro's kernels take) or "ethos-u" (the micro target's forms, full integer, compiled with Vela)
    accelerator: str | None = None  # target="ethos-u": Vela's --accelerator-config
    vela_output: Any = None  # target="ethos-u": where Vela's compiled model is kept (None: not kept)
    output_name: str = "model"  # the name of the model's file (Vela's kept files are named after it)
    micro_sources: bool = False  # the firmware sources will be written (the model must run on TFLite Micro)

    # -- state handed from pass to pass ---------------------------------------------------
    zero_initial: ZeroInitialVariables = field(default_factory=ZeroInitialVariables)
    frozen: list[dict] = field(default_factory=list)  # variables the freeze passes made constants
    read_variables: dict[str, np.ndarray] = field(default_factory=dict)  # read as composites' constant args
    output: bytes | None = None
    float_output: bytes | None = None  # the model before quantization (to measure its error)
    float_names: dict[int, str] = field(default_factory=dict)  # value uid -> tensor name in float_output
    tensor_names: dict[int, str] = field(default_factory=dict)  # value uid -> tensor name in output
    quantized_outputs: dict[int, int] = field(default_factory=dict)  # quantization record -> its op's output uid
    ranges: dict[int, tuple[float, float]] = field(default_factory=dict)  # calibrated (min, max) by value uid
    fixed_params: dict[int, Any] = field(default_factory=dict)  # value uid -> its FakeQuant's int8 Quantization
    fake_quants: int = 0  # FakeQuant ops in the imported program (quantization-aware training)
    keras_int4: list = field(default_factory=list)  # frontend.keras_quantized.Int4Kernel of a Keras model
    error_samples: list[dict] = field(default_factory=list)  # calibration samples the error is measured on
    captured: dict[int, list] = field(default_factory=dict)  # value uid -> its values per calibration sample
    micro_only: list[str] = field(default_factory=list)  # quantized ops only TFLite Micro runs (int16 LSTMs)

    @property
    def on_micro(self) -> bool:
        """The model runs on TFLite Micro (target "micro", or "ethos-u": what Vela leaves to the CPU runs there)."""
        return target_named(self.target).runs_on_micro

    def selects(self, group: str) -> bool:
        """Whether the target (``fuselite/targets/``) runs the pipeline group ``group`` in this conversion."""
        return target_named(self.target).selects(group, self)

    def record_frozen_variables(self) -> None:
        """Update the report's frozen variables from what the passes froze or read so far."""
        read = [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in self.read_variables.items()]
        self.report.frozen_variables = sorted({v["name"]: v for v in self.frozen + read}.values(),
                                              key=lambda v: v["name"])
