"""Golden file for qkv's float8 e4m3fn conversions (core/dtype.h's f8e4m3_to_f32 and f32_to_f8e4m3;
tests/core/tensor_test.cpp, Dtype.Float8E4m3IsPyTorchsFloat8E4m3fn): what PyTorch's
torch.float8_e4m3fn makes of f32 values and gives back for each of its 256 codes.

    python3 tests/golden/make_fp8_golden.py   # pyenv python3: PyTorch ≥ 2.1 (Debian's 1.13 has no float8)

Writes tests/golden/fp8_e4m3.json: "torch" (the version), "decode" (each code's f32 bits, hex),
"inputs" (f32 bits, 8 hex digits each) and "codes" (2 hex digits each): for both signs, every f32
exponent with fractions around e4m3's rounding points (its 3 kept bits, the half and the sticky
bits), the midpoints between neighbouring e4m3 values and one f32 step either side, the saturation
range 448 … 480, ±inf and NaNs, and 2,000 seeded random values in ±500. Deterministic.
"""
import json
import os
import struct

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def bits_of(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    decode = codes.float().view(torch.int32).numpy().astype(np.uint32)
    inputs = []
    fracs = [0, 1, 0x7FFFF, 0x80000, 0x80001, 0xFFFFF, 0x100000, 0x17FFFF, 0x180000, 0x180001, 0x280000,
             0x380000, 0x37FFFF, 0x380001, 0x7FFFFF]
    for sign in (0, 1):
        for e in range(256):
            for f in fracs:
                inputs.append((sign << 31) | (e << 23) | f)
    values = decode.view(np.float32)
    positive = sorted(float(v) for v in values[:127] if np.isfinite(v))
    for a, b in zip(positive, positive[1:]):
        mid = np.float32((np.float64(a) + np.float64(b)) / 2)
        for x in (mid, np.nextafter(mid, np.float32(-1)), np.nextafter(mid, np.float32(1e9))):
            inputs += [bits_of(float(x)), bits_of(-float(x))]
    for x in (448.0, 449.0, 463.99, 464.0, 464.01, 479.0, 480.0, 1e38, float("inf")):
        inputs += [bits_of(x), bits_of(-x)]
    inputs += [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001]
    rng = np.random.default_rng(0)
    inputs += [int(b) for b in rng.uniform(-500, 500, 2000).astype(np.float32).view(np.uint32)]
    x = torch.from_numpy(np.array(inputs, dtype=np.uint32).view(np.int32)).view(torch.float32)
    out = x.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    doc = {
        "torch": torch.__version__,
        "decode": ["%08x" % int(d) for d in decode],
        "inputs": "".join("%08x" % i for i in inputs),
        "codes": "".join("%02x" % int(c) for c in out),
    }
    with open(os.path.join(HERE, "fp8_e4m3.json"), "w") as f:
        json.dump(doc, f)
        f.write("\n")
    print(len(inputs), "inputs")


if __name__ == "__main__":
    main()
