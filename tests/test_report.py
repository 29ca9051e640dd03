"""converter.report: ops before/after, stage times, frozen variables, text and JSON."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf

import fuselite
from fuselite.passes.manager import pass_names
from fuselite.pipeline import PIPELINE


def _converted():
    w = tf.Variable(np.ones((3, 2), np.float32), name="weights")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def f(x):
        return tf.nn.relu(tf.matmul(x, w) + 1.0)

    conv = fuselite.Converter.from_concrete_functions([f.get_concrete_function()])
    data = conv.convert()
    return conv, data


def test_report_contents():
    conv, data = _converted()
    r = conv.report
    assert r.ops_before.get("MatMul") == 1 and r.ops_before.get("Relu") == 1
    assert r.ops_after == {"FULLY_CONNECTED": 1}  # bias and ReLU fused
    assert set(r.stage_seconds) == set(pass_names(PIPELINE, conditional=False))  # each pass timed under its name
    assert [v["name"] for v in r.frozen_variables] == ["weights"]
    assert r.size_bytes == len(data)


def test_report_text_and_json():
    conv, _ = _converted()
    text = str(conv.report)
    assert "FULLY_CONNECTED" in text and "frozen variables: 1" in text
    d = json.loads(conv.report.to_json())
    assert d["ops_after"] == {"FULLY_CONNECTED": 1}
    assert d["total_seconds"] >= 0 and d["frozen_variables"][0]["shape"] == [3, 2]
