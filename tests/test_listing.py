"""`privpix mechanisms` leads with the recommended methods, groups the rest by what they are for, and gives every
parameter's help; the grouping is declared by each mechanism (its ``about``), never guessed from its name."""

from __future__ import annotations

import json

import pytest

from privpix.mechanisms import MECHANISMS
from privpix.mechanisms.base import USES, About


def test_the_listing_leads_with_the_recommended_methods_grouped_by_use(run):
    r = run("mechanisms", "--json")
    assert r.exit_code == 0, r.output
    items = json.loads(r.output)
    assert [it["name"] for it in items] and {it["name"] for it in items} == set(MECHANISMS)
    recommended = [it for it in items if it["recommended_for"]]
    assert recommended and items[: len(recommended)] == recommended  # first, all of them
    assert {"dp-eigenfaces", "dp-teacher"} <= {it["name"] for it in recommended}
    rest = [list(USES).index(it["use"]) for it in items[len(recommended) :]]
    assert rest == sorted(rest)  # then one group per use, in the declared order
    for it in items:
        assert all(p["help"] for p in it["parameters"]), it["name"]
        assert it["output"] == MECHANISMS[it["name"]].output, it["name"]
    outputs = {it["name"]: it["output"] for it in items}
    assert outputs["ae-obfuscator"] == "images" and outputs["ae-obfuscator-records"] == "records"
    assert "issue " not in r.output.lower() and "paper 00" not in r.output
    table = run("mechanisms").output
    assert table.index("recommended") < table.index("dp-eigenfaces") < table.index("gaussian-blur")


def test_a_use_outside_the_declared_ones_is_refused():
    with pytest.raises(ValueError, match="use must be one of"):
        About(use="faces")
