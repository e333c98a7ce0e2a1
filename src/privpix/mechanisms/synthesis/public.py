"""The public-data option of the mean-embedding synthesizers (``--param public=…``): a labelled public image set on
which the generator is pretrained before it is trained on the private set's noisy embedding.

The public set never enters the private release: the noisy embedding is computed from the private images alone,
and pretraining reads only the public images, so the (ε, δ) guarantee for the private set is unchanged. The public
set itself is not protected at all. It must really be public (published, consented, or licensed for this use) and
distinct from the private set: an image that is in both is exposed through the public path with no noise.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.data.overlap import check_distinct, fingerprint
from privpix.errors import DataError, ParameterError

# A built-in public set at one shape, as read: a fit, the refits of its audit and a conformance run read the same
# set again, and resizing is most of the cost (the 1,797 digits to 28x28: about 1 s). Only the sets installed with
# a package (they do not change while a process runs; the face sets on disk keep each resized face themselves,
# privpix.data.loaders.read_resized, and notice a changed file), at most 4 sets of at most 64 MB of pixels each.
CACHE_BYTES = 64 << 20
_CACHE: dict[tuple[str, tuple[int, int, int]], ImageSet] = {}


def load_public(spec: str, shape: tuple[int, int, int], n_classes: int,
                class_names: tuple[str, ...] | None = None, *, labelled: bool = True) -> ImageSet:  # fmt: skip
    """The public set ``spec`` (a dataset name with an optional split, e.g. ``digits`` or ``lfw-gender:train``, or
    an image folder with one subfolder per class) as labelled images of ``shape`` (h, w, c): resized when the
    sizes differ, converted to gray or RGB when the channels do.

    Labels: when both the public set and the private one name their classes (``class_names``), public labels are
    mapped to the private classes by name (LFW's 0 = male and CelebA's 1 = male are the same class); otherwise the
    public labels are taken as they are and must lie in 0..``n_classes`` − 1. ``labelled=False`` (a use that reads
    the images only, e.g. ``dp-eigenfaces``'s basis): any image set or folder, its labels dropped.
    """
    from privpix.data import DATASETS, load_dataset, load_folder

    h, w, c = shape
    name = spec.partition(":")[0].strip().lower()
    key = None
    try:
        if name in DATASETS:
            key = (spec, (h, w, c)) if DATASETS[name].folder is None else None
            if key is not None and key in _CACHE:
                return _finish(_CACHE[key], spec, n_classes, class_names, labelled)
            loader = DATASETS[name].loader
            # Loaders that take a size resize while reading (CelebA, LFW: far less memory than the originals).
            opts: dict[str, Any] = {"size": (h, w)} if "size" in inspect.signature(loader).parameters else {}
            data = load_dataset(spec, **opts)
        elif Path(spec).is_dir():
            data = load_folder(spec, size=(h, w))
        else:
            raise ParameterError(
                f"public: {spec!r} is neither a dataset name ({', '.join(DATASETS)}) nor an image folder"
            )
    except DataError as exc:
        raise ParameterError(f"public: could not load {spec!r}: {exc}") from None
    if not isinstance(data, ImageSet):
        raise ParameterError(f"public: {spec!r} holds records, not images")
    if len(data) == 0:
        raise ParameterError(f"public: {spec!r} holds no images")
    if data.shape[:2] != (h, w):
        data = data.resized(h, w)
    if data.shape[2] != c:
        if c == 1:
            data = data.grayscale()
        elif data.shape[2] == 1 and c == 3:
            data = data.with_images(np.repeat(data.as_uint8(), 3, axis=3))
        else:
            raise ParameterError(f"public: {spec!r} has {data.shape[2]} channels, the private images {c}")
    data = data.with_images(data.as_uint8())
    if key is not None and data.images.nbytes <= CACHE_BYTES:
        if len(_CACHE) >= 4:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = data
    return _finish(data, spec, n_classes, class_names, labelled)


def _finish(data: ImageSet, spec: str, n_classes: int, class_names: tuple[str, ...] | None,
            labelled: bool) -> ImageSet:  # fmt: skip
    """The public set at its final shape as ``load_public`` returns it: labels checked and mapped (or dropped), and
    its own copy of the pixels (the cached set stays as it was read)."""
    if labelled and data.labels is None:
        raise ParameterError(
            f"public: {spec!r} has no labelled images (a folder needs one subfolder per class); pretraining "
            "matches the class-wise embedding φ(x) ⊗ y"
        )
    labels = _private_labels(data, spec, n_classes, class_names) if labelled else None
    names = class_names if labelled else None
    return ImageSet(data.as_uint8().copy(), labels=labels, source=data.source or spec, class_names=names)


def _private_labels(data: ImageSet, spec: str, n_classes: int, class_names: tuple[str, ...] | None) -> np.ndarray:
    labels = np.asarray(data.labels)
    if data.class_names and not class_names:
        # A class folder's labels are its subfolders in sorted order: with no private names to match them to,
        # they would be taken as label numbers silently.
        raise ParameterError(
            f"public: {spec!r} names its classes {list(data.class_names)}, the private set does not; give the "
            "private images class names (a class folder) or a public set with numeric labels"
        )
    if class_names and data.class_names:
        if labels.min() < 0 or labels.max() >= len(data.class_names):
            raise ParameterError(f"public: labels of {spec!r} do not match its {len(data.class_names)} class names")
        index = {str(nm).lower(): i for i, nm in enumerate(class_names)}
        missing = sorted({str(nm) for nm in data.class_names if str(nm).lower() not in index})
        if missing:
            raise ParameterError(
                f"public: classes {missing} of {spec!r} are not among the private set's {list(class_names)}"
            )
        remap = np.array([index[str(nm).lower()] for nm in data.class_names], dtype=np.int64)
        labels = remap[labels]
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= n_classes:
        raise ParameterError(
            f"public: labels of {spec!r} must be integers in 0..{n_classes - 1} (n_classes), got "
            f"{labels.min()}..{labels.max()}"
        )
    return labels.astype(np.int64)


# The check and the fingerprint are shared with every mechanism that takes a public set.
__all__ = ["check_distinct", "fingerprint", "load_public"]
