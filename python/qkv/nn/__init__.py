"""qkv.nn: the functional ops (qkv.nn.functional) under torch.nn's names."""
from . import functional

__all__ = ["functional"]
