"""What one catalog entry holds (:class:`Facts`) and the kernels' shapes it names (:class:`IntegerKernel`,
:class:`HybridKernel`); ``catalog.py`` says what each field means and derives the tables."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IntegerKernel:
    """How one op kind runs on int8 (read from its LiteRT kernel)."""

    output: str  # "range" (calibrated), "same" (the first input's params) or "fixed"
    fixed: tuple[float, int] | None = None  # (scale, zero point) of an int8 output when output == "fixed"
    weight: tuple[int, int] | None = None  # (operand, per-channel axis) of a symmetric int8 weight
    bias: int | None = None  # operand of an int32 bias at input scale x weight scale
    needs_bias: bool = False  # the int8 kernel requires a bias operand
    inputs_as_output: bool = False  # every input must have the output's parameters (requantized if not)
    input: int = 0  # the operand the bias scale multiplies with the weight's (TRANSPOSE_CONV: 2)


@dataclass(frozen=True)
class HybridKernel:
    """How one op kind runs with int8 weights (read from its LiteRT kernel)."""

    weights: tuple[int, ...]  # operand indices that become int8 (all present ones, or none)
    axis: int | None  # per-channel axis of each weight; None: one scale per operand
    asymmetric_option: bool  # write asymmetric_quantize_inputs=True (inputs quantized per row, asymmetric)
    float_input: bool = True  # operand 0 must be float32 (not for EMBEDDING_LOOKUP: its ids)
    float_below: int = 0  # every weight tensor smaller: the op stays float32 (as TF's converter leaves it)


@dataclass(frozen=True)
class Facts:
    """One op kind's quantized kernels (see the module docstring)."""

    integer: IntegerKernel | None = None
    no_integer: str | None = None  # why LiteRT has no integer kernel for it
    int16: bool = False  # a 16x8 kernel (LiteRT; TFLite Micro too unless micro == "int8")
    no_16x8: bool = False  # integer, but no 16x8 kernel in LiteRT: wider means float
    micro: str | None = None  # TFLite Micro: "int8" (no int16 kernel there) or "float" (no integer kernel there)
    saturates: dict[str, float] = field(default_factory=dict)  # dtype -> input past which the output saturates
    left_shift: dict[str, int] = field(default_factory=dict)  # dtype -> the kernel's left shift (ADD / SUB)
    clamp_limit: float | None = None  # a clamp's largest |limit| (round(limit / scale) must fit an int32)
    hybrid: HybridKernel | None = None
    versions: tuple | list = ()  # ordered (condition of the op, version) pairs: the first that holds wins (else 1)
    runtime: tuple = ()  # the earliest LiteRT runtime per op version (entry k: version k + 1; None: not listed)
    micro_op: str | None = None  # the MicroMutableOpResolver method that registers it (None: TFLite Micro lacks it)
    micro_limits: tuple = ()  # TFLite Micro: (condition of the op, why: text or a function of the op) its kernel
    # does not take, checked before writing (conditions.py)


# Read in each kernel's Prepare / Eval (LiteRT tflite/kernels/, docs/kernel-contracts.md §15): "same" where the
# kernel moves or compares raw integers (the output must have the input's parameters, unchecked), "range" where
# it rescales from the input's parameters to the output's (a multiplier or a lookup table built from both).
SAME = IntegerKernel("same")
RANGE = IntegerKernel("range")
AS_OUTPUT = IntegerKernel("range", inputs_as_output=True)

# TF's converter leaves weights under 1024 elements float (``minimum_elements_for_weights``):
# for such a layer the hybrid kernel's per-invoke quantization of its input costs more accuracy
# than the layer's size is worth, and so do int8 weights dequantized at load (their rounding:
# a Bidirectional(GRU(8)) 0.28% of its output range against the official file's 0.00%). fuselite
# leaves them float32 too.
FLOAT_WEIGHTS_BELOW = 1024
