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
from typing import Any

import numpy as np

from fuselite.options import OPTIONS
from fuselite.passes.variables import ZeroInitialVariables
from fuselite.report import Report
from fuselite.targets import target_named


@dataclass
class ConversionContext:
    """One conversion's options, report and cross-pass state (see the module docstring)."""

    # -- options ----------------------------------------------------------------------
    trace: Callable[[ConversionContext], list]  # ctx -> entries (traces the user's program)
    report: Report
    # every option fuselite/options/ declares, as this run takes it (checked; the run's batch size and recurrent
    # form; the input / output types the target forces; no calibration data in a float run): ``ctx.<name>``
    options: dict[str, Any] = field(default_factory=lambda: {n: o.checked(o.initial()) for n, o in OPTIONS.items()})
    print_elide: int | None = 16  # constants with more elements print elided
    quantization: str | None = None  # None (float) or a mode of fuselite.quantize.MODES
    integer_only: bool = False  # int8: an op that stays float is an error (TFLITE_BUILTINS_INT8 alone)
    provenance: Any = None  # tflite.provenance.Provenance: written into the model (description, metadata)
    accelerator: str | None = None  # target="ethos-u": Vela's --accelerator-config
    output_name: str = "model"  # the name of the model's file (Vela's kept files are named after it)

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
    error_signature: str | None = None  # the signature the error is measured on (None: the first)
    captured: dict[int, list] = field(default_factory=dict)  # value uid -> its values per calibration sample
    micro_only: list[str] = field(default_factory=list)  # quantized ops only TFLite Micro runs (int16 LSTMs)
    fold_budget: int | None = None  # bytes folding may allocate, measured at the first fold (stages/groups.py)

    def __getattr__(self, name: str):
        """An option's value (``ctx.threads``): the fields above hold the rest."""
        options = self.__dict__.get("options")
        if options is not None and name in options:
            return options[name]
        raise AttributeError(f"the conversion context has no field or option {name!r}")

    @property
    def on_micro(self) -> bool:
        """The model runs on TFLite Micro (target "micro", or "ethos-u": what Vela leaves to the CPU runs there)."""
        return target_named(self.target).runs_on_micro

    @property
    def for_compiled_model(self) -> bool:
        """The file must load in LiteRT's CompiledModel API too (no variable tensors): every target but TFLite
        Micro's, unless ``litert_api="interpreter"``."""
        return not self.on_micro and self.litert_api != "interpreter"

    def selects(self, group: str) -> bool:
        """Whether the target (``fuselite/targets/``) runs the pipeline group ``group`` in this conversion."""
        return target_named(self.target).selects(group, self)

    def record_frozen_variables(self) -> None:
        """Update the report's frozen variables from what the passes froze or read so far."""
        read = [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in self.read_variables.items()]
        self.report.frozen_variables = sorted({v["name"]: v for v in self.frozen + read}.values(),
                                              key=lambda v: v["name"])
