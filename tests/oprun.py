"""Test helper: run a candidate op file against its reference under the Triton interpreter.

Stands in for the evaluator in the template/autotune/example tests: a subprocess with
TRITON_INTERPRET=1 builds both models with the same seed, runs the reference in float64 and
the candidate in its own dtype, and checks the fp32 tolerance (rtol 1e-4, atol 1e-4 *
max|ref|), every output element written (allocations are poisoned), determinism across
two calls (where the first changed anything the second reads: under the interpreter the same
state gives the same outputs), and that inputs are left unchanged. Where get_init_inputs holds floats, the check
is repeated with every one of them x1.5 (both models rebuilt, one call), as the evaluator does:
a candidate that baked `self.temperature` into its kernel fails there. Each result also gives
the outputs' layout: (reference strides, candidate strides, candidate contiguous) per output.

Each call's jobs run in a fork of one warm process per test process (`_Server`), not in a
`python -c` of their own: importing torch, triton and okgit costs 2.5-3 s of CPU, which each of the
suite's ~40 calls paid. The server only imports them (and turns the sanitizer off), so
its fork is as clean as a fresh process: the candidates' modules, Triton's caches and torch's
global state of one call die with its fork. The fork takes the caller's environment and working
directory; a server started under another environment is replaced first, since some variables
are read at import.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = r'''
import json, sys, types, torch
from okgit.backends.triton import interpret_as_compiled
from okgit.problem import INIT_FLOAT_FACTOR, perturb_floats  # the evaluator's own init_inputs case

interpret_as_compiled()  # as the evaluator's CPU workers run kernels: no int32 overflow sanitizer

def load(path, knobs):
    mod = types.ModuleType("op")
    mod.__file__ = path
    code = compile(open(path).read(), path, "exec")
    exec(code, mod.__dict__)
    mod.__dict__.update(knobs)
    return mod

def check(ref_path, cand_path, knobs):
    maxes, strides = [], None
    for perturbed in (False, True):
        try:
            r = compare(ref_path, cand_path, knobs, perturbed)
        except Exception as e:
            import traceback
            r = {"ok": False, "max_abs": None, "why": traceback.format_exc()[-3000:]}
        if r is None:
            break  # no float constructor argument to scale
        if not r["ok"]:
            if perturbed:
                r["why"] = f"with the constructor's floats x{INIT_FLOAT_FACTOR}: " + r["why"]
            return r
        maxes.append(r["max_abs"])
        strides = strides or r["strides"]
    return {"ok": True, "max_abs": max(maxes), "why": "", "strides": strides}

def state(model, mod):
    """What a call could leave for the next one to read: the RNG's state, and every tensor,
    container and scalar the model's modules, the candidate's module and the classes it defines
    hold (a tensor by identity and in-place version, a container by identity and size). Not the
    dunder names: the interpreter rebinds some in the module a kernel's globals are."""
    marks = [bytes(torch.random.get_rng_state().numpy())]
    spaces = [vars(m) for m in model.modules()] + [vars(mod)]
    spaces += [vars(v) for v in list(vars(mod).values()) if isinstance(v, type) and v.__module__ == mod.__name__]
    for space in spaces:
        for name, v in list(space.items()):
            if name.startswith("__"):
                continue
            if name in ("_parameters", "_buffers"):
                marks += [(k, id(t), t._version) for k, t in v.items() if t is not None]
            elif isinstance(v, torch.Tensor):
                marks.append((name, id(v), v._version))
            elif isinstance(v, (dict, list, set, tuple)):
                marks.append((name, id(v), len(v)))
            elif isinstance(v, (int, float, str, bool)) or v is None:
                marks.append((name, v))
    return marks

def compare(ref_path, cand_path, knobs, perturbed=False):
    ref, cand = load(ref_path, knobs), load(cand_path, knobs)
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    if perturbed:
        init, changed = perturb_floats(list(init))
        if not changed:
            return None
    torch.manual_seed(1)
    m_ref = ref.Model(*init)
    torch.manual_seed(1)
    m_cand = (cand.ModelNew if hasattr(cand, "ModelNew") else cand.Model)(*init)
    m_cand.load_state_dict(m_ref.state_dict())
    torch.manual_seed(2)
    inputs = list(ref.get_inputs())
    keep = [x.clone() for x in inputs]
    wide = [x.double() if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        want = m_ref.double()(*wide)
        empty = torch.empty
        # poisoned allocations: an output element the candidate never writes shows up as NaN
        def poisoned(*a, **k):
            t = empty(*a, **k)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)
        torch.empty = poisoned
        try:
            before = state(m_cand, cand)
            got = m_cand(*inputs)
            # two calls alike: once, at the op's own constructor floats (the scaled ones' run is
            # about constants baked into a kernel, which one call shows), and only where the first
            # call changed what the second would read: the interpreter runs a kernel's programs one
            # after another, so the same state and inputs give the same outputs (atomics included)
            again = got if perturbed or state(m_cand, cand) == before else m_cand(*inputs)
        finally:
            torch.empty = empty
    want = want if isinstance(want, (tuple, list)) else [want]
    got = got if isinstance(got, (tuple, list)) else [got]
    again = again if isinstance(again, (tuple, list)) else [again]
    report = {"ok": True, "max_abs": 0.0, "why": "", "strides": [[list(w.stride()), list(g.stride()), g.is_contiguous()]
                                                              for w, g in zip(want, got)]}
    def fail(why):
        report["ok"] = False
        report["why"] = report["why"] or why
    for w, g, a in zip(want, got, again):
        if g.shape != w.shape:
            fail(f"shape {tuple(g.shape)} != {tuple(w.shape)}"); continue
        if not (torch.equal(g, a) or (g.is_floating_point() and torch.allclose(g, a, rtol=0, atol=0, equal_nan=True))):
            fail("two calls differ")
        w = w.double(); g = g.double()
        finite = w[w.isfinite()]  # a NaN where torch gives one is right; the tolerance comes from the rest
        atol = 1e-4 * max(finite.abs().max().item(), 1e-30) if finite.numel() else 0
        err = (g - w).abs().nan_to_num(0.0)
        report["max_abs"] = max(report["max_abs"], err.max().item() if err.numel() else 0.0)
        nan_apart = (g.isnan() != w.isnan()).sum().item()
        if nan_apart:
            fail(f"mismatch: {nan_apart} element(s) NaN in one and not the other")
        elif not torch.allclose(g, w, rtol=1e-4, atol=atol, equal_nan=True):
            fail(f"mismatch: max abs err {err.max().item():.3g} (atol {atol:.3g})")
    if len(want) != len(got):
        fail("output count")
    for x, k in zip(inputs, keep):
        if not torch.equal(x, k) and not (x.is_floating_point() and torch.allclose(x, k, rtol=0, atol=0, equal_nan=True)):
            fail("an input was modified")
    return report

def run(jobs):
    for job in jobs:
        print("RESULT " + json.dumps(check(*job)))
'''

# A fork server's parts, shared with tests/scriptrun.py's: PRELUDE first (the protocol pipe is fd 1 at
# start; the server's own stdout joins its stderr, so nothing printed while importing can garble
# it), then its imports, then FORKS and a body that `serve` runs in a fork per request line on
# stdin: `enter` gives the fork the request's environment, working directory and files for stdin,
# stdout and stderr, `leave` ends it with its status; the fork's pid and then its wait status go
# back on the protocol pipe. The server exits at stdin's EOF or with its parent.
PRELUDE = r'''
import os
PROTOCOL = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
'''

FORKS = r'''
import ctypes, json, signal, sys, traceback

def die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

def enter(request):
    die_with_parent()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for std, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT),
                             (2, request["stderr"], os.O_WRONLY | os.O_CREAT)):
        fd = os.open(path, flags)
        os.dup2(fd, std)
        os.close(fd)

def leave(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

def serve(body):
    die_with_parent()
    for line in sys.stdin:
        sys.stdout.flush()  # nothing of this process's buffers is written again by the fork
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            body(json.loads(line))  # never returns
        PROTOCOL.write(f"{pid}\n")
        PROTOCOL.flush()
        PROTOCOL.write(f"{os.waitpid(pid, 0)[1]}\n")
        PROTOCOL.flush()
'''

# SCRIPT's imports once, then `run` on each request's jobs in a fork of its own
SERVER = PRELUDE + SCRIPT + FORKS + r'''
def batch(request):
    code = 1
    try:
        enter(request)
        run(request["jobs"])
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        leave(code)

serve(batch)
'''


class _Server:
    """The warm process of this test process, started under `env` (`program`: SERVER, or another
    that speaks its protocol: tests/scriptrun.py's)."""

    def __init__(self, env: dict[str, str], program: str = SERVER) -> None:
        self.env = env
        self.log = tempfile.TemporaryFile()  # the server's own stderr: why it died, if it did
        self.proc = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        self.pending = b""
        self.status: int | None = None  # the last request's fork's wait status, where it ended on its own

    def serves(self, env: dict[str, str]) -> bool:
        return self.proc.poll() is None and same_env(self.env, env)

    def run(self, request: dict, timeout: float) -> bool:
        """Runs the request in a fork and waits for it: False where it ran past `timeout` (the
        fork is killed; a server still importing by then is killed too)."""
        deadline = time.monotonic() + timeout
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            pid = self.line(deadline)
            if pid is None:  # still importing: this server is replaced at the next call
                self.proc.kill()
                self.proc.wait()
                return False
            self.status = None
            status = self.line(deadline) if pid else ""
            if status is None:
                os.kill(int(pid), signal.SIGKILL)
                self.line(None)  # its wait status: the server waits for the next request
                return False
            self.status = int(status) if status else None
            return True
        except BaseException:
            self.close()  # interrupted mid-request: its answer would be read as the next one's
            raise

    def line(self, deadline: float | None) -> str | None:
        """The server's next line ('' once it has died), or None past `deadline`."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([fd], [], [], left)[0]):
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def died(self) -> str:
        """The server's stderr, where it has exited (or been killed)."""
        if self.proc.poll() is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        self.proc.kill()  # its fork, if any, dies with it
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.log.close()


_server: _Server | None = None


def same_env(a: dict[str, str], b: dict[str, str]) -> bool:
    """Alike but for the variable pytest sets to the running test."""
    return {**a, "PYTEST_CURRENT_TEST": ""} == {**b, "PYTEST_CURRENT_TEST": ""}


def _warm(env: dict[str, str]) -> _Server:
    """This process's server, started anew where it died or was started under another environment."""
    global _server
    if _server is None or not _server.serves(env):
        if _server is not None:
            _server.close()
        _server = _Server(env)
    return _server


@atexit.register
def _stop() -> None:
    if _server is not None:
        _server.close()


def run_ops(jobs: list[tuple[str | Path, str, dict[str, int]]], timeout: float = 300) -> list[dict]:
    """{'ok', 'max_abs', 'why', 'strides'} per (reference path, candidate source, knobs), one
    fork of the warm server ('strides' where the outputs were compared). Raises
    subprocess.TimeoutExpired past `timeout`, as a process of its own did."""
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for i, (reference, source, knobs) in enumerate(jobs):
            cand = Path(tmp) / f"candidate_{i}.py"
            cand.write_text(source)
            args.append([str(reference), str(cand), knobs])
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        server = _warm(env)
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"jobs": args, "env": env, "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
        finished = server.run(request, timeout)
        stdout, stderr = (p.read_text(errors="replace") if p.exists() else "" for p in (out, err))
        stderr += server.died()
    if not finished:
        raise subprocess.TimeoutExpired("oprun's fork", timeout, stdout, stderr)
    results = [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]
    failed = {"ok": False, "max_abs": None, "why": (stderr or stdout)[-3000:]}
    return results + [failed] * (len(jobs) - len(results))


def run_op(reference: str | Path, candidate_source: str, knobs: dict[str, int]) -> dict:
    return run_ops([(reference, candidate_source, knobs)])[0]


def small_knobs(knobs: dict[str, int]) -> dict[str, int]:
    """Knobs >= 8 scaled to small, mostly odd sizes the interpreter runs in a second."""
    return {k: min(v, (2 + 3 * v.bit_length()) | 1) for k, v in knobs.items() if v >= 8}
