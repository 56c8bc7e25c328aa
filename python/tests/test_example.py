"""The README's example script runs from start to end (its own asserts check seed 002's numbers) and
draws its two pictures."""
import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "attention_tour.py")


def test_attention_tour_runs(tmp_path):
    out = subprocess.run([sys.executable, EXAMPLE, "-o", str(tmp_path)], capture_output=True, text=True,
                         env=dict(os.environ, MPLBACKEND="Agg"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'attention of "quick"' in out.stdout and "Le chat" in out.stdout
    for png in ("transformer.png", "rnn-attention.png"):
        assert (tmp_path / png).stat().st_size > 10_000
