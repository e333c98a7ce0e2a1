import json

import pytest

from privpix.errors import BudgetExceededError, ParameterError
from privpix.privacy.accounting import PrivacyLedger
from privpix.privacy.guarantees import Guarantee

SOUND = Guarantee(model="central-dp", epsilon=1.0, unit="one image", per_image_epsilon=1.0, sound=True)
UNSOUND = Guarantee(model="central-dp", epsilon=1.0, sound=False, caveats=("sensitivity computed from the data",))


def test_json_round_trip_keeps_every_field():
    g = SOUND.with_measured(reid_top1=0.1)
    d = json.loads(g.to_json())
    assert set(d) >= {"model", "epsilon", "delta", "unit", "per_image_epsilon", "sound", "caveats"}
    assert Guarantee.from_dict(d) == g


def test_unsound_text_never_presents_epsilon_as_guarantee():
    assert "NOT DP" in UNSOUND.short()
    assert "noise knob" in UNSOUND.short()
    assert "sound: NO" in UNSOUND.text()
    assert "sensitivity computed from the data" in UNSOUND.text()


def test_sound_needs_epsilon_and_per_image_epsilon():
    with pytest.raises(ParameterError, match="per_image_epsilon"):
        Guarantee(model="central-dp", epsilon=1.0, sound=True)
    with pytest.raises(ParameterError, match="cannot be marked sound"):
        Guarantee(model="empirical", sound=True, epsilon=1.0, per_image_epsilon=1.0)
    with pytest.raises(ParameterError, match="model"):
        Guarantee(model="dp")


def test_ledger_composes_and_refuses_over_budget(tmp_path):
    book = PrivacyLedger(2.5)
    book.spend(SOUND, "a")
    book.spend(SOUND, "b")
    assert book.spent_epsilon == pytest.approx(2.0)
    with pytest.raises(BudgetExceededError, match="remains"):
        book.spend(SOUND, "c")
    assert len(book.entries) == 2  # the refused release recorded nothing
    path = tmp_path / "ledger.json"
    book.save(path)
    again = PrivacyLedger.load(path)
    assert again.spent_epsilon == pytest.approx(2.0)
    assert again.remaining_epsilon == pytest.approx(0.5)


def test_ledger_refuses_unsound_and_empirical():
    book = PrivacyLedger(100.0)
    with pytest.raises(BudgetExceededError, match="only sound DP"):
        book.spend(UNSOUND)
    with pytest.raises(BudgetExceededError):
        book.spend(Guarantee.none("blur"))


def test_ledger_delta_budget():
    g = Guarantee(model="central-dp", epsilon=0.1, delta=1e-6, per_image_epsilon=0.1, sound=True)
    book = PrivacyLedger(10.0, delta_budget=1.5e-6)
    book.spend(g)
    with pytest.raises(BudgetExceededError, match="δ"):
        book.spend(g)


def test_ledger_rejects_bad_budget():
    with pytest.raises(ParameterError, match="epsilon_budget"):
        PrivacyLedger(0.0)
