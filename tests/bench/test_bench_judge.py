"""bench/judge.py (template candidates judged by okgit's evaluator) on the CPU, and the parser
of bench/ncu_kernels.py on a canned Nsight Compute page (no ncu here)."""

from __future__ import annotations

import json
import sys

import pytest
from test_bench_smoke import BENCH, run

sys.path.insert(0, str(BENCH))

from ncu_kernels import number, rows_of

RAW = '''==PROF== Connected to process 4242
"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","launch__registers_per_thread"
"","","","usecond","%","register/thread"
"0","4242","fused_columns_cl_1_kernel","1,313.20","55.10","40"
"1","4242","_to_channels_last_kernel","101.00","88.00","24"
'''


@pytest.mark.slow  # the script as the GPU machine runs it: a process, the real evaluator on the CPU
def test_judge_smoke(tmp_path):
    proc = run([sys.executable, str(BENCH / "judge.py"), "--smoke"], tmp_path)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| L1/1 |")]
    assert rows and all("| correct | - | - | - |" in line for line in rows), proc.stdout
    data = json.loads((tmp_path / "judge.json").read_text())
    assert [r["status"] for r in data["rows"]] == ["correct"] * len(rows)
    assert all(r["us"] is None and r["speedup"] is None for r in data["rows"])  # nothing timed on a CPU


def test_ncu_rows_are_read_past_the_log_and_the_units_row():
    rows = rows_of(RAW, "okgit")
    assert [r["kernel"] for r in rows] == ["fused_columns_cl_1_kernel", "_to_channels_last_kernel"]
    assert rows[0]["us"] == "1,313.20" and rows[0]["DRAM %"] == "55.10" and rows[0]["regs"] == "40"
    assert rows[0]["SM %"] == ""  # a metric ncu did not report stays empty
    assert rows_of("==ERROR== no kernel profiled", "okgit") == []


def test_ncu_figures_read_with_thousands_separators():
    assert number("1,313.20") == "1313" and number("55.10") == "55.1" and number("") == "-"
