"""Per-thread modes with torch's names: gradient recording (qkv.no_grad, enable_grad,
set_grad_enabled, is_grad_enabled) and mixed precision (qkv.autocast). Each is a context manager
and a decorator, and restores the mode it found on the way out, as torch's do.

    with qkv.no_grad():                       # inference: no tape, no saved tensors
        out = model(x)

    with qkv.autocast("cuda", dtype="bfloat16"):   # or "cpu"; torch.bfloat16 works too
        loss = model(x)                       # linear layers: bf16 operands, f32 sums;
    loss.backward()                           # attention: qkv's bf16 kernels (tensor cores on a GPU)

qkv's autocast covers what its C++ Autocast does (qkv/ops/autocast.h): every linear layer and
scaled_dot_product_attention compute in bf16 with f32 accumulation, forward and backward, and
return f32 — so nothing downstream sees bf16 activations and no GradScaler is needed (bf16 has
f32's range). float16 is not offered: qkv has no f16 kernels.
"""
import contextlib

from ._qkv import _autocast_bf16, _grad_enabled, _set_autocast_bf16, _set_grad_enabled


def is_grad_enabled():
    """Whether ops record the tape on this thread (torch.is_grad_enabled)."""
    return _grad_enabled()


class _Mode(contextlib.ContextDecorator):
    def __init__(self, get, set_, value):
        self._get, self._set, self._value, self._prev = get, set_, value, []

    def __enter__(self):
        self._prev.append(self._get())  # a stack: the same object may be entered again, nested
        self._set(self._value)
        return self

    def __exit__(self, *exc):
        self._set(self._prev.pop())
        return False


class set_grad_enabled(_Mode):  # noqa: N801 — torch's name
    """Records the tape (True) or not (False) inside the block, or from now on when called alone
    (torch.set_grad_enabled)."""

    def __init__(self, mode):
        super().__init__(_grad_enabled, _set_grad_enabled, bool(mode))
        self._prev.append(_grad_enabled())
        _set_grad_enabled(bool(mode))  # called alone, it sets the mode at once, as torch's does
        self._set_at_construction = True

    def __enter__(self):
        if self._set_at_construction:  # the first `with`: set already, the mode to restore is saved
            self._set_at_construction = False
            return self
        return super().__enter__()  # entered again (a decorator's later calls)


class no_grad(_Mode):  # noqa: N801
    """No tape inside the block (torch.no_grad): results do not require grad."""

    def __init__(self):
        super().__init__(_grad_enabled, _set_grad_enabled, False)


class enable_grad(_Mode):  # noqa: N801
    """The tape on inside the block, even within no_grad (torch.enable_grad)."""

    def __init__(self):
        super().__init__(_grad_enabled, _set_grad_enabled, True)


def is_autocast_enabled():
    """Whether bf16 autocast is on for this thread."""
    return _autocast_bf16()


def _dtype_name(dtype):
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "bf16"):
        return "bfloat16"
    raise ValueError(f"qkv.autocast: dtype {dtype} is not supported (qkv autocasts to bfloat16 only)")


class autocast(_Mode):  # noqa: N801 — torch.autocast's name and arguments
    """Mixed precision inside the block (torch.autocast): linear layers and attention compute in bf16
    with f32 accumulation, forward and backward; their outputs stay f32. device_type "cpu" or "cuda"
    (the mode is per thread, for every device); enabled=False turns it off inside the block."""

    def __init__(self, device_type, dtype="bfloat16", enabled=True, cache_enabled=None):
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"qkv.autocast: device_type must be 'cpu' or 'cuda', got {device_type!r}")
        _dtype_name(dtype)
        self.device_type, self.fast_dtype = device_type, "bfloat16"
        super().__init__(_autocast_bf16, _set_autocast_bf16, bool(enabled))


__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "autocast", "is_autocast_enabled"]
