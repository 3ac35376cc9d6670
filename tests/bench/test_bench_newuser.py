"""bench/newuser.py on the CPU (--smoke): a new user's op optimized in a git repository of its
own, the best candidate applied, and the applied file's kernels counted at two batch sizes."""

from __future__ import annotations

import json
import sys

import pytest
from test_bench_smoke import BENCH, run


@pytest.mark.slow  # okgit optimize as a subprocess, then the interpreter: about 20 s
@pytest.mark.timeout(600)
def test_newuser_smoke(tmp_path):
    run([sys.executable, str(BENCH / "newuser.py"), "--smoke", "--ops", "masked_rev_cumsum"], tmp_path, timeout=500)
    (row,) = json.loads((tmp_path / "newuser.json").read_text())
    assert row["origin"].startswith("template:") and row["best"].startswith("okgit/"), row
    best = row["best"].rsplit("/", 1)[-1]
    assert f"{best} {row['origin']} correct" in row["candidates"], row  # no speedup on a CPU: nothing timed
    checks = [row["own eval"], row["batch eval"]]
    assert all(c["launches"] > 0 and c["rel_err"] < 1e-5 for c in checks), row  # its kernel ran at both shapes
    assert "time_us" not in row  # nothing timed on a CPU
