"""Every JSON file and ``--json`` output is strict JSON: NaN is ``null``, infinities are ``±1e999``."""

import json
import math

import numpy as np
import pytest

from conftest import strict_loads
from privpix import strict_json


def test_nan_is_null_and_infinities_are_numbers_that_read_back():
    obj = {"nan": math.nan, "np_nan": np.float32("nan"), "inf": math.inf, "list": [np.float64(-np.inf), 1.5],
           "tuple": (np.int64(3), "Infinity"), "nested": {"x": [math.nan]}}  # fmt: skip
    text = strict_json.dumps(obj, indent=1)
    assert "NaN" not in text and "Infinity\n" not in text
    back = strict_loads(text)
    assert back == {"nan": None, "np_nan": None, "inf": math.inf, "list": [-math.inf, 1.5],
                    "tuple": [3, "Infinity"], "nested": {"x": [None]}}  # fmt: skip
    assert '"inf": 1e999' in text and "-1e999" in text


def test_a_string_is_never_rewritten_and_the_token_itself_is_refused():
    text = strict_json.dumps({"s": "1e999", "t": "privpix:+inf"})
    assert strict_loads(text) == {"s": "1e999", "t": "privpix:+inf"}
    with pytest.raises(ValueError, match="token"):
        strict_json.dumps({"s": "\x00privpix:+inf\x00"})


def test_unknown_types_go_through_default_or_fail():
    class Odd:
        def __str__(self):
            return "odd"

    assert strict_loads(strict_json.dumps({"o": Odd()})) == {"o": "odd"}
    assert strict_loads(strict_json.dumps({"o": Odd()}, default=lambda x: math.nan)) == {"o": None}
    with pytest.raises(TypeError, match="Odd"):
        strict_json.dumps({"o": Odd()}, default=None)


def test_nan_fields_restores_only_the_named_fields():
    rec = {"a": None, "b": None, "c": 1.0}
    out = strict_json.nan_fields(rec, ["a", "c"])
    assert math.isnan(out["a"]) and out["b"] is None and out["c"] == 1.0 and rec["a"] is None


def test_cli_outputs_with_missing_numbers_are_strict(run, tmp_path):
    # dp-sgd's audit has no held-out FPR/FNR (NaN in the result): the file must still be JSON.
    path = tmp_path / "audit.json"
    r = run("audit", "--method", "pixel-laplace", "--epsilon", 1, "--trials", 200, "--size", "8x8", "-q",
            "--json", path)  # fmt: skip
    assert r.exit_code == 0, r.output
    out = strict_loads(path.read_text())
    assert out["verdict"] == "violated"
    # A result with NaN fields written by the same path the CLI uses.
    from privpix.evaluation.audit import AuditResult

    fields = {f: 0 for f in AuditResult.__dataclass_fields__}
    fields.update(claimed_epsilon=1.0, sound=True, unit="image", verdict="consistent", pair="p", statistic="s",
                  pairs_tried=[], curve="", curve_assumption="", curve_statistic="", refuted_by="", kind="trials",
                  raw_epsilon_lower=math.nan, max_auditable_epsilon=math.inf)  # fmt: skip
    doc = strict_loads(strict_json.dumps(AuditResult(**fields).to_dict()))
    assert doc["raw_epsilon_lower"] is None and doc["max_auditable_epsilon"] == math.inf
    json.loads(json.dumps(doc))  # plain json agrees
