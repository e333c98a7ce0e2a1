"""records.csv is pandas' ``to_csv`` byte for byte, written faster (privpix.publishing.records_csv)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from privpix.publishing.records_csv import records_csv


def _pandas(frame: pd.DataFrame, fmt: str) -> bytes:
    return frame.to_csv(index=False, float_format=fmt).encode()


def _awkward(n: int = 2000) -> pd.DataFrame:
    """Every kind of column a release or a records set holds, with the values that are spelled apart: missing
    values, infinities, -0.0 beside 0.0 (one value to np.unique, "-0" and "0" to %), repeated levels, float32,
    integers past 2^32, and strings that need quotes."""
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "noise": rng.random(n),
        "large": rng.normal(size=n) * 1e8,
        "tiny_missing": np.where(rng.random(n) < 0.1, np.nan, rng.random(n) * 1e-9),
        "int": rng.integers(-5, 5, n),
        "flag": rng.random(n) < 0.5,
        "levels": np.array([np.inf, -np.inf, -0.0, 0.0, 1.0] * (n // 5)),
        "float32": rng.random(n).astype(np.float32),
        "quoted": pd.Series(rng.choice(["x", "y,z", 'q"t', "line\nbreak", ""], n), dtype=object),
        "label": pd.Series(rng.choice([">50K", "<=50K"], n)),
        "big": rng.integers(0, 2**40, n, dtype=np.uint64),
        "levels_missing": np.where(rng.random(n) < 0.5, np.nan, np.round(rng.random(n), 1)),
    })  # fmt: skip


@pytest.mark.parametrize("fmt", ["%.6g", "%.3f", "%g", "%.2f,"])
@pytest.mark.parametrize(
    "columns",
    [None, ["noise", "levels", "levels_missing"], ["quoted"], ["tiny_missing"], ["label", "int", "flag", "big"]],
)
def test_awkward_columns_are_written_as_pandas_writes_them(fmt, columns):
    frame = _awkward() if columns is None else _awkward()[columns]
    assert records_csv(frame, fmt) == _pandas(frame, fmt)


def test_a_records_set_and_a_release_like_table(data_dir):
    from privpix.data import load_dataset

    adult = load_dataset("adult:test", data_dir).frame  # strings and integers, as read
    assert records_csv(adult) == _pandas(adult, "%.6g")
    # A release's shape: 100 float32 columns in [0, 1], most clipped to a bound, and the label.
    rng = np.random.default_rng(1)
    values = np.clip(rng.normal(0.5, 1.0, (3000, 100)), 0, 1).astype(np.float32)
    table = pd.DataFrame(values, columns=[f"c{j}" for j in range(100)]).assign(income=adult["income"][:3000])
    assert records_csv(table) == _pandas(table, "%.6g")


def test_other_column_types_are_left_to_pandas():
    frame = pd.DataFrame({"when": pd.date_range("2026-01-01", periods=3), "kind": pd.Categorical(["a", "b", "a"])})
    assert records_csv(frame) == _pandas(frame, "%.6g")
    numbered = pd.DataFrame({0: [1.5, 2.0], 1: [3, 4]})  # labels that are not strings
    assert records_csv(numbered) == _pandas(numbered, "%.6g")
    assert records_csv(pd.DataFrame()) == _pandas(pd.DataFrame(), "%.6g")
    # pandas' nullable and sparse columns: a missing Int64 reads as NaN in to_numpy(), but pandas writes the
    # integers as integers, not through the float format.
    nullable = pd.DataFrame({
        "count": pd.array([1234567, None], dtype="Int64"),
        "share": pd.array([1.5, None], dtype="Float64"),
        "flag": pd.array([True, None], dtype="boolean"),
        "sparse": pd.arrays.SparseArray([0.0, 1.0]),
        "x": [0.5, 1.0],
    })  # fmt: skip
    for fmt in ("%.6g", "%.3f"):
        assert records_csv(nullable, fmt) == _pandas(nullable, fmt)
    # A format that is not one float conversion: %s spells a float32 value as pandas does, not as its widening.
    single = pd.DataFrame({"a": np.array([0.1, 0.2], np.float32), "b": [1, 2]})
    for fmt in ("%s", "%r", "%.6g"):
        assert records_csv(single, fmt) == _pandas(single, fmt)


@given(
    hnp.arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 4)), elements=st.floats(allow_nan=True)),
    st.sampled_from(["%.6g", "%.17g", "%e"]),
)
def test_any_floats_are_written_as_pandas_writes_them(values, fmt):
    frame = pd.DataFrame(values, columns=[f"v{j}" for j in range(values.shape[1])])
    assert records_csv(frame, fmt) == _pandas(frame, fmt)
