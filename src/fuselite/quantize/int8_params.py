"""Integer quantization parameters: activation scales and zero points from ranges (int8 asymmetric, int16
symmetric), their floors, and values quantized at them."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Quantization, Value

FLOAT32 = np.dtype(np.float32)


INT8 = np.dtype(np.int8)


INT16 = np.dtype(np.int16)


# The smallest range an activation gets. The official converter widens a calibrated activation range narrower
# than kNearZeroTolerance (1e-6) to at least [-1e-6, 1e-6] (TensorRangeSanityCheck; measured in TF 2.21: a near-zero
# activation gets 2e-6 / 255 = 7.84e-9) and a weight's to [-5e-7, 5e-7] (ExpandVerySmallRange, kSmallestHalfRange;
# compiler/mlir/lite/quantization/common/quantization_lib/quantization_utils.cc). fuselite takes the weights' half
# range for activations too: keras-hub's MobileNetV3 with random weights carries values of ~1e-7 through a dozen
# blocks, which twice the steps keep (int8 4.8% -> 2.8%; the official converter's 5.1%). A raw range of an
# almost-constant tensor gives scales down to 1e-13, which overflow the kernels' multipliers and fused-activation
# limits (kernel_util.cc Quantize: RELU6's 6 / scale must fit an int32, 2.79e-9 < 3.92e-9; output_scale_floor
# keeps that).
NEAR_ZERO = 1e-6


MIN_SCALE = NEAR_ZERO / 255  # the int8 scale of that range: no int8 activation scale is smaller


# The int16 (symmetric) scale of that range. An int16 scale floored at the int8 one would leave a tensor whose
# values span 3e-7 (EfficientNet's last activation with random weights) ~40 steps: 8% of its range.
MIN_SCALE_INT16 = NEAR_ZERO / 2 / 32767


def _widened(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] widened to hold 0 and, when no wider than NEAR_ZERO, to at least [-NEAR_ZERO / 2, NEAR_ZERO / 2]."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise NoRange(f"its calibrated range [{lo}, {hi}] is not finite (the float model gives inf or NaN on "
                       "the representative dataset)")
    if hi - lo <= NEAR_ZERO:
        lo, hi = min(lo, -NEAR_ZERO / 2), max(hi, NEAR_ZERO / 2)
    return lo, hi


def activation_params(lo: float, hi: float) -> Quantization:
    """Asymmetric int8 parameters for values in [lo, hi] (widened to hold 0, as the spec says, and to the
    official converter's smallest range)."""
    lo, hi = _widened(lo, hi)
    scale = max((hi - lo) / 255, MIN_SCALE)
    zero_point = int(np.clip(round(-128 - lo / scale), -128, 127))
    return Quantization((float(np.float32(scale)),), (zero_point,))


def int16_params(lo: float, hi: float) -> Quantization:
    """Symmetric int16 parameters (zero point 0, as every 16x8 kernel requires) for values in [lo, hi]."""
    peak = max(abs(float(lo)), abs(float(hi)))
    # All zeros: the scale of a [-1, 1] range. A large one would break the kernels that rescale to twice
    # the larger input scale (int16 ADD / SUB need that below 2^15 x their output scale).
    scale = (peak if peak > 0 else 1.0) / 32767
    return Quantization((float(np.float32(max(scale, MIN_SCALE_INT16))),), (0,))


class NoRange(Exception):
    pass


def is_activation(v: Value | None) -> bool:
    return v is not None and not v.is_const and v.dtype == FLOAT32


INT16_HEADROOM = 2.0  # int16 ranges are calibrated ranges x this: inputs beyond the calibration data do not


def params_for(dtype: np.dtype, lo: float, hi: float, headroom: float = 1.0) -> Quantization:
    return int16_params(lo * headroom, hi * headroom) if dtype == INT16 else activation_params(lo, hi)


def represented(q: Quantization, dtype: np.dtype) -> tuple[float, float]:
    """The reals an integer tensor with parameters ``q`` can hold."""
    info = np.iinfo(dtype)
    return q.scale[0] * (info.min - q.zero_point[0]), q.scale[0] * (info.max - q.zero_point[0])


def dequantized(v: Value) -> np.ndarray:
    """The reals of an integer constant with per-tensor parameters."""
    return (np.asarray(v.const, np.float64) - v.quant.zero_point[0]) * v.quant.scale[0]


def holds(v: Value, dtype: np.dtype) -> tuple[float, float]:
    """The reals integer value ``v`` can hold: a constant's own, an activation's its parameters' range."""
    if v.is_const:
        real = dequantized(v)
        return float(real.min()), float(real.max())
    return represented(v.quant, dtype)


def quantize_values(x: np.ndarray, q: Quantization, dtype: np.dtype = INT8) -> np.ndarray:
    """Real values as ``dtype`` (int8 or int16) with per-tensor parameters ``q``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(np.asarray(x, np.float64) / q.scale[0]) + q.zero_point[0], info.min, info.max).astype(dtype)


def int32_bias(values: np.ndarray, scales: np.ndarray, dtype=np.int32) -> np.ndarray:
    """A bias as int32 (int64 for a 16x8 kernel) at ``scales`` (input scale x weight scale), zero point 0."""
    q = np.rint(np.asarray(values, np.float64) / np.asarray(scales, np.float64))
    info = np.iinfo(dtype)
    return np.clip(q, info.min + 1, info.max).astype(dtype)


# The most steps an int32 bias takes: INT32_MAX / 2, room left for the accumulator (the official quantizer's
# kBiasMax, quantization_driver.cc); a larger bias widens its weight's scale instead.
BIAS_MAX = np.iinfo(np.int32).max // 2


def bias_scales(values: np.ndarray, scales: np.ndarray, per_tensor: bool) -> tuple[np.ndarray, int]:
    """A bias's scales (input scale x weight scale, per channel) widened to |bias| / BIAS_MAX where the bias
    would pass BIAS_MAX steps (the official quantizer's SetBiasParamsWithAdjustments, quantization_driver.cc; a
    per-tensor weight: by the largest |bias|), and how many channels that widened. A bias of 3 (a hard sigmoid's,
    folded) behind an input of scale 1e-8 would otherwise clip to int32's limit, and the op's output with it."""
    peak = np.abs(np.asarray(values, np.float64))
    if per_tensor:
        peak = np.full_like(scales, peak.max() if peak.size else 0.0)
    over = peak / scales > BIAS_MAX
    return np.where(over, peak / BIAS_MAX, scales), int(over.sum())


FIXED_INT16 = (1 / 32768, 0)
