"""The GPU benchmark scripts (bench/) on the CPU: each --smoke run goes through every step but
the GPU timing, so a script that would crash on the device fails here first. No time is
claimed on a CPU: every time column reads "-" and the JSON holds None there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def run(args: list[str], out: Path, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out), "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(args, cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def table_rows(stdout: str, header_start: str) -> list[str]:
    lines = stdout.splitlines()
    i = max(n for n, line in enumerate(lines) if line.startswith(header_start))
    return lines[i + 1:]


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, real evaluation
def test_eval_smoke(tmp_path):
    proc = run([sys.executable, str(BENCH / "eval.py"), "--smoke"], tmp_path)
    assert "smoke: skipped A/A timing rounds" in proc.stdout
    rows = table_rows(proc.stdout, "op ")
    assert rows[0].split() == ["tests/ops/relu.py", "-", "-", "-", "-", "-", "-", "correct"]
    assert rows[1].split() == ["examples/01_relu_bias_scale.py", "-", "-", "-", "-", "-", "-",
                               "rejected@backend_kernel"]
    assert any(line.startswith("smoke run: no GPU figure") for line in rows)
    data = json.loads((tmp_path / "bench_eval.json").read_text())
    assert data["smoke"] is True and data["device"].startswith("cpu") and data["skipped"]
    assert [r["op"] for r in data["rows"]] == ["tests/ops/relu.py", "examples/01_relu_bias_scale.py"]
    relu, itself = data["rows"]
    assert relu["candidate"] == "relu_triton.py" and itself["candidate"] == "(itself)"
    assert relu["fast_status"] == relu["thorough_status"] == "correct"
    assert itself["fast_status"] == "rejected@backend_kernel"
    for row in data["rows"]:  # the same keys as on the GPU, with no figure a CPU cannot give
        for key in ("reference_prepare_s", "ref_us", "floor_us", "fast_s", "thorough_s", "fast_us",
                    "fast_speedup", "aa_ratio", "aa_a_us", "aa_b_us"):
            assert row[key] is None, key
        assert row["cpu_fast_s"] > 0
    assert data["summary"] == {"ops": 2, "errors": 0, "median_fast_s": None, "median_thorough_s": None,
                               "aa_within_1pct": None, "aa_rows": 0}


@pytest.mark.slow  # the bench script as the GPU machine runs it, twice: processes, real runs
def test_offline_smoke(tmp_path):
    proc = run([sys.executable, str(BENCH / "offline.py"), "--smoke"], tmp_path / "out")
    assert "smoke: CPU under the Triton interpreter" in proc.stdout
    rows = table_rows(proc.stdout, "| problem | status |")
    assert rows[1].startswith("| level1/1_01_relu_bias_scale | unverified | yes | - | - | - | untimed | untimed |")
    assert "No timing on this device" in proc.stdout
    assert "offline result over all ops: none timed (1 op(s))" in proc.stdout
    data = json.loads((tmp_path / "out" / "offline.json").read_text())
    assert data["device"] == "cpu" and data["flags"]["device"] == "cpu" and data["flags"]["iterations"] == 1
    (p,) = data["problems"]
    assert p["correct"] and p["timed"] is False and p["speedup_eager"] is None and p["eager_us"] is None
    assert data["summary"]["scores"][0]["fast_p"]["1.0"] is None  # no speed claim without timing
    assert (tmp_path / "out" / "offline.md").read_text().count("| level1/") == 3  # its results row, where its time went, its evaluations' phases
    events = [json.loads(line) for line in (tmp_path / "out" / "journals.jsonl").read_text().splitlines()]
    assert {e["problem"] for e in events} == {"level1_1_01_relu_bias_scale"} and events[-1]["type"] == "run_finished"
    # a later call resumes from that offline.json: the problem is not run again
    again = run([sys.executable, str(BENCH / "offline.py"), "--smoke", "--resume-from",
                 str(tmp_path / "out" / "offline.json")], tmp_path / "again")
    assert "resuming: 1 problem(s) already done" in again.stdout
    assert (tmp_path / "again" / "journals.jsonl").read_text() == ""
    assert json.loads((tmp_path / "again" / "offline.json").read_text())["problems"] == data["problems"]


@pytest.mark.slow  # the shell script and the Python it starts
def test_gpu_sh_checks_its_arguments_and_reports_facts(tmp_path):
    script = str(BENCH / "gpu.sh")
    assert subprocess.run(["bash", "-n", script], check=False).returncode == 0
    env = {**os.environ, "OUT": str(tmp_path), "GPU_SH_SKIP_WHEELS": "1", "CUDA_VISIBLE_DEVICES": ""}
    for bad in (["nope"], ["eval:1-x"], ["eval", "eval:3-4"], []):
        proc = subprocess.run(["bash", script, *bad], env=env, check=False, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (bad, proc.stderr)
    # no GPU here: the facts are printed, a GPU stage says it did not run (exit 3), the log is kept
    proc = subprocess.run(["bash", script, "facts", "eval"], env=env, check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    log = (tmp_path / "gpu.log").read_text()
    assert "cuda available False" in log and "okgit " in log and "stage eval: no CUDA GPU visible: not run" in log
    assert sorted(os.listdir(tmp_path)) == ["gpu.log"]


def _module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_rows_render_and_summarize():
    """The GPU path's own arithmetic and tables, on rows shaped as the device writes them."""
    offline = _module("offline")
    problems = [
        {"key": "a", "correct": True, "speedup_eager": 4.0, "speedup_compile": 2.0, "eager_us": 100.0, "compile_us": 50.0},
        {"key": "b", "correct": False, "eager_us": 100.0, "compile_us": 200.0},  # no kernel: the reference stands
        {"key": "c", "correct": False},  # an error: nothing timed, listed
    ]
    f = offline.offline_figures(problems)
    assert f["placed"] == 2 and f["untimed"] == ["c"]
    assert f["geomean_vs_eager"] == pytest.approx(2.0) and f["geomean_vs_compile"] == pytest.approx(2.0)
    assert f["fast_1_vs_eager"] == 0.5 and f["fast_1_vs_compile"] == 1.0
    line = offline.offline_line(f)
    assert "over 2 of 3 ops" in line and "2.00x vs eager" in line and "not timed: c" in line

    ev = _module("eval")
    row = {"op": "examples/x.py", "fast_s": 4.1, "thorough_s": 4.9, "aa_ratio": 1.0009, "ref_us": 263.0,
           "floor_us": 65.7, "fast_status": "rejected@backend_kernel"}
    text = ev.table([row, {"op": "examples/y.py", "error": "the reference does not run"}], "H200", False, [])
    assert "4.10" in text and "1.001" in text and "4.00" in text and "error: the reference does not run" in text
    assert "A/A within 1%: 1/1" in text
    assert ev.select([Path(str(i)) for i in range(1, 22)], "11-21", 30)[0] == Path("11")


@pytest.mark.slow  # the bench script as the GPU machine runs it: a process, the interpreter
def test_space_smoke(tmp_path):
    """Each template candidate of a row and a column reduction is rendered, loaded, checked
    against eager and walked over its settings; a variant that disagrees would be named."""
    proc = run([sys.executable, str(BENCH / "space.py"), "--smoke", "--problems", "11,1"], tmp_path)
    assert "DISAGREES" not in proc.stdout and "Error" not in proc.stdout
    rows = json.loads((tmp_path / "space.json").read_text())
    assert [(r["op"], r["origin"]) for r in rows] == [
        ("11_argmax_dim", "template:columns"), ("11_argmax_dim", "template:rows"),
        ("01_relu_bias_scale", "template:pointwise")]
    for r in rows:
        assert r["variants"] > 1 and r["default_us"] is None and r["eager_us"] is None
        assert r["best"] == r["defaults"] and all(k.endswith(("_TILE", "_BLOCK_N_MAX", "_CHUNK", "_NUM_WARPS",
                                                              "_BLOCK_J", "_BLOCK_R", "_BLOCK")) for k in r["best"])


@pytest.mark.slow  # the bench script as the GPU machine runs it, twice: processes, real evaluation
def test_trust_smoke(tmp_path):
    state = tmp_path / "state"
    cmd = [sys.executable, str(BENCH / "trust.py"), "--smoke", "--state", str(state)]
    proc = run(cmd, tmp_path, timeout=900)
    rows = table_rows(proc.stdout, "problem | parallel 2 | alone")
    assert rows[1].split(" | ")[:4] == ["1_ScaledRelu", "unverified (correct)", "correct (correct)", "yes"]
    assert rows[2].startswith("totals: 1/1 winners with the same verdict at --parallel and alone; without a winner: none; "
                              "out-of-memory failures 0")
    data = json.loads((state / "trust.json").read_text())
    assert data["smoke"] and data["parallel"]["done"] and set(data["alone"]) == {"1"} and "tests" not in data
    assert (state / "trust-parallel.tar.gz").is_file() and (tmp_path / "trust.md").is_file()
    again = run(cmd, tmp_path)  # everything finished: the next call only prints the table
    assert "trust: parallel" not in again.stdout and "trust: alone" not in again.stdout
    assert table_rows(again.stdout, "problem | parallel 2 | alone")[1] == rows[1]


@pytest.mark.slow  # workers, a judge and an evaluator: real processes
def test_starts_smoke(tmp_path):
    proc = run([sys.executable, str(BENCH / "starts.py"), "--smoke"], tmp_path)
    assert "device cpu (smoke: no lock held, so no start in the ledger)" in proc.stdout
    data = json.loads((tmp_path / "starts.json").read_text())
    assert [(b["program"], b["n"], b["ready"]) for b in data["batches"]] == [
        ("okgit.eval.worker", 1, 1), ("okgit.eval.worker", 2, 2), ("okgit.eval.judge", 1, 1)]
    assert data["evaluations"]["evaluation_wall_s"]["n"] == 2 and data["evaluations"]["rounds"] == 0


def test_ncu_passes_smoke(tmp_path):
    """The metric groups cover okgit's ncu list and the pass-count parser reads ncu's lines."""
    proc = run([sys.executable, str(BENCH / "ncu_passes.py"), "--smoke"], tmp_path)
    assert "smoke: groups all (" in proc.stdout and "parser ok" in proc.stdout


@pytest.mark.slow  # a process: torch imported, the op's template planned
def test_autotune_order_prints_both_orders_and_the_focus(tmp_path):
    """bench/autotune_order.py: the same variants with and without the focus, in its order."""
    proc = run([sys.executable, str(BENCH / "autotune_order.py"), str(ROOT / "examples" / "14_linear_gelu.py"),
                "--bottleneck", "memory", "--limiter", "registers", "--occupancy", "0.25", "--first", "30"], tmp_path)
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    plain, focused = (lines[k].split(", ") for k in ("unfocused", "memory-bound"))
    assert sorted(plain) == sorted(focused) and plain != focused and plain[0].startswith("FUSED_GEMM_0_PRECISION=")
    assert "registers hold the occupancy to 25%" in lines["focus"]
