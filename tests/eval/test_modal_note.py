"""The Modal client says what takes minutes through its `on_note` (the CLI's progress), and
prints nothing itself: only the CLI and the progress printer print (docs/internals.md).

Modal's app is replaced at its one network step (`app.run()`): everything before it, the
settings, the image and the function's name, is the client's own code.
"""

from __future__ import annotations

import contextlib
import sys

import pytest

from okgit.config import Config
from okgit.eval.modal import client as om
from okgit.eval.registry import make_evaluator


class _App:
    """Stands for modal.App where it would reach the network: `run()` starts nothing."""

    def run(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


@pytest.mark.slow  # about 8 s: the image and the function name are built twice (okgit's source hashed)
@pytest.mark.skipif(sys.version_info < (3, 11), reason="--eval modal needs Python 3.11 or newer")
def test_the_app_start_is_a_note_not_a_print(tmp_path, monkeypatch, capsys):
    pytest.importorskip("modal")
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.setenv("OKGIT_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(om.ModalEvaluator, "_deployed", lambda self: None)
    real_build_app = om.build_app
    monkeypatch.setattr(om, "build_app", lambda *a, **kw: (_App(), real_build_app(*a, **kw)[1]))
    notes: list[str] = []
    for _ in range(2):  # the first start builds the image; the second finds its stamp
        evaluator = make_evaluator(Config(eval="modal", modal_gpu="T4"), on_note=notes.append)
        evaluator._function()
        evaluator.close()
    assert notes == ["starting a Modal app on T4 (the first run builds the image, shown below: minutes)",
                     "starting a Modal app on T4"]
    out, err = capsys.readouterr()
    assert "starting a Modal app" not in out + err
