"""A PyTorch call's GPU time, as the `*_cuda_vs_pytorch.py` benchmarks take it: the median of `reps`
calls after three warm-up ones, each between two CUDA events (the GPU's own clock, the host's launch
time excluded once the queue is ahead), in milliseconds."""
import statistics


def time_ms(fn, reps):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
