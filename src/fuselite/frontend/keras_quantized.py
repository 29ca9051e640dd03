"""Keras 3's own int4 weights (``model.quantize("int4")``), kept int4 in the LiteRT model.

Keras' int4 ``Dense`` stores its kernel packed two values per int8 and unpacks and scales it in
its ``call``; the traced graph does that on constants, so folding leaves a float32 kernel — larger
than the float model's. Read from the layer objects, each int4 kernel is known here exactly: the
float32 array folding will produce, and the int4 values, scales and zero points behind it. The
``keras-int4-weights`` pass puts a ``DEQUANTIZE`` of an INT4 constant where that array is used
(LiteRT's ``dequantize.cc`` takes int4, per channel, with zero points; a constant input is
dequantized once, at the first invoke): the model computes Keras' numbers from int4 storage.

Keras' two int4 schemes (``keras/src/layers/core/dense.py``, ``_int4_call``):

- per channel (``Int4QuantizationConfig(block_size=-1)``): symmetric; the graph multiplies by the
  int4 values and divides the result by ``kernel_scale`` — the values are the folded kernel;
- sub-channel (the default, ``block_size=128``): ``(q - kernel_zero[g]) * kernel_scale[g]`` per group
  ``g`` of ``block_size`` inputs. One group (inputs <= block_size) is int4 per output channel with a
  zero point; several groups are not (LiteRT's blockwise int4 has no zero points: ``EvalBlockwise4Bit``),
  so those kernels are stored int8 per output channel, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.errors import ConversionError


@dataclass
class Int4Kernel:
    """One Keras int4 kernel: ``folded`` (float32, [inputs, units]) is what the traced graph computes from it."""

    layer: str
    folded: np.ndarray
    values: np.ndarray  # [inputs, units]: int4 values (int8 numbers in -8..7), or int8 ones when ``bits`` is 8
    scale: np.ndarray  # [units]
    zero_point: np.ndarray  # [units]
    bits: int  # 4, or 8 where the kernel cannot be int4 in LiteRT
    why: str | None = None  # why 8 bits


def _layers(model):
    flatten = getattr(model, "_flatten_layers", None)
    return list(flatten(include_self=False, recursive=True)) if flatten else list(getattr(model, "layers", []))


SUPPORTED_MODES = ("int8", "int4")  # Keras quantization modes with a LiteRT form here


class UnsupportedKerasQuantization(ConversionError):
    """A Keras layer quantized in a mode LiteRT has no form for here."""


def int4_kernels(model) -> list[Int4Kernel]:
    """The int4 kernels of a Keras 3 model's ``Dense`` layers (``quantize("int4")``).

    Raises :class:`UnsupportedKerasQuantization` for a layer quantized otherwise than int8 / int4
    (Keras' float8: LiteRT has no float8 type; GPTQ / AWQ, and int4 in layers other than Dense:
    not read here yet) — never a model with its weights silently float32."""
    found = []
    for layer in _layers(model):
        mode = getattr(layer, "quantization_mode", None)
        if mode is None:
            continue
        if mode not in SUPPORTED_MODES or (mode == "int4" and type(layer).__name__ != "Dense"):
            raise UnsupportedKerasQuantization(
                f"Keras layer '{layer.path}' ({type(layer).__name__}) is quantized as {mode!r}, which fuselite does "
                "not convert: supported are quantize('int8') and, on Dense layers, quantize('int4'); "
                + ("LiteRT has no float8 type. " if mode == "float8" else "")
                + "Convert the float model and quantize with optimizations=[tf.lite.Optimize.DEFAULT] instead (and "
                "target_spec.supported_types=['int4'] for blockwise int4 weights)")
        if mode != "int4":
            continue
        from keras import quantizers

        q = np.asarray(quantizers.unpack_int4(layer._kernel, layer._orig_output_dim, axis=-1)).astype(np.int8)
        scale = np.asarray(layer.kernel_scale, np.float32)
        block = getattr(layer, "_int4_block_size", None)
        units = q.shape[1]
        if block is None or block == -1:  # x @ q, then / kernel_scale: the folded kernel is q itself
            found.append(Int4Kernel(layer.path, q.astype(np.float32), q, np.ones(units, np.float32),
                                    np.zeros(units, np.int64), 4))
            continue
        groups = np.asarray(layer.g_idx).astype(np.int64)
        zero = np.asarray(layer.kernel_zero).astype(np.float32)
        folded = (q.astype(np.float32) - zero[groups]) * scale[groups]
        if scale.shape[0] == 1:
            found.append(Int4Kernel(layer.path, folded, q, scale[0], zero[0].astype(np.int64), 4))
            continue
        peak = np.abs(folded).max(axis=0)
        step = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        values = np.clip(np.round(folded / step), -127, 127).astype(np.int8)
        found.append(Int4Kernel(layer.path, folded, values, step, np.zeros(units, np.int64), 8,
                                f"sub-channel int4 in {scale.shape[0]} groups of {block} inputs, each with a zero "
                                "point: LiteRT's blockwise int4 has none, so int8 per output channel"))
    return found
