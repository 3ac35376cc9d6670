"""A new user's first hour (issue 16): fail-fast model errors as a real subprocess, doctor's
exit code, run ids by prefix and `latest`, resuming a finished run, gc's reasons, the live
view's keys (textual's Pilot). Real git repositories in tmp_path throughout."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import OP, record_run, sh, variant

from okgit.tui.app import WatchApp
from okgit.tui.widgets import ExperimentTable

JOURNALS = Path(__file__).parents[1] / "journals"


def _no_keys() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def _one_line(proc: subprocess.CompletedProcess[str], needle: str, code: int = 1) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("okgit: "), proc.stderr
    assert needle in proc.stderr, proc.stderr


@pytest.mark.slow  # a real okgit process, timed from its start
def test_a_missing_key_ends_optimize_at_once_naming_the_variable(git_repo: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "okgit", "optimize", OP, "--model", "gpt-5-mini", "--device", "cpu"],
                          cwd=git_repo, env=_no_keys(), capture_output=True, text=True, timeout=120)
    _one_line(proc, "set OPENAI_API_KEY")
    assert time.monotonic() - started < 30
    assert not (git_repo / ".okgit" / "runs").exists() or not any((git_repo / ".okgit" / "runs").iterdir())


class _Refusing:
    """An OpenAI-compatible server on 127.0.0.1 that answers every call with one status."""

    def __init__(self, status: int) -> None:
        self.calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server.calls += 1
                self.rfile.read(int(self.headers["content-length"]))
                body = json.dumps({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow  # doctor's interpreter probe (a process of its own), litellm's import
def test_doctor_exits_1_when_the_model_s_credentials_are_refused(cli, git_repo: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A missing key (exit 1 within seconds, the variable named): test_new_user.py's
    # test_doctor_without_a_key_imports_neither_torch_nor_litellm_and_names_the_model_once, a
    # process of its own. Here in this process: litellm is imported once for this and the next test.
    for key in os.environ.keys() - _no_keys().keys():
        monkeypatch.delenv(key)
    server = _Refusing(401)
    try:
        proc = cli("doctor", "--model", "openai/local", "--api-base", server.url, "--json", cwd=git_repo)
    finally:
        server.close()
    assert proc.returncode == 1, proc.stderr
    found = {c["name"]: c for c in json.loads(proc.stdout)}
    assert not found["model openai/local"]["ok"] and "credentials refused" in found["model openai/local"]["detail"], found
    assert server.calls == 1


@pytest.mark.slow  # litellm's import (seconds) and two local servers
def test_a_refused_key_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    from okgit import llm
    from okgit.errors import OkgitError

    server = _Refusing(401)
    try:
        with pytest.raises(llm.LLMAuthError, match="credentials refused"):
            llm.complete([{"role": "user", "content": "hi"}], model="openai/local", api_base=server.url, backoff_s=0.01)
        assert server.calls == 1
    finally:
        server.close()
    busy = _Refusing(503)  # transient: bounded retries
    try:
        with pytest.raises(OkgitError, match="gave up after 3 tries"):
            llm.complete([{"role": "user", "content": "hi"}], model="openai/local", api_base=busy.url, max_retries=2, backoff_s=0.01)
        assert busy.calls == 3
    finally:
        busy.close()


def test_runs_by_prefix_and_latest(cli, git_repo: Path) -> None:
    first, _ = record_run(git_repo, [("torch.clamp_min(x, 0.0)", "clamp")])
    time.sleep(1.1)  # run ids have seconds
    second, tags = record_run(git_repo, [("x.clamp(min=0)", "method clamp")])
    for ref, run in (("latest", second), ("latest~1", first), (second.run_id[:15], second), (first.run_id[9:15], first)):
        detail = json.loads(cli("history", ref, "--json", cwd=git_repo).stdout)
        assert detail["summary"]["run_id"] == run.run_id, ref
    assert cli("show", "latest", cwd=git_repo).stdout == (second.run_dir / "report.diff").read_text()
    assert cli("show", f"okgit/latest/{tags[0].rsplit('/', 1)[1]}", cwd=git_repo).returncode == 0
    _one_line(cli("history", "latest~5", cwd=git_repo), "there are only 2 runs")
    _one_line(cli("history", second.run_id[:8], cwd=git_repo), "is ambiguous")
    applied = cli("apply", "latest", cwd=git_repo)
    assert applied.returncode == 0 and applied.stdout.startswith(second.run_id), applied
    (git_repo / OP).write_text((git_repo / OP).read_text() + "# mine\n")  # an unrelated edit since
    reverted = cli("revert", "latest", cwd=git_repo)
    assert reverted.returncode == 0, reverted.stderr
    assert (git_repo / OP).read_text() == variant("torch.relu(x)") + "# mine\n"


def test_resuming_a_finished_run_says_it_is_finished(cli, git_repo: Path) -> None:
    space, _ = record_run(git_repo, [("x.clamp(min=0)", "clamp")])
    (space.run_dir / "result.json").write_text(json.dumps({
        "run_id": space.run_id, "status": "optimized", "report": "r.md", "diff": "r.diff", "op": OP, "device": "cpu"}))
    proc = cli("optimize", OP, "--resume", "latest", cwd=git_repo)
    assert proc.returncode == 0 and "already finished; nothing to resume" in proc.stdout, proc
    assert "resumed" not in (space.run_dir / "journal.jsonl").read_text()


def test_gc_drops_a_stale_applied_record_and_says_what_it_keeps(cli, git_repo: Path) -> None:
    runs = []
    for expr in ("torch.clamp_min(x, 0.0)", "x.clamp(min=0)", "torch.relu(x) + 0"):
        runs.append(record_run(git_repo, [(expr, expr)])[0])
        time.sleep(1.1)
    assert cli("apply", runs[0].run_id, cwd=git_repo).returncode == 0
    sh(git_repo, "-c", "core.hooksPath=/dev/null", "checkout", "-q", "--", OP)  # undone by hand: the record is stale
    assert cli("apply", runs[1].run_id, cwd=git_repo).returncode == 0
    report = json.loads(cli("gc", "--runs", "--keep", "1", "--json", cwd=git_repo).stdout)
    assert any(r.startswith(f"run {runs[0].run_id}: ") for r in report["removed"]), report  # and what it took
    assert any(k.startswith(f"run {runs[1].run_id}: its diff is applied to {OP}") for k in report["kept"]), report
    assert "the newest finished run (--keep 1)" in report["kept"]


def test_a_fallback_run_leaves_no_branch(git_repo: Path) -> None:
    from okgit.git.repo import Repo
    from okgit.git.workspace import start_run

    space = start_run(Repo.find(git_repo), git_repo / OP)
    space.close(accepted=False)
    assert sh(git_repo, "branch", "--list", space.branch) == ""


def _drive(app: WatchApp, steps) -> None:
    async def main() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            await pilot.pause()
            await steps(app, pilot)

    asyncio.run(main())


def _a_run(tmp_path: Path, finished: bool = True) -> Path:
    run = next(d for d in sorted(JOURNALS.iterdir()) if d.is_dir() and not d.name.startswith("__"))  # not a __pycache__
    copy = Path(shutil.copytree(run, tmp_path / run.name))
    if not finished:  # the run as it was before its last event
        journal = copy / "journal.jsonl"
        lines = journal.read_text().splitlines(keepends=True)
        journal.write_text("".join(line for line in lines if '"run_finished"' not in line))
    return copy


def test_ctrl_c_quits_watch(tmp_path: Path) -> None:
    async def steps(app: WatchApp, pilot) -> None:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app.is_running and not app.interrupt_run  # plain watch: nothing to stop

    _drive(WatchApp(_a_run(tmp_path), poll_s=0.05), steps)


def test_the_view_starts_before_the_run_and_ctrl_c_stops_the_run(tmp_path: Path) -> None:
    run_dir = _a_run(tmp_path, finished=False)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)

    async def steps(app: WatchApp, pilot) -> None:
        await pilot.pause(0.2)
        assert "starting" in str(app.query_one("#status").render())
        os.write(write_fd, f"run {run_dir}\n".encode())
        os.close(write_fd)
        await pilot.pause(0.3)
        assert app.run_dir == run_dir and app.query_one(ExperimentTable).row_count
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.interrupt_run  # `watch` then sends SIGINT to the optimize process

    _drive(WatchApp(None, poll_s=0.05, attach=read_fd, run_pid=os.getpid()), steps)
    os.close(read_fd)


def test_ctrl_c_after_the_run_finished_only_closes_the_view(tmp_path: Path) -> None:
    """Under `optimize --watch`, a run that has finished is not reported as interrupted."""
    async def steps(app: WatchApp, pilot) -> None:
        await pilot.pause(0.2)
        assert app.view.finished is not None
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app.is_running and not app.interrupt_run

    _drive(WatchApp(_a_run(tmp_path), poll_s=0.05, run_pid=os.getpid()), steps)


def test_a_refused_run_closes_the_starting_view(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.write(write_fd, b"quit\n")
    os.close(write_fd)

    async def steps(app: WatchApp, pilot) -> None:
        await pilot.pause(0.3)
        assert not app.is_running

    _drive(WatchApp(None, poll_s=0.05, attach=read_fd), steps)
    os.close(read_fd)


def test_an_empty_failures_filter_says_so(tmp_path: Path) -> None:
    run_dir = _a_run(tmp_path)
    lines = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    failed = {e["cand"] for e in lines if e["type"] == "evaluated" and e.get("status") != "correct"}
    kept = [e for e in lines if e.get("cand") not in failed]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept))

    async def steps(app: WatchApp, pilot) -> None:
        await pilot.press("f")
        await pilot.pause()
        table = app.query_one(ExperimentTable)
        assert table.row_count == 0 and "no candidate has failed" in str(table.border_title)
        await pilot.press("f")
        await pilot.pause()
        assert table.row_count and str(table.border_title) == "experiments (enter: select)"

    _drive(WatchApp(run_dir, poll_s=0.05), steps)
