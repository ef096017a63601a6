from __future__ import annotations

import gc

from nodes.wire.collector import SERVING_THRESHOLDS, tune_for_serving


def test_it_sets_the_serving_thresholds() -> None:
    before = gc.get_threshold()
    try:
        tune_for_serving()
        assert gc.get_threshold() == SERVING_THRESHOLDS
    finally:
        gc.set_threshold(*before)
