"""The C header compiled custom-op kernels are written against (``fuselite_tflite_kernel.h``).

The TFLite headers are not shipped with the wheels; :data:`C_HEADER` declares the parts of
``tensorflow/lite/core/c/common.h`` a classic custom-op kernel uses, with the same names and
layouts (those of :mod:`fuselite.runtime.abi`). :func:`write_c_header` writes it next to a kernel's
sources.
"""

from __future__ import annotations

import os
from pathlib import Path

C_HEADER = r"""/* fuselite_tflite_kernel.h -- minimal TFLite kernel C ABI for custom-op kernels.
 *
 * Declares the parts of tensorflow/lite/core/c/common.h a classic custom-op kernel uses,
 * with the same names and layouts, so kernels written against the real header compile
 * unchanged (the real header can be used instead of this one). Build:
 *     gcc -O2 -shared -fPIC my_op.c -o libmy_op.so
 * and export `TfLiteRegistration* Register_MY_OP(void)` (C linkage; `extern "C"` in C++).
 * Arrays handed to context->ResizeTensor must come from malloc (the runtime free()s them):
 * use TfLiteIntArrayCreate below.
 */
#ifndef FUSELITE_TFLITE_KERNEL_H_
#define FUSELITE_TFLITE_KERNEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TfLiteStatus {
  kTfLiteOk = 0,
  kTfLiteError = 1,
  kTfLiteDelegateError = 2,
  kTfLiteApplicationError = 3,
  kTfLiteDelegateDataNotFound = 4,
  kTfLiteDelegateDataWriteError = 5,
  kTfLiteDelegateDataReadError = 6,
  kTfLiteUnresolvedOps = 7,
  kTfLiteCancelled = 8,
  kTfLiteOutputShapeNotKnown = 9
} TfLiteStatus;

typedef enum TfLiteType {
  kTfLiteNoType = 0, kTfLiteFloat32 = 1, kTfLiteInt32 = 2, kTfLiteUInt8 = 3, kTfLiteInt64 = 4,
  kTfLiteString = 5, kTfLiteBool = 6, kTfLiteInt16 = 7, kTfLiteComplex64 = 8, kTfLiteInt8 = 9,
  kTfLiteFloat16 = 10, kTfLiteFloat64 = 11, kTfLiteComplex128 = 12, kTfLiteUInt64 = 13,
  kTfLiteResource = 14, kTfLiteVariant = 15, kTfLiteUInt32 = 16, kTfLiteUInt16 = 17,
  kTfLiteInt4 = 18, kTfLiteBFloat16 = 19
} TfLiteType;

typedef enum TfLiteAllocationType {
  kTfLiteMemNone = 0, kTfLiteMmapRo, kTfLiteArenaRw, kTfLiteArenaRwPersistent, kTfLiteDynamic,
  kTfLitePersistentRo, kTfLiteCustom, kTfLiteVariantObject, kTfLiteNonCpu
} TfLiteAllocationType;

typedef struct TfLiteIntArray {
  int size;
  int data[];
} TfLiteIntArray;

typedef union TfLitePtrUnion {
  int32_t* i32; uint32_t* u32; int64_t* i64; uint64_t* u64; float* f; double* f64;
  char* raw; const char* raw_const; uint8_t* uint8; bool* b; int16_t* i16; uint16_t* ui16;
  int8_t* int8; void* data;
} TfLitePtrUnion;

typedef struct TfLiteQuantizationParams { float scale; int32_t zero_point; } TfLiteQuantizationParams;
typedef struct TfLiteQuantization { int type; void* params; } TfLiteQuantization;
typedef int TfLiteBufferHandle;

struct TfLiteDelegate;
struct TfLiteRegistration;

typedef struct TfLiteTensor {
  TfLiteType type;
  TfLitePtrUnion data;
  TfLiteIntArray* dims;
  TfLiteQuantizationParams params;
  TfLiteAllocationType allocation_type;
  size_t bytes;
  const void* allocation;
  const char* name;
  struct TfLiteDelegate* delegate;
  TfLiteBufferHandle buffer_handle;
  bool data_is_stale;
  bool is_variable;
  TfLiteQuantization quantization;
  void* sparsity;
  const TfLiteIntArray* dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
  TfLiteIntArray* inputs;
  TfLiteIntArray* outputs;
  TfLiteIntArray* intermediates;
  TfLiteIntArray* temporaries;
  void* user_data;
  void* builtin_data;
  const void* custom_initial_data;
  int custom_initial_data_size;
  struct TfLiteDelegate* delegate;
  bool might_have_side_effect;
} TfLiteNode;

/* Prefix of TfLiteContext: kernels only receive pointers to it. */
typedef struct TfLiteContext {
  size_t tensors_size;
  TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext* context, TfLiteIntArray** execution_plan);
  TfLiteTensor* tensors;
  void* impl_;
  TfLiteStatus (*ResizeTensor)(struct TfLiteContext*, TfLiteTensor* tensor, TfLiteIntArray* new_size);
  void (*ReportError)(struct TfLiteContext*, const char* msg, ...);
  TfLiteStatus (*AddTensors)(struct TfLiteContext*, int tensors_to_add, int* first_new_tensor_index);
  TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext*, int node_index, TfLiteNode** node,
                                         struct TfLiteRegistration** registration);
  void* ReplaceNodeSubsetsWithDelegateKernels;
  int recommended_num_threads;
} TfLiteContext;

/* TfLiteRegistration up to `version` (the runtime only reads these fields of yours). */
typedef struct TfLiteRegistration {
  void* (*init)(TfLiteContext* context, const char* buffer, size_t length);
  void (*free)(TfLiteContext* context, void* buffer);
  TfLiteStatus (*prepare)(TfLiteContext* context, TfLiteNode* node);
  TfLiteStatus (*invoke)(TfLiteContext* context, TfLiteNode* node);
  const char* (*profiling_string)(const TfLiteContext* context, const TfLiteNode* node);
  int32_t builtin_code;
  const char* custom_name;
  int version;
  void* registration_external;
  void* async_kernel;
  uint64_t inplace_operator;
} TfLiteRegistration;

#ifndef FUSELITE_NO_INT_ARRAY_HELPERS
static inline TfLiteIntArray* TfLiteIntArrayCreate(int size) {
  TfLiteIntArray* a = (TfLiteIntArray*)malloc(sizeof(int) * (size_t)(size + 1));
  if (a) a->size = size;
  return a;
}
static inline TfLiteIntArray* TfLiteIntArrayCopy(const TfLiteIntArray* src) {
  TfLiteIntArray* a = TfLiteIntArrayCreate(src->size);
  for (int i = 0; a && i < src->size; ++i) a->data[i] = src->data[i];
  return a;
}
static inline void TfLiteIntArrayFree(TfLiteIntArray* a) { free(a); }
#endif

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FUSELITE_TFLITE_KERNEL_H_ */
"""


def write_c_header(directory: str | os.PathLike) -> Path:
    """Write :data:`C_HEADER` as ``<directory>/fuselite_tflite_kernel.h`` and return its path."""
    path = Path(directory) / "fuselite_tflite_kernel.h"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(C_HEADER)
    return path
