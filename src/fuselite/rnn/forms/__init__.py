"""The recurrent forms: how a cell's steps are written, each generic over the cells of ``rnn/cells/``.

* ``fused.py``: LiteRT's sequence ops (``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN``, the bidirectional ones)
  and the state tensors they keep between invokes;
* ``unrolled.py``: builtins step by step, the input projection hoisted;
* ``loop.py``: the input projection hoisted, the steps in a ``WHILE`` without TensorLists;
* ``layer.py``: what a layer adds around any form (its outputs, the merge of a Bidirectional's two
  directions) and :func:`~fuselite.rnn.forms.layer.sequence`, one direction of any cell in the form asked;
* ``policy.py``: which form each family gets (``rnn_form``) and choosing it in a rule.
"""
