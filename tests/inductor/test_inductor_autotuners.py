"""The Inductor seed finds the kernels' chosen launch settings by scanning the live objects for
Inductor's autotuners (okgit.inductor.capture). On the H200 (torch 2.11) dynamo left weak proxies
to dead objects among them, and `isinstance` on one raises ReferenceError: every seed failed."""

from __future__ import annotations

import warnings
import weakref

from okgit.inductor.capture import _autotuners


class _Gone:
    pass


def test_a_dead_weak_proxy_among_the_live_objects_is_skipped() -> None:
    gone = _Gone()
    held = [weakref.proxy(gone)]
    del gone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _autotuners() == []
    assert held  # kept alive until the scan is done
