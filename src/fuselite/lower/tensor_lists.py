"""Tensor lists outside Keras' loops (EmptyTensorList, TensorListPushBack, TensorListConcatV2, TensorListResize) as dense tensors where their sizes are known."""

from __future__ import annotations
