"""TensorFlow dtypes <-> the IR's dtypes (numpy dtypes, or "resource" / "variant" / "string").

Used by the frontend when it imports a graph and by passes that ask TensorFlow about IR values;
TensorFlow is imported only when a function is called.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def tf_dtype_to_ir(dt) -> Any:
    """tf.DType -> numpy dtype, or 'resource' / 'variant' / 'string'."""
    import tensorflow as tf

    dt = tf.as_dtype(dt)
    if dt == tf.resource:
        return "resource"
    if dt == tf.variant:
        return "variant"
    if dt == tf.string:
        return "string"
    return np.dtype(dt.as_numpy_dtype)


def tf_dtype_for(dtype):
    """IR dtype -> tf.DType (None for dtypes TF graphs cannot hold)."""
    import tensorflow as tf

    if isinstance(dtype, str):
        return {"resource": tf.resource, "variant": tf.variant, "string": tf.string}.get(dtype)
    try:
        return tf.as_dtype(np.dtype(dtype))
    except TypeError:
        return None
