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
N = max_detections × max_classes_per_detection.

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
