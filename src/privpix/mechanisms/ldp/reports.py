"""The owner side of paper 000's two-party protocol: encode, perturb with GRR, and write reports.

A report folder holds ``reports.npz`` (``values``: (n, m) integers in [0, d); ``labels`` when known) and
``manifest.json`` (encoder, d, m, ε per feature and per image, the guarantee, the sha256 of the npz).
The manifest is written last and atomically: a folder without one is not a finished release.
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

from privpix.accounting import write_bytes_atomic, write_text_atomic
from privpix.data.imageset import ImageSet
from privpix.errors import DataError, ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.ldp.encoders import Encoder
from privpix.mechanisms.ldp.rr import check_epsilon, grr_perturb
from privpix.noise import RNG, is_secure

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


def ldp_guarantee(epsilon: float, encoder: Encoder, source: str | None = None) -> Guarantee:
    """The guarantee of one owner's report: ε per feature, m·ε per image (sequential composition).

    Not sound when the encoder was fitted on the very images being reported (``source`` equal to the
    encoder's fitting source): the encoder is published to every owner and leaks its fitting data.
    """
    epsilon = check_epsilon(epsilon)
    m, d = int(encoder.n_features), int(encoder.d)
    if math.isinf(epsilon):
        return Guarantee.none(f"epsilon = inf: the {m} encoded features are sent without perturbation")
    caveats = [
        f"ε = {epsilon:g} per feature; the report has m = {m} features over a domain of d = {d} values, so one "
        f"image costs m·ε = {m * epsilon:g} by sequential composition",
        "the label is sent in the clear: it is not protected",
    ]
    fitted_on = encoder.fitted_on
    leaks = False
    if encoder.name == "pixel" and encoder.config.get("scaling") == "fixed":
        pass  # fitted on no data
    else:
        caveats.append(
            f"the encoder was fitted on {fitted_on}; that data is not protected by the owners' perturbation "
            "and must be public or consented"
        )
        if source and may_overlap(encoder.fitted_on, source):
            leaks = True
            caveats.append(
                f"the encoder was fitted on the same images that are reported ({source}): the published encoder "
                "depends on them, so the reports' ε does not bound what is revealed; fit it on a disjoint public "
                "or consented split for the guarantee to hold"
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
    if labels is None and isinstance(images, ImageSet):
        labels = images.labels
    n = len(images)
    t0 = time.perf_counter()
    out = np.empty((n, encoder.n_features), dtype=np.uint8 if encoder.d <= 256 else np.uint16)
    for s in range(0, n, batch_size):
        part = images.subset(slice(s, s + batch_size)) if isinstance(images, ImageSet) else images[s : s + batch_size]
        out[s : s + len(part)] = grr_perturb(encoder.encode(part), encoder.d, epsilon, rng)
        if on_batch is not None:
            on_batch(len(part))
    g = ldp_guarantee(epsilon, encoder, source)
    meta = {"source": source, "secure_rng": is_secure(rng), "seconds": round(time.perf_counter() - t0, 3)}
    return Reports(out, None if labels is None else np.asarray(labels), encoder.d, epsilon, g, encoder.describe(), meta)


def write_reports(reports: Reports, output: str | Path, *, force: bool = False, extra: dict | None = None) -> dict:
    """Write ``reports.npz`` then ``manifest.json`` (both atomically) into ``output``. Refuses to replace an
    earlier release unless ``force``, and never writes into a non-empty folder that is not a release."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise ParameterError(f"--output {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MANIFEST).exists():
            raise ParameterError(f"--output {out}: not empty and holds no privpix manifest; refusing to touch it")
        if not force:
            raise ParameterError(f"--output {out}: holds earlier reports; pass --force to replace them")
    buf = io.BytesIO()
    arrays = {"values": reports.values}
    if reports.labels is not None:
        arrays["labels"] = reports.labels
    np.savez_compressed(buf, **arrays)
    data = buf.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # an old manifest must never describe the new npz
    write_bytes_atomic(out / REPORTS_FILE, data)
    eps = reports.epsilon
    manifest = {
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
        **(extra or {}),
    }
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def read_reports(folder: str | Path) -> Reports:
    """Read a report folder, checking the npz against the manifest's sha256."""
    folder = Path(folder)
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise DataError(f"{mpath}: not found (is {folder} a finished `privpix ldp perturb` output?)")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{mpath}: not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise DataError(f"{mpath}: not a privpix LDP report manifest")
    npz = folder / manifest["file"]
    if not npz.is_file():
        raise DataError(f"{npz}: missing")
    data = npz.read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise DataError(f"{npz}: sha256 does not match {mpath}; the reports were changed or truncated")
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        values = z["values"]
        labels = z["labels"] if "labels" in z.files else None
    eps = manifest["epsilon_per_feature"]
    keep = ("source", "secure_rng", "seconds", "seed")
    return Reports(
        values,
        labels,
        int(manifest["d"]),
        math.inf if eps is None else float(eps),
        Guarantee.from_dict(manifest["guarantee"]),
        manifest["encoder"],
        {k: manifest[k] for k in keep if k in manifest},
    )
