"""TFLite_Detection_PostProcess composites -> the SSD post-processing CUSTOM op, with the options the official
converter's prepare-composites stage writes (nms_utils.cc); runs on stock LiteRT and finds the boxes a hand-built
case says it must. A missing attribute is an error naming it (before: a model with 0 ops, silently)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.export.flexbuffer import decode_options
from fuselite.runtime import run

ATTRS = {"max_detections": 3, "max_classes_per_detection": 1, "num_classes": 2, "nms_score_threshold": 0.3,
         "nms_iou_threshold": 0.5, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0,
         "use_regular_nms": False}
# anchors [y_center, x_center, h, w], far apart
ANCHORS = np.array([[0.2, 0.2, 0.2, 0.2], [0.2, 0.8, 0.2, 0.2], [0.8, 0.2, 0.2, 0.2], [0.8, 0.8, 0.2, 0.2]],
                   np.float32)


def _model(attrs):
    @tf.function(experimental_implements=fuselite.implements("TFLite_Detection_PostProcess", **attrs))
    def postprocess(boxes, scores, anchors):  # a placeholder body, as exported detectors have
        return tf.zeros([1, 3, 4]), tf.zeros([1, 3]), tf.zeros([1, 3]), tf.zeros([1])

    @tf.function(input_signature=[tf.TensorSpec([1, 4, 4], tf.float32), tf.TensorSpec([1, 4, 3], tf.float32)])
    def detect(boxes, scores):
        return postprocess(boxes, scores, tf.constant(ANCHORS))

    return detect


def test_fused_into_the_custom_op_with_the_official_options():
    from ai_edge_litert import schema_py_generated as schema

    conv = fuselite.Converter.from_concrete_functions([_model(ATTRS).get_concrete_function()])
    data = conv.convert()
    m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    (op,) = m.subgraphs[0].operators
    assert m.operatorCodes[op.opcodeIndex].customCode == b"TFLite_Detection_PostProcess"
    options = decode_options(bytes(op.customOptions))
    assert options == pytest.approx(ATTRS) and set(options) == set(ATTRS)
    assert [c["status"] for c in conv.report.composites] == ["fused"]

    # boxes exactly at the anchors; class scores: anchor 0 -> class 0 (0.9), anchor 3 -> class 1 (0.8)
    encodings = np.zeros((1, 4, 4), np.float32)
    scores = np.full((1, 4, 3), 0.05, np.float32)
    scores[0, 0, 1], scores[0, 3, 2] = 0.9, 0.8
    boxes, classes, confidences, count = run(data, [encodings, scores]).values()
    assert int(count[0]) == 2
    np.testing.assert_allclose(confidences[0, :2], [0.9, 0.8], atol=1e-6)
    np.testing.assert_array_equal(classes[0, :2], [0, 1])
    np.testing.assert_allclose(boxes[0, 0], [0.1, 0.1, 0.3, 0.3], atol=1e-6)  # ymin, xmin, ymax, xmax
    np.testing.assert_allclose(boxes[0, 1], [0.7, 0.7, 0.9, 0.9], atol=1e-6)


def test_missing_attribute_is_named():
    attrs = {k: v for k, v in ATTRS.items() if k != "max_classes_per_detection"}
    conv = fuselite.Converter.from_concrete_functions([_model(attrs).get_concrete_function()])  # not strict
    with pytest.raises(fuselite.ConversionError, match="'max_classes_per_detection' is not set"):
        conv.convert()


def test_non_max_suppression_padded_is_one_op_and_matches_tensorflow():
    """tf.image.non_max_suppression_padded (TensorFlow marks it non_max_suppression_padded_v2) ->
    NON_MAX_SUPPRESSION_V4, as the official converter does; before: ~180 ops with WHILE loops."""
    from conftest import litert_op_names

    @tf.function(input_signature=[tf.TensorSpec([20, 4], tf.float32), tf.TensorSpec([20], tf.float32)])
    def nms(boxes, scores):
        return tf.image.non_max_suppression_padded(boxes, scores, 5, iou_threshold=0.5, score_threshold=0.1,
                                                   pad_to_max_output_size=True)

    conv = fuselite.Converter.from_concrete_functions([nms.get_concrete_function()])
    data = conv.convert()
    assert "NON_MAX_SUPPRESSION_V4" in litert_op_names(data) and "WHILE" not in litert_op_names(data)
    (record,) = conv.report.composites
    assert record["status"] == "fused" and record["check"]["checked"], record
    rng = np.random.default_rng(0)
    for _ in range(5):
        corner = rng.uniform(0, 0.8, (20, 2)).astype(np.float32)
        boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.3, (20, 2)).astype(np.float32)], axis=1)
        scores = rng.uniform(0, 1, 20).astype(np.float32)
        want_idx, want_n = (t.numpy() for t in nms(boxes, scores))
        got_idx, got_n = run(data, [boxes, scores]).values()
        assert int(got_n) == int(want_n)
        np.testing.assert_array_equal(got_idx.reshape(-1)[:int(want_n)], want_idx.reshape(-1)[:int(want_n)])
