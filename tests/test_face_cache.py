"""The cache on disk of the named data sets' faces (privpix.data.face_cache): the same pixels as a fresh read, a
changed file or a torn entry read again, nothing written when it is off or for a user's own folder."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from privpix.data import face_cache, load_folder, loaders
from privpix.data.files import read_image
from privpix.data.resize import resize


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(face_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(loaders, "RESIZED_CACHE_BYTES", 0)  # no copy kept in the process: every read asks the disk
    return tmp_path / "cache"


def _face(path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (60, 50, 3), dtype=np.uint8)).save(path, quality=90)


def _entries(folder) -> list:
    return sorted(folder.rglob("*.npy")) if folder.exists() else []


def test_a_cached_face_is_the_fresh_read_and_is_read_from_disk_the_second_time(cache, tmp_path, monkeypatch):
    path = tmp_path / "a.jpg"
    _face(path, 0)
    fresh = resize(read_image(path, "RGB")[2:50, 5:45], (16, 12), work=np.float64)
    first = loaders.read_resized(path, (16, 12), (2, 50, 5, 45))
    assert np.array_equal(first, fresh) and first.dtype == np.uint8
    assert len(_entries(cache)) == 1

    def no_decoding(*_a, **_k):
        raise AssertionError("decoded again although the cache holds the face")

    monkeypatch.setattr(loaders, "read_image", no_decoding)
    assert np.array_equal(loaders.read_resized(path, (16, 12), (2, 50, 5, 45)), fresh)
    with pytest.raises(AssertionError, match="decoded again"):  # another size or crop is another entry
        loaders.read_resized(path, (16, 12))


def test_a_changed_file_and_a_torn_entry_are_read_again(cache, tmp_path):
    path = tmp_path / "a.jpg"
    _face(path, 0)
    old = loaders.read_resized(path, (8, 8))
    _face(path, 1)
    os.utime(path, ns=(1, 1))  # a new modification time as well as new bytes
    new = loaders.read_resized(path, (8, 8))
    assert np.array_equal(new, resize(read_image(path, "RGB"), (8, 8), work=np.float64))
    assert not np.array_equal(new, old)
    entries = _entries(cache)
    assert len(entries) == 2
    for entry in entries:  # torn by a crash mid-write (the rename makes that unlikely, not impossible on every disk)
        entry.write_bytes(entry.read_bytes()[:100])
    assert np.array_equal(loaders.read_resized(path, (8, 8)), new)
    assert any(e.stat().st_size > 100 for e in _entries(cache))  # replaced by a whole one


def test_off_unless_set_and_never_for_a_users_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(face_cache.CACHE_ENV, raising=False)
    monkeypatch.setattr(loaders, "RESIZED_CACHE_BYTES", 0)
    assert face_cache.cache_dir() is None
    path = tmp_path / "a.jpg"
    _face(path, 0)
    loaders.read_resized(path, (8, 8))
    assert _entries(tmp_path) == []

    monkeypatch.setenv(face_cache.CACHE_ENV, str(tmp_path / "cache"))
    (tmp_path / "mine" / "x").mkdir(parents=True)
    _face(tmp_path / "mine" / "x" / "b.jpg", 2)
    assert len(load_folder(tmp_path / "mine", size=(8, 8))) == 1
    assert _entries(tmp_path / "cache") == []


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv(face_cache.CACHE_ENV, str(blocker))
    monkeypatch.setattr(loaders, "RESIZED_CACHE_BYTES", 0)
    path = tmp_path / "a.jpg"
    _face(path, 0)
    assert np.array_equal(loaders.read_resized(path, (8, 8)), resize(read_image(path, "RGB"), (8, 8), work=np.float64))
