"""qkv.nn: modules with torch.nn's names, arguments and parameter names (a PyTorch state_dict loads
one to one with load_state_dict), and the functional ops (qkv.nn.functional)."""
from .._qkv.nn import (GRU, LSTM, Embedding, LayerNorm, Linear, Module, MultiheadAttention, TransformerDecoderLayer,
                       TransformerEncoderLayer)
from . import functional

__all__ = ["GRU", "LSTM", "Embedding", "LayerNorm", "Linear", "Module", "MultiheadAttention",
           "TransformerDecoderLayer", "TransformerEncoderLayer", "functional"]
