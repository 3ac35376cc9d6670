"""How a worker words what a candidate raised (okgit.eval.worker.calls.describe): the exception on
the first line, which the one-line views show (a run's progress line, report.md's table), then the
traceback's last frames for the journal and a model's next attempt."""

from __future__ import annotations

from okgit.eval.worker.calls import describe


def _raises(exc: BaseException) -> BaseException:
    def kernel_launch() -> None:
        raise exc

    try:
        kernel_launch()
    except BaseException as e:  # noqa: BLE001 - the test's own
        return e
    raise AssertionError("did not raise")


def test_the_exception_comes_first_and_the_frames_after_it():
    text = describe(_raises(KeyError("complex64")))
    first, *rest = text.splitlines()
    assert first == "KeyError: 'complex64'"
    assert any("kernel_launch" in line for line in rest) and rest[-1] == "KeyError: 'complex64'"


def test_an_exception_without_words_is_named_alone():
    assert describe(_raises(RuntimeError())).splitlines()[0] == "RuntimeError"
    assert describe(_raises(ValueError("line one\nline two"))).splitlines()[0] == "ValueError: line one"
