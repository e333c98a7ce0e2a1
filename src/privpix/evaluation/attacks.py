"""Privacy attacks against any release: what an adversary recovers from the published images.

Every attack takes plain :class:`~privpix.data.ImageSet` objects (originals and releases in the same order),
so it runs against any mechanism. Conventions: the mechanism released a *training* split (``train`` →
``rel_train``) and a *test* split (``test`` → ``rel_test``) with the same settings; attacks are scored on the
test split, and an adversary that learns from released data learns from the training split (a disjoint set
of images, of the same people where the dataset has subjects).

* :func:`reidentification`: link each released test image to its source among all test originals, by
  nearest neighbour in pixel space, in PCA space (fitted on the originals), and through a learned matcher
  (a ridge model of the mechanism's forward map, fitted on the training pairs: each release is linked to
  the nearest predicted release of an original); top-1 rate against chance 1/n, and the best of the three
  (privacy is the worst case over attacks). With subjects (face sets), also *identity* re-identification:
  a classifier trained on the original training images of the subjects names the subject of each released
  test image.
* :func:`attribute_inference`: the weak adversary (trained on original training images) and the strong
  adversary (trained on released training images) predict an attribute of released test images.
* :func:`membership_inference`: was an image among those the mechanism processed or was fitted on? Scores
  from the published release (distance to the closest released image, residual from the release's
  principal subspace) and, for a mechanism fitted on the members, the loss of querying it; AUC and the
  true-positive rate at 1 % and 0.1 % false positives.
* :func:`reconstruction`: ridge regression (and optionally a small CNN) from release back to original,
  trained on the training pairs; PSNR / SSIM of its output on the test split.

Each returns a flat ``dict`` of floats, ready to go into a result row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.neighbors import NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.evaluation.linkage import reidentification_rate
from privpix.evaluation.quality import psnr, ssim


def _flat(s: ImageSet) -> np.ndarray:
    return s.flat().astype(np.float32)


def _check_pair(original: ImageSet, released: ImageSet, what: str) -> None:
    if len(original) != len(released) or original.shape != released.shape:
        raise ParameterError(
            f"{what}: originals {len(original)}×{original.shape} and release {len(released)}×{released.shape} "
            "must pair up image by image"
        )


def _pca(n_components: int, n: int, p: int, seed: int) -> PCA:
    return PCA(n_components=max(1, min(n_components, n - 1, p)), svd_solver="randomized", random_state=seed)


def _classifier(seed: int):
    """PCA + standardised multinomial logistic regression: a fast, strong-enough adversary for any label."""
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, C=1.0, random_state=seed))


def reidentification(
    test: ImageSet,
    rel_test: ImageSet,
    train: ImageSet | None = None,
    rel_train: ImageSet | None = None,
    n_components: int = 50,
    seed: int = 0,
) -> dict[str, float]:
    """Top-1 linkage rates (see the module docstring); keys ``reid_pixel``, ``reid_pca``, ``reid_learned``
    (only with the training pairs), ``reid_best`` (the largest of them), ``reid_chance``, and with subjects
    ``identity_reid`` and ``identity_chance``."""
    _check_pair(test, rel_test, "reidentification")
    a, b = _flat(rel_test), _flat(test)
    out = {"reid_pixel": reidentification_rate(a, b), "reid_chance": 1.0 / len(test)}
    pca = _pca(n_components, len(b), b.shape[1], seed).fit(b)
    out["reid_pca"] = reidentification_rate(pca.transform(a), pca.transform(b))
    if train is not None and rel_train is not None:
        _check_pair(train, rel_train, "reidentification (training pairs)")
        # The matcher learns the mechanism's forward map (original → release, ridge between PCA coordinates
        # of each side) from the training pairs, predicts how every test original would look released, and
        # links each release to the nearest prediction: it undoes deterministic transforms (blur, SVD
        # truncation) as well as it averages over noise.
        # Both sides in the originals' PCA coordinates: a PCA of noisy releases would keep noise directions.
        po = _pca(n_components, len(train), b.shape[1], seed).fit(_flat(train))
        forward = Ridge(alpha=1.0).fit(po.transform(_flat(train)), po.transform(_flat(rel_train)))
        out["reid_learned"] = reidentification_rate(po.transform(a), forward.predict(po.transform(b)))
    # Privacy is the worst case over attacks: the headline rate is the strongest linkage found.
    out["reid_best"] = max(v for k, v in out.items() if k in ("reid_pixel", "reid_pca", "reid_learned"))
    if train is not None and rel_train is not None:
        if train.subjects is not None and test.subjects is not None:
            ids = identity_reidentification(train, rel_test, n_components, seed)
            out.update(ids)
    return out


def identity_reidentification(
    train: ImageSet, rel_test: ImageSet, n_components: int = 50, seed: int = 0
) -> dict[str, float]:
    """A classifier trained on original images of the subjects (``train.subjects``) names the subject of each
    released image (``rel_test.subjects`` is the truth). Keys ``identity_reid``, ``identity_chance``."""
    if train.subjects is None or rel_test.subjects is None:
        raise ParameterError("identity re-identification needs subjects on both splits")
    x = _flat(train)
    pca = _pca(n_components, len(x), x.shape[1], seed).fit(x)
    clf = _classifier(seed).fit(pca.transform(x), train.subjects)
    acc = float(np.mean(clf.predict(pca.transform(_flat(rel_test))) == rel_test.subjects))
    return {"identity_reid": acc, "identity_chance": 1.0 / len(np.unique(train.subjects))}


def attribute_values(images: ImageSet, attribute: str) -> np.ndarray:
    """``label``/``class``, ``subject``/``identity``, or an attribute name (e.g. CelebA ``Male``)."""
    if attribute in ("label", "class"):
        values = images.labels
    elif attribute in ("subject", "identity"):
        values = images.subjects
    else:
        values = images.attributes.get(attribute)
    if values is None:
        known = ["label"] * (images.labels is not None) + ["subject"] * (images.subjects is not None)
        raise ParameterError(
            f"attribute {attribute!r} is not in {images.source or 'the data'}; known: "
            + ", ".join(known + sorted(images.attributes))
        )
    return np.asarray(values)


def attribute_inference(
    train: ImageSet,
    rel_train: ImageSet,
    test: ImageSet,
    rel_test: ImageSet,
    attribute: str = "label",
    n_components: int = 50,
    seed: int = 0,
) -> dict[str, float]:
    """Weak and strong adversary accuracy on ``attribute`` of the released test images, and the majority
    rate. Keys ``attr_weak``, ``attr_strong``, ``attr_majority`` (suffixed by nothing: one attribute per
    call; the caller names it)."""
    _check_pair(train, rel_train, "attribute_inference (train)")
    _check_pair(test, rel_test, "attribute_inference (test)")
    y_tr, y_te = attribute_values(train, attribute), attribute_values(test, attribute)
    if len(np.unique(y_tr)) < 2:
        raise ParameterError(f"attribute {attribute!r} takes one value only in the training split")
    q = _flat(rel_test)
    res: dict[str, float] = {}
    for key, source in (("attr_weak", _flat(train)), ("attr_strong", _flat(rel_train))):
        pca = _pca(n_components, len(source), source.shape[1], seed).fit(source)
        clf = _classifier(seed).fit(pca.transform(source), y_tr)
        res[key] = float(np.mean(clf.predict(pca.transform(q)) == y_te))
    _, counts = np.unique(y_te, return_counts=True)
    res["attr_majority"] = float(counts.max() / len(y_te))
    return res


def _mia_scores(score_in: np.ndarray, score_out: np.ndarray) -> dict[str, float]:
    """AUC and TPR at 1 % / 0.1 % FPR for "higher score = member"."""
    y = np.r_[np.ones(len(score_in)), np.zeros(len(score_out))]
    s = np.r_[score_in, score_out]
    fpr, tpr, _ = roc_curve(y, s)
    return {
        "auc": float(roc_auc_score(y, s)),
        "tpr_at_1pct_fpr": float(np.interp(0.01, fpr, tpr)),
        "tpr_at_0.1pct_fpr": float(np.interp(0.001, fpr, tpr)),
    }


def membership_inference(
    members: ImageSet,
    released_members: ImageSet,
    non_members: ImageSet,
    query: Any | None = None,
    n_components: int = 20,
    seed: int = 0,
) -> dict[str, float]:
    """Membership attacks against the publication ``released_members`` of ``members``; ``non_members`` are
    images of the same distribution that were not published.

    * ``mia_dcr``: score = minus the distance to the closest released image;
    * ``mia_subspace``: score = minus the residual of the image from the top principal subspace of the
      release (a basis fitted on the private images, as Zhang et al. 2022's, leaves its members closer to it);
    * ``mia_loss`` (only with ``query``, a callable ImageSet → released ImageSet for a mechanism *fitted on
      the members*): score = minus the distortion of querying it, ‖query(z) − z‖².

    Keys ``<attack>_auc``, ``<attack>_tpr_at_1pct_fpr``, ``<attack>_tpr_at_0.1pct_fpr``.
    """
    _check_pair(members, released_members, "membership_inference")
    if non_members.shape != members.shape:
        raise ParameterError("membership_inference: members and non-members must have the same image shape")
    r = _flat(released_members)
    z_in, z_out = _flat(members), _flat(non_members)
    nn = NearestNeighbors(n_neighbors=1, algorithm="brute").fit(r)
    out: dict[str, float] = {}
    for key, value in _mia_scores(-nn.kneighbors(z_in)[0][:, 0], -nn.kneighbors(z_out)[0][:, 0]).items():
        out[f"mia_dcr_{key}"] = value
    pca = _pca(n_components, len(r), r.shape[1], seed).fit(r)

    def residual(z: np.ndarray) -> np.ndarray:
        return np.linalg.norm(z - pca.inverse_transform(pca.transform(z)), axis=1)

    for key, value in _mia_scores(-residual(z_in), -residual(z_out)).items():
        out[f"mia_subspace_{key}"] = value
    if query is not None:
        loss_in = ((_flat(query(members)) - z_in) ** 2).sum(1)
        loss_out = ((_flat(query(non_members)) - z_out) ** 2).sum(1)
        for key, value in _mia_scores(-loss_in, -loss_out).items():
            out[f"mia_loss_{key}"] = value
    return out


def encoder_membership(
    encoder: Any,
    members: ImageSet,
    non_members: ImageSet,
    reference: ImageSet,
) -> dict[str, float]:
    """Was an image among those a DCAConv encoder was fitted on? (In Wang & Chang 2020 the data user fits the
    filters on labelled images and hands them to every owner, so anyone can run them.)

    DCA chooses filters that shrink within-class scatter of the *fitting* images' patches, so a member's
    first-layer responses should separate its class better than a non-member's do. The attacker holds
    labelled ``reference`` images (not members) to estimate each class's mean response map, and scores a
    candidate by its margin: the distance to the nearest other class's mean map minus the distance to its
    own class's. Labels of the candidates are known (Wang & Chang 2020's protocol sends them in the clear).
    Keys ``mia_encoder_auc``, ``…_tpr_at_1pct_fpr``, ``…_tpr_at_0.1pct_fpr``.
    """
    if encoder.first_layer_responses(reference.subset([0])) is None:
        raise ParameterError("encoder_membership needs a fitted encoder with learnt filters (such as DCAConv)")
    for name, s in (("members", members), ("non_members", non_members), ("reference", reference)):
        if s.labels is None:
            raise ParameterError(f"encoder_membership: {name} need labels")

    def responses(s: ImageSet) -> np.ndarray:
        return encoder.first_layer_responses(s)

    def labels(s: ImageSet) -> np.ndarray:
        assert s.labels is not None  # every set was checked above
        return s.labels

    ref = responses(reference)
    means = {c: ref[labels(reference) == c].mean(axis=0) for c in np.unique(labels(reference))}

    classes = np.array(sorted(means))
    centres = np.stack([means[c] for c in classes])

    def score(s: ImageSet) -> np.ndarray:
        y = labels(s)
        if not set(np.unique(y)) <= set(means):
            raise ParameterError("encoder_membership: the reference images must cover every candidate's class")
        dist = np.linalg.norm(responses(s)[:, None, :] - centres[None], axis=2)  # (n, classes)
        own = dist[np.arange(len(s)), np.searchsorted(classes, y)]
        other = np.where(classes[None] == np.asarray(y)[:, None], np.inf, dist).min(axis=1)
        return other - own

    return {f"mia_encoder_{k}": v for k, v in _mia_scores(score(members), score(non_members)).items()}


def reconstruction(
    train: ImageSet,
    rel_train: ImageSet,
    test: ImageSet,
    rel_test: ImageSet,
    cnn_epochs: int = 0,
    n_components: int = 100,
    seed: int = 0,
) -> dict[str, float]:
    """Invert the release: ridge regression (in PCA coordinates of both sides) and, with ``cnn_epochs`` > 0,
    a small convolutional network, trained on the training pairs. Keys ``recon_ridge_psnr``,
    ``recon_ridge_ssim`` (and ``recon_cnn_*``), plus for comparison ``release_psnr`` / ``release_ssim`` of the
    release itself and ``recon_baseline_*`` of the mean training image (no release at all)."""
    _check_pair(train, rel_train, "reconstruction (train)")
    _check_pair(test, rel_test, "reconstruction (test)")
    xo, xr = _flat(train), _flat(rel_train)
    pin = _pca(n_components, len(xr), xr.shape[1], seed).fit(xr)
    pout = _pca(n_components, len(xo), xo.shape[1], seed).fit(xo)
    ridge = Ridge(alpha=1.0).fit(pin.transform(xr), pout.transform(xo))
    guess = np.clip(pout.inverse_transform(ridge.predict(pin.transform(_flat(rel_test)))), 0, 1)
    orig = test.as_float()
    shape = orig.shape
    out = _quality("recon_ridge", orig, guess.reshape(shape))
    out.update(_quality("release", orig, rel_test.as_float()))
    # What an attacker gets with no release at all: the mean training image for every test image. Inversion
    # above this line is information taken from the release.
    out.update(_quality("recon_baseline", orig, np.broadcast_to(train.as_float().mean(axis=0), shape)))
    if cnn_epochs > 0:
        out.update(_quality("recon_cnn", orig, _cnn_inverse(train, rel_train, rel_test, cnn_epochs, seed)))
    return out


def _quality(prefix: str, orig: np.ndarray, out: np.ndarray) -> dict[str, float]:
    p = psnr(orig, out)
    p = p[np.isfinite(p)]
    return {
        f"{prefix}_psnr": float(p.mean()) if len(p) else float("inf"),
        f"{prefix}_ssim": float(ssim(orig, out).mean()),
    }


def _cnn_inverse(train: ImageSet, rel_train: ImageSet, rel_test: ImageSet, epochs: int, seed: int) -> np.ndarray:
    """A three-layer residual CNN (3×3 convolutions, 32 channels) from release to original, Adam on the MSE;
    returns its (n, h, w, c) output on ``rel_test``."""
    from privpix.errors import require_torch

    torch = require_torch("the CNN reconstruction attack")
    from privpix import training

    c = train.shape[2]
    nn = torch.nn
    net = training.build(
        lambda: nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, c, 3, padding=1),
        ),
        training.generator(seed),
    )  # fmt: skip

    def t(s: ImageSet):
        return torch.from_numpy(np.ascontiguousarray(np.moveaxis(s.as_float(), 3, 1)))

    x, y = t(rel_train), t(train)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(idx):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(x[idx] + net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return loss

    training.fit(step, len(x), epochs=epochs, batch_size=32, generator=training.generator(seed), model=net)
    with torch.no_grad():
        xt = t(rel_test)
        out = torch.cat([xb + net(xb) for xb in xt.split(256)]).clamp(0, 1)
    return np.moveaxis(out.numpy(), 1, 3)
