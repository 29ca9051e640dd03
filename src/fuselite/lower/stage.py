"""The lowering stage: replace every ``tf.*`` op by the ``tfl.*`` ops of its rule."""

from __future__ import annotations

from fuselite.errors import UnsupportedOpsError
from fuselite.ir import Module
from fuselite.lower.registry import LOWERINGS, LowerCtx, LowerError

# string ops with no LiteRT builtin: what each is (and which Keras layer writes it), for the error's way out
_HASH = "string hashing ({}: Keras' Hashing, StringLookup / IntegerLookup with num_oov_indices > 1)"
STRING_OPS = {
    "StringToHashBucketFast": _HASH.format("FarmHash Fingerprint64"),
    "StringToHashBucketStrong": _HASH.format("SipHash, a salted Hashing"),
    "StringToHashBucket": _HASH.format("Fingerprint64"),
    "AsString": "numbers written as strings (Keras' Hashing of integers)",
    "StringLower": "lower-casing (TextVectorization's standardize)",
    "StringUpper": "upper-casing",
    "StaticRegexReplace": "a regular-expression replace (TextVectorization's punctuation strip)",
    "RegexReplace": "a regular-expression replace",
    "StringSplitV2": "splitting strings into words (TextVectorization's split; tensorflow_text.WhitespaceTokenizer "
                     "splits on Unicode whitespace with a TFLite kernel fuselite keeps, if that is the split you want)",
    "StringStrip": "stripping whitespace",
    "StringNGrams": "n-grams of words (TextVectorization's ngrams; tensorflow_text.ngrams with "
                    "Reduction.STRING_JOIN has a TFLite kernel fuselite keeps)",
    "StringJoin": "joining strings",
    "ReduceJoin": "joining strings",
    "StringLength": "string lengths",
    "Substr": "substrings",
    "UnicodeDecodeWithOffsets": "decoding Unicode",
    "UnicodeEncode": "encoding Unicode",
    "RaggedBincount": "counting each string's word ids (TextVectorization's output_mode multi_hot / count / tf_idf: "
                      "a bincount of the ragged ids its split gives)",
}

# where the way out is not "keep this step outside the model, before its input"
WAYS_OUT = {
    "RaggedBincount": "keep TextVectorization(output_mode='int', output_sequence_length=N) outside the model, "
                      "before its input, and count its ids inside: keras.layers.CategoryEncoding(num_tokens="
                      "vocabulary_size(), output_mode='multi_hot' or 'count') converts (DenseBincount), then drop "
                      "column 0 (the padding id; output_mode='int' numbers the words one higher), and for tf_idf "
                      "multiply by the layer's idf weights",
}
OUTSIDE = "keep this step outside the model, before its input"


def lower_module(module: Module) -> None:
    """Lower every function; all unsupported ops are reported together."""
    problems: list[str] = []
    for fn in module.functions.values():
        new_ops = []
        for op in fn.ops:
            if op.dialect != "tf":
                new_ops.append(op)
                continue
            rule = LOWERINGS.get(op.kind)
            if rule is None:
                hint = STRING_OPS.get(op.kind)
                problems.append(f"no lowering for TF op {op.describe()}" + (
                    f": {hint}; LiteRT has no builtin for it (and fuselite writes no Flex op): "
                    f"{WAYS_OUT.get(op.kind, OUTSIDE)}" if hint else ""))
                continue
            ctx = LowerCtx(fn, op, module)
            try:
                results = list(rule(ctx))
            except LowerError as e:
                problems.append(str(e))
                continue
            if op.attrs.get("_side_effect"):  # loops / branches that touch mutable variables
                for new in ctx.new_ops:
                    new.attrs["_side_effect"] = True
            new_ops.extend(ctx.new_ops)
            for old, new in zip(op.outputs, results):
                if new is not None and new is not old:
                    _rebind(fn, old, new)
        fn.ops = new_ops
    if problems:
        unique = list(dict.fromkeys(problems))
        raise UnsupportedOpsError(f"{len(unique)} op(s) cannot be converted to TFLite builtins:", unique)


def _rebind(fn, old, new):
    # Values flow forward: later ops (not yet visited) and the function outputs.
    for op in fn.ops:
        op.inputs = [new if v is old else v for v in op.inputs]
    fn.outputs = [new if v is old else v for v in fn.outputs]
