"""Worker processes: started clean, limited, killed with their whole process group.

Each worker runs in its own session (process group) with a private temp directory as cwd, an
environment with no credentials, no core dumps, and a watchdog that kills a worker whose
resident memory passes its budget (okgit.eval.parent.memory). It is forked from a zygote that
imported torch and triton (okgit.eval.parent.forks), or spawned where none forks it. A
`WorkerPool` (okgit.eval.parent.pool) keeps pre-started idle candidate workers per device:
torch, triton and CUDA are up, no candidate code is loaded; each runs one job and exits. The
judge is a worker process too, long-lived, asked one request at a time. Messages go both ways
as JSON lines (okgit.eval.protocol.channel).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from okgit.eval.parent import forks
from okgit.eval.parent.devices import lock_path, physical_id
from okgit.eval.protocol import reaper
from okgit.eval.protocol.jobs import Job
from okgit.eval.protocol.reaper import descendants, kill_tree, send, stop_tree, wait_stopped
from okgit.eval.protocol.start import DEVICE_LOCK_ENV

# Names a worker keeps (then the credential filter still applies to them).
_KEEP = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LC_\w+|TZ|TMPDIR|TEMP|TMP|TERM|PYTHONPATH|PYTHONHOME|VIRTUAL_ENV|"
    r"CONDA_PREFIX|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|CC|CXX|CUDA_\w*|CUDNN_\w*|NVIDIA_\w*|NVCC_\w*|"
    r"TRITON_\w*|TORCH_\w*|TORCHINDUCTOR_\w*|PYTORCH_\w*|CUBLAS_\w*|OMP_\w*|MKL_\w*|OPENBLAS_\w*|NCCL_\w*|"
    r"NVSHMEM_\w*|XDG_CACHE_HOME|OKGIT_DATA_DIR|OKGIT_DEVICE_LEDGER|MAX_JOBS)$"
)
CREDENTIAL = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|MODAL_|OPENAI|ANTHROPIC|AWS_|"
    r"HF_|HUGGING|GITHUB|GH_|AZURE|GOOGLE|GCP_|GEMINI|MISTRAL|COHERE|GROQ|LITELLM|WANDB|NETRC",
    re.IGNORECASE,
)


JUDGE_ALLOC_CONF = "expandable_segments:True"


def worker_env(device: str, environ: dict[str, str] | None = None, role: str = "worker") -> dict[str, str]:
    """Only what torch, triton and the compilers need; never a credential. The judge's
    allocator grows its segments in place: it holds float64 copies and cached outputs of many
    sizes, and a 32 GiB float64 copy of a 17 GB input did not fit while 28 GiB it had reserved
    lay free in pieces. The workers keep the user's allocator: they are the ones timed."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if _KEEP.match(k) and not CREDENTIAL.search(k)}
    if environ is None:
        env.pop(INDUCTOR_CACHE, None)
        if _INDUCTOR_CACHE_AT_START is not None:
            env[INDUCTOR_CACHE] = _INDUCTOR_CACHE_AT_START
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on CPU tensors, in numpy
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
        # the worker sees its one GPU only, as "cuda": nothing it runs can touch another
        env["CUDA_VISIBLE_DEVICES"] = physical_id(device)
        env[DEVICE_LOCK_ENV] = str(lock_path(device))  # held shared through its start (okgit.eval.protocol.start)
        if role == "judge":
            env["PYTORCH_CUDA_ALLOC_CONF"] = JUDGE_ALLOC_CONF
    return env


INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
# The workers get the Inductor cache directory this process started with, not the one torch writes
# into os.environ when torch._dynamo is first imported (torch.export does, in a run's template
# planning): passed on, it changed the workers' environment mid-run, and so their zygote's key, and
# the next worker waited for a second zygote to import torch and triton again (2-3 s of CPU a run).
# Where it was unset, a worker computes torch's default itself, the same directory.
_INDUCTOR_CACHE_AT_START = os.environ.get(INDUCTOR_CACHE)


def die_with_parent() -> None:
    """A child's `preexec_fn`: killed when the thread that started it ends (Linux's parent-death
    signal), so a compile or a sweep problem never outlives what it worked for."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def default_memory_limit() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * 2**30
    return int(min(32 * 2**30, max(4 * 2**30, total // 2)))


@dataclass
class Outcome:
    """How a worker ended, and where its files are."""

    returncode: int | None
    timed_out: bool
    memory_killed: bool
    phase: str
    stderr_tail: str
    job_dir: Path
    wall_s: float
    ready_wait_s: float = 0.0
    memory_limit: int = 0

    @property
    def crashed(self) -> bool:
        return self.timed_out or self.memory_killed or not (self.job_dir / "result.json").exists()

    def describe(self) -> str:
        if self.timed_out:
            return "time limit exceeded (killed)"
        if self.memory_killed:
            return f"host memory budget of {_gib(self.memory_limit)} exceeded (killed)"
        rc = self.returncode
        if rc is not None and rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
            return f"worker killed by signal {name}"
        return f"worker exited with code {rc} without a result"


REAPER = Path(reaper.__file__)  # run by path: no package import before the worker's
_STARTED: dict[int, "WorkerProcess"] = {}  # every worker and judge this process started and has not closed


def live_processes() -> list[str]:
    """What `stop_all` would stop, one name each ("judge 1234", "worker 1235"); a worker a zygote
    has not forked yet has no pid, and will not be forked once the zygotes are stopped."""
    return [f"{w.role} {w.proc.pid}" for w in list(_STARTED.values()) if w.alive() and w.proc.pid is not None]


def stop_all() -> list[str]:
    """Kill every worker and judge this process started (their process groups: their children
    too) and remove their directories (under /dev/shm). On Ctrl-C, SIGTERM and exit, whatever
    state the evaluators were in (a judge still preparing is held by no evaluator yet)."""
    stopped = live_processes()
    forks.stop()  # first: nothing is forked while the workers are stopped
    for worker in list(_STARTED.values()):
        worker.close()
    return stopped


atexit.register(stop_all)


class Lines:
    """A child's stdout, line by line, each line waited for until a deadline at most."""

    def __init__(self, proc: subprocess.Popen[bytes] | forks.Forked) -> None:
        self.proc = proc
        self.buffer = b""

    def next(self, deadline: float, give_up: Callable[[], bool] = lambda: False) -> bytes | None:
        """The next line; None at the deadline, when `give_up()` says so, or once the child ended."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            if time.monotonic() > deadline or give_up():
                return None
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self.buffer += chunk
            elif self.proc.poll() is not None:
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """Every process below `pid` (a worker's reaper: the worker and whatever it started, in any
    group or session) stopped (SIGSTOP) for the block, continued after: while a job has let another
    job's timing have the device, none of its worker's threads or processes (a candidate's own
    included) can launch GPU work: the block begins once each of their threads is stopped (up to a
    second: a thread inside a system call, a launch among them, stops as it returns). Work already
    queued on the GPU is not stopped: the worker synchronized before it asked, so only work
    launched in that instant could run on. Its process group too (where there is no /proc to find
    the tree in, that is all there is)."""
    _signal_group(pid, signal.SIGSTOP)
    stopped = stop_tree(pid)
    wait_stopped(stopped)  # none of them still inside a call the signal came during
    try:
        yield
    finally:
        for p in stopped:
            send(p, signal.SIGCONT)
        _signal_group(pid, signal.SIGCONT)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def deadline_moved(reply: dict[str, Any], room_s: float) -> float:
    """How far an answer moves a job's deadline: the seconds the parent waited for the device on
    its behalf (`waited_s`), within the `room_s` left of the job's own timeout."""
    return max(0.0, min(float(reply.get("waited_s") or 0.0), room_s))


class WorkerProcess:
    """One worker (or judge) process. `args`: more of the worker's own arguments (a profiling pass's
    tool); `wrap`: a program that runs the worker as its child (Nsight Compute), given its arguments
    and then the worker's command line: the whole process tree counts against the memory budget.
    `timing_only`: a worker for a job that only times (the final gate's rounds), which opens no
    profiler session once up (okgit.eval.worker.candidate)."""

    def __init__(self, device: str, memory_limit: int, base_dir: Path | None = None,
                 program: str = "okgit.eval.worker", args: list[str] | None = None,
                 wrap: list[str] | None = None, timing_only: bool = False) -> None:
        self.role = "judge" if program.endswith("judge") else "worker"
        self.device = device
        self.memory_limit = memory_limit
        self.wrapped = bool(wrap)
        self.timing_only = timing_only
        self.dir = Path(tempfile.mkdtemp(prefix="okgit-worker-", dir=base_dir))
        self.started = time.monotonic()
        self.ready_wait_s = 0.0  # how long a job waited for this worker to finish starting
        self._ready = False
        # An interrupt (Ctrl-C, SIGTERM) while it starts leaves no directory behind: one landing in
        # Popen after the fork (its wait for the exec) left a process unknown to `stop_all`, which
        # died with its pipes, and its directory under /dev/shm (seen once in CI under load).
        try:
            env = worker_env(device, role=self.role)
            # forked from a zygote with its imports done, unless it runs under a wrapper or with a tool
            own = ["--timing-only"] if timing_only else []
            forked = forks.fork(device, program, env, self.dir, own) if not wrap and not args else None
            self.proc: subprocess.Popen[bytes] | forks.Forked = forked or self._spawn(program, env, [*(args or []), *own],
                                                                                     wrap or [])
            _STARTED[id(self)] = self
            self._lines = Lines(self.proc)
        except BaseException:
            if "proc" in vars(self):
                self.close()
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _spawn(self, program: str, env: dict[str, str], args: list[str], wrap: list[str]) -> subprocess.Popen[bytes]:
        with open(self.dir / "stderr.log", "wb") as err:  # under the reaper: nothing it starts outlives it
            return subprocess.Popen(
                [sys.executable, "-I", str(REAPER), "--", *wrap, sys.executable, "-m", program,
                 "--device", "cpu" if self.device == "cpu" else "cuda", *args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=self.dir,
                env=env, start_new_session=True, preexec_fn=self._limits,
            )

    def _limits(self) -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def forked(self, timeout_s: float = 300.0) -> bool:
        """Whether its process exists: a spawned one's does; a forked one's once its zygote forked
        it (waited for at most `timeout_s`: the zygote may still be importing), never if the zygote
        ended first."""
        return not isinstance(self.proc, forks.Forked) or self.proc.started(timeout_s)

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the worker has said it is ready (torch imported, device up); waits at most timeout_s."""
        if not self._ready:
            t0 = time.monotonic()
            line = self._read_line(t0 + max(0.0, timeout_s))
            while line is not None and self.wrapped and not line.startswith(b"{"):  # the wrapper's own words
                line = self._read_line(t0 + max(0.0, timeout_s))
            self._ready = line is not None and json.loads(line or "{}").get("ready") is True
            self.ready_wait_s += time.monotonic() - t0
        return self._ready

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the caller sees that when it reads

    def _read_line(self, deadline: float) -> bytes | None:
        """The worker's next line, or None at the deadline, on its exit, or past the memory budget."""
        return self._lines.next(deadline, self.over_budget)

    def over_budget(self) -> bool:
        # below the reaper: the worker and all it started (a forked reaper shares torch's pages with its zygote)
        return self.proc.pid is not None and _tree_rss_bytes(self.proc.pid) > self.memory_limit

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """One request to a long-lived worker (the judge): its answer, or None if it never came."""
        self.send(message)
        line = self._read_line(time.monotonic() + timeout_s)
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def run(self, job: Job, timeout_s: float, on_message: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
            startup_timeout_s: float = 300.0) -> Outcome:
        """Hand the job over, answer its messages, wait for its exit; kill its group on timeout or
        past its memory budget. An answer's `waited_s` (the parent waited for the device on the
        job's behalf) moves the deadline by as much, up to `timeout_s` in all: waiting for other
        jobs' work is not the candidate's time."""
        t0 = time.monotonic()
        if not self.wait_ready(startup_timeout_s):
            self.kill()
            return self._outcome(t0, timed_out=False, memory_killed=False, phase="worker start")
        job.save(self.dir / "job.json")
        self.send({"job": str(self.dir)})
        t0 = time.monotonic()
        deadline, extended = t0 + timeout_s, 0.0
        while True:
            line = self._read_line(deadline)
            if line is None:
                break
            if self.wrapped and not line.startswith(b"{"):
                continue  # the wrapper's own words: an answer would be read as the reply to the worker's next request
            try:
                message = json.loads(line)
            except ValueError:
                message = {}
            reply = on_message(message) if on_message and isinstance(message, dict) else {"ok": False}
            moved = deadline_moved(reply, timeout_s - extended)
            deadline, extended = deadline + moved, extended + moved
            self.send(reply)
        timed_out = memory_killed = False
        if self.alive():
            memory_killed = self.over_budget()
            timed_out = not memory_killed and time.monotonic() > deadline
            if timed_out or memory_killed:
                self.kill()
            else:
                try:
                    self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    self.kill()
        return self._outcome(t0, timed_out=timed_out, memory_killed=memory_killed)

    def _outcome(self, t0: float, *, timed_out: bool, memory_killed: bool, phase: str | None = None) -> Outcome:
        phase_file = self.dir / "phase"
        return Outcome(
            returncode=self.proc.returncode,
            timed_out=timed_out,
            memory_killed=memory_killed,
            phase=phase or (phase_file.read_text() if phase_file.exists() else "worker start"),
            stderr_tail=_tail(self.dir / "stderr.log"),
            job_dir=self.dir,
            wall_s=time.monotonic() - t0,
            ready_wait_s=self.ready_wait_s,
            memory_limit=self.memory_limit,
        )

    def run_outcome(self) -> Outcome:
        """How a long-lived worker (the judge) ended, stopping it if it is still there."""
        memory_killed = self.alive() and self.over_budget()
        if self.alive():
            self.kill()
        return self._outcome(self.started, timed_out=False, memory_killed=memory_killed)

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """The worker stopped for the block (`paused`): it is running a job, so it has a pid."""
        assert self.proc.pid is not None
        return paused(self.proc.pid)

    def kill(self) -> None:
        """Everything below the reaper first (while it lives, an orphan comes back to it, whatever
        group or session it went to), then the reaper's process group."""
        if not self.forked(60.0):
            return  # never forked: if its zygote forks it late, it reads the end of its stdin and exits
        assert self.proc.pid is not None
        kill_tree(self.proc.pid)
        _signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.alive():
            self.kill()
        if isinstance(self.proc, forks.Forked):
            self.proc.close()  # its status pipe with them
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)
        _STARTED.pop(id(self), None)


def _rss_bytes(pid: int) -> int:
    return _status_bytes(pid, "VmRSS:")


def _tree_rss_bytes(pid: int) -> int:
    """The resident memory of every process below `pid` (a worker's reaper)."""
    return sum(_rss_bytes(p) for p in descendants(pid))


def _status_bytes(pid: int | str, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode(errors="replace")


def read_result(job_dir: Path) -> dict[str, Any]:
    """The worker's result.json."""
    return json.loads((job_dir / "result.json").read_text())


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
