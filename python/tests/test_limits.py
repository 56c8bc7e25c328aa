"""Issue 43 from Python: sizes and counts a Python value asks for are checked where the library
checks them for every front end — a clear qkv.Error naming the value, never a crash or a hang."""
import json
import os
import subprocess
import sys

import pytest

import qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")


def shakespeare(**train):
    with open(os.path.join(ROOT, "configs", "shakespeare-char.json")) as f:
        cfg = json.load(f)
    cfg["train"].update(max_iters=1, eval_iters=1, **train)
    return cfg


def test_train_batch_size_that_overflows_is_an_error(tmp_path):
    # item 1: batch_size × block_size wrapped to a 0-byte buffer (a SIGSEGV in memcpy)
    with pytest.raises(qkv.Error, match=r"train.batch_size × model.block_size"):
        qkv.train(shakespeare(batch_size=2**62), out_dir=str(tmp_path), base_dir=os.path.join(ROOT, "configs"), quiet=True)


def test_train_model_too_large_names_its_key(tmp_path):
    # item 7: 10⁵ layers grew to the memory cap
    cfg = shakespeare()
    cfg["model"]["n_layer"] = 100000
    with pytest.raises(qkv.Error, match=r"n_layer 100000.*of memory"):
        qkv.train(cfg, out_dir=str(tmp_path), base_dir=os.path.join(ROOT, "configs"), quiet=True)


def test_set_num_threads_bounded():
    # item 4: 10**6 threads ended in a SIGSEGV inside libgomp
    before = qkv.get_num_threads()
    with pytest.raises(qkv.Error, match=r"set_num_threads: 1000000 threads asked for"):
        qkv.set_num_threads(10**6)
    assert qkv.get_num_threads() == before


def test_omp_num_threads_past_the_bound_is_clamped_with_a_warning():
    code = "import warnings, qkv; print(qkv.get_num_threads())"
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1000000"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "OMP_NUM_THREADS=1000000" in r.stderr
    assert int(r.stdout.strip()) == os.cpu_count() or int(r.stdout.strip()) <= 4 * os.cpu_count()


def test_translate_batch_beam_size_capped():
    # item 6: beam_size=10**6 grew to 2.1 GB; the CLI's cap of 64 holds in the library
    t = qkv.Translator(os.path.join(MODELS, "en-fr.safetensors"))
    with pytest.raises(qkv.Error, match=r"beam_size must be between 1 and 64, got 1000000"):
        t.translate_batch(["I like tea."], beam_size=10**6)


def test_cache_limit_bounds_the_allocators_cache_and_refuses_bad_values():
    # the host allocator's cache from Python (issue 47): qkv translate's decoding bound, then back
    try:
        qkv.set_cache_limit(0, 0.0)            # nothing kept: a freed block goes back at once
        x = qkv.zeros([1024, 1024])            # 4 MiB: a cached size class
        del x
        assert qkv.cached_bytes() == 0
        qkv.set_cache_limit()                  # training's default keeps it
        x = qkv.zeros([1024, 1024])
        del x
        assert qkv.cached_bytes() >= 4 << 20
        qkv.set_cache_limit(64 << 20, 0.0, miss_evicts=True)  # (decoding's kind): a miss sends cached blocks back
        x = qkv.zeros([1024, 1024])
        del x
        assert qkv.cached_bytes() >= 4 << 20
        y = qkv.zeros([2048, 1024])            # 8 MiB: no cached block serves it, so they go first
        assert qkv.cached_bytes() == 0
        del y
        qkv.empty_cache()
        assert qkv.cached_bytes() == 0
        for bad in (float("nan"), float("inf"), -1.0):
            with pytest.raises(qkv.Error, match=r"set_cache_limit: peak_fraction must be a finite number"):
                qkv.set_cache_limit(0, bad)
        with pytest.raises(qkv.Error, match=r"set_cache_limit: at_least must be a number of bytes"):
            qkv.set_cache_limit(-5)
        with pytest.raises(TypeError):
            qkv.set_cache_limit(2**70)
        for bad in ("yes", None, [True]):      # miss_evicts is a bool, nothing taken for one
            with pytest.raises(TypeError):
                qkv.set_cache_limit(0, 0.25, miss_evicts=bad)
    finally:
        qkv.set_cache_limit()
