"""More of what a new user trips on (issue 33): a profile's order and the machine's load said in
words, a CPU profile on one thread, a campaign with no winner that names no patch, an untracked
op file skipped aloud, gc naming the campaigns it keeps and history the runs gc removed, and a
path with `..` echoed folded. Real repositories; the CLI in
this process (`cli`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import sh, variant

from okgit.campaign.profile import order_groups, ranked_past_noise, report_of

SORT = variant("torch.sort(x, dim=1).values")  # no template covers a sort: the offline search finds nothing


def _found(samples: dict[str, list[float]], load: list[float] | None) -> dict:
    """A probe's findings for modules with these per-repeat times (okgit.campaign.probe's shape)."""
    total = [sum(s[i] for s in samples.values()) for i in range(10)]
    rows = [{"kind": "module", "name": name, "type": "torch.nn.modules.linear.Linear", "calls": 1,
             "time_us": statistics.median(s), "samples_us": s, "share": statistics.median(s) / statistics.median(total)}
            for name, s in sorted(samples.items(), key=lambda item: -statistics.median(item[1]))]  # largest first
    return {"device": "cpu", "repeats": 10, "rows": rows, "leaves": {name: {"refused": None} for name in samples},
            "total_us": statistics.median(total), "total_samples_us": total, "chains": [], "load": load}


def test_the_profile_says_which_rows_are_ranked_past_the_noise_and_how_busy_the_cpu_was() -> None:
    steady = [100.0 + i % 3 for i in range(10)]
    wide = [60.0 + 9 * (i % 5) for i in range(10)]  # 60 .. 96: overlaps the next row
    near = [70.0 + i % 4 for i in range(10)]
    small = [10.0 + i % 2 for i in range(10)]
    report = report_of(_found({"a": steady, "b": wide, "c": near, "d": small}, load=[3.8, 2]), "model.py")
    assert [r.name for r in report.rows] == ["a", "b", "c", "d"] and report.rows[1].tied
    assert order_groups(report.rows) == [[1], [2, 3], [4]] and ranked_past_noise(report.rows) == report.settled == 1
    text = report.text()
    assert "ranked past the noise: 1 > 2-3 > 4 (a range's rows in either order)" in text, text
    assert "Load average 3.8 on 2 cores: other work shares the CPU" in text
    assert "ranked past the noise: 1 > 2-3 > ... (" in report.text(top=2)  # the groups that start among the rows shown

    quiet = report_of(_found({"a": steady, "d": small}, load=[0.3, 2]), "model.py")
    assert "Every row shown is ranked past the noise" in quiet.text() and "Load average 0.3 on 2 cores." in quiet.text()
    assert order_groups(quiet.rows) == [[1], [2]]


def test_paths_with_dots_are_echoed_folded(cli, git_repo: Path) -> None:
    outside = git_repo.parent / "other"
    outside.mkdir()
    (outside / "op.py").write_text(variant("torch.relu(x)"))
    cases = [
        (("optimize", "../other/missing.py", "--device", "cpu"), f"{outside}/missing.py: no such file"),
        (("optimize", "ops/../../other/op.py", "--device", "cpu"), f"{outside}/op.py: outside the repository"),
        (("optimize", "ops/../../other/missing.py", "--campaign"), f"{outside}/missing.py: no such file"),
        (("profile", "ops/../../other/missing.py"), "okgit: ../other/missing.py: no such file"),
    ]
    for args, message in cases:
        proc = cli(*args, cwd=git_repo)
        assert proc.returncode == 1 and message in proc.stderr and ".." not in proc.stderr.replace("../other", ""), proc.stderr


@pytest.mark.slow  # a campaign through the session's CPU evaluator
def test_a_campaign_with_no_winner_names_no_patch_says_what_it_skipped_and_outlives_its_runs(cli, git_repo: Path) -> None:
    (git_repo / "sorts").mkdir()
    (git_repo / "sorts" / "sort.py").write_text(SORT)
    sh(git_repo, "add", "sorts")
    sh(git_repo, "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "sorts")
    (git_repo / "sorts" / "draft.py").write_text(SORT)  # an op file the user forgot to commit

    proc = cli("optimize", "sorts/", "--device", "cpu", "--iterations", "1", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("okgit campaign ") and "1 problem on cpu (triton, 1 iteration per problem" in line
               for line in lines), lines
    assert "  sorts/sort.py: fallback: no winner, 1 iteration" in lines and "  report: " in proc.stdout
    assert "diff:" not in proc.stdout and "okgit apply campaign:" not in proc.stdout
    skipped = "skipped sorts/draft.py: not tracked by git (commit it first)"
    assert lines.count(f"  {skipped}") == 2, lines  # once before the screening, once in the summary
    result = json.loads((git_repo / ".okgit" / "campaigns").glob("*/result.json").__next__().read_text())
    assert result["status"] == "fallback" and Path(result["diff"]).read_text() == ""
    assert result["skipped"] == ["sorts/draft.py: not tracked by git (commit it first)"]
    report = Path(result["report"]).read_text()
    assert f"- {skipped}" in report
    assert "## Nothing to apply" in report and "okgit apply" not in report and "TRITON_INTERPRET" not in report
    refused = cli("apply", "campaign:latest", cwd=git_repo)
    assert refused.returncode == 1 and "has no winner" in refused.stderr

    assert json.loads(cli("history", "campaign:latest", "--json", cwd=git_repo).stdout)["problems"][0]["run_removed"] is False
    gone = json.loads(cli("gc", "--runs", "--keep", "0", "--json", cwd=git_repo).stdout)
    assert "1 campaign: its directory under .okgit/campaigns (gc never removes a campaign; its report.diff does " \
           "not need its runs)" in gone["kept"], gone
    run_id = result["problems"][0]["run_id"]
    assert any(r.startswith(f"run {run_id}: its directory") for r in gone["removed"]), gone
    assert (git_repo / ".okgit" / "campaigns" / result["campaign_id"]).is_dir()
    detail = cli("history", "campaign:latest", cwd=git_repo).stdout
    assert f"{run_id} (removed by gc)" in detail, detail


THREADS_MODEL = '''import os

import torch

SEEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "threads.txt")


class Model(torch.nn.Module):
    def forward(self, x):
        with open(SEEN, "a") as f:
            f.write(f"{torch.get_num_threads()}\\n")
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # okgit profile as a process: its probe, a process of its own, profiles the model
def test_a_cpu_profile_runs_the_model_on_one_thread(cli, tmp_path: Path) -> None:
    """A pool of threads on a shared CPU waits at every op for the thread whose core is taken: a
    small MLP took 64 ms a call that way at load 4 on 2 cores, 0.56 ms on one thread."""
    (tmp_path / "model.py").write_text(THREADS_MODEL)
    proc = cli("profile", "model.py", "--device", "cpu", "--json", cwd=tmp_path,
               env={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    seen = (tmp_path / "threads.txt").read_text().split()
    assert len(seen) >= json.loads(proc.stdout)["repeats"] and set(seen) == {"1"}, seen


def test_call_sites_go_by_their_ops_when_torch_cannot_read_the_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's profiler (2.13, CPU) at times decodes a frame's name from bytes that are not UTF-8;
    it cannot be made to on purpose, so its error stands in here."""
    from okgit.campaign import probe

    tries = []

    def unreadable(*args, with_stack: bool, **kwargs):
        tries.append(with_stack)
        raise UnicodeDecodeError("utf-8", b"\x94", 0, 1, "invalid start byte")

    monkeypatch.setattr(probe, "_profile", unreadable)
    assert probe._call_sites(None, None, [], "cpu", "model.py") == [] and tries == [True] * 3
