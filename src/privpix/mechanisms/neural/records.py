"""Tabular records as the obfuscator's feature vectors (Jamshidi et al. 2023, UCI Adult).

The paper one-hot encodes the categorical columns, min–max normalises the numeric ones, and removes the
utility (income) and private (gender) columns: 102 features for Adult after rows with missing values are
dropped. The encoding (column list and ranges) is fitted once on the training records and stored in the
model file, so every data provider maps its records onto the same 102 columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from privpix.data.imageset import RecordSet
from privpix.errors import ParameterError

if TYPE_CHECKING:  # pandas (0.4 s to import) only where records are handled
    pass


def fit_record_encoding(records: RecordSet, private: str) -> dict:
    """Column names and per-column [lo, hi] for :func:`encode_records`, JSON-serialisable."""
    if private not in records.frame.columns:
        raise ParameterError(f"private column {private!r} is not in the records ({list(records.frame.columns)})")
    x, cols = records.one_hot(drop=[private])
    return {
        "columns": cols,
        "lo": x.min(0).tolist(),
        "hi": x.max(0).tolist(),
        "private": private,
        "label_column": records.label_column,
    }


def encode_records(records: RecordSet, encoding: dict) -> np.ndarray:
    """(n, len(columns)) float32 in [0, 1]. Categories the encoding never saw map to all-zero one-hot groups;
    numeric values outside the fitted range are clipped."""
    missing = [c for c in (encoding["label_column"], encoding["private"]) if c not in records.frame.columns]
    if missing:
        raise ParameterError(f"records lack the column(s) {missing} the model was trained with")
    df = records.frame.drop(columns=[encoding["label_column"], encoding["private"]])
    import pandas as pd

    x = pd.get_dummies(df, dtype=np.float32).reindex(columns=encoding["columns"], fill_value=0.0)
    x = x.to_numpy(dtype=np.float32)
    if np.isnan(x).any():
        raise ParameterError("records have missing numeric values; drop or impute them first")
    lo, hi = np.asarray(encoding["lo"], np.float32), np.asarray(encoding["hi"], np.float32)
    return np.clip((x - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)
