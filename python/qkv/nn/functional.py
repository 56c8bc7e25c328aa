"""torch.nn.functional's names over qkv's ops; inputs are qkv tensors or anything array-like
(NumPy arrays and torch tensors are viewed without a copy when dense, row-major float32)."""
from .._qkv import functional as _f

scaled_dot_product_attention = _f.scaled_dot_product_attention
scaled_dot_product_attention_with_weights = _f.scaled_dot_product_attention_with_weights
softmax = _f.softmax
log_softmax = _f.log_softmax
relu = _f.relu
gelu = _f.gelu
matmul = _f.matmul
linear = _f.linear
multi_head_attention = _f.multi_head_attention
cross_entropy = _f.cross_entropy
linear_cross_entropy = _f.linear_cross_entropy

__all__ = ["scaled_dot_product_attention", "scaled_dot_product_attention_with_weights", "softmax", "log_softmax",
           "relu", "gelu", "matmul", "linear", "multi_head_attention", "cross_entropy", "linear_cross_entropy"]
