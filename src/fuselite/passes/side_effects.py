"""Which TensorFlow ops touch the world outside the graph: files, the network, the environment, the clock, the
Python interpreter. Conversion runs none of them: constant folding (``fold_tf.py``) refuses one whose operands are
all constants with an error naming it, shape refinement leaves it out of the graph it imports, and the fusion check
runs a composite's body only when nothing in it (nor in a function it calls) is one of them or another stateful op
not known to keep its state inside the graph (:func:`graph_state_only`).

TensorFlow's registry marks most of these ops stateful, which alone keeps them out of folding; some it does not
(``ReadFile``, ``MatchingFiles``, ``ImmutableConst``, the debug ops that write to their URLs, ``PyFuncStateless``),
hence the names here.

Example::

    outside_effect("ReadFile")   # -> "reads a file"
    outside_effect("MatMul")     # -> None
"""

from __future__ import annotations

import functools
import re

from fuselite.errors import ConversionError

_NAMED = {
    "ReadFile": "reads a file",
    "WriteFile": "writes a file",
    "MatchingFiles": "lists files matching a pattern",
    "ImmutableConst": "maps a file into memory",
    "FileSystemSetConfiguration": "configures a file system",
    "GenerateVocabRemapping": "reads vocabulary files",
    "LoadAndRemapMatrix": "reads a checkpoint",
    "MergeV2Checkpoints": "merges checkpoint files",
    "Timestamp": "reads the clock",
    "SleepOp": "waits on the clock",
    "SleepIdentityOp": "waits on the clock",
    "DumpTensor": "writes a file",
    "CalibrationStatisticsSaver": "writes a file",
    "DistributedSave": "writes files",
    "RecordInput": "reads files matching a pattern",
    "Copy": "writes to its debug URLs",
    "CopyHost": "writes to its debug URLs",
}
# (pattern, what a matching op does): whole families
_FAMILIES = [
    (re.compile(r"^(Save|Restore)"), "writes or reads a checkpoint"),
    (re.compile(r"Reader"), "reads records from files"),
    (re.compile(r"Dataset|Iterator"), "a tf.data pipeline (reads files, caches to disk, talks to a service)"),
    (re.compile(r"TextFile"), "reads a text file"),
    (re.compile(r"^Print"), "prints (to stderr or a file)"),
    (re.compile(r"^Debug"), "writes to its debug URLs (files, gRPC)"),
    (re.compile(r"PyFunc"), "runs Python code"),
    (re.compile(r"^(Write|Create|Flush|Close|Import)\w*(Summary|Event)|SummaryWriter|SummaryDbWriter"),
     "writes summaries to files"),
    (re.compile(r"^_?(Host)?(Send|Recv)$|^Collective|^Nccl|Rpc"), "talks to other devices or processes"),
    (re.compile(r"^(Infeed|Outfeed)"), "talks to the host"),
]
_PROTO_OPS = {"DecodeProtoV2", "EncodeProto"}  # descriptor_source may be a file's path


def outside_effect(kind: str, node_def=None) -> str | None:
    """What running the TensorFlow op ``kind`` does outside the graph (files, network, environment, clock,
    Python), in words, or None where it does none of that. ``node_def``: the op's ``NodeDef``, for ops whose
    attributes decide (a proto op's ``descriptor_source`` naming a file)."""
    what = _effect_of_kind(kind)
    if what is not None:
        return what
    if kind in _PROTO_OPS and node_def is not None and "descriptor_source" in node_def.attr:
        source = node_def.attr["descriptor_source"].s.decode(errors="replace")
        if not source.startswith(("local://", "bytes://")):
            return f"reads its proto descriptors from the file '{source}'"
    return None


@functools.lru_cache(maxsize=4096)
def _effect_of_kind(kind: str) -> str | None:
    if kind in _NAMED:
        return _NAMED[kind]
    return next((what for pattern, what in _FAMILIES if pattern.search(kind)), None)


# stateful in TensorFlow's registry, but their state lives in the graph's run (variables, random generators,
# tensor arrays, stacks, tables, control flow and calls, whose bodies are checked too)
_GRAPH_STATE = re.compile(r"Variable|Random|Stateful|TensorArray|^Stack|HashTable|LookupTable|InitializeTable|Mutex"
                          r"|^Rng|SeedGenerator|Multinomial|Poisson|Gamma|Shuffle|TruncatedNormal|^(While|If|Case)$"
                          r"|^Resource(Gather|Scatter|Apply|SparseApply|StridedSliceAssign)|^_?(Arg|Retval)$"
                          r"|^(Assert|CheckNumerics|CheckNumericsV2|Empty|VarHandleOp|VarIsInitializedOp|NoOp"
                          r"|DestroyResourceOp|GuaranteeConst|DeepCopy|NonDeterministicInts|Placeholder|Const)$")


def graph_state_only(kind: str, stateful: bool) -> bool:
    """True where running ``kind`` changes nothing outside the graph's run: not an op of :func:`outside_effect`,
    and either stateless in TensorFlow's registry or stateful in a way kept in the run (``_GRAPH_STATE``)."""
    if outside_effect(kind) is not None:
        return False
    return not stateful or bool(_GRAPH_STATE.search(kind))


class SideEffectError(ConversionError):
    """An op that touches files, the network, the environment or the clock would have to run at conversion."""


def side_effect_error(problems: list[str], where: str = "constant folding would have run them") -> SideEffectError:
    """The one error for every such op found in one pass (each problem: the op described, what it does);
    ``where``: what would have run them."""
    return SideEffectError(
        f"{len(problems)} op(s) touch files, the network, the environment or the clock: fuselite runs none at "
        f"conversion ({where}), and LiteRT has no builtin for them; keep them outside the model (read the file in "
        "the app, pass its contents as an input):", problems)
