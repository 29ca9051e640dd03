"""Tensor and subgraph names as the writer gives them: without TensorFlow's trace counters (``StableNames``) and,
for people, without its call plumbing (``readable``)."""

from __future__ import annotations

import re


class StableNames:
    """Tensor and subgraph names without TensorFlow's trace counters.

    A traced function is named ``__inference_<name>_<counter>`` (a loop's body and
    condition ``<scope>_while_body_<counter>`` / ``_while_cond_``, a conditional's branches
    ``..._cond_true_<counter>`` / ``_cond_false_``), the counter counting every trace in
    the process, so the same model converted twice (or in another thread) would get
    other names and other bytes. Each distinct such name becomes ``<name>``,
    the next distinct one with the same ``<name>`` ``<name>_2`` and so on, numbered in
    the order the writer meets them (subgraphs, then tensors, in file order).

    Example::

        names = StableNames()
        names("lstm/PartitionedCall/__inference_composite_759/fill")  # 'lstm/PartitionedCall/composite/fill'
        names("__inference_composite_812/const")                      # 'composite_2/const'
    """

    _TRACED = re.compile(r"__inference_([A-Za-z0-9_.\-]+?)_\d+(?=$|/|:)"
                         r"|([A-Za-z0-9_.\-]*?(?:while_body|while_cond|cond_true|cond_false))_\d+(?=$|/|:|_)")

    def __init__(self):
        self._stable: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def _one(self, m: re.Match) -> str:
        traced = m.group(0)
        if traced not in self._stable:
            base = m.group(1) or m.group(2)
            n = self._count[base] = self._count.get(base, 0) + 1
            self._stable[traced] = base if n == 1 else f"{base}_{n}"
        return self._stable[traced]

    def __call__(self, name: str) -> str:
        return self._TRACED.sub(self._one, name) if "__inference_" in name or "while_" in name or "cond_" in name \
            else name


_PLUMBING = re.compile(r"(Stateful)?PartitionedCall(_\d+)?|composite(_\d+)?")


def readable(name: str) -> str:
    """A tensor name without TensorFlow's call plumbing: path segments ``PartitionedCall`` /
    ``StatefulPartitionedCall`` (the call of a function) and ``composite`` (the composite function a
    fused op came from) are dropped; the layer and op names stay.

    Example::

        readable("functional_1/encoder_1/PartitionedCall/composite/fill")   # 'functional_1/encoder_1/fill'
    """
    parts = [p for p in name.split("/") if not _PLUMBING.fullmatch(p)]
    return "/".join(parts) or name.rsplit("/", 1)[-1]
