"""A released table as ``records.csv``: pandas' bytes, written without pandas' per-value formatting machinery.

``frame.to_csv(index=False, float_format="%.6g")`` formats each value through four layers of Python calls (a
formatter, a missing-value test, a lambda and the % itself): 1.7 s for the 16,281 records of Adult's test split
(1.6 M values), most of a records release. :func:`records_csv` formats a column at a time with the same ``%``
(each distinct value once), spells missing values, integers and booleans as pandas does, and joins the fields as
pandas' ``csv`` writer would, so the file is the same byte for byte (``tests/test_records_csv.py`` compares them):
0.25 to 0.8 s for those records. Any other column type (nullable integers, categories, dates, ...), and a
``float_format`` that is not one e, f or g conversion, are left to pandas."""

from __future__ import annotations

import csv
import io
import os
import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# What the csv writer quotes a field for (QUOTE_MINIMAL): the delimiter, the quote character, a line break.
_SPECIAL = re.compile(r'[,"\r\n]')
# One float conversion (e, f or g) in literal text: a float32 value then formats as the float it widens to, as in
# pandas (%s or %r would spell the widened value apart from the float32 one).
_FLOAT_FORMAT = re.compile(r"[^%]*%[-+ #0]*\d*(?:\.\d+)?[eEfFgG][^%]*")


def _column(series: pd.Series, float_format: str) -> tuple[list[str], bool] | None:
    """The column's fields as pandas writes them and whether one may need quotes; None for a type this module
    leaves to pandas."""
    import pandas as pd

    if not isinstance(series.dtype, np.dtype | pd.StringDtype):
        return None  # nullable Int64/Float64/boolean, sparse, categories, dates...: pandas spells them its own way
    values = series.to_numpy()
    kind = values.dtype.kind
    if kind == "f":
        # A release often repeats values (clipped to a bound, a few levels): each distinct one is formatted once.
        distinct, where = np.unique(values, return_inverse=True)
        if 2 * len(distinct) < len(values):
            out = np.array([float_format % v for v in distinct.tolist()], dtype=object)[where.ravel()]
            # unique() takes -0.0 and 0.0 for one value; % writes them apart ("-0" and "0").
            zero = np.flatnonzero(values == 0)
            out[zero] = np.where(np.signbit(values[zero]), float_format % -0.0, float_format % 0.0)
        else:
            out = np.array([float_format % v for v in values.tolist()], dtype=object)
        out[np.isnan(values)] = ""  # pandas' na_rep
        # % turns a float into digits, a sign, a point, an exponent, inf or nan: only the format's own text can
        # hold a character to quote.
        return out.tolist(), bool(_SPECIAL.search(float_format))
    if kind in "iu":
        return [str(v) for v in values.tolist()], False
    if kind == "b":
        return ["True" if v else "False" for v in values.tolist()], False
    if kind == "O":
        text = values.tolist()
        if all(isinstance(v, str) for v in text):
            return text, any(_SPECIAL.search(v) for v in set(text))
    return None


def records_csv(frame: pd.DataFrame, float_format: str = "%.6g") -> bytes:
    """``frame.to_csv(index=False, float_format=float_format).encode()``, the same bytes (UTF-8, pandas' default
    line ending ``os.linesep``, fields quoted only where the CSV needs it)."""
    header = list(frame.columns)
    if not _FLOAT_FORMAT.fullmatch(float_format) or not header or not all(isinstance(n, str) for n in header):
        return frame.to_csv(index=False, float_format=float_format).encode()
    columns = [_column(frame.iloc[:, j], float_format) for j in range(frame.shape[1])]
    if any(c is None for c in columns):
        return frame.to_csv(index=False, float_format=float_format).encode()
    fields = [c[0] for c in columns if c is not None]
    rows = zip(*fields, strict=True)
    quote = any(c[1] for c in columns if c is not None) or any(_SPECIAL.search(name) for name in header)
    if len(fields) > 1 and not quote:
        # Nothing to quote (a one-column row that is an empty field would be written ""): the fields joined are
        # what the writer writes, three times faster.
        return (os.linesep.join([",".join(header), *map(",".join, rows)]) + os.linesep).encode()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=os.linesep, quoting=csv.QUOTE_MINIMAL)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()
