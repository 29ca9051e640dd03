"""Dynamic-size TensorArrays (``size=0, dynamic_size=True``), TF2 functions and TF1 SavedModels (issue 17).

Their lists start empty and grow with each write: every write pads the dense list up to the
index it writes (``passes/tensor_lists.py``, ``_grow``). They used to be written as a list of 0
rows, whose first write failed in LiteRT (``dynamic_update_slice.cc ... failed to prepare``).
Run on LiteRT at several lengths against TensorFlow.
"""

from __future__ import annotations

import numpy as np
import pytest

import fuselite
from fuselite.runtime import run


def _tf2_function():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for i in tf.range(tf.shape(x)[0]):
            ta = ta.write(i, x[i] * 2.0 + tf.cast(i, tf.float32))
        return ta.stack()

    return f


def _tf1_saved_model(path):
    import tensorflow as tf

    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        n = tf.shape(x)[0]
        _, ta = tf.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, tf.tanh(x[i]))), [0, ta])
        y = tf.identity(ta.stack(), name="y")
        with tf.compat.v1.Session() as sess:
            tf.compat.v1.saved_model.simple_save(sess, str(path), {"x": x}, {"y": y})
    return lambda v: np.tanh(v)


@pytest.mark.parametrize("source", ["tf2_function", "tf1_saved_model"])
def test_dynamic_size_tensor_array_grows_with_its_writes(tmp_path, source):
    if source == "tf2_function":
        f = _tf2_function()
        data = fuselite.Converter.from_concrete_functions([f.get_concrete_function()]).convert()

        def want(v):
            return f(v).numpy()
    else:
        want = _tf1_saved_model(tmp_path / "m")
        data = fuselite.Converter.from_saved_model(tmp_path / "m").convert()
    rng = np.random.default_rng(0)
    for rows in (1, 4, 9):
        x = rng.standard_normal((rows, 3)).astype(np.float32)
        (got,) = run(data, [x]).values()
        np.testing.assert_allclose(got, want(x), atol=1e-6, err_msg=f"{rows} rows")
