"""Sharded releases: the same pixels for any number of workers, backend or shard size; resumable after a real
kill; duplicates released once across shards; a ledger charged once; every format loads."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privpix.data.formats.release_layout import SHARDS, STAGING_PREFIX
from privpix.data.generated import GeneratedSource
from privpix.executor import make_executor
from privpix.mechanisms import get_mechanism
from privpix.privacy.accounting import PrivacyLedger
from privpix.publishing.release import read_manifest, verify_manifest
from privpix.publishing.shard_worker import ATTEMPTS, DELAY_ENV
from privpix.publishing.shards import (
    ShardedRelease,
    block_order,
    block_size,
    read_plan,
    shard_size,
)

PIXEL = ["--method", "pixel-laplace", "--epsilon", "1", "--param", "sensitivity=bound", "--param", "unit=pixel"]
# Per-image ε = 1: a ledger can be charged for it.
WHOLE_IMAGE = ["--method", "pixel-laplace", "--epsilon", "1", "--param", "sensitivity=bound", "--param", "unit=image"]


def _mech():
    return get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="pixel").fit(None)


def _pixels(folder: Path) -> Counter:
    """The released images as a multiset of pixel digests (names are opaque and differ from run to run)."""
    m = read_manifest(folder)
    assert m is not None
    out: Counter = Counter()
    for f in m["files"]:
        if f["name"].endswith(".png"):
            out[np.asarray(Image.open(folder / f["name"])).tobytes()] += 1
    return out


def _write_pngs(folder: Path, images: np.ndarray, classes: int = 2) -> None:
    for i, img in enumerate(images):
        d = folder / f"c{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(d / f"{i:04d}.png")


@pytest.mark.integration
def test_block_and_shard_sizes_follow_the_image_size_not_the_workers():
    assert block_size(None, (28, 28, 1)) == 256
    assert block_size(None, (4000, 3000, 3)) == 1  # a 12 MP photo: one per block
    assert block_size(50, (28, 28, 1)) == 50  # a mechanism's own batch wins
    s = shard_size(100_000, 256, (28, 28, 1), workers=2)
    assert shard_size(10**6, 256, (28, 28, 1), workers=2) == 65_536  # at most 65,536 images: 16 shards
    assert shard_size(4 * 10**5, 256, (28, 28, 1), workers=2) == 50_176  # four shards per worker
    # Tiny images: the images cap, not the values cap (a record holds a few Python objects per image).
    assert shard_size(10**7, 256, (8, 8, 3), workers=2) == 65_536
    assert s % 256 == 0 and -(-100_000 // s) == 5  # shards of at least 16 M values, whole blocks
    assert shard_size(10_000, 256, (28, 28, 1), workers=2) == 21_504  # small releases: one shard, no processes
    assert shard_size(4559, 256, (218, 178, 3), workers=2) == 768  # CelebA photos: six shards


@pytest.mark.integration
@pytest.mark.slow
def test_same_seed_same_pixels_whatever_the_workers_backend_or_shards(tmp_path):
    src = GeneratedSource(700, (16, 16, 3), seed=1)
    results = []
    # Both shard sizes run on one pool of 2 local workers: starting a second pool would test nothing more.
    for engine, workers, shards in [("local", 1, (None,)), ("local", 2, (256, 512)), ("dask", 2, (256,))]:
        if engine == "dask":
            pytest.importorskip("distributed")
        with make_executor(engine, workers) as ex:
            for shard in shards:
                out = tmp_path / f"{engine}-{workers}-{shard}"
                job = ShardedRelease(_mech(), src, src.shape, seed=7, shard=shard, input_id=src.description)
                m = job.run(out, ex, expect=_mech().privacy(src.shape).guarantee)
                assert m["images"] == 700 and not verify_manifest(out)
                results.append(_pixels(out))
    assert len(results) == 4
    assert all(r == results[0] for r in results[1:])
    # And a different seed gives different noise.
    job = ShardedRelease(_mech(), src, src.shape, seed=8, input_id=src.description)
    with make_executor("local", 1) as ex:
        job.run(tmp_path / "other", ex, expect=_mech().privacy(src.shape).guarantee)
    assert _pixels(tmp_path / "other") != results[0]


@pytest.mark.integration
@pytest.mark.slow
def test_a_release_runs_on_a_tls_secured_cluster_and_a_client_without_certificates_is_told(tmp_path, run):
    """A LocalCluster whose scheduler and workers speak only TLS (distributed.security.Security,
    self-signed certificates), reached by `privpix release --engine dask --scheduler tls://...` with the
    certificates given through Dask's own configuration variables, as docs/scale.md shows. The pixels are those of
    a local run with the same seed; a client without the certificates gets one line naming what to set."""
    pytest.importorskip("distributed")
    pytest.importorskip("cryptography")  # Security.temporary() makes the certificates
    from distributed import LocalCluster
    from distributed.security import Security

    images = np.random.default_rng(3).integers(0, 256, size=(40, 12, 10, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    sec = Security.temporary()
    certs = {"CA_FILE": sec.tls_ca_file, "CLIENT__CERT": sec.tls_client_cert, "CLIENT__KEY": sec.tls_client_key}
    env = dict(os.environ)
    for key, pem in certs.items():
        path = tmp_path / f"{key.lower()}.pem"
        path.write_text(pem)
        env[f"DASK_DISTRIBUTED__COMM__TLS__{key}"] = str(path)
    env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] = "True"
    release = [sys.executable, "-m", "privpix", "release", "--input", str(tmp_path / "in"), *PIXEL, "--seed", "5"]
    # The local run is only the reference pixels: in this process (the commands below are the processes under test).
    local = run(*release[3:], "--output", tmp_path / "local", "--workers", 1, "-q")
    assert local.exit_code == 0, local.output
    # One worker: TLS between client, scheduler and worker is the subject; many workers give the same pixels
    # (test_same_seed_same_pixels_whatever_the_workers_backend_or_shards).
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls://", security=sec,
                      dashboard_address=None, silence_logs=40) as cluster:  # fmt: skip
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        cmd = [*release, "--engine", "dask", "--scheduler", address]
        r = subprocess.run([*cmd, "--output", str(tmp_path / "tls"), "-q"], env=env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        bare = subprocess.run([*cmd, "--output", str(tmp_path / "bare"), "-q"], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    assert _pixels(tmp_path / "tls") == _pixels(tmp_path / "local") and not verify_manifest(tmp_path / "tls")
    assert bare.returncode != 0 and not (tmp_path / "bare").exists()
    assert "TLS-secured cluster" in bare.stderr and "DASK_DISTRIBUTED__COMM__TLS__CA_FILE" in bare.stderr
    assert "internal error" not in bare.stderr and len(bare.stderr.strip().splitlines()) <= 2, bare.stderr


def test_cli_imagefolder_release_loads_with_hugging_face(tmp_path, run):
    datasets = pytest.importorskip("datasets")
    images = np.random.default_rng(0).integers(0, 256, size=(30, 12, 10, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images, classes=3)
    out = tmp_path / "out"
    r = run("release", "--input", tmp_path / "in", *PIXEL, "--seed", "0", "--output", out, "--labels", "-q")
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert (
        m["format"] == "imagefolder" and m["images"] == 30 and "not covered by the guarantee" in m["labels_published"]
    )
    names = [f["name"] for f in m["files"]]
    assert "metadata.jsonl" in names and all(n.split("/")[0] in {"c0", "c1", "c2"} for n in names if n.endswith(".png"))
    ds = datasets.load_dataset("imagefolder", data_dir=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(ds) == 30
    assert Counter(ds.features["label"].int2str(v) if hasattr(ds.features["label"], "int2str") else v
                   for v in ds["label"]) == Counter({"c0": 10, "c1": 10, "c2": 10})  # fmt: skip


def test_labels_are_dropped_unless_asked(tmp_path, run):
    images = np.random.default_rng(1).integers(0, 256, size=(8, 6, 6, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    out = tmp_path / "out"
    assert run("release", "--input", tmp_path / "in", *PIXEL, "--output", out, "-q").exit_code == 0
    m = read_manifest(out)
    assert "labels_published" not in m
    assert all("/" not in f["name"] for f in m["files"])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "webdataset"])
def test_cli_shard_formats_round_trip_as_input(tmp_path, run, fmt):
    images = np.random.default_rng(2).integers(0, 256, size=(20, 8, 8, 1), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images[..., 0])
    out = tmp_path / "out"
    # One worker: the shards are the same files whoever writes them, and no processes need starting.
    r = run("release", "--input", tmp_path / "in", *PIXEL, "--seed", "3", "--format", fmt, "--labels",
            "--shard-size", "8", "--block-size", "4", "--workers", "1", "--output", out, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m["format"] == fmt and m["images"] == 20 and m["shards"] == 3 and not verify_manifest(out)
    # The release is itself an input: a second release reads the shards back.
    again = tmp_path / "again"
    r = run("release", "--input", out, *PIXEL, "--seed", "3", "--output", again, "-q")
    assert r.exit_code == 0, r.output
    assert read_manifest(again)["images"] == 20


def _with_pixel_copies(folder: Path, images: np.ndarray, copies: dict[int, int]) -> Path:
    """``images`` as 00.png, 01.png, ... in ``folder``, image ``i`` of ``copies`` replaced by a copy of image
    ``copies[i]`` saved as BMP: other bytes, the same decoded pixels (the folder scan does not catch it by bytes)."""
    folder.mkdir()
    for i in range(len(images)):
        Image.fromarray(images[copies.get(i, i)]).save(folder / f"{i:02d}.{'bmp' if i in copies else 'png'}")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("shard", ["4", "6"])
def test_every_copy_of_an_earlier_shards_image_is_skipped(tmp_path, run, shard):
    """Copies at positions 1, 8 and 9 (two in a later shard): one image out, whatever the shard size."""
    images = np.random.default_rng(6).integers(0, 256, size=(12, 5, 5, 3), dtype=np.uint8)
    folder = _with_pixel_copies(tmp_path / "in", images, {8: 1, 9: 1})
    out = tmp_path / "out"
    r = run("release", "--input", folder, *PIXEL, "--seed", "1", "--shard-size", shard, "--block-size", "2",
            "--output", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["images"] == 10 and "08.bmp" in r.output and "09.bmp" in r.output


def _shard_positions(source_map: Path) -> dict[str, set[int]]:
    """Shard file → input positions of the images it holds, from a --source-map (sources named 0000.png ...)."""
    out: dict[str, set[int]] = {}
    for row in csv.DictReader(source_map.open(encoding="utf-8")):
        out.setdefault(row["released_name"].split("#")[0], set()).add(int(Path(row["source"]).stem))
    return out


def test_a_shard_tells_nothing_of_input_positions(tmp_path, run):
    """Shards hold blocks drawn by a keyed permutation, not contiguous input ranges; each block
    (here two consecutive images) stays whole; another run draws another permutation. 24 blocks in 6 shards of 4:
    a contiguous layout, or two equal layouts, by chance has probability 6!·4!⁶/24! ≈ 2e-13 (the key is random)."""
    images = np.random.default_rng(6).integers(0, 256, size=(48, 6, 6, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images, classes=1)
    layouts = []
    for k in range(2):
        smap = tmp_path / f"map{k}.csv"
        out = tmp_path / f"o{k}"
        # The layout is the plan's, whoever runs the shards: one worker, no processes to start.
        r = run("release", "--input", tmp_path / "in", *PIXEL, "--seed", "1", "--format", "parquet", "--shard-size",
                "8", "--block-size", "2", "--workers", "1", "--source-map", smap, "--output", out)  # fmt: skip
        assert r.exit_code == 0, r.output
        shards = _shard_positions(smap)
        assert len(shards) == 6 and sorted(p for s in shards.values() for p in s) == list(range(48))
        for held in shards.values():
            assert {p // 2 for p in held} == {p // 2 for p in held if p % 2 == 0}  # whole blocks only
        contiguous = all(held == set(range(min(held), min(held) + 8)) for held in shards.values())
        assert not contiguous
        layouts.append(sorted(sorted(h) for h in shards.values()))
    assert layouts[0] != layouts[1]
    assert "secret keyed permutation" in read_manifest(tmp_path / "o0")["shard_order"]


@pytest.mark.slow
def test_duplicates_across_shards_are_released_once(tmp_path, run):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(12, 6, 6, 3), dtype=np.uint8)
    folder = _with_pixel_copies(tmp_path / "in", images, {9: 1})  # another shard (shards of 4)
    out = tmp_path / "out"
    r = run("release", "--input", folder, *PIXEL, "--shard-size", "4", "--block-size", "2", "--output", out)
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["images"] == 11
    assert "09.bmp" in r.output and "same pixels" in r.output


def test_pixel_copies_within_one_shard_are_released_once(tmp_path, run):
    """Two files that decode to the same pixels (PNG and BMP: different bytes) in one shard: the later is skipped,
    named with the earlier."""
    images = np.random.default_rng(5).integers(0, 256, size=(6, 6, 6, 3), dtype=np.uint8)
    folder = _with_pixel_copies(tmp_path / "in", images, {4: 2})
    out = tmp_path / "out"
    r = run("release", "--input", folder, *PIXEL, "--seed", "1", "--shard-size", "6", "--output", out)
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["images"] == 5
    assert "04.bmp" in r.output and "same pixels as 02.png" in r.output


def _cli(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "privpix", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        text=True,
    )


def _staged_shards(out: Path) -> int:
    return sum(len(list((p / SHARDS).glob("*.json"))) for p in out.glob(f"{STAGING_PREFIX}*"))


def _kill_mid_release(args: list, out: Path, *, shards: int, delay: float, sig: int = signal.SIGKILL) -> int:
    """Start a real release, slowed by ``delay`` seconds per shard, and send it ``sig`` once ``shards`` are
    finished; returns its exit code."""
    proc = _cli(*args, "-q", env={DELAY_ENV: str(delay)})
    deadline = time.time() + 120
    while _staged_shards(out) < shards and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()  # still running: the signal lands mid-release
    proc.send_signal(sig)
    return proc.wait(timeout=60)


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_is_handled_as_ctrl_c_and_leaves_no_reservation(tmp_path, run):
    """A release stopped by SIGTERM (timeout, a job scheduler): exit 143, nothing published, its reservation
    rolled back (Ctrl-C's semantics), its finished shards kept for --resume, which then charges once."""
    images = np.random.default_rng(11).integers(0, 256, size=(64, 16, 16, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    args = ["release", "--input", tmp_path / "in", *WHOLE_IMAGE, "--seed", "2", "--shard-size", "8", "--block-size",
            "8", "--workers", "1", "--output", out, "--ledger", ledger]  # fmt: skip
    code = _kill_mid_release([*args, "--budget", "3"], out, shards=1, delay=0.3, sig=signal.SIGTERM)
    assert code == 143
    assert not (out / "manifest.json").exists() and _staged_shards(out) >= 1
    assert PrivacyLedger.load(ledger).entries == []
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged"] and book.spent_epsilon == 1.0


@pytest.mark.integration
@pytest.mark.slow
def test_verify_repair_releases_the_reservation_of_a_killed_run_that_published_nothing(tmp_path, run):
    """SIGKILL mid-release keeps the reservation (a killed run may have published); `verify --repair` removes its
    uncommitted staging and releases the reservation, recording why; a release that did commit is never touched."""
    images = np.random.default_rng(12).integers(0, 256, size=(64, 16, 16, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    # Seeded, as the killed command's subject is its reservation, not its sampler (the exact one's compiled kernels
    # are 0.5 of its CPU-s).
    args = ["release", "--input", tmp_path / "in", *WHOLE_IMAGE, "--seed", "3", "--shard-size", "8", "--block-size",
            "8", "--workers", "1", "--ledger", ledger]  # fmt: skip
    assert run(*args, "--output", tmp_path / "done", "--budget", "3").exit_code == 0
    _kill_mid_release([*args, "--output", out], out, shards=1, delay=0.3)
    assert [e.status for e in PrivacyLedger.load(ledger).entries] == ["charged", "reserved"]
    r = run("verify", "--repair", out)
    assert "reservation" in r.output and "released" in r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged", "released"] and book.spent_epsilon == 1.0
    assert "published nothing" in book.entries[1].proof and not list(out.glob(f"{STAGING_PREFIX}*"))
    shown = run("ledger", "show", ledger, "--json")
    assert json.loads(shown.output)["entries"][1]["proof"] == book.entries[1].proof


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_release_resumes_redoing_only_unfinished_shards(tmp_path, run):
    """A real SIGKILL in the middle of a release; --resume finishes it, with the pixels of an uninterrupted run
    and one ledger charge."""
    images = np.random.default_rng(4).integers(0, 256, size=(96, 32, 32, 3), dtype=np.uint8)  # 12 shards of 8
    _write_pngs(tmp_path / "in", images)
    args = [
        "release",
        "--input",
        tmp_path / "in",
        *WHOLE_IMAGE,
        "--seed",
        "5",
        "--shard-size",
        "8",
        "--block-size",
        "4",
        "--workers",
        "1",
    ]
    whole = tmp_path / "whole"
    assert run(*args, "--output", whole, "-q").exit_code == 0
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    charged = [*args, "--output", out, "--ledger", ledger]
    # PRIVPIX_SHARD_DELAY slows each shard so the kill lands mid-release; the run itself is a normal one.
    _kill_mid_release([*charged, "--budget", "3"], out, shards=3, delay=0.2)
    done = _staged_shards(out)
    assert 3 <= done < 12 and read_manifest(out) is None  # nothing published
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["reserved"]
    # The finished shards' files, by inode: a resume that redid them would write new files.
    (stage,) = out.glob(f"{STAGING_PREFIX}*")
    kept = set()
    for path in (stage / SHARDS).glob("*.json"):
        rec = json.loads(path.read_text())
        # Each run writes into a folder of its own: a late worker never touches another's files.
        kept |= {(stage / ATTEMPTS / rec["attempt"] / name).stat().st_ino for name, _ in rec["files"]}
    r = run(*charged, "--resume")
    assert r.exit_code == 0, r.output
    assert f"resuming: {done} of 12 shard(s) were finished; redoing {12 - done}" in r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged"] and book.spent_epsilon == 1.0
    assert not verify_manifest(out)
    assert _pixels(out) == _pixels(whole)
    released = {(out / f["name"]).stat().st_ino for f in read_manifest(out)["files"]}
    assert kept and kept <= released  # moved into the release as they were, not redone


@pytest.mark.integration
def test_a_failed_release_keeps_its_shards_and_resumes_after_the_fix(tmp_path, run):
    """An error in one shard (an image that cannot be decoded) stops the release with its finished shards kept;
    after the file is fixed, --resume redoes only the rest, and the ledger is charged once."""
    images = np.random.default_rng(7).integers(0, 256, size=(24, 8, 8, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images, classes=1)
    bad = sorted((tmp_path / "in" / "c0").glob("*.png"))[-1]
    good = bad.read_bytes()
    bad.write_bytes(good[:60])  # a valid header, a truncated body: passes the scan, fails the decode
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    args = ["release", "--input", tmp_path / "in", *WHOLE_IMAGE, "--seed", "2", "--shard-size", "4",
            "--block-size", "4", "--workers", "1", "--output", out, "--ledger", ledger]  # fmt: skip
    r = run(*args, "--budget", "2")
    assert r.exit_code != 0 and bad.name in r.output and "--resume continues the release" in r.output
    # One worker runs the shards in order and stops at the one holding the bad file (the last block, 5): every
    # shard before it in the plan's keyed order is finished and kept.
    failed_at = int(np.flatnonzero(block_order(read_plan(out)["block_order"], 6) == 5)[0])
    assert read_manifest(out) is None and _staged_shards(out) == failed_at
    assert PrivacyLedger.load(ledger).entries == []  # nothing published, nothing charged
    bad.write_bytes(good)
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    assert f"resuming: {failed_at} of 6 shard(s) were finished; redoing {6 - failed_at}" in r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["charged"] and book.spent_epsilon == 1.0


@pytest.mark.integration
@pytest.mark.slow
def test_a_fresh_run_drops_the_killed_runs_reservation(tmp_path, run):
    """Without --resume, the killed run's unpublished work is removed and its reservation released: one charge."""
    images = np.random.default_rng(8).integers(0, 256, size=(120, 16, 16, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    out, ledger = tmp_path / "out", tmp_path / "ledger.json"
    args = ["release", "--input", tmp_path / "in", *WHOLE_IMAGE, "--seed", "3", "--shard-size", "8", "--block-size",
            "8", "--workers", "1", "--output", out, "--ledger", ledger]  # fmt: skip
    _kill_mid_release([*args, "--budget", "3"], out, shards=1, delay=0.3)
    assert [e.status for e in PrivacyLedger.load(ledger).entries] == ["reserved"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert "reservation" in r.output and "released" in r.output
    book = PrivacyLedger.load(ledger)
    assert [e.status for e in book.entries] == ["released", "charged"] and book.spent_epsilon == 1.0
    assert "published nothing" in book.entries[0].proof


@pytest.mark.integration
@pytest.mark.slow
def test_a_finished_shard_whose_input_changed_is_done_again(tmp_path, run):
    """A file replaced one for one after the kill (same name, other pixels): its finished shard is read again."""
    images = np.random.default_rng(9).integers(0, 256, size=(40, 8, 8, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images, classes=1)
    out = tmp_path / "out"
    args = ["release", "--input", tmp_path / "in", *PIXEL, "--seed", "1", "--shard-size", "8", "--block-size", "8",
            "--workers", "1", "--output", out]  # fmt: skip
    _kill_mid_release([*args], out, shards=2, delay=0.5)
    done = _staged_shards(out)
    # A file of shard 0's block (shards of one block, in the plan's keyed order): shard 0 finished first.
    block = int(block_order(read_plan(out)["block_order"], 5)[0])
    first = sorted((tmp_path / "in" / "c0").glob("*.png"))[8 * block]
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(first)
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    assert f"resuming: {done - 1} of 5 shard(s) were finished; redoing {5 - done + 1}" in r.output


def test_resume_refuses_an_unseeded_fit_on_the_private_images(tmp_path, run):
    r = run("release", "--method", "dp-merf", "--epsilon", "1", "--delta", "1e-5", "--input", tmp_path,
            "--output", tmp_path / "out", "--resume")  # fmt: skip
    assert r.exit_code != 0 and "unseeded fit cannot be repeated" in r.output


@pytest.mark.integration
@pytest.mark.slow
def test_resume_refuses_other_settings_and_nothing_to_resume(tmp_path, run):
    images = np.random.default_rng(5).integers(0, 256, size=(40, 8, 8, 3), dtype=np.uint8)
    _write_pngs(tmp_path / "in", images)
    out = tmp_path / "out"
    args = [
        "release",
        "--input",
        tmp_path / "in",
        *PIXEL,
        "--seed",
        "1",
        "--shard-size",
        "8",
        "--block-size",
        "8",
        "--output",
        out,
    ]
    r = run(*args, "--resume")
    assert r.exit_code != 0 and "holds no interrupted release" in r.output
    _kill_mid_release([*args, "--workers", "1"], out, shards=1, delay=0.5)
    other = list(args)
    other[other.index("--seed") + 1] = "2"
    r = run(*other, "--resume")
    assert r.exit_code != 0 and "other settings (seed)" in r.output
    r = run(*args, "--ledger", tmp_path / "l.json", "--budget", "2", "--resume")
    assert r.exit_code != 0 and "started with no --ledger" in r.output
    # Without --resume, the interrupted work is discarded with a note saying --resume would have kept it.
    r = run(*args)
    assert r.exit_code == 0 and "--resume" in r.output
    assert json.loads((out / "manifest.json").read_text())["images"] == 40


def test_every_block_draws_its_own_noise(tmp_path, run):
    """Six flat grey images, two per block: the noise (released minus original) of no two images is the same. One
    stream for every block (a seed reused across blocks) adds the same noise to the first image of each block."""
    folder = tmp_path / "in"
    folder.mkdir()
    levels = [100 + 12 * i for i in range(6)]
    for i, level in enumerate(levels):
        Image.fromarray(np.full((8, 8), level, np.uint8)).save(folder / f"{i:02d}.png")
    out = tmp_path / "out"
    # ε = 60 per pixel: Laplace noise of scale 255/60 ≈ 4 levels; the mean of 64 pixels tells the 12-level steps apart.
    r = run("release", "--input", folder, "--method", "pixel-laplace", "--epsilon", "60", "--param",
            "sensitivity=bound", "--param", "unit=pixel", "--seed", "3", "--block-size", "2",
            "--output", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    noises = []
    for f in read_manifest(out)["files"]:
        if f["name"].endswith(".png"):
            img = np.asarray(Image.open(out / f["name"]), dtype=int)
            level = min(levels, key=lambda v: abs(v - img.mean()))
            noises.append((img - level).tobytes())
    assert len(noises) == 6 and len(set(noises)) == 6


def test_a_late_worker_of_an_interrupted_run_never_changes_what_a_later_run_publishes(tmp_path, monkeypatch):
    """A worker of an earlier run that is still running (a Dask task cannot be stopped; a killed
    coordinator's pool finishes its shard) writes its shard again while a resumed run commits. With secure noise its
    bytes differ from the recorded ones. It writes into its own run's folder, so the published files are the ones
    recorded and the folder verifies (before, it overwrote them after their record: `privpix verify` failed)."""
    from dataclasses import replace

    from privpix.data import load_dataset
    from privpix.data.inmemory import ImageSetSource
    from privpix.executor import Executor
    from privpix.publishing import shard_worker, shards

    digits = load_dataset("builtin-mnist:test").subset(np.arange(600))
    mech = get_mechanism("pixel-laplace", epsilon=1)
    job = ShardedRelease(mech, ImageSetSource(digits), digits.shape, secure=True, shard=256)
    tasks: list = []
    real_run, real_commit = shards.run_shard, ShardedRelease._commit

    def recording(task):
        tasks.append(task)
        return real_run(task)

    def late_worker_then_commit(self, *args, **kwargs):
        # The late worker has written its files but not yet its record when the commit runs.
        with monkeypatch.context() as m:
            m.setattr(shard_worker, "_write_record", lambda *a, **k: None)
            real_run(replace(tasks[0], attempt="00000000deadbeef"))
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(shards, "run_shard", recording)
    monkeypatch.setattr(ShardedRelease, "_commit", late_worker_then_commit)
    with Executor(1) as ex:
        manifest = job.run(tmp_path / "out", ex, expect=mech.privacy(digits.shape).guarantee)
    assert len(tasks) == 3 and manifest["images"] == len({x.tobytes() for x in digits.images})
    assert verify_manifest(tmp_path / "out") == []


def test_every_released_file_has_one_modification_time(tmp_path):
    """docs/security.md, promise 6: the order files were written in would show the input order, so every file of a
    release gets one modification time. Workers set it (the plan's) before they sync; the commit sets it on its own
    files (metadata.jsonl) and does not touch the workers' again."""
    from privpix.data import load_dataset
    from privpix.data.inmemory import ImageSetSource
    from privpix.executor import Executor

    digits = load_dataset("builtin-mnist:test").subset(np.arange(600))
    mech = get_mechanism("pixel-laplace", epsilon=1)
    job = ShardedRelease(mech, ImageSetSource(digits), digits.shape, seed=0, shard=256, labels=True)
    with Executor(1) as ex:
        manifest = job.run(tmp_path / "out", ex, expect=mech.privacy(digits.shape).guarantee)
    assert manifest["shards"] == 3 and "files" not in manifest and job.files_published == 602
    files = read_manifest(tmp_path / "out")["files"]
    stamps = {(tmp_path / "out" / f["name"]).stat().st_mtime_ns for f in files}
    assert len(stamps) == 1 and any(f["name"] == "metadata.jsonl" for f in files) and len(files) == 602
    assert any(f["name"] == "README.md" for f in files)


def test_a_record_naming_a_file_outside_its_run_is_refused_before_anything_moves(tmp_path):
    """A shard record is read back from disk: a name in it that leaves its run's folder (``../``) is never hashed
    at a resume nor moved at the commit (a review's finding)."""
    from privpix.errors import DataError
    from privpix.publishing.shard_worker import _write_record, read_record
    from privpix.publishing.shards import _adopt
    from privpix.publishing.staging import ReleaseWriter

    victim = tmp_path / "thesis.txt"
    victim.write_text("years of work")
    with ReleaseWriter(tmp_path / "out") as writer:
        stage = writer.stage
        assert stage is not None
        (stage / ATTEMPTS / "ab12").mkdir(parents=True)
        record = {"shard": 0, "attempt": "ab12", "files": [["../../../thesis.txt", "0" * 64]]}
        _write_record(stage, 0, record)
        assert read_record(stage, 0) is None
        with pytest.raises(DataError, match="points outside the release"):
            _adopt(writer, stage, record)
    assert victim.read_text() == "years of work"


def test_shards_are_handed_out_largest_first(tmp_path, monkeypatch):
    """The shard with the last, partial block goes out last, so two workers finish together instead of one
    waiting on a full shard handed out last. The plan's key here puts that block first in
    the keyed block order, so shard 0 holds it: handed out in shard order, it would go first."""
    src = GeneratedSource(700, (16, 16, 3), seed=1)  # blocks of 256, 256 and 188 images, one a shard
    key = next(f"{k:032x}" for k in range(100) if block_order(f"{k:032x}", 3)[0] == 2)
    seen: list[list[tuple[int, ...]]] = []
    real = ShardedRelease._run_tasks

    def recording(executor, tasks, records, on_progress):
        seen.append([t.blocks for t in tasks])
        return real(executor, tasks, records, on_progress)

    monkeypatch.setattr(ShardedRelease, "_run_tasks", staticmethod(recording))
    job = ShardedRelease(_mech(), src, src.shape, seed=7, shard=256, input_id=src.description)
    plan = {**job.plan(1), "block_order": key}
    with make_executor("local", 1) as ex:
        m = job.run(tmp_path / "out", ex, expect=_mech().privacy(src.shape).guarantee, plan=plan)
    assert m["images"] == 700 and len(seen) == 1
    assert sorted(seen[0]) == [(0,), (1,), (2,)] and seen[0][-1] == (2,), seen


def test_later_copies_are_those_a_full_comparison_finds():
    """The copy search across shards compares whole digests only where their first 8 bytes repeat (25 bytes an
    image instead of 120): the same copies as comparing every digest whole, in input order, including a digest that
    shares its first 8 bytes with another by chance (not a copy) and an image present three times."""
    from privpix.publishing.shards import later_copies

    rng = np.random.default_rng(5)
    n, per = 5000, 700
    order = rng.permutation(n)
    records = {}
    for i, a in enumerate(range(0, n, per)):
        pos = np.sort(order[a : a + per]).astype(np.int64)
        records[i] = {"positions": pos, "digests": np.frombuffer(rng.bytes(16 * len(pos)), dtype="S16").copy()}
    records[3]["digests"][5] = records[1]["digests"][7]
    records[6]["digests"][0] = records[1]["digests"][7]  # three times
    records[2]["digests"][9] = records[4]["digests"][2]
    near = bytearray(records[0]["digests"][0])
    near[15] ^= 1
    records[5]["digests"][1] = bytes(near)  # the same first 8 bytes, another image
    seen: dict[bytes, list[tuple[int, int]]] = {}
    for i, r in records.items():
        for p, d in zip(r["positions"].tolist(), r["digests"].tolist(), strict=True):
            seen.setdefault(d, []).append((p, i))
    expected = sorted((i, p) for members in seen.values() for p, i in sorted(members)[1:])
    assert len(expected) == 3 and later_copies(records) == expected
    assert later_copies({}) == []
