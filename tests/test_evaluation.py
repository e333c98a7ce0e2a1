import numpy as np
import pytest

from privpix.data import load_dataset
from privpix.errors import ParameterError
from privpix.evaluation import entropy, evaluate, pca_svm_scores, psnr, ssim
from privpix.evaluation.runner import ROW_KEYS


def test_quality_metrics_on_known_inputs():
    rng = np.random.default_rng(0)
    x = rng.random((3, 16, 16, 1))
    assert np.all(np.isinf(psnr(x, x)))
    assert np.allclose(ssim(x, x), 1.0)
    y = np.clip(x + 0.1, 0, 1)
    assert np.all(psnr(x, y) < 25) and np.all(ssim(x, y) < 1)
    # 8-bit uniform levels: entropy exactly 8 bits; a constant image: 0 bits.
    levels = (np.arange(256) / 255.0).reshape(1, 16, 16, 1)
    assert entropy(levels)[0] == pytest.approx(8.0)
    assert entropy(np.zeros((1, 4, 4, 1)))[0] == 0.0
    with pytest.raises(ParameterError, match="same shape"):
        psnr(x, x[:2])


def test_pca_svm_learns_digits():
    d = load_dataset("digits")
    tr, te = d.split_halves()
    s = pca_svm_scores(tr.flat(), tr.labels, te.flat(), te.labels, n_components=30)
    assert s.accuracy > 0.9 and s.f1 > 0.9 and s.recall > 0.9


def test_evaluate_rows_and_monotone_utility():
    tr, te = load_dataset("digits:train"), load_dataset("digits:test")
    rows = evaluate(tr, te, ["pixel-laplace[sensitivity=bound,unit=pixel]", "gaussian-blur"], [0.05, 50.0])
    assert len(rows) == 3
    assert all(ROW_KEYS <= set(r) for r in rows)
    lo, hi, blur = rows
    assert lo["accuracy"] < hi["accuracy"] and hi["accuracy"] > 0.85
    assert blur["epsilon"] is None and blur["guarantee"]["model"] == "none"
    again = evaluate(tr, te, ["pixel-laplace[sensitivity=bound,unit=pixel]"], [0.05])
    assert again[0]["accuracy"] == lo["accuracy"]  # same seed, same row
