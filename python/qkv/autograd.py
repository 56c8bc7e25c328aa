"""Reverse mode with torch.autograd's names (Tensor.backward() is on the tensor itself)."""
from ._qkv import autograd as _autograd

grad = _autograd.grad

__all__ = ["grad"]
