"""TensorList ops are rewritten to dense tensors before lowering (passes/tensor_lists.py);
any that survive reach the registry's "no lowering" report with their node names."""
