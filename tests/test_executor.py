"""The executor: same results on every backend and any number of workers; clear errors; exact reductions."""

from __future__ import annotations

import numpy as np
import pytest

from privpix.errors import ParameterError
from privpix.executor import Executor, LocalExecutor, default_workers, make_executor, tree_reduce


def _square_sum(task: tuple[int, int]) -> int:
    """A picklable task: sum of squares over [a, b)."""
    a, b = task
    return int(sum(i * i for i in range(a, b)))


def _fails(task: int) -> int:
    if task == 3:
        raise ValueError("task 3 failed")
    return task


TASKS = [(i * 100, (i + 1) * 100) for i in range(9)]
EXPECTED = {i: _square_sum(t) for i, t in enumerate(TASKS)}


def test_inline_and_local_processes_give_the_same_results():
    with make_executor("local", 1) as one:
        assert type(one) is Executor and one.workers == 1
        assert dict(one.map_unordered(_square_sum, TASKS)) == EXPECTED
    with make_executor("local", 2) as two:
        assert isinstance(two, LocalExecutor) and two.workers == 2
        assert dict(two.map_unordered(_square_sum, TASKS)) == EXPECTED


@pytest.mark.integration
def test_dask_local_cluster_gives_the_same_results():
    pytest.importorskip("distributed")
    with make_executor("dask", 2) as ex:
        assert ex.workers == 2 and "Dask" in ex.describe()
        assert dict(ex.map_unordered(_square_sum, TASKS)) == EXPECTED


def test_a_failing_task_raises_its_error():
    with make_executor("local", 2) as ex, pytest.raises(ValueError, match="task 3 failed"):
        list(ex.map_unordered(_fails, list(range(8))))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "spark"}, "--engine"),
        ({"workers": 0}, "--workers"),
        ({"scheduler": "tcp://x:1"}, "--scheduler needs --engine dask"),
    ],
)
def test_bad_settings_name_the_option(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        make_executor(**kwargs)


@pytest.mark.integration
@pytest.mark.slow
def test_unreachable_scheduler_is_a_clear_error(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("privpix.executor.CONNECT_TIMEOUT", "2s")
    with pytest.raises(ParameterError, match=r"--scheduler tcp://127\.0\.0\.1:9"):
        make_executor("dask", scheduler="tcp://127.0.0.1:9")


def test_default_workers_is_every_core():
    import os

    assert default_workers() == len(os.sched_getaffinity(0))


def test_tree_reduce_of_integer_sums_does_not_depend_on_the_split():
    rng = np.random.default_rng(0)
    rows = rng.integers(-(2**40), 2**40, size=(1000, 7))
    whole = rows.sum(axis=0)
    for parts in (1, 2, 3, 7, 1000):
        chunks = [c.sum(axis=0) for c in np.array_split(rows, parts)]
        assert np.array_equal(tree_reduce(chunks, np.add), whole)
    with pytest.raises(ParameterError, match="nothing to reduce"):
        tree_reduce([], np.add)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "params"), [("dp-merf", {"n_features": 2000}), ("dp-hp", {"order": 4})])
@pytest.mark.parametrize("secure", [False, True])
def test_a_synthesizer_fit_on_workers_releases_the_same_embedding(digits, method, params, secure):
    """The private embedding's chunk sums computed by 2 worker processes, added in chunk order: the same noisy
    embedding, bit for bit, as one process computes (float sums and exact fixed-point sums alike)."""
    pytest.importorskip("torch")
    from privpix.executor import using
    from privpix.mechanisms import get_mechanism

    data = digits.subset(np.arange(2600))
    common = {"epochs": 1, "batch_size": 50, "width": 8, "channels": 4, "secure": secure, **params}

    def embedding(ex):
        mech = get_mechanism(method, epsilon=1.0, delta=1e-5, **common)
        with using(ex):
            mech.fit(data, seed=3)
        return mech.embedding_

    with make_executor("local", 1) as one, make_executor("local", 2) as two:
        assert np.array_equal(embedding(one), embedding(two))
