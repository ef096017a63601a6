"""Parsing in a worker process: the same data and the same errors as in this one, and a worker
that dies is replaced."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.config import ConfigError
from edge.config.parse_worker import ParseWorker
from edge.config.yaml_source import parse_yaml

EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "edge.provider-pool.yaml"


@pytest.fixture(scope="module")
def worker() -> Iterator[ParseWorker]:
    parse_worker = ParseWorker()
    yield parse_worker
    parse_worker.close()


def test_it_parses_what_this_process_parses(worker: ParseWorker) -> None:
    text = EXAMPLE.read_text()

    assert worker.parse(text) == parse_yaml(text)


def test_it_raises_the_same_config_error(worker: ParseWorker) -> None:
    text = "version: 1\nedge: {id: a}\nversion: 1\n"
    with pytest.raises(ConfigError) as here:
        parse_yaml(text)

    with pytest.raises(ConfigError) as there:
        worker.parse(text)

    assert there.value.issues == here.value.issues
    assert str(there.value) == str(here.value)


def test_a_worker_that_dies_is_replaced(worker: ParseWorker) -> None:
    assert worker.parse("a: 1\n") == {"a": 1}
    executor = worker._executor()
    [process] = executor._processes.values()  # the one worker, to kill from outside
    os.kill(process.pid, signal.SIGKILL)
    process.join()

    assert worker.parse("b: 2\n") == {"b": 2}  # this one in this process, as the pool broke
    assert worker.parse("c: 3\n") == {"c": 3}  # and a new worker after it
    assert worker._executor() is not executor
