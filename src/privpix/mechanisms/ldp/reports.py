"""The owner side of Wang & Chang 2020's two-party protocol: encode, perturb with GRR, and write reports.

A report folder holds ``reports.npz`` (``values``: (n, m) integers in [0, d); ``labels`` when known) and
``manifest.json`` (encoder, d, m, ε per feature and per image, the guarantee, the sha256 of the npz).
The folder is written by the sharded writer, like every release (staged, swapped in atomically; see
docs/security.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.data.overlap import shared_count
from privpix.errors import DataError, ParameterError
from privpix.mechanisms.ldp.encoder_base import gray_images
from privpix.mechanisms.ldp.encoders import Encoder
from privpix.privacy.grr import check_epsilon, grr_perturb, value_dtype
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, is_secure
from privpix.version import __version__

REPORTS_FILE = "reports.npz"
MANIFEST = "manifest.json"
FORMAT = "privpix-ldp-reports/1"


def _origin(source: str) -> tuple[str, str, str | None]:
    """'mnist:train (seeded subset of 5000)' → ('dataset', 'mnist', 'train'); a folder → ('folder', path, None)."""
    from privpix.data.loaders import DATASETS

    base = source.split(" (")[0].strip()
    name, _, split = base.partition(":")
    if name.lower() in DATASETS:
        return "dataset", name.lower(), split.lower() or None
    return "folder", str(Path(base).expanduser().resolve()), None


def may_overlap(fitted_on: str, source: str) -> bool:
    """Whether the encoder's fitting data and the reported images may share images: the same dataset with
    the same split (or no split named), or the same folder or one inside the other."""
    (ka, a, sa), (kb, b, sb) = _origin(fitted_on), _origin(source)
    if ka != kb:
        return False
    if ka == "dataset":
        return a == b and (sa is None or sb is None or sa == sb)
    pa, pb = Path(a), Path(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def ldp_guarantee(
    epsilon: float, encoder: Encoder, source: str | None = None, images: ImageSet | np.ndarray | None = None
) -> Guarantee:
    """The guarantee of one owner's report: ε per feature, m·ε per image (sequential composition).

    Not sound when the encoder was fitted on any of the images being reported: the encoder is published to every
    owner and leaks its fitting data. With the reported ``images`` and an encoder that recorded its fitting
    images' digests, that is decided exactly, image by image; otherwise (older encoder files) from the two
    sources' descriptions (the same data set and split, or nested folders).
    """
    epsilon = check_epsilon(epsilon)
    m, d = int(encoder.fitted_m()), int(encoder.fitted_d())
    if math.isinf(epsilon):
        return Guarantee.none(f"epsilon = inf: the {m} encoded features are sent without perturbation")
    caveats = [
        f"ε = {epsilon:g} per feature; the report has m = {m} features over a domain of d = {d} values, so one "
        f"image costs m·ε = {m * epsilon:g} by sequential composition",
        "the label is sent in the clear: it is not protected",
    ]
    fitted_on = encoder.fitted_on
    leaks = False
    if encoder.uses_fitting_data:
        caveats.append(
            f"the encoder was fitted on {fitted_on}; that data is not protected by the owners' perturbation "
            "and must be public or consented"
        )
        if images is not None and encoder.fit_digests:
            shared = shared_count(encoder.fit_digests, gray_images(images))
            where = f"{shared} of the reported images are among them"
        else:
            shared = int(bool(source and may_overlap(encoder.fitted_on, source)))
            where = f"the reported images ({source}) may be among them"
        if shared:
            leaks = True
            caveats.append(
                f"the encoder was fitted on images that are reported ({where}): the published encoder depends on "
                "them, so the reports' ε does not bound what is revealed; fit it on a disjoint public or consented "
                "split for the guarantee to hold"
            )
    return Guarantee(
        model="local-dp",
        epsilon=m * epsilon,
        unit=f"one owner's report ({m} features; any change of the image)",
        per_image_epsilon=m * epsilon,
        per_feature_epsilon=epsilon,
        sound=not leaks,
        caveats=tuple(caveats),
    )


@dataclass
class Reports:
    """A batch of GRR reports as the data user receives them."""

    values: np.ndarray
    labels: np.ndarray | None
    d: int
    epsilon: float
    guarantee: Guarantee
    encoder: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return int(self.values.shape[1])

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of_release(cls, release: Any, epsilon: float, labels: np.ndarray | None = None) -> Reports:
        """The reports of a feature mechanism's :class:`~privpix.mechanisms.Release` (its ``features``, and the
        ``domain_size`` and ``encoder`` it states), perturbed at ``epsilon`` per feature; ``labels`` travel with
        them in the clear when given."""
        d = int(release.domain_size)
        return cls(np.asarray(release.features).astype(value_dtype(d)), None if labels is None else np.asarray(labels),
                   d, float(epsilon), release.guarantee, release.encoder,
                   {"seconds": round(release.seconds, 3)})  # fmt: skip


def perturb(
    encoder: Encoder,
    images: ImageSet | np.ndarray,
    epsilon: float,
    rng: RNG,
    *,
    labels: np.ndarray | None = None,
    source: str | None = None,
    batch_size: int = 2000,
    on_batch=None,
) -> Reports:
    """Encode ``images`` with the fitted ``encoder`` and perturb every feature with ε-LDP GRR.

    Each owner's image is handled independently (batching only saves time). ``labels`` default to the
    ImageSet's labels; they travel in the clear.
    """
    epsilon = check_epsilon(epsilon)
    if not encoder.fitted:
        raise ParameterError("encoder is not fitted")
    d, m = encoder.fitted_d(), encoder.fitted_m()
    if labels is None and isinstance(images, ImageSet):
        labels = images.labels
    n = len(images)
    t0 = time.perf_counter()
    out = np.empty((n, m), dtype=value_dtype(d))
    for s in range(0, n, batch_size):
        part = images.subset(slice(s, s + batch_size)) if isinstance(images, ImageSet) else images[s : s + batch_size]
        out[s : s + len(part)] = grr_perturb(encoder.encode(part), d, epsilon, rng)
        if on_batch is not None:
            on_batch(len(part))
    g = ldp_guarantee(epsilon, encoder, source, images)
    meta = {"source": source, "secure_rng": is_secure(rng), "seconds": round(time.perf_counter() - t0, 3)}
    return Reports(out, None if labels is None else np.asarray(labels), d, epsilon, g, encoder.describe(), meta)


def report_files(reports: Reports) -> tuple[dict[str, bytes], dict[str, Any]]:
    """A report folder's files (``reports.npz``: ``values``, and ``labels`` when known) and its manifest fields, as
    :func:`read_reports` checks them. The sharded writer (:mod:`privpix.publishing.shards`) stages and commits them
    like every release (``privpix release`` and ``privpix ldp perturb``): all or nothing, an earlier report folder
    replaced only with ``--force``."""
    buf = io.BytesIO()
    arrays = {"values": reports.values}
    if reports.labels is not None:
        arrays["labels"] = reports.labels
    # numpy's stub types **kwds as if a key could be its allow_pickle flag; every value here is an array.
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    data = buf.getvalue()
    eps = reports.epsilon
    manifest = {
        "privpix_version": __version__,
        "format": FORMAT,
        "file": REPORTS_FILE,
        "sha256": hashlib.sha256(data).hexdigest(),
        "n": len(reports),
        "m": reports.n_features,
        "d": reports.d,
        "epsilon_per_feature": None if math.isinf(eps) else eps,
        "epsilon_per_image": None if math.isinf(eps) else eps * reports.n_features,
        "labels": "in the clear" if reports.labels is not None else "none",
        "encoder": reports.encoder,
        "guarantee": reports.guarantee.to_dict(),
        **reports.meta,
    }
    return {REPORTS_FILE: data}, manifest


def read_reports(folder: str | Path) -> Reports:
    """Read a report folder, checking the npz against the manifest's sha256.

    Reports come from other parties, so everything is checked: a malformed manifest or npz, a missing array,
    or values outside ``[0, d)`` raise :class:`DataError` naming the file at fault."""
    folder = Path(folder)
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise DataError(f"{mpath}: not found (is {folder} a finished `privpix ldp perturb` output?)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{mpath}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{mpath}: not a privpix LDP report manifest")
    try:
        name = manifest["file"]
        # Only a file beside the manifest: a path would let a manifest point anywhere on the disk.
        if not isinstance(name, str) or not name or Path(name).name != name:
            raise ValueError(f"file {name!r} is not a file name in {folder}")
        sha = str(manifest["sha256"])
        d = int(manifest["d"])
        if d < 2:
            raise ValueError(f"d = {d} must be >= 2")
        eps = manifest["epsilon_per_feature"]
        epsilon = math.inf if eps is None else check_epsilon(eps)
        guarantee = Guarantee.from_dict(manifest["guarantee"])
        encoder = manifest["encoder"]
        if not isinstance(encoder, dict) or not isinstance(encoder.get("config"), dict):
            raise ValueError("encoder must be an object with a config")
    except KeyError as exc:
        raise DataError(f"{mpath}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:  # ValueError covers check_epsilon's ParameterError
        raise DataError(f"{mpath}: not a valid privpix LDP report manifest ({exc})") from None
    npz = folder / name
    if not npz.is_file():
        raise DataError(f"{npz}: missing")
    data = npz.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha:
        raise DataError(f"{npz}: sha256 does not match {mpath}; the reports were changed or truncated")
    if not data.startswith(b"PK"):  # every zip starts so
        # np.load's own message for a non-zip file suggests allow_pickle, which must never be followed here.
        raise DataError(f"{npz}: not an .npz archive")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            files = list(z.files)
            values = z["values"] if "values" in files else None
            labels = z["labels"] if "labels" in files else None
    except MemoryError:
        raise
    except Exception as exc:  # zip, zlib and npy parsers each raise their own kinds
        raise DataError(f"{npz}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    if values is None:
        raise DataError(f"{npz}: holds no 'values' array (arrays: {', '.join(files) or 'none'})")
    _check_arrays(npz, values, labels, d, manifest)
    keep = ("source", "secure_rng", "seconds", "seed")
    return Reports(values, labels, d, epsilon, guarantee, encoder, {k: manifest[k] for k in keep if k in manifest})


def _check_arrays(npz: Path, values: np.ndarray, labels: np.ndarray | None, d: int, manifest: dict) -> None:
    """``values`` (n, m) integers in [0, d) as the manifest says; ``labels`` one per report."""
    if values.ndim != 2 or len(values) == 0 or values.shape[1] == 0:
        raise DataError(f"{npz}: 'values' must have shape (n, m) with n, m >= 1, got {values.shape}")
    if not np.issubdtype(values.dtype, np.integer):
        raise DataError(f"{npz}: 'values' must hold integers, got dtype {values.dtype}")
    if int(values.min()) < 0 or int(values.max()) >= d:
        raise DataError(f"{npz}: 'values' must lie in [0, {d}) (d = {d}), got [{values.min()}, {values.max()}]")
    declared = (manifest.get("n"), manifest.get("m"))
    if declared != (None, None) and tuple(values.shape) != declared:
        raise DataError(f"{npz}: 'values' has shape {values.shape}, the manifest says (n, m) = {declared}")
    if labels is not None and (labels.ndim != 1 or len(labels) != len(values)):
        raise DataError(f"{npz}: 'labels' must have shape ({len(values)},), got {labels.shape}")
