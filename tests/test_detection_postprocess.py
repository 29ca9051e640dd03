"""TFLite_Detection_PostProcess composites -> the SSD post-processing CUSTOM op, with the options the official
converter's prepare-composites stage writes (nms_utils.cc); runs on stock LiteRT and finds the boxes a hand-built
case says it must. A missing attribute is an error naming it (before: a model with 0 ops, silently)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import fuselite
from fuselite.runtime import run
from fuselite.tflite.flexbuffer import decode_options

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


# -- the official converter's prepare-composites cases (prepare-composite-functions-tf.mlir), ported (issue 32) ----

# @tflite_custom_nms: the attributed form as TensorFlow's object-detection exporter writes it (a NameAttrList text)
OD_SIGNATURE = (
    'name: "TFLite_Detection_PostProcess" attr { key: "max_detections" value { i: 10 } } '
    'attr { key: "max_classes_per_detection" value { i: 1 } } attr { key: "num_classes" value { i: 91 } } '
    'attr { key: "nms_score_threshold" value { f: 0.5 } } attr { key: "nms_iou_threshold" value { f: 0.6 } } '
    'attr { key: "y_scale" value { f: 5.0 } } attr { key: "x_scale" value { f: 10.0 } } '
    'attr { key: "h_scale" value { f: 1.0 } } attr { key: "w_scale" value { f: 2.0 } } '
    'attr { key: "use_regular_nms" value { b: false } }')


def _od_detector(signature=OD_SIGNATURE, body=None):
    @tf.function(experimental_implements=signature)
    def dummy_post_processing(box_encodings, class_predictions, anchors):
        if body is not None:
            return body(box_encodings, class_predictions, anchors)
        # the stand-in body of the exporter (and of the MLIR test): four scalars, no shape to go by
        boxes = tf.constant(0.0, dtype=tf.float32, name="boxes")
        scores = tf.constant(0.0, dtype=tf.float32, name="scores")
        classes = tf.constant(0.0, dtype=tf.float32, name="classes")
        num_detections = tf.constant(0.0, dtype=tf.float32, name="num_detections")
        return boxes, classes, scores, num_detections

    @tf.function(input_signature=[tf.TensorSpec([1, 100, 4], tf.float32), tf.TensorSpec([1, 100, 91], tf.float32),
                                  tf.TensorSpec([100, 4], tf.float32)])
    def detect(box_encodings, class_predictions, anchors):
        return dummy_post_processing(box_encodings, class_predictions, anchors)

    return detect


def _tf_fast_postprocess(encodings, scores, anchors, max_detections=10, score_threshold=0.5, iou_threshold=0.6,
                         scales=(5.0, 10.0, 1.0, 2.0)):
    """What LiteRT's SSD post-processing computes (fast NMS, one class per detection), in TensorFlow: the boxes
    decoded against the anchors, each anchor's best class, then TensorFlow's NMS over those scores."""
    y, x, h, w = tf.unstack(encodings[0], axis=1)
    ay, ax, ah, aw = tf.unstack(anchors, axis=1)
    yc, xc = y / scales[0] * ah + ay, x / scales[1] * aw + ax
    hh, hw = 0.5 * tf.exp(h / scales[2]) * ah, 0.5 * tf.exp(w / scales[3]) * aw
    boxes = tf.stack([yc - hh, xc - hw, yc + hh, xc + hw], axis=1)
    best, best_class = tf.reduce_max(scores[0], axis=1), tf.argmax(scores[0], axis=1)
    keep = tf.image.non_max_suppression(boxes, best, max_detections, iou_threshold, score_threshold)
    return (tf.gather(boxes, keep).numpy(), tf.cast(tf.gather(best_class, keep), tf.float32).numpy(),
            tf.gather(best, keep).numpy())


def _detector_inputs(rng):
    centres = rng.uniform(0.1, 0.9, (100, 2))
    anchors = np.concatenate([centres, rng.uniform(0.1, 0.3, (100, 2))], axis=1).astype(np.float32)
    encodings = rng.normal(0, 1, (1, 100, 4)).astype(np.float32)
    scores = rng.uniform(0, 0.45, (1, 100, 91)).astype(np.float32)  # below the 0.5 threshold but for a few anchors
    confident = rng.choice(100, rng.integers(4, 20), replace=False)
    scores[0, confident, rng.integers(0, 91, len(confident))] = rng.uniform(0.5, 1, len(confident))
    return encodings, scores, anchors


def test_od_placeholder_composite_takes_its_result_shapes_from_the_op_and_matches_tensorflow():
    """The exporter's stand-in body returns four scalars; the op's outputs are [1, 10, 4], [1, 10], [1, 10], [1].
    Before: declined ("result 0 would change shape from [] to [1, 10, 4]") and the model returned four zeros."""
    from fuselite.inspect import describe

    conv = fuselite.Converter.from_concrete_functions([_od_detector().get_concrete_function()], strict_fusion=True)
    data = conv.convert()
    info = describe(data)
    assert info["subgraphs"][0]["ops"] == {"CUSTOM(TFLite_Detection_PostProcess)": 1}, info["subgraphs"]
    outputs = info["signatures"]["serving_default"]["outputs"]
    assert [o["shape"] for o in outputs] == [[1, 10, 4], [1, 10], [1, 10], [1]]
    (record,) = conv.report.composites
    assert record["status"] == "fused" and record["shapes_from_op"] == {
        "0": "[1, 10, 4]", "1": "[1, 10]", "2": "[1, 10]", "3": "[1]"}, record
    for seed in range(8):
        encodings, scores, anchors = _detector_inputs(np.random.default_rng(seed))
        boxes, classes, confidences, count = run(data, [encodings, scores, anchors]).values()
        want_boxes, want_classes, want_scores = _tf_fast_postprocess(encodings, scores, anchors)
        n = len(want_scores)
        assert int(count[0]) == n and n > 1
        np.testing.assert_allclose(boxes[0, :n], want_boxes, atol=1e-5)  # measured: 1.2e-7 at most
        np.testing.assert_array_equal(classes[0, :n], want_classes)
        np.testing.assert_allclose(confidences[0, :n], want_scores, atol=0)


def test_a_body_computing_other_shapes_than_the_op_still_declines_with_the_reason():
    """A body that computes its results from the arguments (no placeholder) and disagrees with the op's shapes
    (here 5 detections for max_detections 10) is a genuine mismatch: declined, the body converted."""

    def five_detections(box_encodings, class_predictions, anchors):
        boxes = box_encodings[:, :5]
        scores = tf.reduce_max(class_predictions[:, :5], axis=2)
        return boxes, scores, scores, tf.reduce_sum(scores, axis=1)

    conv = fuselite.Converter.from_concrete_functions([_od_detector(body=five_detections).get_concrete_function()])
    conv.convert()
    (record,) = conv.report.composites
    assert record["status"] == "declined"
    assert record["reason"] == "result 0 would change shape from [1, 5, 4] to [1, 10, 4]"


def _valid_boxes(rng, n):
    """[y_min, x_min, y_max, x_max], a positive area, corners in the same order in every box (the body's domain)."""
    centre, size = rng.uniform(0, 1, (n, 2)), rng.uniform(0.05, 0.5, (n, 2))
    return np.concatenate([centre - size / 2, centre + size / 2], axis=1).astype(np.float32)


def test_nms_padded_of_100_boxes_is_non_max_suppression_v4_and_matches_the_body():
    """100 boxes, 10 selected: the fusion check's plain normal arguments (corners in any order) made the body and
    the op disagree ("differs ... by 54"), and the composite stayed ~180 ops with WHILE and IF. The check now
    draws boxes from the body's domain; the result is the op, equal to the body on valid boxes."""
    from fuselite.inspect import describe

    @tf.function(input_signature=[tf.TensorSpec([100, 4], tf.float32), tf.TensorSpec([100], tf.float32)])
    def nms(boxes, scores):
        return tf.image.non_max_suppression_padded(boxes, scores, 10, iou_threshold=0.5, score_threshold=0.1,
                                                   pad_to_max_output_size=True)

    conv = fuselite.Converter.from_concrete_functions([nms.get_concrete_function()], strict_fusion=True)
    data = conv.convert()
    ops = describe(data)["subgraphs"][0]["ops"]
    assert ops.get("NON_MAX_SUPPRESSION_V4") == 1 and "WHILE" not in ops and "IF" not in ops, ops
    (record,) = conv.report.composites
    assert record["status"] == "fused" and record["check"]["checked"], record
    for seed in range(10):
        rng = np.random.default_rng(seed)
        boxes, scores = _valid_boxes(rng, 100), rng.uniform(0, 1, 100).astype(np.float32)
        want_idx, want_n = (t.numpy() for t in nms(boxes, scores))
        got_idx, got_n = run(data, [boxes, scores]).values()
        assert int(got_n) == int(want_n) and int(want_n) > 1
        np.testing.assert_array_equal(got_idx, want_idx)  # the padding too: zeros in both


def test_nms_padded_with_tensor_arguments_as_the_mlir_test_writes_it():
    """@nms_padded of prepare-composite-functions-tf.mlir: max_output_size and both thresholds are arguments
    (the op's selected indices are then sized at run time)."""
    from tensorflow.python.ops.image_ops_impl import non_max_suppression_padded_v2

    from fuselite.inspect import describe

    @tf.function(input_signature=[tf.TensorSpec([100, 4], tf.float32), tf.TensorSpec([100], tf.float32),
                                  tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
                                  tf.TensorSpec([], tf.float32)])
    def nms(boxes, scores, max_output_size, iou_threshold, score_threshold):
        return non_max_suppression_padded_v2(boxes, scores, max_output_size, iou_threshold, score_threshold)

    conv = fuselite.Converter.from_concrete_functions([nms.get_concrete_function()], strict_fusion=True)
    data = conv.convert()
    ops = describe(data)["subgraphs"][0]["ops"]
    assert ops.get("NON_MAX_SUPPRESSION_V4") == 1 and "WHILE" not in ops, ops
    for seed in range(6):
        rng = np.random.default_rng(seed)
        boxes, scores = _valid_boxes(rng, 100), rng.uniform(0, 1, 100).astype(np.float32)
        args = [boxes, scores, np.int32(rng.integers(1, 30)), np.float32(rng.uniform(0.2, 0.8)),
                np.float32(rng.uniform(0, 0.5))]
        want_idx, want_n = (t.numpy() for t in nms(*args))
        got_idx, got_n = run(data, args).values()
        assert int(got_n) == int(want_n)
        np.testing.assert_array_equal(got_idx, want_idx)
