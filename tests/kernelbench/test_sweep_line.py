"""The sweep's line on a shared GPU (okgit.kernelbench.admission.Admission.take, sweep._run_all):
a device with room takes the first problem in line that fits, not only the first of all; the
first in line is waited for once it has been passed over for RESERVE_S; resumed problems, then
the largest, go first."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from okgit.eval.parent.device_pool import DevicePool
from okgit.eval.parent.memory import GiB
from okgit.kernelbench import admission, sweep
from okgit.kernelbench.reader import find_problems
from okgit.kernelbench.runs import slug
from okgit.kernelbench.scoring import ProblemResult

FIXTURE = Path(__file__).resolve().parents[1] / "kb_fixture"


def test_a_device_with_room_takes_the_first_problem_that_fits_and_the_first_of_all_when_idle():
    adm = admission.Admission({"cuda:0": 100 * GiB}, {}.get)
    adm.line_up([("big", 90 * GiB), ("huge", 200 * GiB), ("small", 5 * GiB), ("tiny", 1 * GiB)])
    stop = threading.Event()
    assert adm.take("cuda:0", stop)[0] == "big"  # idle: the first in line
    # 10 GiB left: "huge" cannot run beside it, "small" can
    assert adm.take("cuda:0", stop)[0] == "small"
    assert adm.take("cuda:0", stop)[0] == "tiny"
    assert adm.running["cuda:0"] == {"big": 90 * GiB, "small": 5 * GiB, "tiny": 1 * GiB}
    for key in ("big", "small", "tiny"):
        adm.leave(key, "cuda:0")
    assert adm.take("cuda:0", stop)[0] == "huge"  # alone: too large to share, not too large to run
    assert adm.take("cuda:0", stop) is None  # the line is empty


def test_the_first_in_line_passed_over_for_long_is_waited_for(monkeypatch):
    monkeypatch.setattr(admission, "RESERVE_S", 0.3)
    footprints: dict[str, int] = {}
    adm = admission.Admission({"cuda:0": 100 * GiB}, footprints.get)
    adm.line_up([("running", 60 * GiB), ("big", 50 * GiB), ("s1", 5 * GiB), ("s2", 5 * GiB)])
    stop = threading.Event()
    assert adm.take("cuda:0", stop)[0] == "running"
    assert adm.take("cuda:0", stop)[0] == "s1"  # "big" does not fit yet: passed over
    time.sleep(0.35)
    got: list = []
    t = threading.Thread(target=lambda: got.append(adm.take("cuda:0", stop)))
    t.start()
    time.sleep(0.3)
    assert not got  # s2 would fit, but "big" has waited long enough: nothing passes it now
    footprints["running"] = 30 * GiB  # its reference prepared: it holds less than estimated
    t.join(5)
    assert got and got[0][0] == "big" and got[0][1] >= 0.2
    stop.set()
    adm.leave("s1", "cuda:0")
    assert adm.take("cuda:0", stop)[0] == "s2"  # it fits: taken even with `stop` set
    footprints["running"] = 95 * GiB
    adm.line_up([("late", 10 * GiB)])
    assert adm.take("cuda:0", stop) is None  # no room and stopped: not taken


class _Recorded(sweep._Sweep):
    """The sweep's scheduling as it is, each problem's okgit run replaced by a record of it."""

    order: list[str]

    def _run(self, problem, slot):
        self.order.append(problem.key)
        return ProblemResult(key=problem.key, level=problem.level, id=problem.id, name=problem.name,
                             status="optimized", device=slot.name)


def test_on_a_gpu_resumed_problems_start_first_then_the_largest(tmp_path, monkeypatch):
    problems = find_problems(FIXTURE, None, None)
    sizes = {p.key: (i + 1) * GiB for i, p in enumerate(problems)}  # the last the largest
    monkeypatch.setattr(sweep, "estimate", lambda path, model=False: sizes[next(p.key for p in problems if p.path == path)])
    resumed = problems[1]
    (tmp_path / "in_flight").mkdir()
    (tmp_path / "in_flight" / f"{slug(resumed)}.json").write_text("{}")
    adm = admission.Admission({"cpu:0": 100 * GiB}, {}.get)
    s = _Recorded({}, tmp_path, 60.0, None, True, False, {}, 1, None, lambda line: None, admission=adm)
    s.order = []
    done: dict = {}
    sweep._run_all(DevicePool(["cpu:0"]), s, problems, done, tmp_path, lambda line: None)
    expected = [resumed.key] + sorted((p.key for p in problems if p is not resumed), key=lambda k: -sizes[k])
    assert s.order == expected and sorted(done) == sorted(p.key for p in problems)
    assert adm.running["cpu:0"] == {}  # each left the device when it ended


def test_a_problem_that_ran_alone_is_not_run_again_for_its_own_out_of_memory(tmp_path, monkeypatch):
    """Only company makes an out-of-memory failure no verdict: a problem too large to share the
    device ran alone, and running it again alone would repeat the same minutes (the sweep did,
    and threw away a finished run when its time limit came during the repeat)."""
    problems = find_problems(FIXTURE, None, None)
    big = problems[0]
    sizes = {p.key: (95 if p is big else 10) * GiB for p in problems}
    monkeypatch.setattr(sweep, "estimate", lambda path, model=False: sizes[next(p.key for p in problems if p.path == path)])

    class OutOfMemory(_Recorded):
        def _run(self, problem, slot):
            self.order.append(problem.key)
            time.sleep(0.2)  # the others, which fit together, overlap one another
            return ProblemResult(key=problem.key, level=problem.level, id=problem.id, name=problem.name,
                                 status="error", device=slot.name, error="torch.OutOfMemoryError: CUDA out of memory")

    adm = admission.Admission({"cpu:0": 100 * GiB}, {}.get)
    s = OutOfMemory({}, tmp_path, 60.0, None, True, False, {}, 1, None, lambda line: None, admission=adm)
    s.order = []
    reran = sweep._run_all(DevicePool(["cpu:0"], slots=3), s, problems, {}, tmp_path, lambda line: None)
    assert s.order[0] == big.key and not adm.had_company(big.key)
    assert big.key not in reran and s.order.count(big.key) == 1
    others = [p.key for p in problems if p is not big]
    assert all(adm.had_company(k) for k in others) and sorted(reran) == sorted(others)


def test_a_whole_model_counts_at_its_estimate_however_small_its_modules_footprints():
    """A campaign's ledger says what its extracted modules hold; its whole model, verified and
    timed last, holds more: counted at no less than its estimate, so no second one joins it."""
    footprints = {"level3/big_model": 10 * GiB, "level1/op": 10 * GiB}
    adm = admission.Admission({"cuda:0": 100 * GiB}, footprints.get, floored={"level3/big_model"})
    adm.line_up([("level3/big_model", 70 * GiB), ("level1/op", 70 * GiB), ("level1/late", 40 * GiB)])
    stop = threading.Event()
    assert adm.take("cuda:0", stop)[0] == "level3/big_model"
    assert adm.used("cuda:0") == 70 * GiB  # not its modules' 10
    stop.set()
    assert adm.take("cuda:0", stop) is None  # 30 GiB of room: neither fits
    adm.leave("level3/big_model", "cuda:0")
    assert adm.take("cuda:0", stop)[0] == "level1/op"
    assert adm.used("cuda:0") == 10 * GiB  # an op is counted at its footprint once it has one
    assert adm.take("cuda:0", stop)[0] == "level1/late"


def test_a_whole_models_estimate_counts_the_activations_its_forward_makes(tmp_path):
    """Ten 1 GiB activations from a 4 MiB input: the op's estimate sees only the input and the
    output, the model's every tensor the forward makes (on the meta device, nothing allocated)."""
    path = tmp_path / "deep.py"
    path.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x.repeat(256, 1)\n"
        "        for _ in range(9):\n"
        "            y = torch.relu(y)\n"
        "        return y.sum()\n\n\n"
        "def get_inputs():\n    return [torch.randn(1024, 1024)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    op, model = admission.estimate(path), admission.estimate(path, model=True)
    base = admission.CONTEXTS * admission.CUDA_CONTEXT
    assert op - base < 64 * 2**20  # the input (4 MiB) and a scalar, times ESTIMATE_FACTOR
    assert model - op >= admission.ACTIVATION_FACTOR * 10 * GiB
