"""Python as easy as the command line: a folder loads by its path, a printed image set names no file (face file
names are people's names), the ledger's figures are properties, an audit result reads as text, and tables print
"—" where a number is missing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

import privpix
from privpix.data import ImageSet, load_dataset
from privpix.errors import DataError, ParameterError
from privpix.mechanisms import get_mechanism
from privpix.privacy.accounting import PrivacyLedger, Spend
from privpix.privacy.guarantees import Guarantee
from privpix.report.summaries import num, verdict_text

PEOPLE = ["Woody_Allen_0004", "Ada_Lovelace_0001", "Alan_Turing_0002"]


def _faces(root, people=PEOPLE):
    for i, person in enumerate(people):
        for cls in ("female", "male"):
            (root / cls).mkdir(parents=True, exist_ok=True)
            value = 30 * i + 100 * (cls == "male")  # distinct pixels: a copy would be passed over
            Image.fromarray(np.full((6, 5, 3), value, np.uint8)).save(root / cls / f"{person}.jpg")
    return root


def test_load_dataset_takes_a_folder_and_its_repr_names_no_file(tmp_path):
    root = _faces(tmp_path / "faces")
    for spec in (root, str(root), f"{root}/"):
        data = load_dataset(spec)
        assert isinstance(data, ImageSet) and len(data) == 6 and data.shape == (6, 5, 3)
        assert data.class_names == ("female", "male") and sorted(set(data.labels.tolist())) == [0, 1]
        assert data.source == "the input folder"
        shown = repr(data) + str(data)
        assert not any(person in shown for person in PEOPLE) and str(tmp_path) not in shown
        assert "6 images of 6x5x3" in shown and "2 classes" in shown
    assert len(load_dataset(root, pick=lambda n: np.arange(2))) == 2


def test_a_path_that_does_not_exist_names_itself_and_a_dataset_name_still_wins(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="no-such-folder"):
        load_dataset(tmp_path / "no-such-folder")
    with pytest.raises(DataError, match="neither a dataset name"):
        load_dataset("./no-such-folder/")
    with pytest.raises(ParameterError, match="unknown name"):
        load_dataset("no-such-dataset")
    monkeypatch.chdir(tmp_path)
    _faces(tmp_path / "builtin-mnist")  # a folder named like a dataset: the name means the dataset
    assert load_dataset("builtin-mnist").shape == (28, 28, 1)
    assert load_dataset("./builtin-mnist").shape == (6, 5, 3)


def test_a_record_set_prints_no_row():
    import pandas as pd

    from privpix.data import RecordSet

    rs = RecordSet(pd.DataFrame({"name": ["Ada Lovelace", "Alan Turing"], "income": [">50K", "<=50K"]}), "income")
    assert "Ada" not in repr(rs) and repr(rs) == "RecordSet(2 records, 2 columns, label 'income')"


def test_the_ledger_figures_are_properties():
    book = PrivacyLedger(2.0)
    book.spend(Guarantee(model="central-dp", epsilon=0.5, per_image_epsilon=0.5, sound=True), "a", status="charged")
    assert isinstance(book.spent, Spend) and book.spent.epsilon == pytest.approx(0.5)
    assert book.spent_epsilon == book.spent.epsilon and book.remaining_epsilon == pytest.approx(1.5)


def test_an_audit_result_reads_as_text_and_a_claim_out_of_reach_is_not_called_consistent():
    images = ImageSet(np.random.default_rng(0).integers(0, 256, (6, 4, 4, 1), dtype=np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    res = privpix.audit(mech, images, trials=200, seed=0)
    text = res.text()
    assert text.startswith("pixel-laplace: ε = 1, for ") and "audited ε ≥ " in text and "verdict: " in text
    assert "200 trials per side" in text and "nan" not in text
    # Far above what 200 trials can show: the verdict says so, never "consistent".
    loose = privpix.audit(get_mechanism("pixel-laplace", epsilon=50.0, sensitivity="bound", unit="image"), images,
                          trials=200, seed=0)  # fmt: skip
    assert not loose.refutable and loose.verdict == "consistent"
    assert "verdict: not refutable with 200 trials" in loose.text() and "consistent" not in loose.text()
    record = {"verdict": "consistent", "refutable": False, "trials": 400, "perfect_distinguisher": True}
    assert verdict_text(record).startswith("not refutable with 400 trials") and "consistent" not in verdict_text(record)


def test_a_missing_number_prints_as_a_dash():
    assert num(math.nan) == "—" and num(None) == "—" and num(0.81234) == "0.812" and num(math.inf) == "∞"


def test_evaluate_is_exported_at_the_top():
    from privpix.evaluation.grid import evaluate

    assert privpix.evaluate is evaluate and "evaluate" in privpix.__all__


def test_errors_raised_to_python_name_python_arguments_and_the_cli_its_options(tmp_path, run):
    images = ImageSet(np.random.default_rng(0).integers(0, 256, (4, 4, 4, 1), dtype=np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    privpix.release(mech, images, tmp_path / "out", seed=0)
    with pytest.raises(ParameterError, match=r"^output .*: holds an earlier release; pass force=True to replace it"):
        privpix.release(mech, images, tmp_path / "out", seed=1)
    folder = tmp_path / "in"
    folder.mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(folder / "a.png")
    r = run("release", "--input", folder, "--method", "pixel-laplace", "--param", "sensitivity=bound", "--param",
            "unit=image", "--epsilon", "1", "--output", tmp_path / "out")  # fmt: skip
    assert r.exit_code == 2 and "--output" in r.output and "pass --force to replace it" in r.output
