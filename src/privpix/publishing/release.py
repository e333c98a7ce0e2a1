"""The API's release (``privpix.release``): a mechanism's output written to a folder with its ``manifest.json``,
through the one writer every release takes (:mod:`privpix.publishing.shards`: staged, swapped in atomically,
never touching a user's files), and the names of a release folder."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.formats.release_layout import (  # noqa: F401  (re-exported: the public names of a release folder)
    JOURNAL,
    LOCK,
    MANIFEST,
    RECORDS,
    STAGING_PREFIX,
    listed_files,
    png_bytes,
    read_manifest,
)
from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import Mechanism
from privpix.mechanisms.kinds import SyntheticImageMechanism, require_kind
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, SecureRandom, make_rng, rng_kind
from privpix.publishing.shards import exact_noise  # and the CLI's release and ldp perturb, from here
from privpix.publishing.source_map import check_source_map, map_name, unmap_name  # noqa: F401  (re-exported)
from privpix.publishing.staging import (  # noqa: F401  (re-exported)
    FAULT_ENV,
    OpaqueNames,
    ReleaseWriter,
    check_no_overlap,
    check_output,
    recover,
    verify_manifest,
)

# ------------------------------------------------------------------------------------------------ releases


def release_to_dir(
    mechanism: Mechanism,
    data: ImageSet | RecordSet | int | Iterable[ImageSet | int],
    output: str | Path,
    rng: RNG | int | None = None,
    *,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    inputs: Sequence[str | Path] = (),
    source_map: str | Path | None = None,
    on_published: Callable[[], None] | None = None,
    note: Callable[[str], None] | None = None,
    compress_level: int = 6,
    expect: Guarantee | None = None,
    fmt: str = "imagefolder",
    labels: bool = False,
    workers: int = 1,
    seed: int | None = None,
    ledger: str | Path | None = None,
    budget: float | None = None,
    delta_budget: float | None = None,
    label: str = "",
) -> dict[str, Any]:
    """Release ``data`` into the folder ``output`` through the sharded writer ``privpix release`` uses
    (:mod:`privpix.publishing.shards`); returns the manifest as written, less its ``files`` list (streamed to
    ``manifest.json``, never held: it can list millions of files).

    Args:
        mechanism: fitted (see :meth:`~privpix.mechanisms.Mechanism.fit`) and ready to release.
        data: an :class:`~privpix.data.ImageSet` (one file per image, or one report file for a feature mechanism);
            a :class:`~privpix.data.RecordSet` (``records.csv``); for a synthesizer, a count of new images to draw
            (its labels go into the manifest), or images whose number and shape it copies; or an iterable of image
            sets (joined) or of counts (added up).
        rng: an integer seed, which gives the output ``privpix release --seed`` gives (or pass ``seed=``); a
            :class:`~privpix.privacy.noise.SecureRandom` (the exact samplers, as ``--secure``; refused for a
            mechanism that has none); a NumPy ``Generator``, from which one seed is drawn (the same generator state,
            the same release); or ``None``: the exact samplers on the OS CSPRNG where the mechanism has them (the
            publication default), else floating-point noise from fresh OS entropy, with a caveat in the guarantee.
        force: replace an earlier privpix release in ``output`` (only the files its manifest lists).
        source_map: receives a CSV of (released name, source name); it must lie outside ``output``.
        expect: the guarantee a ledger was charged for: a release whose guarantee differs is stopped before it is
            published (default: the guarantee of a release of ``data``).
        fmt: the layout: ``imagefolder``, ``parquet`` or ``webdataset``.
        labels: publish the input's class labels (as given: not privatized, not covered by the guarantee).
        compress_level: the PNG compression level, 0 (fastest) to 9.
        workers: processes to spread the shards over (1: this process).
        seed: the same as an integer ``rng`` (give one of them): a reproducible research release, whose noise
            anyone who knows the seed can remove.
        ledger: a privacy ledger file, charged as ``privpix release --ledger`` charges it: locked for the whole
            release, the charge reserved before any file is written (refused over budget, nothing written), and
            kept once the release may be visible. A release from a model file whose fit was charged to this ledger
            charges nothing more; one whose fit it does not hold is refused.
        budget: the per-image ε budget of a new ledger file (it must match an existing one's).
        delta_budget: the δ budget of a new ledger file (it must match an existing one's).
        label: what the ledger entry says was released (default: the mechanism and the output).

    The earlier release in ``output`` (with ``force``) stays whole until the new one is complete; file names are
    opaque, and an image whose pixels equal an earlier one's is released once. The manifest holds no source name.
    """
    from privpix.data.inmemory import ImageSetSource, RecordSetSource
    from privpix.executor import Executor, make_executor
    from privpix.publishing.ledger import publish_job
    from privpix.publishing.shards import ShardedRelease

    if seed is not None:
        if rng is not None:
            raise ParameterError("give rng or seed, not both")
        rng = seed
    seed, secure = _seed_of(rng)
    secure = exact_noise(mechanism, seed=seed, secure=secure)
    # What `privpix release` records of its noise.
    metadata = {"secure_rng": secure, "rng": rng_kind(seed, secure), **(metadata or {})}
    if mechanism.capabilities().fits_on == "model-file" and not mechanism.is_fitted:
        mechanism.fit(None)  # reads the model file it names: its shape and labels say what to draw
    caps = mechanism.capabilities()
    source: Any = None
    count: int | None = None
    class_names = None
    if isinstance(data, RecordSet):
        source, shape = RecordSetSource(data), (0, 0, 0)
    else:
        images, count = _joined(mechanism, data)
        if caps.output == "synthetic-images":
            # Given images, one new image per given one, in their shape: the caller chose the batches.
            drawn = images.shape if images is not None else caps.fixed_shape
            if drawn is None:
                raise ParameterError(f"{mechanism.name}: give the image shape to synthesize (images of that shape)")
            shape, count = drawn, len(images) if images is not None else count
            class_names = require_kind(mechanism, SyntheticImageMechanism).label_names()
        elif images is None:
            raise ParameterError(f"{mechanism.name}: draws no synthetic images; give it images to release")
        else:
            source, shape, class_names = ImageSetSource(images), images.shape, images.class_names
    if expect is None:
        whole = caps.output == "features" and source is not None
        expect = (
            mechanism.privacy(source.read(0, len(source))).guarantee if whole else mechanism.privacy(shape).guarantee
        )
    job = ShardedRelease(mechanism, source, shape, count=count, seed=seed, secure=secure, fmt=fmt,
                         compress_level=compress_level, labels=labels, class_names=class_names,
                         input_id=getattr(source, "description", ""))  # fmt: skip
    with Executor(1) if workers == 1 else make_executor("local", workers) as executor:
        manifest, _ = publish_job(job, output, executor, expect=expect, ledger=ledger, budget=budget,
                                  delta_budget=delta_budget, label=label or f"{mechanism.name} → {output}",
                                  force=force, inputs=inputs, source_map=source_map,
                                  metadata=metadata, on_progress=on_batch, on_published=on_published,
                                  note=note)  # fmt: skip
        return manifest


def _seed_of(rng: RNG | int | None) -> tuple[int | None, bool]:
    """(seed, secure) of the API's ``rng`` argument: see :func:`release_to_dir`."""
    if isinstance(rng, SecureRandom):
        return None, True
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63)), False
    if rng is None or (isinstance(rng, int | np.integer) and not isinstance(rng, bool)):
        seed = None if rng is None else int(rng)
        make_rng(seed)  # the seed's own checks (a non-negative integer)
        return seed, False
    raise ParameterError(f"rng must be an integer seed, a SecureRandom, a numpy Generator or None, got {rng!r}")


def _joined(mechanism: Mechanism, data: Any) -> tuple[ImageSet | None, int | None]:
    """(the images, or ``None``; the count of new images, or ``None``) of the API's ``data`` argument."""
    if isinstance(data, ImageSet):
        return data, None
    if isinstance(data, int | np.integer) and not isinstance(data, bool):
        return None, int(data)
    if isinstance(data, str | bytes | Path) or not isinstance(data, Iterable):
        raise ParameterError(
            f"{mechanism.name}: data must be an ImageSet, a RecordSet, a count, or an iterable of image sets or "
            f"counts; got {type(data).__name__}"
        )
    images: ImageSet | None = None
    count: int | None = None
    for part in data:
        if isinstance(part, ImageSet):
            images = part if images is None else images.concat(part)
        elif isinstance(part, int | np.integer) and not isinstance(part, bool):
            count = int(part) + (count or 0)
        else:
            raise ParameterError(f"{mechanism.name}: a batch must be an ImageSet or a count, got {type(part).__name__}")
    if images is not None and count is not None:
        raise ParameterError(f"{mechanism.name}: give image sets or counts, not both")
    if images is None and count is None:
        raise ParameterError("nothing to release: the input holds no images")
    return images, count
