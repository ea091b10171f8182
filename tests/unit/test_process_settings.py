"""The documented process settings are read and checked: concurrency and the pool sizes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tickwork.sql.db import DatabaseSettings, pool_sizes
from tickwork.worker.settings import WorkerSettings


def test_concurrency_comes_from_the_environment_with_no_fixed_ceiling(monkeypatch):
    monkeypatch.setenv("TICKWORK_CONCURRENCY", "5000")
    assert WorkerSettings().concurrency == 5000


@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_concurrency_below_one_is_refused_in_one_sentence(monkeypatch, value):
    monkeypatch.setenv("TICKWORK_CONCURRENCY", value)
    with pytest.raises(ValidationError) as refused:
        WorkerSettings()
    assert (f"concurrency must be a whole number of at least 1 (got {value})"
            in str(refused.value))


def test_pool_sizes_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("TICKWORK_POOL_MIN_SIZE", "3")
    monkeypatch.setenv("TICKWORK_POOL_MAX_SIZE", "17")
    assert pool_sizes(DatabaseSettings()) == {"min_size": 3, "max_size": 17}


@pytest.mark.parametrize("low, high", [("5", "2"), ("0", "0"), ("-1", "4")])
def test_pool_sizes_that_cannot_work_are_refused(monkeypatch, low, high):
    monkeypatch.setenv("TICKWORK_POOL_MIN_SIZE", low)
    monkeypatch.setenv("TICKWORK_POOL_MAX_SIZE", high)
    with pytest.raises(ValidationError) as refused:
        DatabaseSettings()
    assert "pool sizes must satisfy 0 <= pool_min_size <= pool_max_size" in str(refused.value)
