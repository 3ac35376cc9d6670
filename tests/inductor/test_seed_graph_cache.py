"""The seed's compiles and Inductor's graph cache: while capturing, every graph is generated (a
graph served from the cache shows the capture no code), yet saved, so that torch.compile of the
same graph later (the sweep's torch.compile baseline) is served what the seed compiled. Real
Inductor compiles on the CPU (C++), in a cache directory of the test's own."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # Inductor compiles, twice
@pytest.mark.timeout(600)
def test_graphs_compiled_while_capturing_are_generated_and_saved_for_a_later_compile(tmp_path, monkeypatch):
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import graph as inductor_graph
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    from okgit.inductor.capture import _generated_afresh

    # Inductor's CPU ISA probes (a C++ build each, cached per process and in the cache directory)
    # are not what is tested: made in the usual directory, not rebuilt in the test's own (7-8 s).
    pick_vec_isa()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    generated: list[int] = []
    original = inductor_graph.GraphLowering.codegen

    def codegen(self, *args, **kwargs):
        generated.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(inductor_graph.GraphLowering, "codegen", codegen)

    def op(x):
        return torch.relu(x) * 3 - 1

    x = torch.randn(64)

    def compile_once() -> tuple[int, int, int]:
        """(hits, misses, graphs generated) of one fresh torch.compile of `op`."""
        torch._dynamo.reset()
        before = (counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"], len(generated))
        with torch.no_grad():
            assert torch.equal(torch.compile(op)(x), op(x))
        return (counters["inductor"]["fxgraph_cache_hit"] - before[0],
                counters["inductor"]["fxgraph_cache_miss"] - before[1], len(generated) - before[2])

    with _generated_afresh(torch):
        assert compile_once() == (0, 1, 1)
        assert compile_once() == (0, 1, 1)  # in the cache now, and generated again all the same
    assert compile_once() == (1, 0, 0)  # outside: served what the capture compiled, nothing generated
