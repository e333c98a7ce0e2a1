"""Release formats in and out (privpix.data.formats): round trips, byte-for-byte determinism, the outputs read by
Hugging Face ``datasets`` and ``webdataset`` themselves, lazy sources, and errors that name the item."""

import hashlib
import io
import json
import pickle
import struct
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from privpix.data import list_image_files, load_dataset, load_folder
from privpix.data.formats import (
    FORMATS,
    ImageSource,
    Item,
    check_class_names,
    dataset_source,
    finish,
    open_source,
    write_shard,
)
from privpix.errors import DataError, ParameterError

CLASSES = ("bird", "cat", "dog")


def make_items(n, *, c=3, labelled=True, seed=0, h=7, w=5):
    rng = np.random.default_rng(seed)
    return [
        Item(
            key=f"{(i * 0x9E3779B97F4A7C15 + seed) % 2**64:016x}",
            image=rng.integers(0, 256, (h, w, c), dtype=np.uint8),
            label=CLASSES[(i * 7) % 3] if labelled else None,
        )
        for i in range(n)
    ]


def release(fmt, folder, items, n_shards=3, **kw):
    """Write ``items`` as ``n_shards`` shards, last shard first (shards finish in any order), then the index;
    returns every (file, sha256), the rows, and the items in the order the release holds them: by key within
    each shard file, by file name in an ImageFolder (never the order given, which is the sources' order). Adds
    what a real release folder holds besides."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(items) // n_shards)
    parts = [items[s * size : (s + 1) * size] for s in range(n_shards)]
    written = {s: write_shard(fmt, folder, s, n_shards, parts[s], **kw) for s in reversed(range(n_shards))}
    rows = [r for s in range(n_shards) for r in written[s].rows]
    files = [f for s in range(n_shards) for f in written[s].files] + finish(fmt, folder, rows[::-1])
    (folder / "manifest.json").write_text(json.dumps({"privpix_version": "0.1.0", "files": []}))
    (folder / ".privpix-lock").write_text("")
    if fmt == "imagefolder":
        order = sorted(items, key=lambda it: f"{it.label}/{it.key}" if it.label else it.key)
    else:
        order = [it for part in parts for it in sorted(part, key=lambda it: it.key)]
    return files, rows, order


def expected(items):
    return np.stack([it.image for it in items])


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """Hugging Face ``datasets``, offline, with its cache in a temporary folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
        datasets = pytest.importorskip("datasets")
        datasets.disable_progress_bars()
        yield datasets


# ---------------------------------------------------------------------------------------------- round trips

CASES = [
    ("imagefolder", {"labelled": True}, {}),
    ("imagefolder", {"labelled": False, "c": 1}, {}),
    ("parquet", {"labelled": True}, {"class_names": CLASSES}),
    ("parquet", {"labelled": True}, {}),
    ("parquet", {"labelled": False, "c": 1}, {}),
    ("webdataset", {"labelled": True}, {"class_names": CLASSES}),
    ("webdataset", {"labelled": True}, {}),
    ("webdataset", {"labelled": False, "c": 1}, {}),
]


@pytest.mark.parametrize(("fmt", "make", "kw"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_round_trip(tmp_path, fmt, make, kw):
    items = make_items(230, **make)
    files, rows, order = release(fmt, tmp_path / "out", items, **kw)
    assert order != items  # the sources' order is not kept
    for name, sha in files:  # the hash of the bytes on disk
        assert hashlib.sha256((tmp_path / "out" / name).read_bytes()).hexdigest() == sha
    assert len(rows) == len(items) and all(json.loads(json.dumps(r)) == r for r in rows)
    src = open_source(tmp_path / "out")
    assert isinstance(src, ImageSource) and len(src) == len(items)
    assert src.shape == items[0].image.shape and src.skipped == []  # the release's own files are not noise
    got = src.read(0, len(src))
    np.testing.assert_array_equal(got.images, expected(order))  # same pixels, in the release's order
    if make["labelled"]:
        assert [src.class_names[i] for i in got.labels] == [it.label for it in order]
        assert src.class_names == (CLASSES if "class_names" in kw or fmt == "imagefolder" else tuple(sorted(CLASSES)))
    else:
        assert got.labels is None and src.class_names is None
    # Random access by range, and in another process (pickled: small, no pixels).
    part = pickle.loads(pickle.dumps(src)).read(97, 104)
    np.testing.assert_array_equal(part.images, expected(order[97:104]))
    assert list(part.names) == list(got.names[97:104])
    assert len(pickle.dumps(src)) < 20_000
    assert src.read(5, 5).images.shape == (0, *src.shape)


def test_layouts_and_rows(tmp_path):
    items = sorted(make_items(4), key=lambda it: it.key)  # a shard is written in key order
    w = write_shard("imagefolder", tmp_path / "i", 0, 1, items)
    assert w.files[0][0] == f"{items[0].label}/{items[0].key}.png"
    assert w.rows[0] == {"file_name": w.files[0][0], "label": items[0].label}
    w = write_shard("parquet", tmp_path / "p", 3, 12, items)
    assert [f for f, _ in w.files] == ["data/train-00003-of-00012.parquet"]
    assert w.rows[1] == {"file_name": "data/train-00003-of-00012.parquet", "key": items[1].key, "label": items[1].label}
    t = pq.read_table(tmp_path / "p" / w.files[0][0])
    assert t.column_names == ["image", "label", "key"] and t.column("image")[0]["path"].as_py() == f"{items[0].key}.png"
    w = write_shard("webdataset", tmp_path / "w", 3, 12, items, class_names=CLASSES)
    assert [f for f, _ in w.files] == ["shards/shard-000003.tar"]
    with tarfile.open(tmp_path / "w" / w.files[0][0]) as tf:
        members = tf.getmembers()
        assert [m.name for m in members[:3]] == [f"{items[0].key}.{e}" for e in ("png", "cls", "json")]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        assert json.load(tf.extractfile(members[2])) == {"label": items[0].label}
    unlabelled = write_shard("imagefolder", tmp_path / "u", 0, 1, make_items(2, labelled=False))
    assert unlabelled.rows[0] == {"file_name": unlabelled.files[0][0]} and "/" not in unlabelled.files[0][0]
    assert finish("webdataset", tmp_path / "w", w.rows) == finish("parquet", tmp_path / "p", []) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_items_same_bytes(tmp_path, fmt):
    items = make_items(120)
    kw = {} if fmt == "imagefolder" else {"class_names": CLASSES}
    a, _, _ = release(fmt, tmp_path / "a", items, n_shards=2, **kw)
    b, _, _ = release(fmt, tmp_path / "b", items[::-1][60:] + items[::-1][:60], n_shards=2, **kw)
    assert a == b  # the same items in another order: the same bytes
    # A shard redone after a crash (a half-written file left behind) overwrites it with the same bytes.
    name = a[0][0]
    (tmp_path / "a" / name).write_bytes(b"half a file")
    again = write_shard(fmt, tmp_path / "a", 0, 2, items[:60], **kw)
    assert again.files[0] == a[0]


def test_png_carries_nothing_but_pixels(tmp_path):
    w = write_shard("imagefolder", tmp_path, 0, 1, make_items(1), compress_level=9)
    data = (tmp_path / w.files[0][0]).read_bytes()
    chunks, pos = [], 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunks.append(kind.decode())
        pos += 12 + n
    assert chunks == ["IHDR", "IDAT", "IEND"]


# ------------------------------------------------------------------------------------------ read by others


def test_hf_imagefolder_loads_images_and_labels(tmp_path, hf):
    items = make_items(40)
    _, _, items = release("imagefolder", tmp_path / "out", items)
    # What a committed release also holds: HF ignores hidden files and manifest.json (not an image, not metadata).
    (tmp_path / "out" / ".privpix-staging-x").mkdir()
    (tmp_path / "out" / ".privpix-staging-x" / "0123.png").write_bytes(b"not read")
    ds = hf.load_dataset("imagefolder", data_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"))
    assert list(ds) == ["train"] and len(ds["train"]) == len(items)
    train = ds["train"]
    assert train["label"] == [it.label for it in items]  # metadata.jsonl order and labels
    for i in (0, 17, 39):
        np.testing.assert_array_equal(np.asarray(train[i]["image"]), items[i].image)


def test_hf_imagefolder_grey_unlabelled(tmp_path, hf):
    items = make_items(6, c=1, labelled=False)
    _, _, items = release("imagefolder", tmp_path / "out", items, n_shards=2)
    train = hf.load_dataset("imagefolder", data_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "c"))["train"]
    assert list(train.features) == ["image"]
    assert train[3]["image"].mode == "L"
    np.testing.assert_array_equal(np.asarray(train[3]["image"]), items[3].image[..., 0])


def test_split_names_hf_would_misread_are_refused(tmp_path):
    for bad in ("test", "train", "x-val", "dev2", "eval set", "__x", ".hidden", "a/b", ""):
        with pytest.raises(ParameterError):
            check_class_names("imagefolder", ["cat", bad])
    for fine in ("Test", "interval", "contest", "devil", "dog 2"):
        check_class_names("imagefolder", ["cat", fine])
    assert check_class_names("parquet", ["test", "x/y"]) == ("test", "x/y")  # a value in a column, not a folder
    with pytest.raises(ParameterError, match="split"):
        write_shard("imagefolder", tmp_path, 0, 1, [Item("ab", np.zeros((2, 2, 3), np.uint8), "test")])


def test_hf_parquet_reads_class_labels(tmp_path, hf):
    items = make_items(250)
    _, _, items = release("parquet", tmp_path / "out", items, n_shards=2, class_names=CLASSES)
    ds = hf.load_dataset("parquet", data_files=str(tmp_path / "out/data/*.parquet"), cache_dir=str(tmp_path / "c"))
    train = ds["train"]
    assert isinstance(train.features["image"], hf.Image)
    assert isinstance(train.features["label"], hf.ClassLabel) and tuple(train.features["label"].names) == CLASSES
    assert [CLASSES[v] for v in train["label"]] == [it.label for it in items]
    assert train["key"] == [it.key for it in items]
    np.testing.assert_array_equal(np.asarray(train[201]["image"]), items[201].image)
    # The folder itself, as a Hub repository would be loaded: the data/train-* files are the train split.
    repo = hf.load_dataset(str(tmp_path / "out"), cache_dir=str(tmp_path / "c2"))
    assert list(repo) == ["train"] and len(repo["train"]) == len(items)


def test_reads_parquet_written_by_datasets(tmp_path, hf):
    imgs = make_items(5, c=3)
    feats = hf.Features({"img": hf.Image(), "fine": hf.ClassLabel(names=["x", "y", "z"])})
    pngs = [{"bytes": _png(it.image), "path": None} for it in imgs]
    hf.Dataset.from_dict({"img": pngs, "fine": [2, 0, 1, 1, 2]}, features=feats).to_parquet(tmp_path / "d.parquet")
    src = open_source(tmp_path / "d.parquet")
    got = src.read(0, 5)
    np.testing.assert_array_equal(got.images, expected(imgs))
    assert src.class_names == ("x", "y", "z") and got.labels.tolist() == [2, 0, 1, 1, 2]
    assert got.names[3] == "d.parquet#3"


def test_exif_orientation_gives_the_shape(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: shown rotated, width and height swapped
    buf = io.BytesIO()
    Image.fromarray(np.zeros((6, 4, 3), np.uint8)).save(buf, "JPEG", exif=exif)
    _parquet(tmp_path / "r.parquet", [buf.getvalue()] * 2)
    src = open_source(tmp_path / "r.parquet")
    assert src.shape == (4, 6, 3) and src.read(0, 2).images.shape == (2, 4, 6, 3)


def test_webdataset_reads_the_shards(tmp_path):
    wds = pytest.importorskip("webdataset")
    items = make_items(50)
    _, rows, items = release("webdataset", tmp_path / "out", items, n_shards=2, class_names=CLASSES)
    urls = [str(tmp_path / "out" / name) for name in sorted({r["file_name"] for r in rows})]
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode("rgb8"))
    assert [s["__key__"] for s in samples] == [it.key for it in items]
    for s, it in zip(samples, items, strict=True):
        np.testing.assert_array_equal(s["png"], it.image)
        assert CLASSES[s["cls"]] == it.label and s["json"] == {"label": it.label}


def test_hf_webdataset_loader_reads_the_shards(tmp_path, hf):
    items = make_items(30)
    _, _, items = release("webdataset", tmp_path / "out", items, n_shards=2, class_names=CLASSES)
    ds = hf.load_dataset("webdataset", data_files=str(tmp_path / "out/shards/*.tar"), cache_dir=str(tmp_path / "c"))
    train = ds["train"]
    assert train["__key__"] == [it.key for it in items]
    assert [CLASSES[v] for v in train["cls"]] == [j["label"] for j in train["json"]] == [it.label for it in items]
    np.testing.assert_array_equal(np.asarray(train[12]["png"]), items[12].image)


def test_reads_tars_written_by_webdataset(tmp_path):
    wds = pytest.importorskip("webdataset")
    rng = np.random.default_rng(1)
    imgs = [rng.integers(0, 256, (8, 6, 3), dtype=np.uint8) for _ in range(4)]
    with wds.TarWriter(str(tmp_path / "a.tar")) as sink:
        for i, img in enumerate(imgs):
            sink.write({"__key__": f"sample{i:03d}", "png": img, "cls": i % 2, "txt": "caption"})
    src = open_source(tmp_path / "a.tar")
    got = src.read(0, 4)
    np.testing.assert_array_equal(got.images, np.stack(imgs))
    assert got.labels.tolist() == [0, 1, 0, 1] and src.class_names == ("0", "1")
    assert got.names[2] == "a.tar#sample002"


# -------------------------------------------------------------------------------------------------- sources


def test_parquet_reads_only_the_row_groups_asked_for(tmp_path, monkeypatch):
    items = make_items(300)
    _, _, items = release("parquet", tmp_path / "out", items, n_shards=1)
    src = open_source(tmp_path / "out")
    calls = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: calls.append(i) or real(self, i, **kw))
    np.testing.assert_array_equal(src.read(150, 160).images, expected(items[150:160]))
    assert calls == [1]  # rows 100-199: one row group of 100
    calls.clear()
    src.read(195, 205)
    assert calls == [1, 2]


def test_folder_source_follows_the_folder_rules(tmp_path):
    root = tmp_path / "in"
    for cls, k in (("a", 0), ("a", 1), ("b", 2)):
        (root / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((6, 4), 40 * k + 10, np.uint8), "L").save(root / cls / f"{k}.png")
    Image.fromarray(np.full((6, 4, 3), 200, np.uint8)).save(root / "b" / "rgb.jpg")
    (root / "b" / "copy.png").write_bytes((root / "a" / "0.png").read_bytes())
    (root / "notes.txt").write_text("not an image")
    (root / ".DS_Store").write_text("x")
    src = open_source(root)
    ref = load_folder(root)
    got = src.read(0, len(src))
    np.testing.assert_array_equal(got.images, ref.images)  # one RGB mode, decided over every header
    assert list(got.names) == list(ref.names) and got.labels.tolist() == ref.labels.tolist()
    assert src.class_names == ("a", "b") and src.shape == (6, 4, 3)
    _, skipped = list_image_files(root)
    assert src.skipped == [(str(p), why) for p, why in skipped]
    assert "folder" in src.description and "4 images" in src.description
    assert open_source(root, size=(3, 2)).read(0, 2).images.shape == (2, 3, 2, 3)


def test_metadata_that_does_not_match_is_reported(tmp_path):
    Image.fromarray(np.zeros((3, 3), np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "other.png"}\n')
    src = open_source(tmp_path)
    assert len(src) == 1 and src.skipped[0][0].endswith("metadata.jsonl") and "path order" in src.skipped[0][1]


@pytest.mark.slow
def test_celeba_is_read_lazily_with_the_loaders_pixels(data_dir):
    # The loader decodes only the compared images (its pick equals the whole split's subset), not all 897 twice.
    split: dict[str, int] = {}

    def pick(n: int) -> np.ndarray:
        split["n"] = n
        return np.array([0, 1, 400, n - 1])

    ref = load_dataset("celeba:test", data_dir, pick=pick)
    src = dataset_source("celeba:test", data_dir)
    assert len(src) == split["n"] and src.shape == ref.shape and src.class_names == ref.class_names
    assert len(pickle.dumps(src)) < 50_000 and "lazily" in src.description
    for j, i in enumerate(pick(split["n"])):
        got = src.read(i, i + 1)
        np.testing.assert_array_equal(got.images[0], ref.images[j])
        assert got.names[0] == ref.names[j] and got.labels[0] == ref.labels[j] and got.subjects[0] == ref.subjects[j]
        assert all(got.attributes[k][0] == ref.attributes[k][j] for k in ref.attributes)
    small = dataset_source("celeba:test", data_dir, size=(24, 20)).read(0, 2)
    first_two = load_dataset("celeba:test", data_dir, size=(24, 20), pick=lambda n: np.arange(2))
    np.testing.assert_array_equal(small.images, first_two.images)


def test_small_datasets_are_wrapped_and_records_refused(data_dir):
    src = dataset_source("mnist:test", data_dir)
    ref = load_dataset("mnist:test", data_dir)
    assert len(pickle.dumps(src)) < 20_000  # the name and labels travel, not 7.8 MB of pixels
    got = pickle.loads(pickle.dumps(src)).read(10, 20)
    np.testing.assert_array_equal(got.images, ref.images[10:20])
    assert got.labels.tolist() == ref.labels[10:20].tolist() and src.class_names == ref.class_names
    assert dataset_source("digits", size=(4, 4)).read(0, 3).images.shape == (3, 4, 4, 1)
    with pytest.raises(ParameterError, match="records"):
        dataset_source("adult", data_dir)


# --------------------------------------------------------------------------------------------------- errors


def _png(img):
    buf = io.BytesIO()
    Image.fromarray(img if img.shape[2] == 3 else img[..., 0]).save(buf, "PNG")
    return buf.getvalue()


def _parquet(path, cells, **extra):
    image = pa.array(
        [{"bytes": b, "path": None} for b in cells], pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    )
    pq.write_table(pa.table({"image": image, **extra}), path)


def test_bad_arguments_are_refused(tmp_path):
    items = make_items(2)
    with pytest.raises(ParameterError, match="format"):
        write_shard("zip", tmp_path, 0, 1, items)
    with pytest.raises(ParameterError, match="hex"):
        write_shard("parquet", tmp_path, 0, 1, [Item("Not-Hex", items[0].image, None)])
    with pytest.raises(ParameterError, match="label"):
        write_shard("parquet", tmp_path, 0, 1, [items[0], Item("ff", items[1].image, None)])
    with pytest.raises(ParameterError, match="class names"):
        write_shard("parquet", tmp_path, 0, 1, items, class_names=("bird",))
    with pytest.raises(ParameterError, match="class names"):
        write_shard("parquet", tmp_path, 0, 1, make_items(2, labelled=False), class_names=CLASSES)
    with pytest.raises(ParameterError, match="shard"):
        write_shard("parquet", tmp_path, 2, 2, items)
    with pytest.raises(ParameterError, match="compress_level"):
        write_shard("parquet", tmp_path, 0, 1, items, compress_level=10)
    with pytest.raises(ParameterError, match="uint8"):
        write_shard("webdataset", tmp_path, 0, 1, [Item("ab", np.zeros((2, 2, 4), np.uint8), None)])
    release("parquet", tmp_path / "r", items, n_shards=1)
    src = open_source(tmp_path / "r")
    with pytest.raises(ParameterError, match="start"):
        src.read(1, 3)


def test_unknown_inputs_are_named(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"PK")
    with pytest.raises(DataError, match=r"x\.zip: not a supported input"):
        open_source(tmp_path / "x.zip")
    with pytest.raises(DataError, match="does not exist"):
        open_source(tmp_path / "missing")
    (tmp_path / "mixed").mkdir()
    _parquet(tmp_path / "mixed" / "a.parquet", [_png(np.zeros((2, 2, 3), np.uint8))])
    Image.fromarray(np.zeros((2, 2), np.uint8)).save(tmp_path / "mixed" / "b.png")
    with pytest.raises(DataError, match="image files and Parquet files"):
        open_source(tmp_path / "mixed")
    pq.write_table(pa.table({"pixels": [b"x"], "label": [1]}), tmp_path / "noimg.parquet")
    with pytest.raises(DataError, match=r"noimg.parquet: no image column"):
        open_source(tmp_path / "noimg.parquet")
    with tarfile.open(tmp_path / "z.tar.gz", "w:gz") as tf:
        tf.addfile(tarfile.TarInfo("a.png"), io.BytesIO(b""))
    (tmp_path / "z.tar").write_bytes((tmp_path / "z.tar.gz").read_bytes())
    with pytest.raises(DataError, match=r"z\.tar: not a plain"):
        open_source(tmp_path / "z.tar")


def test_mixed_sizes_name_the_item(tmp_path):
    a, b = np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)
    _parquet(tmp_path / "m.parquet", [_png(a), _png(a), _png(b)])
    with pytest.raises(DataError, match=r"m\.parquet#2: image is 4x5, but .*m\.parquet#0 is 4x4"):
        open_source(tmp_path / "m.parquet")
    assert open_source(tmp_path / "m.parquet", size=(4, 4)).read(0, 3).images.shape == (3, 4, 4, 3)
    w = write_shard("webdataset", tmp_path / "w", 0, 1, [Item("aa", a, None), Item("bb", b, None)])
    with pytest.raises(DataError, match=r"shard-000000.tar#bb: image is 4x5"):
        open_source(tmp_path / "w" / w.files[0][0])
    (tmp_path / "f").mkdir()
    Image.fromarray(a).save(tmp_path / "f" / "a.png")
    Image.fromarray(b).save(tmp_path / "f" / "b.png")
    with pytest.raises(DataError, match=r"b.png: image is 4x5"):
        open_source(tmp_path / "f")


def test_corrupt_and_oversized_bytes_name_the_item(tmp_path):
    good = _png(np.zeros((4, 4, 3), np.uint8))
    _parquet(tmp_path / "c.parquet", [good, b"not an image at all"])
    with pytest.raises(DataError, match=r"c.parquet#1: not a readable image"):
        open_source(tmp_path / "c.parquet")
    # A valid header over broken pixel data fails when the image is read, named the same way.
    noise = _png(np.random.default_rng(0).integers(0, 256, (4, 4, 3), dtype=np.uint8))
    _parquet(tmp_path / "t.parquet", [good, noise[: len(noise) // 2]])
    src = open_source(tmp_path / "t.parquet")
    src.read(0, 1)
    with pytest.raises(DataError, match=r"t.parquet#1: not a readable image"):
        src.read(0, 2)
    _parquet(tmp_path / "big.parquet", [_png(np.zeros((20, 20, 3), np.uint8))])
    with pytest.raises(DataError, match=r"big.parquet#0: declares 20x20 = 400 pixels, over the limit of 100"):
        open_source(tmp_path / "big.parquet", max_pixels=100)
    with tarfile.open(tmp_path / "bad.tar", "w") as tf:
        info = tarfile.TarInfo("k1.png")
        info.size = 5
        tf.addfile(info, io.BytesIO(b"12345"))
    with pytest.raises(DataError, match=r"bad.tar#k1: not a readable image"):
        open_source(tmp_path / "bad.tar")


@pytest.mark.skipif(not hasattr(__import__("os"), "posix_fadvise"), reason="no posix_fadvise on this system")
def test_imagefolder_files_start_their_writeback_once_written(tmp_path, monkeypatch):
    """Each released PNG is handed to the kernel's writeback as soon as it is whole (the shard syncs them all before
    its record: started early, the disk writes overlap the encoding of the next images). A file system that refuses
    the advice changes nothing."""
    import os

    from privpix.data.formats.base import Item
    from privpix.data.formats.writing import write_shard

    advised: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def recording(fd, offset, length, advice):
        advised.append((os.fstat(fd).st_size, advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    rng = np.random.default_rng(0)
    items = [Item(key=f"{i:08x}", image=rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), label=None) for i in range(3)]
    written = write_shard("imagefolder", tmp_path, 0, 1, items)
    sizes = [(tmp_path / name).stat().st_size for name, _ in written.files]
    assert advised == [(size, os.POSIX_FADV_DONTNEED) for size in sizes]

    def refusing(*_args):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refusing)
    again = write_shard("imagefolder", tmp_path / "again", 0, 1, items)
    assert again.files == written.files
