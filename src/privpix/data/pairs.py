"""A dataset's train and test splits loaded together, as `privpix evaluate`, `bench` and `demo` use them."""

from __future__ import annotations

import os

import numpy as np

from privpix.data.imageset import ImageSet
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


def load_pair(
    name: str,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
    size: tuple[int, int] | None = None,
    grayscale: bool = False,
) -> tuple[ImageSet, ImageSet]:
    """The ``train`` and ``test`` splits of dataset ``name`` (a name, not NAME:SPLIT).

    ``limit``: at most this many images of each split, a sorted random subset drawn with ``seed`` (train first,
    then test, from one generator). ``grayscale`` converts, then ``size`` (HEIGHT, WIDTH) resizes, both splits;
    a resize that cannot fit in memory is refused before it starts.
    """
    name = pair_name(name)
    train = load_named(f"{name}:train", data_dir)
    test = load_named(f"{name}:test", data_dir)
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
