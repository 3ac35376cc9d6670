"""Campaigns over a directory of op files: the plan (pure), the refusals, and the whole flow as a
user runs it (real repository, real Triton kernels under the interpreter; the CLI in this
process, `cli`, but as a subprocess where a signal interrupts it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sh, snapshot, variant

from okgit.campaign import plan
from okgit.eval.types import ProfileData, Reference

SMALL = variant("torch.relu(x * 0.5) * 2.0")  # 16 x 64: little work

LARGE = (Path(__file__).parents[1] / "ops" / "scaled_softmax.py").read_text()  # 8 x 1024: 8 times SMALL's bytes


def commit_kernels(root: Path) -> Path:
    """kernels/ with two op files of unequal work and a helper module, committed."""
    kernels = root / "kernels"
    kernels.mkdir()
    (kernels / "small.py").write_text(SMALL)
    (kernels / "large.py").write_text(LARGE)
    (kernels / "helpers.py").write_text("SCALE = 2\n")  # not an op file: not a problem
    sh(root, "add", "kernels")
    sh(root, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "kernels")
    return kernels


def _screen(op: str, runtime_us: float | None, floor: float, timed: bool = True) -> plan.Screen:
    return plan.Screen(op=op, timed=timed, runtime_us=runtime_us, floor_us=floor, flops=None, min_bytes=None)


def test_budget_goes_by_time_times_headroom_and_nothing_to_a_problem_at_its_floor() -> None:
    screens = [
        _screen("small.py", 10.0, 5.0),  # gain 5 us
        _screen("big.py", 100.0, 10.0),  # gain 90 us
        _screen("done.py", 50.0, 45.0),  # at 90% of its floor
    ]
    allotted = plan.allot(screens, iterations=20, time_s=100.0, usd=1.0)
    assert [a.screen.op for a in allotted] == ["big.py", "small.py", "done.py"]
    big, small, done = allotted
    assert (done.iterations, done.time_s, done.usd, done.share) == (0, None, None, 0.0) and done.screen.at_floor
    assert big.iterations + small.iterations == 20 and small.iterations >= 1
    # one each, then the 18 spare by largest remainder: 18 x 90/95 = 17.05, 18 x 5/95 = 0.95
    assert (big.iterations, small.iterations) == (18, 2)
    assert big.time_s == pytest.approx(100 * 90 / 95) and small.usd == pytest.approx(5 / 95)


def test_untimed_problems_go_by_their_work_with_full_headroom() -> None:
    costly = Reference(device="cpu", timed=False, profile=ProfileData(flops=1e9, min_bytes=1e6))
    cheap = Reference(device="cpu", timed=False, profile=ProfileData(flops=1e3, min_bytes=1e4))
    screens = [plan.screen("cheap.py", cheap), plan.screen("costly.py", costly)]
    assert all(s.headroom is None and not s.at_floor for s in screens)
    allotted = plan.allot(screens, iterations=6, time_s=None, usd=None)
    assert [(a.screen.op, a.iterations) for a in allotted] == [("costly.py", 5), ("cheap.py", 1)]


def test_every_problem_at_its_floor_gets_no_budget() -> None:
    allotted = plan.allot([_screen("a.py", 10.0, 9.5)], iterations=12, time_s=None, usd=None)
    assert [(a.iterations, a.share) for a in allotted] == [(0, 0.0)]


def test_campaign_refusals_are_one_line(cli, git_repo: Path) -> None:
    (git_repo / "empty").mkdir()
    (git_repo / "empty" / "notes.py").write_text("X = 1\n")
    cases = [
        (("optimize", "empty", "--device", "cpu"), "no op file found"),
        (("optimize", "nowhere/", "--device", "cpu"), "nowhere: no such file"),
        (("optimize", "empty/notes.py", "--campaign"), "not a model file: missing Model"),
        (("optimize", "lib/util.py", "--campaign"), "not a model file"),
        (("profile", "empty/notes.py"), "not a model file"),
        (("optimize", "ops/relu.py", "--campaign", "--resume", "latest"), "neither --resume nor --watch"),
        (("apply", "campaign:latest"), "no campaigns yet"),
        (("verify", "campaign:nope"), "unknown campaign: nope"),
        (("history", "campaign:x"), "unknown campaign: x"),
    ]
    for args, message in cases:
        proc = cli(*args, cwd=git_repo)
        assert proc.returncode == (2 if "--resume" in args else 1), (args, proc.stdout, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.slow  # two real runs and a verify through the evaluator
def test_a_directory_of_ops_is_one_campaign_with_one_patch(cli, git_repo: Path) -> None:
    kernels = commit_kernels(git_repo)
    (kernels / "draft.py").write_text(SMALL)  # an untracked op: skipped, said so
    before = snapshot(git_repo)

    proc = cli("optimize", "kernels/", "--device", "cpu", "--iterations", "2", "--json", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert snapshot(git_repo) == before  # nothing of the user's touched
    assert result["kind"] == "ops" and result["status"] == "unverified" and result["device"] == "cpu"
    assert "no timing on this device" in result["ordered_by"]
    # the op with more work goes first and gets more of the 4 iterations
    assert [(p["op"], p["iterations"]) for p in result["problems"]] == [("kernels/large.py", 3), ("kernels/small.py", 1)]
    campaign_dir = git_repo / ".okgit" / "campaigns" / result["campaign_id"]
    for p in result["problems"]:
        assert p["status"] == "unverified" and p["best_tag"].startswith(f"okgit/{p['run_id']}/")
        run = json.loads(cli("history", p["run_id"], "--json", cwd=git_repo).stdout)
        assert any(c["tag"] == p["best_tag"] for c in run["candidates"])  # a normal run, with its tags
        assert Path(p["diff"]).parent == campaign_dir / "ops" and Path(p["diff"]).is_file()
    journal = (campaign_dir / "journal.jsonl").read_text()
    assert "skipped kernels/draft.py: not tracked by git" in journal
    report = (campaign_dir / "report.md").read_text()
    assert "`kernels/large.py`" in report and "okgit apply campaign:" in report
    diff = (campaign_dir / "report.diff").read_text()
    assert diff == "".join(Path(p["diff"]).read_text() for p in result["problems"])
    assert "a/kernels/large.py" in diff and "a/kernels/small.py" in diff

    listed = cli("history", cwd=git_repo)
    assert f"campaign:{result['campaign_id']}" in listed.stdout
    runs = json.loads(cli("history", "--json", cwd=git_repo).stdout)
    assert {r["campaign"] for r in runs} == {result["campaign_id"]}
    detail = json.loads(cli("history", "campaign:latest", "--json", cwd=git_repo).stdout)
    assert [p["status"] for p in detail["problems"]] == ["unverified", "unverified"] and detail["status"] == "unverified"

    # The combined patch, as the user takes it: show, check, apply, verify, revert.
    ref = f"campaign:{result['campaign_id'][9:]}"  # a prefix without the date, as for runs
    assert cli("show", ref, cwd=git_repo).stdout.strip() == diff.strip()
    assert cli("apply", ref, "--check", cwd=git_repo).returncode == 0
    applied = cli("apply", ref, cwd=git_repo)
    assert applied.returncode == 0, applied.stderr
    assert "@triton.jit" in (kernels / "large.py").read_text() and "@triton.jit" in (kernels / "small.py").read_text()
    reverted = cli("revert", ref, cwd=git_repo)
    assert reverted.returncode == 0, reverted.stderr
    assert (kernels / "large.py").read_text() == LARGE and (kernels / "small.py").read_text() == SMALL

    verified = cli("verify", "campaign:latest", "--mode", "fast", "--json", cwd=git_repo, env={"OKGIT_DEVICE": "cpu"})
    assert verified.returncode == 0, verified.stderr
    report_json = json.loads(verified.stdout)
    assert report_json["ok"] and {v["op"] for v in report_json["ops"]} == {"kernels/large.py", "kernels/small.py"}


@pytest.mark.slow  # the live view driven through its pauses
def test_watching_a_campaign_moves_to_each_problem_s_run_as_it_starts(tmp_path: Path) -> None:
    import asyncio
    import shutil

    from okgit.tui.app import WatchApp

    journals = Path(__file__).parents[1] / "journals"
    first = Path(shutil.copytree(journals / "cpu-failures", tmp_path / "cpu-failures"))
    second = Path(shutil.copytree(journals / "gpu-optimized", tmp_path / "gpu-optimized"))
    current: list[Path | None] = [None]
    seen: list[str | None] = []

    async def main() -> None:
        app = WatchApp(None, poll_s=0.05, follow=lambda: current[0])
        async with app.run_test(size=(150, 45)) as pilot:
            await pilot.pause(0.2)
            seen.append(app.run_dir.name if app.run_dir else None)  # no problem started yet: waiting
            current[0] = first
            await pilot.pause(0.3)
            seen.append(app.run_dir.name if app.run_dir else None)
            assert app.view.candidates  # the first run's candidates are on screen
            current[0] = second
            await pilot.pause(0.3)
            seen.append(app.run_dir.name if app.run_dir else None)
            assert app.view.run == "gpu-optimized" and app.view.finished is not None

    asyncio.run(main())
    assert seen == [None, "cpu-failures", "gpu-optimized"]


@pytest.mark.slow  # a signal to a real okgit process
def test_an_interrupted_campaign_writes_what_it_has(cli, git_repo: Path) -> None:
    import signal
    import time

    commit_kernels(git_repo)
    proc = subprocess.Popen([sys.executable, "-m", "okgit", "optimize", "kernels", "--device", "cpu", "--iterations", "3"],
                            cwd=git_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    campaigns = git_repo / ".okgit" / "campaigns"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # interrupt the first problem's run once it has begun
        # once the first problem's run searches: a run stopped while it is prepared is removed whole
        runs = list((git_repo / ".okgit" / "runs").glob("*/journal.jsonl"))
        if runs and '"proposal"' in runs[0].read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the campaign never started a run")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    [campaign_dir] = list(campaigns.iterdir())
    result = json.loads((campaign_dir / "result.json").read_text())
    assert result["status"] == "interrupted"
    assert [p["status"] for p in result["problems"]] == ["interrupted", "pending"]
    shown = cli("history", "campaign:latest", "--json", cwd=git_repo)
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)
    assert listed["status"] == "interrupted"
    assert [p["status"] for p in listed["problems"]] == ["interrupted", "pending"]
    run = result["problems"][0]["run_id"]
    assert run and json.loads(cli("history", run, "--json", cwd=git_repo).stdout)["summary"]["status"] == "interrupted"


def test_the_problems_of_a_directory_are_its_tracked_op_files_or_okgit_toml_s(git_repo: Path) -> None:
    from okgit.campaign.core import find_ops
    from okgit.config import load_config
    from okgit.git.repo import Repo

    kernels = commit_kernels(git_repo)
    (kernels / "draft.py").write_text(SMALL)  # untracked
    repo = Repo.find(git_repo)
    ops, skipped = find_ops(repo, kernels, load_config(git_repo))
    assert ops == ["kernels/large.py", "kernels/small.py"]  # helpers.py is not an op file
    assert skipped == ["kernels/draft.py: not tracked by git (commit it first)"]
    (git_repo / "okgit.toml").write_text('[[op]]\npath = "kernels/large.py"\n\n[[op]]\npath = "ops/relu.py"\n')
    ops, skipped = find_ops(repo, kernels, load_config(git_repo))
    assert (ops, skipped) == (["kernels/large.py"], [])  # the listed ops under the directory, only
