"""A model's fusable chains and the swap that puts kernels in place (okgit.campaign.chains,
okgit.campaign.swapin, okgit.campaign.extract), and the profile's noise rule
(okgit.campaign.profile): in-process, on small torch models on the CPU."""

from __future__ import annotations

from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from okgit.campaign import chains, extract, swapin  # noqa: E402
from okgit.campaign.profile import ProfileRow, middle_half, ranked_past_noise, within_noise  # noqa: E402

KINDS = {"conv1": "Conv2d", "bn1": "BatchNorm2d", "relu": "ReLU", "conv2": "Conv2d", "bn2": "BatchNorm2d",
         "fc": "Linear", "act": "GELU", "norm": "LayerNorm"}


def test_a_chain_is_a_producer_then_its_norm_and_or_activation_each_on_the_one_before_s_output() -> None:
    # A residual block: conv1 bn1 relu | conv2 bn2 | (add) relu; then a Linear whose output goes elsewhere first.
    order = [("conv1", False), ("bn1", True), ("relu", True), ("conv2", True), ("bn2", True), ("relu", False),
             ("fc", False), ("norm", False), ("act", True)]
    assert chains.find(order, KINDS) == [["conv1", "bn1", "relu"], ["conv2", "bn2"]]
    # a producer called twice, once without its activation after it: never a chain
    twice = [("fc", False), ("act", True), ("fc", False), ("norm", False)]
    assert chains.find(twice, KINDS) == []
    # an activation then a norm is not a chain's order; nor is a lone producer
    assert chains.find([("fc", False), ("act", True), ("norm", True)], KINDS) == [["fc", "act"]]


class Block(nn.Module):
    """conv1 -> bn1 -> relu -> conv2 -> bn2 -> (+ x) -> relu, the ReLU module shared (ResNet's way)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


@pytest.fixture(autouse=True)
def no_flop_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's FLOP counter costs seconds at its first use and plays no part here."""
    from okgit.campaign import probe

    monkeypatch.setattr(probe, "_cost", lambda torch, leaf, call: (None, None))


def _infos(model: nn.Module, paths: list[str], x) -> dict[str, dict]:
    """The probe's records of these leaves, as okgit.campaign.probe makes them (constructor
    arguments read back, first-call inputs)."""
    from okgit.campaign.probe import _leaf_info

    calls: dict[str, dict] = {}
    def record(path: str):
        def hook(module, args, out) -> None:
            calls.setdefault(path, {"args": [t.clone() for t in args], "kwargs": [], "out": out.clone()})
        return hook

    hooks = [model.get_submodule(p).register_forward_hook(record(p)) for p in paths]
    with torch.no_grad():
        model(x.clone())
    for h in hooks:
        h.remove()
    return {p: _leaf_info(torch, p, model.get_submodule(p), calls[p], "cpu") for p in paths}


def _kernels(groups: list[extract.Group], seen: list[str]) -> dict[str, ModuleType]:
    """Each group's op file as its kernel, its forward counted in `seen` (the swap really calls it)."""
    kernels = {}
    for g in groups:
        module = ModuleType(g.slug)
        exec(compile(extract.op_source(g, "block.py"), g.slug, "exec"), module.__dict__)
        forward = module.Model.forward

        def counted(self, *args, forward=forward, slug=g.slug):
            seen.append(slug)
            return forward(self, *args)

        module.Model.forward = counted
        kernels[g.slug] = module
    return kernels


def test_the_swap_runs_each_chain_s_kernel_and_keeps_outputs_state_and_the_shared_activation() -> None:
    torch.manual_seed(0)
    model, x = Block(), torch.randn(2, 4, 8, 8)
    leaves = _infos(model, ["conv1", "bn1", "relu", "conv2", "bn2"], x)
    assert all(info["refused"] is None for info in leaves.values()), leaves
    groups = [extract.Group(paths=[paths], infos=[leaves[p] for p in paths]) for paths in (["conv1", "bn1", "relu"], ["conv2", "bn2"])]
    seen: list[str] = []
    kernels = _kernels(groups, seen)
    plain, fast = Block(), Block()
    fast.load_state_dict(model.state_dict())
    plain.load_state_dict(model.state_dict())
    before = {k: v.clone() for k, v in fast.state_dict().items()}
    assert swapin.install(fast, [s for g in groups for s in g.sites()], kernels.__getitem__) == ["conv1+bn1+relu", "conv2+bn2"]
    assert {k: v.shape for k, v in fast.state_dict().items()} == {k: v.shape for k, v in before.items()}
    with torch.no_grad():
        for train in (True, False):  # the evaluator's sequence: training mode (running stats move), then eval
            plain.train(train)
            fast.train(train)
            want, got = plain(x.clone()), fast(x.clone())
            assert torch.equal(got, want), (train, (got - want).abs().max())
    assert seen == ["conv1_bn1_relu", "conv2_bn2"] * 2  # each kernel once per call
    assert all(torch.equal(fast.state_dict()[k], plain.state_dict()[k]) for k in before)  # the same running stats
    # the shared ReLU still applies after the residual add: only the chain's own output passes through
    assert (fast(x.clone()) >= 0).all() and (fast(x.clone()) > 0).any()


def test_a_kernel_that_does_not_hold_the_modules_is_refused_by_the_swap() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    kernel = ModuleType("k")
    exec("import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, *a):\n        super().__init__()\n"
         "        self.w = nn.Linear(4, 4)\n", kernel.__dict__)
    site = ("k", [4, 4, True], [("0", "Linear", {"weight": [4, 4], "bias": [4]})])
    with pytest.raises(RuntimeError, match="does not hold the modules"):
        swapin.install(model, [site], lambda name: kernel)
    other = ("k", [4, 4, True], [("0", "Linear", {"weight": [8, 4], "bias": [8]})])  # other shapes: left as it is
    assert swapin.install(model, [other], lambda name: kernel) == [] and "forward" not in model[0].__dict__


class Residual(nn.Module):
    """The Linear's output is read twice: fusing its activation in would change the sum."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.GELU()

    def forward(self, x):
        y = self.fc(x)
        return self.act(y) + y


def test_the_probe_refuses_a_chain_whose_first_output_is_read_elsewhere() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    for model, refused in ((Residual(), True), (nn.Sequential(nn.Linear(8, 8), nn.GELU()), False)):
        paths = ["fc", "act"] if refused else ["0", "1"]
        found = chains.check(torch, model, [x], [paths], _infos(model, paths, x), "m.py")
        assert (found[0]["refused"] is not None) == refused, found
        if refused:
            assert "changes the model's outputs" in found[0]["refused"]


def _row(name: str, samples: list[float]) -> ProfileRow:
    low, high, spread = middle_half(samples)
    return ProfileRow(kind="module", name=name, time_us=sorted(samples)[len(samples) // 2], samples_us=samples,
                      low_us=low, high_us=high, spread=spread, share=0.0, calls=1)


def test_the_profile_says_which_neighbours_are_ordered_within_the_noise() -> None:
    low, high, spread = middle_half([10.0, 10.0, 11.0, 12.0, 30.0])
    assert (low, high) == (10.0, 12.0) and spread == pytest.approx(2 / 11)
    rows = [_row("a", [100, 101, 102, 99, 100]), _row("b", [50, 60, 70, 55, 65]), _row("c", [58, 40, 57, 50, 44]),
            _row("d", [5, 5, 6, 5, 5])]
    assert not within_noise(rows[0], rows[1]) and within_noise(rows[1], rows[2]) and not within_noise(rows[2], rows[3])
    assert ranked_past_noise(rows) == 1  # a, then b and c in either order
    assert ranked_past_noise([rows[0], rows[3]]) == 2
