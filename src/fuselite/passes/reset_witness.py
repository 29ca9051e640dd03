"""Make LiteRT's ``interpreter.reset_all_variables()`` reset resource variables too.

LiteRT's ``reset_all_variables()`` (``Subgraph::ResetVariableTensors``) zeroes the
``is_variable`` tensors of every subgraph and nothing else: resource variables
(``VAR_HANDLE`` / ``ASSIGN_VARIABLE``, where fuselite keeps the state of a stateful
Keras RNN and any other assigned variable) keep their values. The only tensors that
persist across invokes *and* are zeroed by that call are the variable inputs that a
kernel updates in place, such as the hidden state of ``UNIDIRECTIONAL_SEQUENCE_RNN``
(``unidirectional_sequence_rnn.cc`` writes its final state into that tensor).

So each signature that uses variables gets a *witness*: a one-unit
``UNIDIRECTIONAL_SEQUENCE_RNN`` whose hidden state ``W`` (``[1, 1]``, ``is_variable``)
is 0 after ``AllocateTensors()`` or ``reset_all_variables()`` and at least 1 after any
invoke (input ``CAST(fresh)``, weight 1, recurrent weight 0, bias 1, RELU). First in the
signature, after the ``CALL_ONCE`` of the init function::

    fresh = EQUAL(W, 0)                       # [1, 1, 1] bool
    IF(fresh) then reset_variables else (nothing)
    _ = UNIDIRECTIONAL_SEQUENCE_RNN(CAST(fresh), [[1]], [[0]], [1], W)   # W := 1 or 2

The ``IF`` runs the ``reset_variables`` function (the same subgraph as the signature of
that name), so ``reset_all_variables()`` followed by an invoke sees every variable at
its initial value, exactly as after invoking the ``reset_variables`` signature. Five
small ops per signature; the witness never touches the model's numbers.

Not for integer-only models (the witness is float; there the ``reset_variables``
signature and ``fuselite.runtime.reset_variables`` still reset) and not for the micro
target: TFLite Micro's ``MicroInterpreter::Reset()`` resets resource variables itself
(``micro_interpreter_graph.cc``: ``resource_variables_->ResetAll()``).
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Module, Value
from fuselite.passes.variables import RESET_SIGNATURE

WITNESS = "reset_witness"
KEEP_FUNCTION = "fuselite_keep_variables"


def _keep_function(module: Module) -> Function:
    """An empty function: the ``IF``'s else branch."""
    name, i = KEEP_FUNCTION, 1
    while name in module.functions and module.functions[name].ops:
        name, i = f"{KEEP_FUNCTION}_{i}", i + 1
    return module.functions.get(name) or module.add(Function(name))


def add_reset_witnesses(module: Module) -> int:
    """Give each signature that initialises variables a reset witness; returns how many got one."""
    if RESET_SIGNATURE not in module.signatures:
        return 0
    reset = module.signatures[RESET_SIGNATURE]
    keep = None
    done = 0
    for name in dict.fromkeys(module.signatures.values()):
        fn = module.functions[name]
        init = next((i for i, op in enumerate(fn.ops) if op.kind == "CALL_ONCE"), None)
        if name == reset or init is None:
            continue
        keep = keep or _keep_function(module)
        f32 = np.dtype(np.float32)
        w = Value(fn.unique_name(WITNESS), f32, (1, 1), meta={"is_variable": True})
        equal = fn.make_op("tfl.EQUAL", [w, fn.const(np.zeros((1, 1, 1), np.float32), "zero")],
                           [(np.dtype(np.bool_), (1, 1, 1))], {}, name=f"{WITNESS}/fresh")
        fresh = equal.outputs[0]
        branch = fn.make_op("tfl.IF", [fresh], [], {"then_subgraph_index": "@" + reset,
                                                    "else_subgraph_index": "@" + keep.name,
                                                    "_side_effect": True, "_pinned": True},
                            name=f"{WITNESS}/reset_if_fresh")
        cast = fn.make_op("tfl.CAST", [fresh], [(f32, (1, 1, 1))], {}, name=f"{WITNESS}/input")
        rnn = fn.make_op("tfl.UNIDIRECTIONAL_SEQUENCE_RNN",
                         [cast.outputs[0], fn.const(np.ones((1, 1), np.float32), "one"),
                          fn.const(np.zeros((1, 1), np.float32), "zero"), fn.const(np.ones(1, np.float32), "bias"), w],
                         [(f32, (1, 1, 1))],
                         {"fused_activation_function": "RELU", "time_major": False,
                          "asymmetric_quantize_inputs": False, "_pinned": True},
                         name=f"{WITNESS}/mark")
        for op in (equal, branch, cast, rnn):
            op.attrs["_reset_witness"] = True  # not the model's: TFLite Micro's checks leave it out
        fn.ops[init + 1:init + 1] = [equal, branch, cast, rnn]
        done += 1
    return done
