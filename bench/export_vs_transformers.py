"""`qkv export --to hf` against transformers writing the same folder: each loads its own form of a
model from disk and writes the Hugging Face folder (qkv: its model file → export; transformers:
from_pretrained(folder) → save_pretrained). Wall time and peak RSS of each, medians of --repeats runs,
old/new alternated.

    python3 bench/export_vs_transformers.py --folder /tmp/expbench/bert-base-cls --qkv build/qkv
(the folder: any checkpoint qkv converts; pyenv python3 with torch and transformers)
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HF_SAVE = """
import sys, time, torch, transformers
transformers.logging.set_verbosity_error()
t = time.perf_counter()
torch.set_num_threads(int(sys.argv[3]))
cfg = transformers.AutoConfig.from_pretrained(sys.argv[1])
m = getattr(transformers, cfg.architectures[0]).from_pretrained(sys.argv[1], dtype=torch.float32)
m.save_pretrained(sys.argv[2])
transformers.AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
print(time.perf_counter() - t)
"""


def timed(argv, env=None):
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, err = p.communicate()
    wall = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"{argv}: {err.decode()[-500:]}")
    return wall, ru.ru_maxrss / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True)
    p.add_argument("--qkv", default="build/qkv")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.safetensors")
        subprocess.run([a.qkv, "convert", a.folder, "-o", model], check=True, capture_output=True)
        qkv_t, hf_t, qkv_m, hf_m, hf_op = [], [], [], [], []
        for i in range(a.repeats):
            for who in ("qkv", "hf"):
                out = os.path.join(tmp, f"{who}-{i}")
                # each in a fresh process measured alone: RUSAGE_CHILDREN's max is over all children, so
                # each run goes through its own child shell that reports it
                if who == "qkv":
                    argv = [sys.executable, "-c", "import resource,subprocess,sys,time;t=time.perf_counter();"
                            "subprocess.run(sys.argv[1:],check=True,capture_output=True);"
                            "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
                            a.qkv, "export", "--to", "hf", model, out]
                else:
                    argv = [sys.executable, "-c", "import resource,subprocess,sys,time;t=time.perf_counter();"
                            "r=subprocess.run(sys.argv[1:],check=True,capture_output=True,text=True);"
                            "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
                            "r.stdout.split()[-1])",
                            sys.executable, "-c", HF_SAVE, a.folder, out, str(a.threads)]
                r = subprocess.run(argv, capture_output=True, text=True, env=env)
                if r.returncode:
                    raise SystemExit(r.stderr[-800:])
                wall, rss, *op = r.stdout.split()
                if op:
                    hf_op.append(float(op[0]))
                (qkv_t if who == "qkv" else hf_t).append(float(wall))
                (qkv_m if who == "qkv" else hf_m).append(int(rss) / 1024)
                shutil.rmtree(out, ignore_errors=True)
    mq, mh = statistics.median(qkv_t), statistics.median(hf_t)
    size = os.path.getsize(os.path.join(a.folder, "model.safetensors")) / 1e6
    print(f"{os.path.basename(a.folder)} ({size:.0f} MB of weights), {a.threads} threads, medians of {a.repeats}:")
    print(f"  qkv export --to hf          {mq:6.2f} s   peak RSS {statistics.median(qkv_m):7.0f} MiB")
    print(f"  transformers load + save    {mh:6.2f} s   peak RSS {statistics.median(hf_m):7.0f} MiB"
          f"   (from_pretrained + save_pretrained alone, after the imports: {statistics.median(hf_op):.2f} s)")
    print(f"  qkv {mh / mq:.2f}× faster ({statistics.median(hf_op) / mq:.2f}× without transformers' imports), "
          f"{statistics.median(qkv_m) / statistics.median(hf_m):.2f}× the memory")


if __name__ == "__main__":
    main()
