"""``TFLite_Detection_PostProcess`` composites -> LiteRT's SSD post-processing custom op.

As the official converter's prepare-composites stage does (``ConvertSSDPostProcessFunc`` in
``tflite/converter/utils/nms_utils.cc``): a function with
``experimental_implements="TFLite_Detection_PostProcess"`` and the attributes
``max_detections``, ``max_classes_per_detection``, ``num_classes`` (ints),
``nms_score_threshold``, ``nms_iou_threshold``, ``y_scale``, ``x_scale``, ``h_scale``,
``w_scale`` (floats) and ``use_regular_nms`` (bool), three arguments (box encodings
[1, boxes, 4], class predictions [1, boxes, classes + 1], anchors [boxes, 4]) and four
results, becomes one ``CUSTOM`` op ``TFLite_Detection_PostProcess`` whose flexbuffer options
hold those attributes (and ``detections_per_class`` when given). Its kernel
(``detection_postprocess.cc``) is in LiteRT's default op resolver. The results are
[1, N, 4] boxes, [1, N] classes, [1, N] scores and [1] the number of detections, with
N = max_detections × max_classes_per_detection. Those are the composite's result shapes whatever the placeholder
body returns (TensorFlow's object-detection exporter returns four ``tf.constant(0.0)`` scalars; a result computed
from no argument is a placeholder, ``Result.placeholder``, and takes the op's shape, callers included).

The composite's own body (often a placeholder in exported detectors) is not what the op
computes, so a missing or mistyped attribute or a wrong signature stops the conversion with
an error naming it (``Composite.refuse``), whatever ``strict_fusion`` says: never a silently
different model (before this rule: a model with 0 ops).
"""

from __future__ import annotations

import numpy as np

from fuselite.fusion.registry import fusion

CODE = "TFLite_Detection_PostProcess"
_INTS = ("max_detections", "max_classes_per_detection", "num_classes")
_FLOATS = ("nms_score_threshold", "nms_iou_threshold", "y_scale", "x_scale", "h_scale", "w_scale")


@fusion(CODE)
def fuse_detection_postprocess(c):
    a = c.attrs
    if len(c.args) != 3:
        c.refuse(f"{CODE} takes 3 arguments (box encodings, class predictions, anchors), got {len(c.args)}")
    if len(c.results) != 4:
        c.refuse(f"{CODE} has 4 results (boxes, classes, scores, number of detections), got {len(c.results)}")
    options = {}
    for key in _INTS + ("detections_per_class",):
        v = a.get(key)
        if v is None and key == "detections_per_class":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            c.refuse(f"{CODE}: attribute '{key}' is not set or not an integer (got {v!r})")
        options[key] = int(v)
    for key in _FLOATS:
        v = a.get(key)
        if isinstance(v, bool) or not isinstance(v, (float, int, np.floating, np.integer)):
            c.refuse(f"{CODE}: attribute '{key}' is not set or not a float (got {v!r})")
        options[key] = float(v)
    regular = a.get("use_regular_nms")
    if not isinstance(regular, (bool, np.bool_, int, np.integer)):
        c.refuse(f"{CODE}: attribute 'use_regular_nms' is not set or not a bool (got {regular!r})")
    options["use_regular_nms"] = bool(regular)
    boxes, scores, anchors = c.args
    if boxes.shape is None or len(boxes.shape) != 3 or boxes.shape[-1] != 4:
        c.refuse(f"{CODE}: box encodings must be [batch, boxes, 4], got {boxes.shape}")
    n = options["max_detections"] * options["max_classes_per_detection"]
    f32 = np.dtype(np.float32)
    outs = [(f32, (1, n, 4)), (f32, (1, n)), (f32, (1, n)), (f32, (1,))]
    return c.custom_op(CODE, [boxes, scores, anchors], options, outs=outs)


NMS_PADDED = "non_max_suppression_padded_v2"


def _corner_boxes(rng, shape):
    """[N, 4] boxes as [y_min, x_min, y_max, x_max] with a positive area, centres in [0, 1): every box has its
    corners in the same order and a positive coordinate, the domain on which the body is NMS (see below)."""
    n = shape[0]
    centre, size = rng.uniform(0, 1, (n, 2)), rng.uniform(0.05, 0.5, (n, 2))
    return np.concatenate([centre - size / 2, centre + size / 2], axis=1)


@fusion(NMS_PADDED)
def fuse_nms_padded(c):
    """``tf.image.non_max_suppression_padded`` (TensorFlow marks its implementation with this interface) ->
    ``NON_MAX_SUPPRESSION_V4``, as the official converter's ``ConvertNMSPaddedFunc`` does: arguments 0-4 are
    boxes [N, 4], scores [N], max_output_size, iou_threshold and score_threshold; the results are the selected
    indices (padded with zeros, as both compute them) and how many are valid. Batched boxes have no LiteRT op:
    declined (converted from the body).

    The body is greedy NMS only on boxes whose corners are all in the same order with a positive area: it orders
    every box's corners as the *first* box's are (``canonicalize_coordinates``: ``y_1[0, 0, 0] <= y_2[0, 0, 0]``)
    and counts a box as selected only if one of its coordinates is positive (``reduce_any(selected_boxes > 0)``),
    where LiteRT's kernel orders each box's corners on its own and selects any box. So the fusion check draws its
    arguments from that domain (:meth:`Composite.draw_for_check`): boxes ``[y_min, x_min, y_max, x_max]`` with
    centres in [0, 1), scores in [0, 1) (sorted when the body is told its input is sorted), thresholds in [0, 1)."""
    if len(c.args) < 5:
        c.decline(f"{NMS_PADDED} needs at least 5 arguments, got {len(c.args)}")
    if len(c.results) != 2:
        c.decline(f"{NMS_PADDED} has 2 results, got {len(c.results)}")
    boxes, scores, max_out, iou, score = c.args[:5]
    if boxes.shape is None or len(boxes.shape) != 2:
        c.decline("batched boxes: LiteRT's NON_MAX_SUPPRESSION_V4 takes [boxes, 4] only")
    if boxes.dtype != np.float32 or scores.dtype != np.float32:
        c.decline("boxes and scores must be float32")
    sorted_input = c.args[5].const if len(c.args) > 5 else False
    n = boxes.shape[0] or 16
    c.draw_for_check(0, _corner_boxes)
    c.draw_for_check(1, lambda rng, shape: rng.uniform(0, 1, shape) if sorted_input is not None and not sorted_input
                     else -np.sort(-rng.uniform(0, 1, shape)))
    c.draw_for_check(2, lambda rng, shape: rng.integers(1, n + 1, shape))
    c.draw_for_check(3, lambda rng, shape: rng.uniform(0.2, 0.8, shape))
    c.draw_for_check(4, lambda rng, shape: rng.uniform(0, 0.5, shape))
    m = int(max_out.const) if max_out.const is not None else None
    sel, valid = c.op("NON_MAX_SUPPRESSION_V4", [boxes, scores, max_out, iou, score], {},
                      outs=[(np.dtype(np.int32), (m,)), (np.dtype(np.int32), ())])
    want = c.results[0].shape  # TensorFlow's v2 keeps a batch of 1: [1, M]
    if want is not None and tuple(want) != (m,):
        unknown = [i for i, d in enumerate(want) if d is None]
        known = int(np.prod([d for d in want if d is not None]))
        if len(unknown) > 1 or (m is not None and (m % known if known else m)):
            c.decline(f"the selected indices' shape {want} is not known well enough to reshape to")
        shape = tuple(d if d is not None else (m // known if m is not None else None) for d in want)
        sel = c.op("RESHAPE", [sel, np.array([-1 if d is None else d for d in want], np.int32)], dtype=np.int32,
                   shape=shape)
    if c.results[1].shape not in (None, ()):
        valid = c.op("RESHAPE", [valid, np.array(c.results[1].shape, np.int32)], dtype=np.int32,
                     shape=tuple(c.results[1].shape))
    return [sel, valid]
