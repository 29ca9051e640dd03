"""Memory of a conversion against the size of the model's weights (issue 13: peak ≤ 3·N + the TF model).

Python's own allocations are traced (numpy arrays, the flatbuffer builder, the file's bytes);
TensorFlow's C++ heap is not, which is why ``benchmarks/memory.py`` measures the resident peak
of whole processes. The model is over the size above which export collects the garbage the
passes leave (``stages/export.py``'s ``COLLECT_ABOVE``), as a large model's conversion does.
"""

from __future__ import annotations

import gc
import tracemalloc

import keras
import numpy as np

import fuselite
from fuselite.stages.export import COLLECT_ABOVE


def test_the_weights_are_held_at_most_twice_over_and_once_after():
    n = 1800  # three Dense(n): 38.9 MB of float32 weights
    inputs = keras.Input((n,))
    x = inputs
    for _ in range(3):
        x = keras.layers.Dense(n)(x)
    model = keras.Model(inputs, x)
    model(np.zeros((1, n), np.float32))
    weights = sum(w.nbytes for w in model.get_weights())
    assert weights > COLLECT_ABOVE
    conv = fuselite.Converter.from_keras_model(model)
    gc.collect()
    tracemalloc.start()
    try:
        data = conv.convert()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) > 0.99 * weights  # (the zero biases are one buffer)
    # the frozen weights, their lowered (transposed) copies, then the builder and the file: the module's
    # constants become views of the file as it is built, so no more than about two copies coexist
    # (3.03·N before: the module's constants, the builder and the file)
    assert peak < 2.6 * weights, f"peak {peak / weights:.2f}·N"
    # after: the file, which the converter's module now views (2.02·N before: the module kept its own copy)
    assert held < 1.2 * weights, f"held {held / weights:.2f}·N"
