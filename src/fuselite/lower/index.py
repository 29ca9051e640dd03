"""Index and array ops: diagonals, segments, scatters, stitches, Unique, SparseToDense, searches, XLA's gather.

Each rule says which LiteRT kernel it reads (``tflite/kernels/<op>.cc``) and, where it does more than the official
converter (``legalize_patterns.td``, ``legalize_tf.cc``, ``lower_tf.cc``), how. LiteRT's MATRIX_DIAG and
MATRIX_SET_DIAG take the main diagonal only, so other diagonals, bands, sizes, paddings and alignments (and the
diagonal parts) are a GATHER at constant positions of the flattened diagonals or matrices; sorted-segment
reductions are the unsorted kernels over ``max(ids) + 1`` segments, empty segments set to TensorFlow's 0; a
TensorScatter update / add / sub is SCATTER_ND combined with the tensor, a max / min is UNSORTED_SEGMENT_MAX / MIN
over the indices' row-major positions; XLA's Gather is GATHER_ND between transposes, its indices clamped as XLA
clamps them. Integer forms: ``ops/moves.py``'s entries for the kinds first written here (MATRIX_DIAG stays float:
its kernel writes a raw 0, not the zero point).
"""
from __future__ import annotations

import numpy as np

from fuselite.ir import Value
from fuselite.lower.registry import LowerCtx, lowering

_NO_ACT = {"fused_activation_function": "NONE"}
_SEGMENT_KERNEL_TYPES = (np.float32, np.int32)  # unsorted_segment.cc / segment_sum.cc: "data->type == Int32 || Float32"
# matrix_diag.cc / matrix_set_diag.cc switch on these; any other type (bool) would be read as float32
_DIAG_KERNEL_TYPES = (np.float32, np.int8, np.uint8, np.int16, np.int32, np.int64)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _gather(ctx: LowerCtx, params: Value, indices, axis: int, shape) -> Value:
    idx = indices if isinstance(indices, Value) else ctx.i32(indices)
    return ctx.emit("GATHER", [params, idx], {"axis": axis, "batch_dims": 0}, dtype=params.dtype, shape=shape)


def _reshape_keeping_batch(ctx: LowerCtx, v: Value, batch: tuple, tail: list[int]) -> Value:
    """``v`` reshaped to ``batch + tail``: one unknown batch dim is written -1, more than one is refused."""
    if sum(d is None for d in batch) > 1:
        ctx.fail("more than one batch dimension unknown before conversion")
    dims = [-1 if d is None else int(d) for d in batch] + [int(t) for t in tail]
    return ctx.reshape(v, dims)


def _num_segments(ctx: LowerCtx, ids: Value) -> Value:
    """The segment count of sorted ids: ``max(ids) + 1`` (a constant when the ids are)."""
    if ids.is_const:
        return ctx.i32(int(ids.const.max()) + 1 if ids.const.size else 0)
    top = ctx.emit("REDUCE_MAX", [ids, ctx.i32([0])], {"keep_dims": False}, dtype=np.int32, shape=())
    return ctx.emit("ADD", [top, ctx.i32(1)], _NO_ACT, dtype=np.int32, shape=())


# --------------------------------------------------------------------------------------------
# diagonals: MatrixDiag / MatrixSetDiag (V1, V2, V3)
# --------------------------------------------------------------------------------------------


def _band_positions(rows: int, cols: int, k0: int, k1: int, max_len: int, align: str):
    """For each (row, col) of a ``rows x cols`` matrix: whether it is on a diagonal ``k0 <= col - row <= k1``, and
    its position in the diagonals flattened to ``[(k1 - k0 + 1) * max_len]`` (TF's MatrixDiagV3 formula: diagonal
    ``k1 - d``, element ``col - max(d, 0) + offset``, offset ``max_len - len(d)`` where ``align`` puts d right)."""
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    d = j - i
    in_band = (d >= k0) & (d <= k1)
    length = np.minimum(cols - np.maximum(d, 0), rows + np.minimum(d, 0))
    sup, sub = align.split("_")  # superdiagonals' alignment, then subdiagonals'
    right = ((sup == "RIGHT") & (d >= 0)) | ((sub == "RIGHT") & (d <= 0))
    offset = np.where(right, max_len - length, 0)
    flat = (k1 - d) * max_len + j - np.maximum(d, 0) + offset
    return in_band, np.where(in_band, flat, 0).astype(np.int32)


def _diag_layout(ctx: LowerCtx, diagonal: Value, k: np.ndarray):
    """(k0, k1, number of diagonals, their max length, batch dims) of a V2 / V3 diagonal operand."""
    k = np.asarray(k).reshape(-1)
    if k.size not in (1, 2):
        ctx.fail(f"k of {k.size} values (TensorFlow takes one or two)")
    k0, k1 = int(k[0]), int(k[-1])
    if k0 > k1:
        ctx.fail(f"k = [{k0}, {k1}]: the lower diagonal is above the upper one")
    if diagonal.shape is None or diagonal.shape[-1] is None:
        ctx.fail("the diagonals' length must be known before conversion")
    n = k1 - k0 + 1
    lead = 2 if n > 1 else 1
    if len(diagonal.shape) < lead or (n > 1 and diagonal.shape[-2] != n):
        ctx.fail(f"{n} diagonals (k = [{k0}, {k1}]) need a diagonal operand of shape [..., {n}, length], "
                 f"not {list(diagonal.shape)}")
    return k0, k1, n, int(diagonal.shape[-1]), tuple(diagonal.shape[:-lead])


def _align(ctx: LowerCtx) -> str:
    # MatrixDiagV2 / MatrixSetDiagV2 pack every diagonal to the left (V3's "LEFT_LEFT"); V3 defaults to RIGHT_LEFT
    align = ctx.attr("align", "LEFT_LEFT" if ctx.op.kind.endswith("V2") else "RIGHT_LEFT")
    if align not in ("LEFT_LEFT", "LEFT_RIGHT", "RIGHT_LEFT", "RIGHT_RIGHT"):
        ctx.fail(f"align {align!r}")
    return align


def _flat_diagonals(ctx: LowerCtx, diagonal: Value, n: int, length: int, batch: tuple) -> Value:
    if n == 1:
        return diagonal
    return _reshape_keeping_batch(ctx, diagonal, batch, [n * length])


def _matrix_shape(ctx: LowerCtx, k0: int, k1: int, length: int) -> tuple[int, int]:
    """MatrixDiagV2 / V3's rows and columns from constant num_rows / num_cols (-1: the smallest that holds the
    diagonals, square when both are -1: TensorFlow's rule in matrix_diag_op.cc)."""
    given = []
    for i, what in ((2, "num_rows"), (3, "num_cols")):
        v = ctx.input(i)
        if not v.is_const:
            ctx.fail(f"the matrices' rows and columns must be known before conversion ({what} is not a constant)")
        given.append(int(np.asarray(v.const).reshape(())))
    least_rows, least_cols = length - min(k1, 0), length + max(k0, 0)
    rows, cols = given
    if rows == -1 and cols == -1:
        rows = cols = max(least_rows, least_cols)
    rows, cols = least_rows if rows == -1 else rows, least_cols if cols == -1 else cols
    out = ctx.out(0).shape
    if out is not None and tuple(out[-2:]) not in ((rows, cols), (None, None), (rows, None), (None, cols)):
        ctx.fail(f"num_rows / num_cols give {rows} x {cols} matrices, TensorFlow's shape is {list(out)}")
    return rows, cols


@lowering("MatrixDiag", "MatrixDiagV2", "MatrixDiagV3")
def lower_matrix_diag(ctx: LowerCtx) -> list[Value]:
    """tf.linalg.diag: matrices with the given diagonals, ``padding_value`` elsewhere. The main diagonal of square
    matrices padded with 0 is LiteRT's MATRIX_DIAG (matrix_diag.cc, its types; as the official converter takes it);
    any other k, num_rows, num_cols, padding_value, alignment or type (bool) is a GATHER of the diagonals (one
    padding value appended by PADV2) at constant positions."""
    diagonal = ctx.input(0)
    native = np.dtype(diagonal.dtype) in _DIAG_KERNEL_TYPES
    if ctx.op.kind == "MatrixDiag":
        if native:
            return [ctx.emit("MATRIX_DIAG", [diagonal])]
        k0, k1, n, length, batch = _diag_layout(ctx, diagonal, np.zeros((), np.int32))
        rows = cols = length
        padding = ctx.const(np.zeros((), diagonal.dtype))
    else:
        k0, k1, n, length, batch = _diag_layout(ctx, diagonal, ctx.const_input(1, "k"))
        rows, cols = _matrix_shape(ctx, k0, k1, length)
        padding = ctx.input(4)
    zero_padding = padding.is_const and not np.any(np.asarray(padding.const))
    if k0 == k1 == 0 and rows == cols == length and zero_padding and native:
        return [ctx.emit("MATRIX_DIAG", [diagonal])]
    in_band, flat = _band_positions(rows, cols, k0, k1, length, _align(ctx))
    flat = np.where(in_band, flat, n * length)  # off the band: the appended padding value
    values = _flat_diagonals(ctx, diagonal, n, length, batch)
    rank = len(batch) + 1
    pads = ctx.i32([[0, 0]] * (rank - 1) + [[0, 1]])
    pad_value = ctx.cast(ctx.reshape(padding, []) if padding.shape not in ((), None) else padding, diagonal.dtype)
    padded = ctx.emit("PADV2", [values, pads, pad_value], dtype=diagonal.dtype, shape=(*batch, n * length + 1))
    return [_gather(ctx, padded, flat, len(batch), (*batch, rows, cols))]


@lowering("MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3")
def lower_matrix_set_diag(ctx: LowerCtx) -> list[Value]:
    """tf.linalg.set_diag: the input with the given diagonals written over it. The main diagonal is LiteRT's
    MATRIX_SET_DIAG (matrix_set_diag.cc: it reads min(rows, cols) values per matrix, as TensorFlow's diagonal
    holds); other k (several diagonals, any alignment) or types (bool) is SELECT_V2 of a constant band mask between
    a GATHER of the diagonals at constant positions and the input."""
    x, diagonal = ctx.input(0), ctx.input(1)
    k = np.zeros((), np.int32) if ctx.op.kind == "MatrixSetDiag" else ctx.const_input(2, "k")
    native = np.dtype(x.dtype) in _DIAG_KERNEL_TYPES
    if x.shape is None or len(x.shape) < 2 or x.shape[-2] is None or x.shape[-1] is None:
        if np.all(np.asarray(k) == 0) and native:
            return [ctx.emit("MATRIX_SET_DIAG", [x, diagonal])]
        ctx.fail("the matrices' rows and columns must be known before conversion (for k other than 0, or "
                 f"{np.dtype(x.dtype).name} values, which MATRIX_SET_DIAG does not take)")
    k0, k1, n, length, batch = _diag_layout(ctx, diagonal, k)
    if k0 == k1 == 0 and native:
        return [ctx.emit("MATRIX_SET_DIAG", [x, diagonal])]
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    in_band, flat = _band_positions(rows, cols, k0, k1, length, _align(ctx))
    values = _gather(ctx, _flat_diagonals(ctx, diagonal, n, length, batch), flat, len(batch), (*batch, rows, cols))
    return [ctx.emit("SELECT_V2", [ctx.const(in_band), values, x])]


@lowering("MatrixDiagPart", "MatrixDiagPartV2", "MatrixDiagPartV3")
def lower_matrix_diag_part(ctx: LowerCtx) -> list[Value]:
    """tf.linalg.diag_part: the diagonals ``k`` of the matrices, each ``padding_value``-padded to the longest
    (aligned as ``align`` says). LiteRT has no such op (nor does the official converter take it): one GATHER of the
    flattened matrices, a padding value appended by PADV2, at constant positions (the inverse of MatrixDiag's)."""
    x = ctx.input(0)
    if x.shape is None or len(x.shape) < 2 or x.shape[-2] is None or x.shape[-1] is None:
        ctx.fail("the matrices' rows and columns must be known before conversion")
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    v1 = ctx.op.kind == "MatrixDiagPart"
    if v1:
        k0 = k1 = 0
        padding = ctx.const(np.zeros((), x.dtype))
    else:
        k = np.asarray(ctx.const_input(1, "k")).reshape(-1)
        k0, k1 = int(k[0]), int(k[-1])
        padding = ctx.input(2)
    if not -rows < k0 <= k1 < cols:
        ctx.fail(f"k = [{k0}, {k1}] outside a {rows} x {cols} matrix")
    n, length = k1 - k0 + 1, min(rows + min(k1, 0), cols - max(k0, 0))
    in_band, flat = _band_positions(rows, cols, k0, k1, length, "LEFT_LEFT" if v1 else _align(ctx))
    source = np.full(n * length, rows * cols, np.int32)  # unwritten: the appended padding value
    source[flat[in_band]] = np.flatnonzero(in_band.reshape(-1))
    batch = tuple(x.shape[:-2])
    values = _reshape_keeping_batch(ctx, x, batch, [rows * cols])
    pads = ctx.i32([[0, 0]] * len(batch) + [[0, 1]])
    pad_value = ctx.cast(ctx.reshape(padding, []) if padding.shape not in ((), None) else padding, x.dtype)
    padded = ctx.emit("PADV2", [values, pads, pad_value], dtype=x.dtype, shape=(*batch, rows * cols + 1))
    shape = (n, length) if n > 1 else (length,)
    return [_gather(ctx, padded, source.reshape(shape), len(batch), (*batch, *shape))]


def _static_dims(ctx: LowerCtx, v: Value) -> tuple[int, ...]:
    if v.shape is None or None in v.shape:
        ctx.fail("the input's shape must be known before conversion")
    return tuple(int(d) for d in v.shape)


@lowering("Diag")
def lower_diag(ctx: LowerCtx) -> list[Value]:
    """tf.linalg.tensor_diag: ``x`` of shape S on the diagonal of a tensor of shape S + S: the values as one vector,
    LiteRT's MATRIX_DIAG (a P x P matrix, P the element count), reshaped to S + S."""
    x = ctx.input(0)
    dims = _static_dims(ctx, x)
    if np.dtype(x.dtype) not in _DIAG_KERNEL_TYPES:
        ctx.fail(f"{np.dtype(x.dtype).name} values (LiteRT's MATRIX_DIAG takes float32 and integers)")
    count = int(np.prod(dims, dtype=np.int64))
    flat = ctx.reshape(x, [count])
    square = ctx.emit("MATRIX_DIAG", [flat], dtype=x.dtype, shape=(count, count))
    return [ctx.reshape(square, list(dims) * 2)]


@lowering("DiagPart")
def lower_diag_part(ctx: LowerCtx) -> list[Value]:
    """tf.linalg.tensor_diag_part: the inverse of Diag, the elements ``x[i..., i...]`` of an S + S tensor: one
    GATHER of the flattened tensor at ``p * (P + 1)``."""
    x = ctx.input(0)
    dims = _static_dims(ctx, x)
    half = dims[: len(dims) // 2]
    if len(dims) % 2 or dims[len(dims) // 2:] != half:
        ctx.fail(f"an input of shape {list(dims)} (TensorFlow's DiagPart takes S + S)")
    count = int(np.prod(half, dtype=np.int64))
    picked = _gather(ctx, ctx.reshape(x, [count * count]), np.arange(count, dtype=np.int32) * (count + 1), 0,
                     (count,))
    return [ctx.reshape(picked, list(half))]


# --------------------------------------------------------------------------------------------
# sequences, segments, unique values
# --------------------------------------------------------------------------------------------


@lowering("ReverseSequence")
def lower_reverse_sequence(ctx: LowerCtx) -> list[Value]:
    """tf.reverse_sequence: LiteRT's REVERSE_SEQUENCE (reverse_sequence.cc: float32, int16, int32, int64 and uint8
    data; int32 / int64 lengths; non-negative dims, as the official converter writes it). A bool or int8 input is
    reversed as int32 and cast back."""
    x, lengths = ctx.input(0), ctx.input(1)
    rank = x.rank
    if rank is None:
        ctx.fail("the input's rank must be known")
    seq_dim, batch_dim = int(ctx.attr("seq_dim")) % rank, int(ctx.attr("batch_dim", 0)) % rank
    dtype = np.dtype(x.dtype)
    opts = {"seq_dim": seq_dim, "batch_dim": batch_dim}
    if dtype in (np.float32, np.int16, np.int32, np.int64, np.uint8):
        return [ctx.emit("REVERSE_SEQUENCE", [x, lengths], opts)]
    if dtype not in (np.bool_, np.int8):
        ctx.fail(f"{dtype.name} data (LiteRT's REVERSE_SEQUENCE takes float32, int16, int32, int64, uint8)")
    wide = ctx.emit("REVERSE_SEQUENCE", [ctx.cast(x, np.int32), lengths], opts, dtype=np.int32)
    return [ctx.cast(wide, dtype)]


def _segment_data(ctx: LowerCtx) -> tuple[Value, Value]:
    data, ids = ctx.input(0), ctx.cast(ctx.int32_input(1), np.int32)
    if np.dtype(data.dtype) not in _SEGMENT_KERNEL_TYPES:
        ctx.fail(f"{np.dtype(data.dtype).name} data (LiteRT's segment kernels take float32 and int32)")
    if ids.rank != 1:
        ctx.fail("segment ids of rank other than 1 (LiteRT's segment kernels take a vector of ids)")
    return data, ids


def _contiguous(ids: Value) -> bool:
    """Constant sorted ids from 0 that step by at most 1: no empty segment (segment_sum.cc's own check)."""
    if not ids.is_const or ids.const.size == 0:
        return False
    steps = np.diff(ids.const.astype(np.int64))
    return int(ids.const[0]) == 0 and bool(np.all((steps == 0) | (steps == 1)))


def _segment_count_shape(ctx: LowerCtx, data: Value, count: Value) -> tuple:
    n = int(count.const) if count.is_const else None
    return (n, *data.shape[1:]) if data.shape is not None else None


@lowering("SegmentSum")
def lower_segment_sum(ctx: LowerCtx) -> list[Value]:
    """tf.math.segment_sum. LiteRT's SEGMENT_SUM (segment_sum.cc) fails unless the ids start at 0 and step by at
    most 1, while TensorFlow's sorted ids may skip segments (an empty segment sums to 0): constant ids that the
    kernel takes are SEGMENT_SUM (as the official converter writes every SegmentSum); other ids are
    UNSORTED_SEGMENT_SUM over ``max(ids) + 1`` segments, exact for every sorted id list."""
    data, ids = _segment_data(ctx)
    if _contiguous(ids):
        return [ctx.emit("SEGMENT_SUM", [data, ids])]
    count = _num_segments(ctx, ids)
    return [ctx.emit("UNSORTED_SEGMENT_SUM", [data, ids, count], shape=_segment_count_shape(ctx, data, count))]


@lowering("SegmentMax", "SegmentMin", "SegmentProd", "SegmentMean")
def lower_segment_reduce(ctx: LowerCtx) -> list[Value]:
    """tf.math.segment_max / min / prod / mean (sorted ids; LiteRT has no sorted kernel for them): the unsorted
    kernel over ``max(ids) + 1`` segments. TensorFlow gives an empty segment 0 where UNSORTED_SEGMENT_MAX / MIN give
    the type's lowest / highest value: unless constant ids leave no segment empty, the count of each segment
    (UNSORTED_SEGMENT_SUM of ones) selects 0 for the empty ones. A mean is the sum over max(count, 1), float only
    (TensorFlow's integer mean truncates)."""
    data, ids = _segment_data(ctx)
    kind = ctx.op.kind
    dtype = np.dtype(data.dtype)
    if kind == "SegmentMean" and dtype != np.float32:
        ctx.fail(f"a segment mean of {dtype.name} data (float32 only)")
    count = _num_segments(ctx, ids)
    shape = _segment_count_shape(ctx, data, count)
    kernel = {"SegmentMax": "UNSORTED_SEGMENT_MAX", "SegmentMin": "UNSORTED_SEGMENT_MIN",
              "SegmentProd": "UNSORTED_SEGMENT_PROD", "SegmentMean": "UNSORTED_SEGMENT_SUM"}[kind]
    reduced = ctx.emit(kernel, [data, ids, count], shape=shape)
    if kind == "SegmentProd" or (kind != "SegmentMean" and _contiguous(ids)):
        return [reduced]  # an empty product is 1 in both
    n = ids.shape[0]
    ones = ctx.const(np.ones((n,), dtype)) if n is not None else ctx.emit(
        "FILL", [ctx.emit("SHAPE", [ids], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(1,)),
                 ctx.const(np.ones((), dtype))], dtype=dtype, shape=(None,))
    members = ctx.emit("UNSORTED_SEGMENT_SUM", [ones, ids, count], dtype=dtype, shape=shape[:1] if shape else None)
    rank = data.rank or 1
    members = ctx.emit("RESHAPE", [members, ctx.i32([-1] + [1] * (rank - 1))], dtype=dtype,
                       shape=(shape[0] if shape else None,) + (1,) * (rank - 1))
    if kind == "SegmentMean":
        at_least_one = ctx.emit("MAXIMUM", [members, ctx.const(np.ones((), dtype))], dtype=dtype,
                                shape=members.shape)
        return [ctx.emit("DIV", [reduced, at_least_one], _NO_ACT, dtype=dtype, shape=shape)]
    empty = ctx.emit("EQUAL", [members, ctx.const(np.zeros((), dtype))], dtype=np.bool_, shape=members.shape)
    return [ctx.emit("SELECT_V2", [empty, ctx.const(np.zeros((), dtype)), reduced], shape=shape)]


@lowering("Unique", "UniqueWithCounts", "UniqueV2")
def lower_unique(ctx: LowerCtx) -> list[Value]:
    """tf.unique / tf.unique_with_counts: LiteRT's UNIQUE (unique.cc: a vector of float32, int8, int16, int32, int64
    or uint8; the values in order of first appearance, as TensorFlow's, and each element's index as int32 or int64,
    ``idx_out_type``); the counts are UNSORTED_SEGMENT_SUM of ones over the indices (unsorted_segment.cc)."""
    x = ctx.input(0)
    if ctx.op.kind == "UniqueV2":  # the axis of a vector: [] or [0] (-1); other tensors' unique slices are refused
        axis = [int(a) for a in np.asarray(ctx.const_input(1, "axis")).reshape(-1)]
        if x.rank != 1 or axis not in ([], [0], [-1]):
            ctx.fail(f"unique slices along axis {axis} of a rank-{x.rank} tensor (LiteRT's UNIQUE takes a vector)")
    if x.rank not in (1, None):
        ctx.fail("a tensor of rank other than 1 (TensorFlow's Unique takes a vector)")
    dtype = np.dtype(x.dtype)
    if dtype not in (np.float32, np.int8, np.int16, np.int32, np.int64, np.uint8):
        ctx.fail(f"{dtype.name} values (LiteRT's UNIQUE takes float32, int8, int16, int32, int64, uint8)")
    idx = np.dtype(ctx.attr("out_idx", np.int32))
    y, where = ctx.emit("UNIQUE", [x], {"idx_out_type": idx},
                        out_specs=[(o.dtype, o.shape) for o in ctx.op.outputs[:2]])
    if ctx.op.kind != "UniqueWithCounts":
        return [y, where]
    # UniqueWithCounts: how many elements each unique value has, UNSORTED_SEGMENT_SUM of ones over the indices
    n = x.shape[0] if x.shape else None
    ones = ctx.const(np.ones((n,), np.int32)) if n is not None else ctx.emit(
        "FILL", [_runtime_shape(ctx, x), ctx.i32(1)], dtype=np.int32, shape=(None,))
    unique_count = ctx.emit("SHAPE", [y], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(1,))
    counts = ctx.emit("UNSORTED_SEGMENT_SUM", [ones, ctx.cast(where, np.int32), unique_count], dtype=np.int32,
                      shape=(None,))
    return [y, where, ctx.cast(counts, idx)]


@lowering("SparseToDense")
def lower_sparse_to_dense(ctx: LowerCtx) -> list[Value]:
    """tf.sparse.to_dense's op: LiteRT's SPARSE_TO_DENSE (sparse_to_dense.cc: int32 / int64 indices of rank <= 2,
    at most 4 output dims; float32, int32, int64, int8, uint8 values; a scalar value broadcast). The kernel does not
    check ``validate_indices`` (sorted, unique, in range): constant indices are checked here, as TensorFlow would
    check them at run time; indices known only at run time must be valid (TensorFlow raises where they are not)."""
    indices, shape, values, default = ctx.inputs
    dtype = np.dtype(values.dtype)
    if dtype not in (np.float32, np.int32, np.int64, np.int8, np.uint8):
        ctx.fail(f"{dtype.name} values (LiteRT's SPARSE_TO_DENSE takes float32, int32, int64, int8, uint8)")
    rank = ctx.out(0).rank
    if rank is None or rank > 4:
        ctx.fail(f"an output of rank {rank} (LiteRT's SPARSE_TO_DENSE writes at most 4 dims)")
    if indices.is_const and shape.is_const and bool(ctx.attr("validate_indices", True)):
        idx = np.asarray(indices.const).reshape(indices.const.shape[0] if indices.const.ndim else 1, -1)
        dims = np.asarray(shape.const).reshape(-1)
        if idx.size and (np.any(idx < 0) or np.any(idx >= dims[None, :])):
            ctx.fail("an index out of the output's bounds")
        flat = np.ravel_multi_index(tuple(idx.T), tuple(dims)) if idx.size else idx.reshape(-1)
        if np.any(np.diff(flat) <= 0):
            ctx.fail("indices not sorted in row-major order or repeated (validate_indices=True)")
    opts = {"validate_indices": bool(ctx.attr("validate_indices", True))}
    return [ctx.emit("SPARSE_TO_DENSE", [indices, shape, values, ctx.reshape(default, []) if default.is_const else
                                         default], opts)]


# --------------------------------------------------------------------------------------------
# scatters and stitches
# --------------------------------------------------------------------------------------------


def _runtime_shape(ctx: LowerCtx, v: Value) -> Value:
    if v.shape is not None and None not in v.shape:
        return ctx.i32(list(v.shape))
    return ctx.emit("SHAPE", [v], {"out_type": np.dtype(np.int32)}, dtype=np.int32, shape=(v.rank,))


def _check_unique_indices(ctx: LowerCtx, indices: Value) -> None:
    if indices.is_const:
        idx = np.asarray(indices.const)
        rows = idx.reshape(-1, idx.shape[-1]) if idx.ndim else idx.reshape(1, 1)
        if len(np.unique(rows, axis=0)) != len(rows):
            ctx.fail("repeated indices (TensorFlow leaves the order of their updates undefined; SCATTER_ND would "
                     "add them)")


@lowering("TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub", "ScatterNdNonAliasingAdd")
def lower_tensor_scatter_add(ctx: LowerCtx) -> list[Value]:
    """tf.tensor_scatter_nd_update / add / sub (and tf.scatter_nd_non_aliasing_add, an add). LiteRT's SCATTER_ND
    (scatter_nd.cc: int32 indices and shape) writes the updates into zeros, adding repeated indices as TensorFlow's
    add does: an add / sub is the tensor plus / minus that; an update is SELECT_V2 of the scattered values where a
    SCATTER_ND of ones counts a write, the tensor elsewhere (the official converter's x * (1 - mask) + scattered
    turns an inf or NaN of x into NaN). Repeated indices of an update (TensorFlow leaves their order undefined)
    are refused when the indices are constants, and must not occur when they are not."""
    x, indices, updates = ctx.input(0), ctx.cast(ctx.int32_input(1), np.int32), ctx.input(2)
    dtype = np.dtype(x.dtype)
    if dtype not in (np.float32, np.int8, np.uint8, np.int32, np.int64):
        ctx.fail(f"{dtype.name} values (LiteRT's SCATTER_ND takes float32, int8, uint8, int32 and int64)")
    shape = _runtime_shape(ctx, x)
    scattered = ctx.emit("SCATTER_ND", [indices, updates, shape], dtype=x.dtype, shape=x.shape)
    kind = ctx.op.kind
    if kind != "TensorScatterUpdate":
        return [ctx.emit("SUB" if kind == "TensorScatterSub" else "ADD", [x, scattered], _NO_ACT)]
    _check_unique_indices(ctx, indices)
    if updates.shape is not None and None not in updates.shape:
        ones = ctx.const(np.ones(updates.shape, np.int32))
    else:
        ones = ctx.emit("FILL", [_runtime_shape(ctx, updates), ctx.i32(1)], dtype=np.int32, shape=updates.shape)
    written = ctx.emit("SCATTER_ND", [indices, ones, shape], dtype=np.int32, shape=x.shape)
    mask = ctx.emit("GREATER", [written, ctx.i32(0)], dtype=np.bool_, shape=x.shape)
    return [ctx.emit("SELECT_V2", [mask, scattered, x])]


@lowering("TensorScatterMax", "TensorScatterMin")
def lower_tensor_scatter_max(ctx: LowerCtx) -> list[Value]:
    """tf.tensor_scatter_nd_max / min: each index's row-major position in the tensor's leading ``K`` dims (``K`` the
    indices' last dim) is a segment id; UNSORTED_SEGMENT_MAX / MIN (unsorted_segment.cc: float32 / int32) reduces the
    updates per position, an unwritten position the type's lowest / highest value, so MAXIMUM / MINIMUM with the
    tensor is TensorFlow's result. The tensor's leading ``K`` dims must be known."""
    x, indices, updates = ctx.input(0), ctx.cast(ctx.int32_input(1), np.int32), ctx.input(2)
    dtype = np.dtype(x.dtype)
    if dtype not in _SEGMENT_KERNEL_TYPES:
        ctx.fail(f"{dtype.name} values (LiteRT's UNSORTED_SEGMENT_MAX / MIN take float32 and int32)")
    if x.shape is None or indices.shape is None or indices.shape[-1] is None or updates.shape is None:
        ctx.fail("the shapes of the tensor, the indices and the updates must be known")
    depth = int(indices.shape[-1])
    outer, inner = x.shape[:depth], tuple(x.shape[depth:])
    if None in outer or None in inner:
        ctx.fail("the tensor's dims must be known before conversion")
    positions = int(np.prod(outer, dtype=np.int64))
    strides = np.cumprod((list(outer) + [1])[:0:-1])[::-1].astype(np.int32)
    ids = ctx.emit("MUL", [indices, ctx.i32(strides)], _NO_ACT, dtype=np.int32, shape=indices.shape)
    ids = ctx.emit("SUM", [ids, ctx.i32([indices.rank - 1])], {"keep_dims": False}, dtype=np.int32,
                   shape=indices.shape[:-1])
    ids = ctx.reshape(ids, [-1])
    flat_updates = ctx.reshape(updates, [-1, *inner])
    flat_x = ctx.reshape(x, [positions, *inner])
    kernel, combine = ("UNSORTED_SEGMENT_MAX", "MAXIMUM") if ctx.op.kind == "TensorScatterMax" else \
        ("UNSORTED_SEGMENT_MIN", "MINIMUM")
    reduced = ctx.emit(kernel, [flat_updates, ids, ctx.i32(positions)], dtype=dtype, shape=(positions, *inner))
    out = ctx.emit(combine, [flat_x, reduced], dtype=dtype, shape=(positions, *inner))
    return [ctx.reshape(out, list(x.shape))]


@lowering("DynamicStitch", "ParallelDynamicStitch")
def lower_dynamic_stitch(ctx: LowerCtx) -> list[Value]:
    """tf.dynamic_stitch with constant indices (as the official converter takes it, lower_tf.cc): the data
    flattened to rows and concatenated, then one GATHER of each output row's source (a later write of an index
    wins, as TensorFlow's DynamicStitch; ParallelDynamicStitch leaves that order undefined). Every output row must
    be written (TensorFlow leaves an unwritten one uninitialised)."""
    n = len(ctx.inputs) // 2
    index_values, data = ctx.inputs[:n], ctx.inputs[n:]
    if not all(v.is_const for v in index_values):
        ctx.fail("indices known only at run time (the output's size is their maximum)")
    indices = [np.asarray(v.const).astype(np.int64) for v in index_values]
    inner = None
    rows, sources, offset = [], [], 0
    for idx, d in zip(indices, data):
        if d.shape is None or None in d.shape[idx.ndim:]:
            ctx.fail("the data's trailing dims must be known")
        inner = tuple(d.shape[idx.ndim:])
        rows.append(ctx.reshape(d, [idx.size, *inner]))
        sources.append(idx.reshape(-1))
        offset += idx.size
    everything = np.concatenate(sources)
    size = int(everything.max()) + 1 if everything.size else 0
    if everything.size and everything.min() < 0:
        ctx.fail("a negative index")
    source = np.full(size, -1, np.int64)
    source[everything] = np.arange(everything.size)  # numpy: the last write of a repeated index wins
    if np.any(source < 0):
        ctx.fail(f"indices that leave output rows {np.flatnonzero(source < 0).tolist()} unwritten")
    stacked = rows[0] if len(rows) == 1 else ctx.emit(
        "CONCATENATION", rows, {"axis": 0, **_NO_ACT}, dtype=data[0].dtype, shape=(offset, *inner))
    return [_gather(ctx, stacked, source.astype(np.int32), 0, (size, *inner))]


@lowering("InvertPermutation")
def lower_invert_permutation(ctx: LowerCtx) -> list[Value]:
    """tf.math.invert_permutation: y[x[i]] = i, a SCATTER_ND of RANGE(n) at x (the official converter's
    TensorScatterUpdate of a range, lower_tf.cc; here the length may be known only at run time)."""
    x = ctx.input(0)
    dtype = np.dtype(x.dtype)
    size = _runtime_shape(ctx, x)
    n = x.shape[0] if x.shape else None
    count = ctx.i32(n) if n is not None else ctx.emit("RESHAPE", [size, ctx.i32([])], dtype=np.int32, shape=())
    positions = ctx.emit("RANGE", [ctx.i32(0), count, ctx.i32(1)], dtype=np.int32, shape=(n,))
    where = ctx.emit("RESHAPE", [ctx.cast(x, np.int32), ctx.i32([-1, 1])], dtype=np.int32, shape=(n, 1))
    y = ctx.emit("SCATTER_ND", [where, positions, size], dtype=np.int32, shape=(n,))
    return [ctx.cast(y, dtype)]


# --------------------------------------------------------------------------------------------
# shapes, values, top-k, XLA
# --------------------------------------------------------------------------------------------


@lowering("BroadcastArgs")
def lower_broadcast_args(ctx: LowerCtx) -> list[Value]:
    """tf.broadcast_dynamic_shape's op: LiteRT's BROADCAST_ARGS (broadcast_args.cc: two int32 or int64 shapes of one
    type)."""
    s0, s1 = ctx.input(0), ctx.input(1)
    dtype = np.dtype(ctx.out(0).dtype)
    return [ctx.emit("BROADCAST_ARGS", [ctx.cast(s0, dtype), ctx.cast(s1, dtype)])]


@lowering("Empty")
def lower_empty(ctx: LowerCtx) -> list[Value]:
    """tf.raw_ops.Empty: a tensor of the given shape whose values TensorFlow leaves undefined unless ``init``
    (zeros): FILL with zeros either way."""
    dtype = np.dtype(ctx.out(0).dtype)
    if dtype.kind not in "biuf":
        ctx.fail(f"an empty {dtype.name} tensor")
    return [ctx.emit("FILL", [ctx.cast(ctx.input(0), np.int32), ctx.const(np.zeros((), dtype))])]


@lowering("ApproxTopK")
def lower_approx_top_k(ctx: LowerCtx) -> list[Value]:
    """tf.math.approx_max_k / approx_min_k: the exact top k (a valid answer to "approximately", and what TensorFlow
    computes on a CPU) with LiteRT's TOPK_V2 along the last dim, as the official converter writes approx_max_k
    over the last dim; another reduction dim is transposed there and back, a min-k is the top k of the negated
    values (float only, as TensorFlow's op). ``aggregate_to_topk=False`` (partial results of another size) is
    refused."""
    x = ctx.input(0)
    if x.rank is None:
        ctx.fail("the input's rank must be known")
    if not bool(ctx.attr("aggregate_to_topk", True)):
        ctx.fail("aggregate_to_topk=False (results that are not the top k)")
    k, rank = int(ctx.attr("k")), x.rank
    axis = int(ctx.attr("reduction_dimension", -1)) % rank
    values_out, indices_out = ctx.op.outputs
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    y = ctx.transpose(x, perm) if axis != rank - 1 else x
    maximum = bool(ctx.attr("is_max_k", True))
    if not maximum:
        y = ctx.emit("NEG", [y], dtype=y.dtype, shape=y.shape)
    shape = None if y.shape is None else (*y.shape[:-1], k)
    values, indices = ctx.emit("TOPK_V2", [y, ctx.i32(k)], out_specs=[(y.dtype, shape), (np.int32, shape)])
    if not maximum:
        values = ctx.emit("NEG", [values], dtype=values.dtype, shape=shape)
    if axis != rank - 1:
        values, indices = ctx.transpose(values, perm), ctx.transpose(indices, perm)
    return [values, ctx.cast(indices, indices_out.dtype)]


@lowering("XlaSharding", "PlaceholderWithDefault")
def lower_identity_like(ctx: LowerCtx) -> list[Value]:
    """XLA's sharding annotation and a function's PlaceholderWithDefault (its input, the default, is what the
    function computes with: a converted model has no feed that overrides it): the input itself."""
    return [ctx.input(0)]


def _gather_dimension_numbers(ctx: LowerCtx):
    from tensorflow.compiler.xla import xla_data_pb2

    raw = ctx.attr("dimension_numbers")
    if isinstance(raw, str):
        if "\ufffd" in raw:  # the importer decodes string attributes as UTF-8: a byte it could not read is lost
            ctx.fail("dimension_numbers that do not survive the import (a dimension of 128 or more)")
        raw = raw.encode("utf-8")
    numbers = xla_data_pb2.GatherDimensionNumbers()
    numbers.ParseFromString(bytes(raw or b""))
    return numbers


@lowering("XlaGather")
def lower_xla_gather(ctx: LowerCtx) -> list[Value]:
    """XLA's Gather (tensorflow.compiler.tf2xla.python.xla.gather, what JAX-exported and XLA-bridged programs write)
    where each indexed operand dim takes one element (a slice size of 1) and every other dim a window from 0: the
    operand transposed so that the indexed dims come first in ``start_index_map`` order (and sliced to the windows),
    the index vector moved last and clamped into range as XLA clamps it, then GATHER_ND, a RESHAPE that drops the
    collapsed and keeps the uncollapsed size-1 dims, and a TRANSPOSE that puts the offset dims where
    ``offset_dims`` says (``indices_are_sorted`` is a hint, not needed). The official converter takes the
    GATHER_ND-shaped subset of these, unclamped. Windows of more than one element along an indexed dim, and batching
    dims, are refused."""
    operand, indices = ctx.input(0), ctx.input(1)
    sizes = [int(s) for s in np.asarray(ctx.const_input(2, "slice_sizes")).reshape(-1)]
    dn = _gather_dimension_numbers(ctx)
    if list(dn.operand_batching_dims) or list(dn.start_indices_batching_dims):
        ctx.fail("batching dims (operand_batching_dims / start_indices_batching_dims)")
    if operand.shape is None or None in operand.shape or indices.shape is None:
        ctx.fail("the operand's shape and the indices' rank must be known")
    rank = len(operand.shape)
    start = [int(d) for d in dn.start_index_map]
    collapsed = {int(d) for d in dn.collapsed_slice_dims}
    offset_dims = [int(d) for d in dn.offset_dims]
    if len(sizes) != rank or sorted(set(start)) != sorted(start) or not start:
        ctx.fail(f"slice_sizes {sizes} / start_index_map {start} for a rank-{rank} operand")
    windowed = [d for d in start if sizes[d] != 1]
    if windowed:
        ctx.fail(f"windows of more than one element along indexed dims {windowed} (LiteRT's GATHER_ND takes one)")
    if any(sizes[d] != 1 for d in collapsed):
        ctx.fail("a collapsed dim with a slice size other than 1")
    rest = [d for d in range(rank) if d not in start]
    x = operand
    if any(sizes[d] < operand.shape[d] for d in rest):  # each window of a dim not indexed starts at 0
        x = ctx.emit("SLICE", [x, ctx.i32([0] * rank), ctx.i32([sizes[d] if d in rest else -1 for d in range(rank)])],
                     dtype=x.dtype, shape=tuple(sizes[d] if d in rest else s for d, s in enumerate(x.shape)))
    if start + rest != list(range(rank)):
        x = ctx.transpose(x, start + rest)
    # the index vector last
    ivd, irank = int(dn.index_vector_dim), len(indices.shape)
    idx = ctx.cast(ctx.int32_input(1), np.int32)
    if ivd == irank:
        idx = ctx.const(idx.const[..., None]) if idx.is_const else \
            ctx.emit("EXPAND_DIMS", [idx, ctx.i32(-1)], dtype=np.int32, shape=(*indices.shape, 1))
    elif ivd != irank - 1:
        idx = ctx.transpose(idx, [d for d in range(irank) if d != ivd] + [ivd])
    if idx.shape[-1] != len(start):
        ctx.fail(f"an index vector of {idx.shape[-1]} values for {len(start)} indexed dims")
    limit = np.asarray([operand.shape[d] - 1 for d in start], np.int32)
    if idx.is_const:
        idx = ctx.const(np.clip(idx.const, 0, limit).astype(np.int32))
    else:  # XLA clamps each start index into the operand
        idx = ctx.emit("MAXIMUM", [idx, ctx.i32(0)], dtype=np.int32, shape=idx.shape)
        idx = ctx.emit("MINIMUM", [idx, ctx.i32(limit)], dtype=np.int32, shape=idx.shape)
    batch = tuple(idx.shape[:-1])
    gathered = ctx.emit("GATHER_ND", [x, idx], dtype=operand.dtype, shape=(*batch, *[sizes[d] for d in rest]))
    kept = [d for d in range(rank) if d not in collapsed]
    if len(kept) != len(offset_dims):
        ctx.fail(f"offset_dims {offset_dims} for {len(kept)} uncollapsed dims")
    if kept != rest:
        if sum(d is None for d in batch) > 1:
            ctx.fail("more than one batch dimension of the indices unknown before conversion")
        gathered = ctx.reshape(gathered, [-1 if d is None else d for d in batch] + [sizes[d] for d in kept])
    # [batch..., offset...] -> the output's order: offset dims at offset_dims, batch dims elsewhere in order
    out_rank = len(batch) + len(kept)
    batch_iter, offset_iter, perm = iter(range(len(batch))), iter(range(len(batch), out_rank)), []
    for p in range(out_rank):
        perm.append(next(offset_iter) if p in offset_dims else next(batch_iter))
    if perm != list(range(out_rank)):
        gathered = ctx.transpose(gathered, perm)
    return [gathered]


@lowering("ListDiff")
def lower_list_diff(ctx: LowerCtx) -> list[Value]:
    """tf.raw_ops.ListDiff (tf.compat.v1.setdiff1d): the values of ``x`` not in ``y``, in order, and their positions:
    EQUAL of every pair, REDUCE_ANY over ``y``, WHERE of the misses, GATHER of them (LiteRT has no set op)."""
    x, y = ctx.input(0), ctx.input(1)
    if x.rank != 1 or y.rank != 1:
        ctx.fail("operands of rank other than 1 (TensorFlow's ListDiff takes vectors)")
    n, m = x.shape[0], y.shape[0]
    column = ctx.emit("EXPAND_DIMS", [x, ctx.i32(1)], dtype=x.dtype, shape=(n, 1))
    pairs = ctx.emit("EQUAL", [column, y], dtype=np.bool_, shape=(n, m))
    found = ctx.emit("REDUCE_ANY", [pairs, ctx.i32([1])], {"keep_dims": False}, dtype=np.bool_, shape=(n,))
    missing = ctx.emit("LOGICAL_NOT", [found], dtype=np.bool_, shape=(n,))
    where = ctx.emit("WHERE", [missing], dtype=np.int64, shape=(None, 1))
    positions = ctx.emit("RESHAPE", [ctx.cast(where, np.int32), ctx.i32([-1])], dtype=np.int32, shape=(None,))
    values = _gather(ctx, x, positions, 0, (None,))
    return [values, ctx.cast(positions, np.dtype(ctx.out(1).dtype))]


@lowering("LowerBound", "UpperBound")
def lower_search_sorted(ctx: LowerCtx) -> list[Value]:
    """tf.searchsorted (side 'left': LowerBound, 'right': UpperBound): for each value, how many of its row's sorted
    inputs are below it (LESS) or not above it (LESS_EQUAL), a SUM over the row of the comparisons of every pair
    (exact; memory values x sorted inputs per row)."""
    sorted_inputs, values = ctx.input(0), ctx.input(1)
    if sorted_inputs.rank != 2 or values.rank != 2:
        ctx.fail("operands of rank other than 2 (TensorFlow's LowerBound / UpperBound take [batch, n] and [batch, m])")
    batch, n = sorted_inputs.shape
    m = values.shape[1]
    grid = ctx.emit("EXPAND_DIMS", [sorted_inputs, ctx.i32(1)], dtype=sorted_inputs.dtype, shape=(batch, 1, n))
    column = ctx.emit("EXPAND_DIMS", [values, ctx.i32(2)], dtype=values.dtype, shape=(batch, m, 1))
    kind = "LESS" if ctx.op.kind == "LowerBound" else "LESS_EQUAL"
    below = ctx.emit(kind, [grid, column], dtype=np.bool_, shape=(batch, m, n))
    count = ctx.emit("SUM", [ctx.cast(below, np.int32), ctx.i32([2])], {"keep_dims": False}, dtype=np.int32,
                     shape=(batch, m))
    return [ctx.cast(count, np.dtype(ctx.out(0).dtype))]


@lowering("Cumprod")
def lower_cumprod(ctx: LowerCtx) -> list[Value]:
    """tf.math.cumprod (exclusive, reverse): LiteRT has no CUMPROD (the official converter fails on it). Along an
    axis of static length n, ceil(log2 n) steps of y = y * (y shifted by 2^i, ones shifted in) (Hillis-Steele;
    exact for integers, float products in another order than TensorFlow's running product); ``exclusive`` shifts
    the input by one first, ``reverse`` runs it in a REVERSE_V2."""
    x = ctx.input(0)
    if x.shape is None:
        ctx.fail("the input's rank must be known")
    rank = len(x.shape)
    axis = int(np.asarray(ctx.const_input(1, "axis")).reshape(())) % rank
    n = x.shape[axis]
    if n is None:
        ctx.fail("the length along the axis must be known before conversion")
    dtype = np.dtype(x.dtype)
    if dtype not in (np.float32, np.int32, np.int64):
        ctx.fail(f"a cumulative product of {dtype.name} values")
    one = ctx.const(np.ones((), dtype))
    reverse = bool(ctx.attr("reverse", False))

    def shifted(v: Value, by: int) -> Value:
        if by >= n:
            return None
        pads = ctx.i32([[by, 0] if d == axis else [0, 0] for d in range(rank)])
        grown = tuple(s + by if d == axis and s is not None else s for d, s in enumerate(v.shape))
        padded = ctx.emit("PADV2", [v, pads, one], dtype=dtype, shape=grown)
        return ctx.emit("SLICE", [padded, ctx.i32([0] * rank), ctx.i32([n if d == axis else -1 for d in range(rank)])],
                        dtype=dtype, shape=v.shape)

    y = ctx.emit("REVERSE_V2", [x, ctx.i32([axis])], dtype=dtype, shape=x.shape) if reverse else x
    if bool(ctx.attr("exclusive", False)):
        y = shifted(y, 1) if n > 1 else ctx.emit("FILL", [_runtime_shape(ctx, y), one], dtype=dtype, shape=y.shape)
    step = 1
    while step < n:
        y = ctx.emit("MUL", [y, shifted(y, step)], _NO_ACT, dtype=dtype, shape=x.shape)
        step *= 2
    if reverse:
        y = ctx.emit("REVERSE_V2", [y, ctx.i32([axis])], dtype=dtype, shape=x.shape)
    return [y]


@lowering("Concat")
def lower_concat_v1(ctx: LowerCtx) -> list[Value]:
    """TF1's Concat (the axis first; tf.compat.v1 graphs): CONCATENATION, as the official converter writes it."""
    axis = int(np.asarray(ctx.const_input(0, "concat_dim")).reshape(()))
    values = list(ctx.inputs[1:])
    if len(values) == 1:
        return [values[0]]
    return [ctx.emit("CONCATENATION", values, {"axis": axis, **_NO_ACT})]


@lowering("Reverse")
def lower_reverse_v1(ctx: LowerCtx) -> list[Value]:
    """TF1's Reverse (a bool per dim): REVERSE_V2 over the dims marked (one op per run of adjacent dims, as LiteRT's
    kernel reverses contiguous axes only)."""
    x = ctx.input(0)
    dims = np.asarray(ctx.const_input(1, "dims")).reshape(-1).astype(bool)
    axes = [int(a) for a in np.flatnonzero(dims)]
    y = x
    runs: list[list[int]] = []
    for a in axes:
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    for run in runs:
        y = ctx.emit("REVERSE_V2", [y, ctx.i32(run)], dtype=x.dtype, shape=x.shape)
    return [y]


@lowering("UnravelIndex")
def lower_unravel_index(ctx: LowerCtx) -> list[Value]:
    """tf.unravel_index: each flat index's coordinates in ``dims`` (row-major), ``(index // stride) mod dim`` with
    FLOOR_DIV / FLOOR_MOD on int32, stacked along a new first axis (a scalar index: a vector of coordinates); an
    index outside dims, which TensorFlow refuses, wraps around."""
    indices, dims = ctx.input(0), ctx.input(1)
    if not dims.is_const:
        ctx.fail("dims known only at run time")
    sizes = np.asarray(dims.const).reshape(-1).astype(np.int64)
    if np.prod(sizes) >= 2 ** 31:
        ctx.fail(f"dims {sizes.tolist()} of 2^31 elements or more (computed on int32)")
    strides = np.cumprod(np.concatenate([[1], sizes[::-1][:-1]]))[::-1]
    if indices.shape is None:
        ctx.fail("the indices' rank must be known")
    per_dim = (len(sizes),) + (1,) * len(indices.shape)  # broadcast against the indices: [len(dims), *indices]
    out_shape = (len(sizes), *indices.shape)
    quotient = ctx.emit("FLOOR_DIV", [ctx.cast(indices, np.int32), ctx.i32(strides.astype(np.int32).reshape(per_dim))],
                        dtype=np.int32, shape=out_shape)
    coords = ctx.emit("FLOOR_MOD", [quotient, ctx.i32(sizes.astype(np.int32).reshape(per_dim))], dtype=np.int32,
                      shape=out_shape)
    return [ctx.cast(coords, np.dtype(indices.dtype))]
