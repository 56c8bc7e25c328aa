"""pytest setup for qkv's Python tests: where PyTorch is required (the README's test command sets
QKV_REQUIRE_TORCH=1), its absence fails the run instead of skipping the comparisons against it."""
import os


def pytest_configure(config):
    if os.environ.get("QKV_REQUIRE_TORCH"):
        import torch  # noqa: F401  (ImportError here fails the run)
