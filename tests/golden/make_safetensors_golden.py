#!/usr/bin/env python3
"""Golden file for qkv's safetensors reader, written by Hugging Face's `safetensors` package.

Run with the pyenv interpreter (PyTorch 2.x, for BF16, which numpy has no dtype for):

    python3 -m pip install safetensors numpy
    python3 tests/golden/make_safetensors_golden.py

It writes tests/golden/tiny.safetensors next to this script (644 bytes). The values are deterministic;
the order of the two metadata keys in the header is not (safetensors keeps them in a Rust HashMap).
tests/io/safetensors_test.cpp reads it and expects exactly the values below, so a change here needs
the same change there.
"""
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    tensors = {
        # F32: a 2x3 matrix of exactly representable values.
        "f32": torch.tensor([[0.5, -1.25, 3.0], [1e-3, -0.0, 1e30]], dtype=torch.float32),
        # F16: one, the largest finite half, the smallest subnormal (2^-24), a negative value.
        "f16": torch.tensor([1.0, 65504.0, 2.0**-24, -2.5], dtype=torch.float16),
        # BF16: values exact in bfloat16.
        "bf16": torch.tensor([1.0, -0.5, 3.140625, 1e38], dtype=torch.bfloat16),
        # I64: the ends of the i32 range (they fit; qkv reads I64 as i32).
        "i64": torch.tensor([[0, -1], [2147483647, -2147483648]], dtype=torch.int64),
        "i32": torch.tensor([7, -8, 9], dtype=torch.int32),
        "bool": torch.tensor([True, False, False, True]),
        "scalar": torch.tensor(42.0, dtype=torch.float32),  # shape []
        "empty": torch.zeros((0, 3), dtype=torch.float32),  # zero bytes
    }
    path = os.path.join(HERE, "tiny.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "source": "make_safetensors_golden.py"})
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
