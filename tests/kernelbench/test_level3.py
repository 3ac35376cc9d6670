"""A whole model's end-to-end figures: the campaign's own timing of eager, torch.compile and the
patched model, how it reads with its noise, and the level-3 table of a sweep (pure)."""

from __future__ import annotations

from okgit.campaign.result import EndToEnd
from okgit.kernelbench.models import _end_to_end
from okgit.kernelbench.scoring import ProblemResult, SweepReport, summarize

TIMED = EndToEnd(model="m.py", ok=True, status="optimized", reason="", swapped=["conv1+bn1+relu"], modules_swapped=3,
                 device="cuda:0", state="unchanged", eager_us=100.0, compile_us=80.0, patched_us=70.0,
                 arm_noise={"eager": 0.01, "compile": 0.2, "okgit": 0.005})


def test_the_patched_model_against_eager_and_torch_compile_says_when_a_speedup_is_within_the_noise() -> None:
    assert TIMED.speedup_against("eager") == (100 / 70, False)
    assert TIMED.speedup_against("compile") == (80 / 70, True)  # 1.14x with 20.5% of noise on the two arms
    text = TIMED.against()
    assert "state dict unchanged" in text and "1.43x eager" in text and "1.14x torch.compile (within the noise)" in text
    cpu = EndToEnd(model="m.py", ok=True, status="unverified", reason="", swapped=["fc"], device="cpu", state="unchanged",
                   untimed="no GPU: timing is not claimed")
    assert cpu.speedup_against("eager") is None
    assert cpu.against() == "state dict unchanged; no GPU: timing is not claimed"


def test_a_level3_sweep_takes_the_campaign_s_figures_and_tables_each_whole_model() -> None:
    fields = _end_to_end(TIMED.model_dump(mode="json"))
    assert fields["okgit_us"] == 70.0 and fields["speedup_eager"] == 100 / 70 and fields["noise"]["compile"] == 0.2
    assert _end_to_end({"untimed": "no GPU: timing is not claimed"}) == {"untimed_reason": "no GPU: timing is not claimed"}
    rows = [ProblemResult(key="level3/8_Block", level=3, id=8, name="Block", status="optimized", correct=True,
                          modules_swapped=3, wall_s=300.0, **fields),
            ProblemResult(key="level3/9_Other", level=3, id=9, name="Other", status="fallback", modules_swapped=0,
                          eager_us=50.0, compile_us=40.0, wall_s=90.0)]
    md = SweepReport(dir="/kb", out="/out", device="cuda", problems=rows, summary=summarize(rows)).markdown()
    assert "| level3/8_Block | optimized | 100.0 | 80.0 | 70.0 | 1.43x | 1.14x | 1.0%/20.0%/0.5% | 3 | 5.0 |" in md
    assert "| level3/9_Other | fallback | 50.0 | 40.0 | - | - | - | -/-/- | 0 | 1.5 |" in md
    assert "| torch.compile | 50% | 50% | 0% | 0% | 1.14x over 1 |" in md
