"""`privpix ledger drop-unpublished L` releases the reservations of killed runs that provably published nothing (their
uncommitted staging, removed, the rule of `privpix verify --repair`), records that proof, and keeps every other
reservation counting, saying why: a fit's, whose model file may exist, above all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privpix.data.formats.release_layout import JOURNAL, PLAN, STAGING_PREFIX
from privpix.privacy.accounting import PrivacyLedger, open_ledger
from privpix.privacy.composition import GaussianNoise, LaplaceNoise
from privpix.privacy.guarantees import Guarantee
from privpix.publishing.ledger import drop_unpublished
from privpix.publishing.staging import FAULT_ENV

ONE = Guarantee(model="central-dp", epsilon=1.0, per_image_epsilon=1.0, sound=True, unit="one whole image")
FIT = Guarantee(model="central-dp", epsilon=1.0, delta=1e-5, per_image_epsilon=1.0, sound=True, unit="one image")


def _killed_release(ledger: Path, out: Path, run: str, *, staging: bool = True) -> int:
    """What a release killed after staging leaves: its reservation, naming its folder, and (``staging``) its owner-only
    staging folder with its plan; nothing committed."""
    with open_ledger(ledger, budget=10.0) as session:
        entry = session.add(ONE, "killed", run=run, events=[LaplaceNoise(1.0)], output=str(out.resolve()))
    if staging:
        stage = out / f"{STAGING_PREFIX}{run[:12]}"
        stage.mkdir(parents=True, mode=0o700)
        (stage / PLAN).write_text(json.dumps({"run": run, "ledger": str(ledger.resolve())}))
        (stage / "noisy.png").write_bytes(b"noise")
    return entry.id


def test_only_reservations_shown_to_have_published_nothing_are_released(tmp_path, run):
    ledger = tmp_path / "ledger.json"
    dropped = _killed_release(ledger, tmp_path / "a", "run-a")
    committed = _killed_release(ledger, tmp_path / "b", "run-b")
    (tmp_path / "b" / JOURNAL).write_text("{}")  # killed after its commit: it may have published
    no_staging = _killed_release(ledger, tmp_path / "c", "run-c", staging=False)
    (tmp_path / "c").mkdir()  # killed before its staging was made, or published and replaced since: no proof
    gone = _killed_release(ledger, tmp_path / "d", "run-d", staging=False)
    with open_ledger(ledger) as session:
        older = session.add(ONE, "an older entry", run="run-e", events=[LaplaceNoise(1.0)])  # no folder recorded
    # A fit killed after writing its model file under the temporary name: its noise may be in that file.
    with open_ledger(ledger) as session:
        fit = session.add(FIT, "killed fit", run="run-f", events=[GaussianNoise(3.7306)], kind="fit")
    (tmp_path / ".privpix-fit-run-f.tmp").write_bytes(b"model")
    assert PrivacyLedger.load(ledger).spent.epsilon == 6.0

    r = run("ledger", "drop-unpublished", ledger)
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    book = PrivacyLedger.load(ledger)
    statuses = {e.id: e.status for e in book.entries}
    assert statuses == {dropped: "released", committed: "reserved", no_staging: "reserved", gone: "reserved",
                        older.id: "reserved", fit.id: "reserved"}  # fmt: skip
    assert "published nothing" in book.entry(dropped).proof and "drop-unpublished" in book.entry(dropped).proof
    assert not list((tmp_path / "a").glob(f"{STAGING_PREFIX}*"))  # the noise is gone with its staging
    assert list((tmp_path / "b").glob(f"{STAGING_PREFIX}*"))  # untouched
    assert book.spent.epsilon == 5.0
    assert f"entry {dropped}: released" in said
    assert f"entry {committed}: kept: " in said and "commit journal" in said
    assert f"entry {no_staging}: kept: " in said and "holds no staging of its run" in said
    assert f"entry {gone}: kept: its folder {tmp_path / 'd'} is gone" in said
    assert f"entry {older.id}: kept: the folder its release was writing is not recorded" in said
    assert f"entry {fit.id}: kept: a fit's reservation is kept: its model file" in said
    assert "ledger charge" in said and "released 1 of 6 reservation(s)" in said
    # Nothing more can be shown: a second pass releases nothing.
    assert not any(d.released for d in drop_unpublished(ledger))


@pytest.mark.integration
@pytest.mark.slow
def test_the_reservation_of_a_release_killed_before_its_commit_is_dropped(tmp_path, run):
    """A real release, SIGKILLed after staging and before its commit (SIGTERM, handled as Ctrl-C, leaves no
    reservation: tests/test_sharded_release.py), keeps its reservation; drop-unpublished releases it, with its
    proof, and a release that committed is never touched."""
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(src / f"{i}.png")
    ledger = tmp_path / "ledger.json"
    args = ["release", "--input", str(src), "--method", "pixel-laplace", "--param", "sensitivity=bound", "--param",
            "unit=image", "--epsilon", "1", "--seed", "1", "--workers", "1", "--ledger", str(ledger), "-q"]  # fmt: skip
    assert run(*args, "--output", tmp_path / "done", "--budget", 4).exit_code == 0
    killed = subprocess.run([sys.executable, "-m", "privpix", *args, "--output", str(tmp_path / "out")],
                            env={**os.environ, FAULT_ENV: "staged"}, capture_output=True, timeout=120)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged", "reserved"] and book.spent.epsilon == 2.0
    r = run("ledger", "drop-unpublished", ledger)
    assert r.exit_code == 0 and "entry 2: released" in r.output, r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged", "released"] and book.spent.epsilon == 1.0
    assert "published nothing" in book.entries[1].proof
    assert not list((tmp_path / "out").glob(f"{STAGING_PREFIX}*")) and not (tmp_path / "out" / "manifest.json").exists()
