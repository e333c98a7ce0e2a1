"""A dataset's train and test splits loaded together, as `privpix evaluate`, `bench` and `demo` use them."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.loaders import load_named, parse_dataset_spec
from privpix.data.memory import check_resize_fits
from privpix.errors import ParameterError


def pair_name(spec: str) -> str:
    """The dataset name of ``spec`` for commands that use its train and test splits both: a split named there
    would be ignored, so it is refused (a misspelt one as much as a real one)."""
    name, split = parse_dataset_spec(spec)
    if split is not None:
        raise ParameterError(
            f"--dataset {spec}: this command uses both the train and the test split; give the name only ({name})"
        )
    return name


# What a command that measures on a folder of the user's own calls it (never the path: paths can name people).
INPUT_PAIR = "the input folder"


def load_pair(
    name: str | None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
    size: tuple[int, int] | None = None,
    grayscale: bool = False,
    *,
    input_dir: str | os.PathLike | None = None,
) -> tuple[ImageSet, ImageSet]:
    """The ``train`` and ``test`` splits of dataset ``name`` (a name, not NAME:SPLIT), or of the user's own images
    in ``input_dir`` (a folder, flat or one sub-folder per class, or Parquet / WebDataset shards): split in two
    halves by a seeded permutation within each class, so both halves hold every class in proportion.

    ``limit``: at most this many images of each split, a sorted random subset drawn with ``seed`` (train first,
    then test, from one generator). ``grayscale`` converts, then ``size`` (HEIGHT, WIDTH) resizes, both splits;
    a resize that cannot fit in memory is refused before it starts.
    """
    if (name is None) == (input_dir is None):
        raise ParameterError("give exactly one of --dataset NAME and --input DIR")
    train: ImageSet | RecordSet
    test: ImageSet | RecordSet
    if input_dir is not None:
        train, test = split_halves(input_dir, seed)
    else:
        name = pair_name(name or "")
        train, test = load_named(f"{name}:train", data_dir), load_named(f"{name}:test", data_dir)
    if not isinstance(train, ImageSet) or not isinstance(test, ImageSet):
        raise ParameterError(f"--dataset {name}: holds records, not images")
    if limit is not None:
        if limit < 2:
            raise ParameterError(f"--limit must be >= 2, got {limit}")
        rng = np.random.default_rng(seed)
        if len(train) > limit:
            train = train.subset(np.sort(rng.choice(len(train), limit, replace=False)))
        if len(test) > limit:
            test = test.subset(np.sort(rng.choice(len(test), limit, replace=False)))
    if grayscale:
        train, test = train.grayscale(), test.grayscale()
    if size is not None:
        check_resize_fits(len(train) + len(test), size, train.shape[2])
        train, test = train.resized(*size), test.resized(*size)
    return train, test


def split_halves(input_dir: str | os.PathLike, seed: int) -> tuple[ImageSet, ImageSet]:
    """The images of ``input_dir`` in two halves (train, test) by a permutation seeded with ``seed``, taken within
    each class (an unlabelled folder is one class), so each half holds every class in proportion."""
    from privpix.data.load import load_dataset

    data = load_dataset(input_dir)
    assert isinstance(data, ImageSet)  # a path is read as images
    if len(data) < 4:
        raise ParameterError(f"--input: {len(data)} images; a train and a test half need at least 4")
    labels = data.labels if data.labels is not None else np.zeros(len(data), dtype=np.int64)
    rng = np.random.default_rng(seed)
    train_idx, test_idx = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        half = (len(members) + 1) // 2
        train_idx.extend(members[:half].tolist())
        test_idx.extend(members[half:].tolist())
    train = data.subset(np.sort(np.asarray(train_idx, dtype=np.int64)))
    test = data.subset(np.sort(np.asarray(test_idx, dtype=np.int64)))
    return replace(train, source=INPUT_PAIR), replace(test, source=INPUT_PAIR)
