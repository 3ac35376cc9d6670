"""`okgit bench kernelbench` units: the reader, the figures, the sweep's state and resume.

The sweep's own runs of `okgit optimize` are replaced by a stand-in here (see
test_kernelbench_e2e.py for the real subprocess sweep).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from okgit.errors import OkgitError, UsageError
from okgit.eval.parent.device_pool import Slot
from okgit.kernelbench import runs, sweep
from okgit.kernelbench.crosscheck import as_kernelbench_candidate
from okgit.kernelbench.reader import find_problems, level_dirs, parse_ids
from okgit.kernelbench.scoring import (
    ProblemResult,
    SweepReport,
    fast_p,
    geomean,
    summarize,
)

FIXTURE = Path(__file__).parents[1] / "kb_fixture"


# --- reader ----------------------------------------------------------------------------------------


def test_reader_accepts_checkout_inner_folder_and_level_folder():
    keys = [p.key for p in find_problems(FIXTURE)]
    assert keys == ["level1/1_ScaledRelu", "level1/2_RowSum", "level1/3_RowSort", "level2/1_ScaleShift"]
    assert [p.key for p in find_problems(FIXTURE / "KernelBench")] == keys
    assert [p.key for p in find_problems(FIXTURE / "KernelBench" / "level2")] == ["level2/1_ScaleShift"]
    assert sorted(level_dirs(FIXTURE)) == [1, 2]


def test_reader_selects_by_level_and_id_ranges():
    assert [p.id for p in find_problems(FIXTURE, level=1, problems="2-3")] == [2, 3]
    assert [p.id for p in find_problems(FIXTURE, level=1, problems="1,3")] == [1, 3]
    assert [p.key for p in find_problems(FIXTURE, problems="1")] == ["level1/1_ScaledRelu", "level2/1_ScaleShift"]
    assert parse_ids(None) is None and parse_ids("4") == {4} and parse_ids("1-3,7") == {1, 2, 3, 7}


@pytest.mark.parametrize("spec", ["a-b", "3-1", "1-", "1;2"])
def test_reader_rejects_bad_ranges_as_usage_errors(spec):
    with pytest.raises(UsageError):
        parse_ids(spec)


def test_reader_errors_name_what_is_missing(tmp_path):
    with pytest.raises(OkgitError, match="not a KernelBench checkout"):
        find_problems(tmp_path)
    with pytest.raises(OkgitError, match="no level3 folder"):
        find_problems(FIXTURE, level=3)
    with pytest.raises(OkgitError, match="no problems"):
        find_problems(FIXTURE, level=1, problems="40-50")


def test_reader_ignores_files_outside_the_layout(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "1_Good.py").write_text("x = 1\n")
    (level / "notes.py").write_text("")
    (level / "2_Bad.txt").write_text("")
    (level / "__init__.py").write_text("")
    assert [p.key for p in find_problems(tmp_path)] == ["level1/1_Good"]


# --- scoring ---------------------------------------------------------------------------------------


def result(key: str, correct: bool, eager: float | None = None, compile: float | None = None, **kw) -> ProblemResult:
    level, rest = key.split("/")
    pid, name = rest.split("_", 1)
    return ProblemResult(key=key, level=int(level[5:]), id=int(pid), name=name, status="optimized" if correct else "fallback",
                         correct=correct, speedup_eager=eager, speedup_compile=compile,
                         timed=eager is not None, **kw)


def test_fast_p_counts_every_selected_problem_in_the_denominator():
    rs = [result("level1/1_A", True, 2.5, 1.2), result("level1/2_B", True, 1.2, 0.8),
          result("level1/3_C", False), result("level1/4_D", True, 0.9, 0.5)]
    assert fast_p(rs, "eager", 0) == 0.75  # the correctness rate
    assert fast_p(rs, "eager", 1.0) == 0.5
    assert fast_p(rs, "eager", 1.5) == 0.25
    assert fast_p(rs, "eager", 2.0) == 0.25
    assert fast_p(rs, "torch.compile", 1.0) == 0.25
    s = summarize(rs)
    assert s.correct == 3 and s.correctness_rate == 0.75
    eager = next(b for b in s.scores if b.baseline == "eager")
    assert eager.fast_p == {"0": 0.75, "1.0": 0.5, "1.5": 0.25, "2.0": 0.25}
    assert eager.geomean_speedup == pytest.approx((2.5 * 1.2 * 0.9) ** (1 / 3))
    assert eager.timed == 3


def test_an_incorrect_kernel_is_never_fast_even_with_a_speedup():
    rs = [result("level1/1_A", False, 5.0, 5.0)]
    assert fast_p(rs, "eager", 1.0) == 0.0
    assert summarize(rs).scores[0].geomean_speedup is None


def test_without_timing_only_fast_0_is_claimed():
    rs = [result("level1/1_A", True), result("level1/2_B", False)]
    s = summarize(rs)
    for b in s.scores:
        assert b.fast_p == {"0": 0.5, "1.0": None, "1.5": None, "2.0": None}
        assert b.geomean_speedup is None
    assert s.timed == 0


def test_cost_per_kernel_divides_dollars_by_correct_kernels():
    rs = [result("level1/1_A", True, llm_usd=0.3), result("level1/2_B", False, llm_usd=0.1)]
    assert summarize(rs).cost_per_kernel == pytest.approx(0.4)
    assert summarize([result("level1/2_B", False, llm_usd=0.1)]).cost_per_kernel is None
    assert geomean([]) is None and geomean([4.0, 1.0]) == pytest.approx(2.0)


def test_markdown_has_a_row_per_problem_and_the_fast_p_table():
    rs = [result("level1/1_A", True, 2.0, 1.1, eager_us=20.0, compile_us=11.0, okgit_us=10.0, best_iteration=2, iterations=4),
          result("level1/2_B", False, error="okgit: boom")]
    report = SweepReport(dir="/kb", out="/out", device="cuda", devices=["cuda:0"], problems=rs, summary=summarize(rs))
    md = report.markdown()
    assert "| level1/1_A | optimized | yes | 20.0 | 11.0 | 10.0 | 2.00x | 1.10x |" in md
    assert "| level1/2_B | fallback | no |" in md
    assert "| eager | 50% | 50% | 50% | 0% | 2.00x over 1 |" in md
    assert "- level1/2_B: okgit: boom" in md
    assert json.loads(report.model_dump_json())["summary"]["scores"][0]["fast_p"]["1.0"] == 0.5


def test_cross_check_aliases_a_rewritten_model_as_model_new():
    src = "class Model:\n    pass\n"
    assert as_kernelbench_candidate(src).endswith("ModelNew = Model  # okgit rewrote Model itself\n")
    already = "class Model:\n    pass\n\nclass ModelNew:\n    pass\n"
    assert as_kernelbench_candidate(already) == already


# --- the sweep, with a stand-in for each problem's okgit run ---------------------------------------


class FakeRuns:
    """Stands in for one problem's whole okgit run; can be told to be interrupted at a problem."""

    def __init__(self, interrupt_at: str | None = None) -> None:
        self.calls: list[str] = []
        self.interrupt_at = interrupt_at

    def __call__(self, p, slot: Slot, flags, out_dir, timeout_s, **kw) -> ProblemResult:
        if p.key == self.interrupt_at:
            raise runs.ProblemInterrupted()
        self.calls.append(p.key)
        correct = p.id != 3
        return ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, device=kw["device"],
                             status="unverified" if correct else "fallback", correct=correct, iterations=2,
                             best_iteration=1 if correct else None, untimed_reason="no GPU: timing is not claimed")


def test_sweep_writes_state_and_report_and_resumes_only_unfinished(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "out"
    first = FakeRuns(interrupt_at="level1/3_RowSort")
    monkeypatch.setattr(sweep, "_run_problem", first)
    partial = sweep.run_sweep(FIXTURE, level=1, flags={"device": "cpu", "iterations": 2}, out=out, progress=None)
    assert partial.pending == ["level1/3_RowSort"]  # interrupted: not scored, left for the next sweep
    assert sorted(first.calls) == ["level1/1_ScaledRelu", "level1/2_RowSum"]
    assert sorted(p.name for p in (out / "state").iterdir()) == ["level1_1_ScaledRelu.json", "level1_2_RowSum.json"]

    second = FakeRuns()
    monkeypatch.setattr(sweep, "_run_problem", second)
    report = sweep.run_sweep(FIXTURE, level=1, flags={"device": "cpu", "iterations": 2}, out=out, progress=None)
    assert second.calls == ["level1/3_RowSort"]  # the finished two were skipped
    assert [r.key for r in report.problems] == ["level1/1_ScaledRelu", "level1/2_RowSum", "level1/3_RowSort"]
    assert report.summary.scores[0].fast_p == {"0": pytest.approx(2 / 3), "1.0": None, "1.5": None, "2.0": None}
    assert report.device == "cpu"
    saved = json.loads((out / "report.json").read_text())
    assert saved["summary"]["correct"] == 2
    assert (out / "report.md").read_text() == report.markdown()


def test_resuming_with_other_flags_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(sweep, "_run_problem", FakeRuns())
    sweep.run_sweep(FIXTURE, level=2, flags={"device": "cpu", "iterations": 2}, out=tmp_path, progress=None)
    with pytest.raises(OkgitError, match="other flags"):
        sweep.run_sweep(FIXTURE, level=2, flags={"device": "cpu", "iterations": 3}, out=tmp_path, progress=None)


def test_sweep_runs_problems_concurrently_on_distinct_slots(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    import threading
    import time

    barrier = threading.Barrier(3, timeout=10)  # only passes if three problems run at once

    def run(p, slot, *a, **kw):
        barrier.wait()
        time.sleep(0.05)
        return ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, status="fallback", device=kw["device"])

    monkeypatch.setattr(sweep, "_run_problem", run)
    report = sweep.run_sweep(FIXTURE, level=1, parallel=3, flags={"device": "cpu"}, out=tmp_path, progress=None)
    assert sorted(r.device for r in report.problems) == ["cpu:0", "cpu:1", "cpu:2"]
    assert report.devices == ["cpu:0", "cpu:1", "cpu:2"]


def test_a_cut_short_state_file_is_run_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    runs = FakeRuns()
    monkeypatch.setattr(sweep, "_run_problem", runs)
    state = tmp_path / "state"
    state.mkdir()
    (state / "level2_1_ScaleShift.json").write_text('{"key": "level2/1_Sc')
    sweep.run_sweep(FIXTURE, level=2, flags={"device": "cpu"}, out=tmp_path, progress=None)
    assert runs.calls == ["level2/1_ScaleShift"]


def test_helpers_of_one_problem(tmp_path):
    assert runs.flag_args({"device": "cpu", "iterations": 2, "budget_usd": 0.5}) == [
        "--device", "cpu", "--iterations", "2", "--budget-usd", "0.5"]
    assert runs.last_json('warning: x\n{\n  "status": "unverified"\n}\n') == {"status": "unverified"}
    assert runs.last_json("no json here") is None
    problem = find_problems(FIXTURE, level=2)[0]
    work = tmp_path / "repo"
    runs.init_repo(work, problem.file_name, problem.path.read_text())
    from okgit.git.repo import git

    assert git("ls-files", cwd=work).split() == ["1_ScaleShift.py"]
    assert git("status", "--porcelain", cwd=work) == ""


def test_untimed_baselines_on_a_cpu(tmp_path):
    fields = runs.baselines(tmp_path / "ref.py", tmp_path / "win.py", {}, timer=None, gpu=False)
    assert fields == {"untimed_reason": "no GPU: timing is not claimed"}


def test_a_helper_started_ahead_takes_its_arguments_later_and_one_left_unused_ends():
    """The baselines' helper started beside a problem's run (runs.Ahead) imports, waits, and
    measures what it is then handed, as one started at that moment would; one never handed
    anything ends when its stdin closes, and one closed by the sweep ends too. Real processes."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(Path(__file__).parents[2])}
    ref = find_problems(FIXTURE, level=2)[0].path
    ahead = runs.Ahead("baselines", env)
    data = runs.helper("baselines", ref, None, env, ahead=ahead)
    assert isinstance(data, dict) and data["timed"] is False, data  # a CPU: nothing timed, as ever
    assert data["errors"] == {"all": "no GPU: timing is not claimed"} and ahead.proc.returncode == 0
    unused = runs.Ahead("baselines", env)
    assert unused.proc.stdin is not None
    unused.proc.stdin.close()
    assert unused.proc.wait(timeout=120) == 0
    closed = runs.Ahead("baselines", env)
    closed.close()
    assert closed.proc.poll() is not None


def test_baselines_from_a_timer_give_both_speedups(tmp_path):
    from okgit.kernelbench.baselines import BaselineTimes

    (tmp_path / "ref.py").write_text("ref")
    (tmp_path / "win.py").write_text("win")
    times = BaselineTimes(device="cuda:0", timed=True, eager_us=30.0, compile_us=15.0, okgit_us=10.0)
    fields = runs.baselines(tmp_path / "ref.py", tmp_path / "win.py", {}, timer=lambda r, w: times, gpu=True)
    assert fields["speedup_eager"] == pytest.approx(3.0) and fields["speedup_compile"] == pytest.approx(1.5)
    assert fields["timed"] is True
    failed = BaselineTimes(device="cuda:0", timed=True, eager_us=30.0, okgit_us=10.0, errors={"compile": "Unsupported: sort"})
    fields = runs.baselines(tmp_path / "ref.py", tmp_path / "win.py", {}, timer=lambda r, w: failed, gpu=True)
    assert "speedup_compile" not in fields and fields["untimed_reason"] == "compile: Unsupported: sort"


def test_cross_check_plan_says_why_it_does_not_run(monkeypatch):
    from okgit.kernelbench import crosscheck

    assert sweep._cross_check_plan(False, gpu=True, modal=False) == (None, False)
    monkeypatch.setattr(crosscheck, "available", lambda: False)
    note, run = sweep._cross_check_plan(True, gpu=True, modal=False)
    assert not run and "not installed" in note
    monkeypatch.setattr(crosscheck, "available", lambda: True)
    assert sweep._cross_check_plan(True, gpu=False, modal=False)[0] == "not run: KernelBench's evaluation needs a GPU"
    assert sweep._cross_check_plan(True, gpu=True, modal=False)[1] is True


def test_default_out_is_under_the_repository_okgit_dir(tmp_path, monkeypatch):
    from okgit.git.repo import git

    git("init", "-q", cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    out = sweep._out_dir(None)
    assert out.parent == (tmp_path / ".okgit" / "bench").resolve()
    assert "/.okgit/" in (tmp_path / ".git" / "info" / "exclude").read_text()
    shutil.rmtree(out)


def test_a_winner_that_disagrees_with_float64_eager_is_not_scored_correct(tmp_path):
    """The baselines process checks the winner again (tests/eval/test_crosscheck.py: by the evaluator's code)."""
    from okgit.kernelbench.baselines import BaselineTimes

    (tmp_path / "ref.py").write_text("ref")
    (tmp_path / "win.py").write_text("win")
    times = BaselineTimes(device="cuda:0", timed=True, eager_us=30.0, compile_us=15.0, okgit_us=10.0,
                          disagreement="output 0: mismatch: 1 of 8 elements outside tolerance")
    fields = runs.baselines(tmp_path / "ref.py", tmp_path / "win.py", {}, timer=lambda r, w: times, gpu=True)
    assert fields["correct"] is False and fields["status"] == "incorrect" and "disagrees with float64 eager" in fields["error"]


def test_baselines_build_both_models_alike_in_training_mode(tmp_path):
    """The sweep's figures are timed in the mode the run's evaluator (and KernelBench) times: a
    batch norm in eval mode gave the sweep 1.00x where the run measured 1.28x (H200, 2026-12-03)."""
    import importlib.util

    import torch

    from okgit.kernelbench.baselines import built

    def load(name, text):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    body = ("import torch\nclass {cls}(torch.nn.Module):\n    def __init__(self, c):\n        super().__init__()\n"
            "        self.conv = torch.nn.Conv2d(c, c, 3)\n        self.bn = torch.nn.BatchNorm2d(c)\n"
            "    def forward(self, x):\n        return self.bn(self.conv(x))\n"
            "def get_init_inputs():\n    return [4]\n")
    ref, win = load("ref_mode", body.format(cls="Model")), load("win_mode", body.format(cls="ModelNew"))
    eager, fast = built(torch, ref, win, "cpu")
    assert eager.training and fast.training and eager.bn.training and fast.bn.training
    assert torch.equal(eager.conv.weight, fast.conv.weight)
    alone, none = built(torch, ref, None, "cpu")
    assert alone.training and none is None


@pytest.mark.slow  # the baselines module as a process
def test_a_problem_without_a_kernel_times_only_its_two_baselines(tmp_path):
    """The user keeps the reference: eager and torch.compile place the problem, and no third
    arm times the reference again as if it were okgit's."""
    from okgit.kernelbench.baselines import BaselineTimes

    (tmp_path / "ref.py").write_text("ref")
    winners = []
    times = BaselineTimes(device="cuda:0", timed=True, eager_us=30.0, compile_us=15.0)
    fields = runs.baselines(tmp_path / "ref.py", None, {}, timer=lambda r, w: winners.append(w) or times, gpu=True)
    assert winners == [None]
    assert (fields["eager_us"], fields["compile_us"], fields["okgit_us"], fields["timed"]) == (30.0, 15.0, None, False)
    assert "speedup_eager" not in fields
    proc = subprocess.run([sys.executable, "-m", "okgit.kernelbench.baselines", str(tmp_path / "ref.py")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0 and json.loads(proc.stdout)["timed"] is False, proc.stderr


def test_a_problem_out_of_memory_beside_others_is_run_again_alone(tmp_path, monkeypatch):
    """The device's memory taken by the problems beside it is no verdict: such a problem runs
    again once nothing else runs (the run itself is scripted here; the scheduling is real)."""
    import threading

    from okgit.kernelbench.scoring import ProblemResult

    running: set[str] = set()
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []

    def run_problem(p, slot, flags, out_dir, timeout_s, **kw):
        with lock:
            running.add(p.key)
        time.sleep(0.5)  # the other problems start meanwhile
        with lock:
            beside = len(running)
        seen.append((p.key, beside))
        time.sleep(0.5)
        with lock:
            running.discard(p.key)
        crowded = p.id == 1 and beside > 1
        return ProblemResult(key=p.key, level=p.level, id=p.id, name=p.name, device=slot.name,
                             status="error" if crowded else "unverified", correct=not crowded,
                             error="the reference does not run: torch.OutOfMemoryError: CUDA out of memory" if crowded else None)

    monkeypatch.setattr(sweep, "_run_problem", run_problem)
    report = sweep.run_sweep(FIXTURE, level=1, parallel=3, flags={"device": "cpu"}, out=tmp_path, progress=None)
    first = next(r for r in report.problems if r.id == 1)
    assert first.correct and first.status == "unverified"
    assert [n for k, n in seen if k.endswith("/1_ScaledRelu")][-1] == 1  # the last try ran alone
    assert any("ran again alone after an out-of-memory failure" in n and "1_ScaledRelu" in n for n in report.notes)
    assert all(r.correct for r in report.problems)


def test_the_whole_sets_geomean_counts_the_reference_where_no_kernel_was_handed_out():
    rs = [result("level1/1_A", True, 2.0, 1.5, eager_us=100.0, compile_us=75.0),
          result("level1/2_B", False, eager_us=100.0, compile_us=50.0),  # slower or fallback: eager kept
          result("level1/3_C", False, 5.0, 5.0, eager_us=10.0, compile_us=20.0),  # incorrect: its speed never counts
          result("level1/4_D", False)]  # not even the baselines timed: left out
    eager, compiled = summarize(rs).scores
    assert eager.geomean_kept == pytest.approx((2.0 * 1.0 * 1.0) ** (1 / 3)) and eager.kept_over == 3
    assert compiled.geomean_kept == pytest.approx((1.5 * 0.5 * 2.0) ** (1 / 3)) and compiled.kept_over == 3
    assert eager.geomean_speedup == pytest.approx(2.0) and eager.timed == 1  # the wins alone, as before
    assert "| 1.26x over 3 |" in SweepReport(dir="d", out="o", device="cuda", problems=rs, summary=summarize(rs)).markdown()


def test_a_slower_kernel_kept_under_its_tag_is_one_of_okgits_own_but_not_handed_out():
    slower = result("level1/9_S", False, eager_us=10.0, compile_us=10.0).model_copy(
        update={"status": "slower", "best_tag": "okgit/r/c010"})
    rs = [result("level1/1_A", True, 2.0, 2.0, eager_us=10.0, compile_us=10.0), slower, result("level1/3_C", False)]
    s = summarize(rs)
    assert (s.correct, s.own_kernels) == (1, 2)  # fast_0 counts handed-out kernels; own kernels the slower one too
    assert "a correct kernel of okgit's own, faster or not, on 2" in SweepReport(
        dir="d", out="o", device="cuda", problems=rs, summary=s).markdown()


def test_a_winner_the_live_baselines_time_well_below_eager_is_said_to_disagree():
    """L1/87 on 122e097: the run's final gate called its winner matched, the sweep's own baselines
    timed it at 0.51x eager; the report says the two measurements disagree."""
    wrong = result("level1/87_P", True, 0.51, 1.51, eager_us=3427.4, compile_us=10153.9).model_copy(
        update={"status": "matched"})
    slow_but_said = result("level1/5_S", False, eager_us=10.0, compile_us=10.0).model_copy(update={"status": "slower"})
    fine = result("level1/1_A", True, 0.97, 1.0, eager_us=10.0, compile_us=10.0).model_copy(update={"status": "matched"})
    rs = [wrong, slow_but_said, fine]
    md = SweepReport(dir="d", out="o", device="cuda", problems=rs, summary=summarize(rs)).markdown()
    notes = [line for line in md.splitlines() if "measurements is wrong" in line]
    assert notes == ["note: level1/87_P: the run called its winner matched, the live baselines time it at 0.51x eager: "
                     "one of the two measurements is wrong"]
