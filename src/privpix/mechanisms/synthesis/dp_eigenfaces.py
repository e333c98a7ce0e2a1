"""``dp-eigenfaces``: a Gaussian per class in a public face basis, its moments released once with DP noise.

Why: DP-MERF's generator, fitted on 3,357 CelebA faces, draws coloured blobs at every ε (its random features of
3,072 pixel values carry little of a face's structure, and the subset is small). Faces, aligned, live near a
low-dimensional subspace that a **public** face set already spans (eigenfaces, Turk & Pentland 1991). Here the
public set gives that subspace for free, and the private set pays only for where its faces sit in it: the mean and
covariance of their coefficients, per class. Samples are faces at any ε: the noise moves the class means and
shapes, never off the span of real faces.

The construction (what is public, what is released, the sensitivity):

1. **Public, no ε**: from the public set P (named by ``public``; LFW, ORL, Yale here) at the private image shape:
   its mean c (d,), its first k principal directions V (k, d) (``components``), and a scale C, the
   ``clip_quantile`` quantile of the public coefficient norms ‖V(p − c)‖. The public set is not protected and must
   be distinct from the private one (checked as every public set in privpix: identical images and near copies,
   :mod:`privpix.data.overlap`).
2. Each private image x gives z = V(x − c)/C, clipped to ‖z‖ ≤ 1, and the feature vector
   φ(x) = [z, u(z)]/√2, where u(z) holds the upper triangle of z·zᵀ with the off-diagonal entries times √2, so
   ‖u(z)‖ = ‖z zᵀ‖_F = ‖z‖² ≤ 1 and ‖φ(x)‖ ≤ 1 (renormalised to at most 1 after the float arithmetic).
3. The release is the embed-once pipeline's (:mod:`~privpix.mechanisms.synthesis.embedding`): the mean over the
   private set of [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)], L2 sensitivity 2/n under replace-one,
   Gaussian noise calibrated by the analytic Gaussian mechanism (or, with ``secure=true``, exact discrete Gaussian
   noise on a fixed-point sum, RDP-calibrated). One release, one (ε, δ).
4. **Post-processing, no ε**: per class k, from the noisy class-wise mean m_k and the DP proportion p̂_k, the
   coefficient mean μ_k = √2·m_k[z]/p̂_k and second moment S_k = √2·m_k[u]/p̂_k (unpacked, symmetric), the
   covariance S_k − μ_k μ_kᵀ with its negative eigenvalues set to 0. A synthetic image of class k is
   clip(c + C·(μ_k + L_k ε)·V, 0, 1), ε ~ N(0, I_k), L_k L_kᵀ the covariance.

Guarantee: central (ε, δ)-DP for one image and its label of the private set (replace-one; n, the shape, the K
classes and the public set are public). The audit tests the released embedding as it does dp-merf's
(``released_statistic``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from privpix.data.content_memo import by_content
from privpix.data.imageset import ImageSet
from privpix.data.overlap import CHECK_CAVEAT
from privpix.errors import ParameterError
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.synthesis.embedding import GENERATOR_PARAMS, MeanEmbeddingSynthesizer

FORMAT = "privpix-dp-eigenfaces-1"
TRAINING = ("components", "clip_quantile", "public", "n_classes", "count_share", "secure")


def feature_width(k: int) -> int:
    """D = k + k(k + 1)/2: the coefficients and the upper triangle of their outer product."""
    return k + k * (k + 1) // 2


# The same public set gives the same basis to every fit in a process: a bench's fits at each ε, an audit's refits,
# a model's fit and its evaluation. Computing it (a Gram matrix and its eigenvectors) takes 0.2 s for 2,000 faces of
# 16×16 and seconds at 32×32, against 10 ms to hash the rows.
@by_content(kept=4)
def public_basis(x: np.ndarray, k: int, quantile: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(centre (d,), basis (k, d), scale C) from public rows ``x`` (m, d) in [0, 1]: their mean, first k principal
    directions and the ``quantile`` of their coefficient norms. Reads public images only. The arrays are read-only
    (the same rows give the same arrays, computed once per process)."""
    centre, basis, scale = _public_basis(x, k, quantile)
    centre.setflags(write=False)
    basis.setflags(write=False)
    return centre, basis, scale


def _public_basis(x: np.ndarray, k: int, quantile: float) -> tuple[np.ndarray, np.ndarray, float]:
    x = np.asarray(x, dtype=np.float64)
    if k > min(len(x) - 1, x.shape[1]):
        raise ParameterError(
            f"dp-eigenfaces: components={k} needs more public images and pixels than the {len(x)} images of "
            f"{x.shape[1]} values given (at most {min(len(x) - 1, x.shape[1])})"
        )
    centre = x.mean(axis=0)
    xc = x - centre
    # The top k right singular vectors of xc, from the eigenvectors of the smaller Gram matrix (m × m or d × d):
    # an order of magnitude faster than a full SVD of a wide matrix.
    if len(xc) < xc.shape[1]:
        values, vectors = np.linalg.eigh(xc @ xc.T)
        top = np.argsort(values)[::-1][:k]
        basis = vectors[:, top].T @ xc
        basis /= np.linalg.norm(basis, axis=1, keepdims=True)
    else:
        values, vectors = np.linalg.eigh(xc.T @ xc)
        basis = vectors[:, np.argsort(values)[::-1][:k]].T
    # A component's sign is arbitrary: fix it (largest entry positive), so the basis does not depend on LAPACK's.
    basis *= np.sign(basis[np.arange(k), np.abs(basis).argmax(axis=1)])[:, None]
    scale = float(np.quantile(np.linalg.norm(xc @ basis.T, axis=1), quantile))
    if not scale > 0:
        raise ParameterError("dp-eigenfaces: the public images do not vary; no basis to draw faces in")
    return centre, basis, scale


def featurizer(centre: np.ndarray, basis: np.ndarray, scale: float):
    """φ as a torch callable on rows (m, d) float32 → (m, D), ‖φ‖ ≤ 1 for every row (the module docstring)."""
    from privpix.training import torch

    k = len(basis)
    iu = torch.triu_indices(k, k)
    weight = torch.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    c = torch.from_numpy(centre.astype(np.float32))
    b = torch.from_numpy(np.ascontiguousarray(basis.T, dtype=np.float32))

    def phi(x):
        z = (x - c) @ b / scale
        z = z / z.norm(dim=1, keepdim=True).clamp_min(1.0)
        out = torch.cat([z, z[:, iu[0]] * z[:, iu[1]] * weight], dim=1) / math.sqrt(2.0)
        return out / out.norm(dim=1, keepdim=True).clamp_min(1.0)

    return phi


def class_gaussians(means: np.ndarray, probs: np.ndarray, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(μ (K, k), L (K, k, k)) from the noisy class-wise feature means (K, D) and the DP proportions (K,):
    post-processing (module docstring, step 4). A class with no proportion is never drawn; its rows stay 0."""
    n_classes = len(probs)
    mu = np.zeros((n_classes, k))
    factors = np.zeros((n_classes, k, k))
    iu = np.triu_indices(k)
    off = iu[0] != iu[1]
    for cls in range(n_classes):
        if not probs[cls] > 0:
            continue
        m = math.sqrt(2.0) * means[cls] / max(float(probs[cls]), 1.0 / n)
        mu[cls] = m[:k]
        upper = m[k:].copy()
        upper[off] /= math.sqrt(2.0)
        second = np.zeros((k, k))
        second[iu] = upper
        second = second + second.T - np.diag(np.diag(second))
        values, vectors = np.linalg.eigh(second - np.outer(mu[cls], mu[cls]))
        factors[cls] = vectors * np.sqrt(np.maximum(values, 0.0))
    return mu, factors


@register
class DPEigenfaces(
    MeanEmbeddingSynthesizer, params_before="n_classes", drop_params=(*GENERATOR_PARAMS, "public_epochs")
):
    """A Gaussian per class in the span of a public set's principal components; one noisy release of the private
    set's class-wise coefficient moments (see the module docstring for the construction and the guarantee).
    ``public`` is required when fitting; a model file carries the basis, so a release from it needs no public set."""

    name = "dp-eigenfaces"
    summary = ("public eigenfaces + one Gaussian release of the private class-wise coefficient moments → a Gaussian "
               "per class; (ε, δ)-DP per image, faces at any ε")  # fmt: skip
    about = replace(
        MeanEmbeddingSynthesizer.about,
        paper="privpix: DP moments in a public PCA basis (eigenfaces: Turk & Pentland 1991)",
        soundness="sound (ε, δ)-DP per image (replace-one, n public); the public set is not protected",
        recommended_for="a face folder of a few thousand images when the public set's faces must not appear in the "
        "release (with a public face set, e.g. public=lfw-gender)",
        recommended_on=("celeba",),
        recommended_params=(("public", "lfw-gender"),),
    )
    components: int = param(
        50,
        "k: principal components of the public set the images are drawn in (the "
        "release holds k + k(k+1)/2 values per class)",
        minimum=1,
    )
    clip_quantile: float = param(
        0.9,
        "each private image's coefficients are scaled by this quantile of the "
        "public coefficient norms and clipped to norm 1",
        minimum=1e-6,
    )
    public: str = param(
        "",
        "required to fit: public images spanning the synthetic ones (a dataset name such "
        "as lfw-gender, orl, yale, or an image folder; labels not needed). It must really be public and "
        "distinct from the private set: it is not protected",
    )
    training: ClassVar[dict[str, str]] = {k: k for k in TRAINING}
    FORMAT = FORMAT
    features_word = "eigenface-moment"
    norm_claim = "has norm at most 1"
    public_parts = "the public set's basis"
    conformance_tiny: ClassVar[dict[str, Any]] = {"components": 6, "public": "digits"}
    # Drawing: one (k × d) product per image, about 0.03 ms for a 32×32 face on one core (a shard-planning hint).
    _seconds_per_value = 1e-8

    basis_: tuple[np.ndarray, np.ndarray, float] | None = None

    def _check_generator(self) -> None:
        """No generator parameters: the class Gaussians are computed, not trained."""

    def _check_features(self) -> None:
        if not self.clip_quantile <= 1:
            raise ParameterError(f"{self.name}: clip_quantile must be in (0, 1], got {self.clip_quantile}")

    def _check_shape(self, shape: tuple[int, int, int]) -> None:
        # Not the base's: it checks the trained generator's shape rules, which a computed Gaussian does not have.
        d = int(np.prod(shape))
        if self.components > d:
            raise ParameterError(f"{self.name}: components={self.components} exceeds the {d} values of an image")

    @classmethod
    def _feature_width(cls, meta: dict) -> int:
        return feature_width(int(meta["components"]))

    _labelled_public: ClassVar[bool] = False

    def _public_images(self, shape: tuple[int, int, int], private: ImageSet | None = None) -> ImageSet:
        if not self.public:
            raise ParameterError(
                f"{self.name}: needs public=… to fit: public images whose principal components span the synthetic "
                "ones (e.g. --param public=lfw-gender for faces); it is not protected and must not hold private images"
            )
        from privpix.mechanisms.synthesis.public import check_distinct, load_public

        # Labelled (mapped to the private set's classes) only for a subclass that releases the public images
        # themselves and only when fitting; the basis reads the pixels, which are the same either way.
        labelled = self._labelled_public and private is not None
        public = load_public(self.public, shape, max(self.n_classes, 1),
                             private.class_names if labelled and private is not None else None,
                             labelled=labelled)  # fmt: skip
        if private is not None:
            check_distinct(public, private, repr(self.public))
        return public

    def _public_set(self, data: ImageSet) -> ImageSet:
        public = self._public_images(data.shape, data)
        self._set_basis(public)
        return public

    def _set_basis(self, public: ImageSet) -> None:
        self.basis_ = public_basis(public.flat(), self.components, self.clip_quantile)

    def _featurizer(self, shape, seed):
        # No randomness: the basis is the public set's (``seed`` unused). A fresh copy (the audit's) reads it here.
        if self.basis_ is None or self.basis_[0].shape[0] != int(np.prod(shape)):
            self._set_basis(self._public_images(shape))
        return featurizer(*self.basis_), feature_width(self.components)

    def _generator_from(self, meta, means, probs, featurize, width, n, public, seed):
        from privpix.mechanisms.synthesis import embed_net
        from privpix.mechanisms.synthesis.public import fingerprint
        from privpix.training import torch

        assert self.basis_ is not None and public is not None
        centre, basis, scale = self.basis_
        mu, factors = class_gaussians(means, probs, self.components, n)
        meta.update(generator="gaussian", basis_source=public.source or self.public, basis_n=len(public),
                    basis_sha256=fingerprint(public), scale=scale)  # fmt: skip
        gen = embed_net.build_generator(meta, seed)
        with torch.no_grad():
            gen.centre.copy_(torch.from_numpy(centre.astype(np.float32)))
            gen.basis.copy_(torch.from_numpy(basis.astype(np.float32)))
            gen.scale.fill_(scale)
            gen.means.copy_(torch.from_numpy(mu.astype(np.float32)))
            gen.factors.copy_(torch.from_numpy(factors.astype(np.float32)))
        return gen

    def _read_model(self, path: str):
        self.basis_ = None  # the generator holds the basis; a fresh fit reads the public set again
        return super()._read_model(path)

    def _public_caveats(self, meta: dict | None) -> list[str]:
        out = [
            f"the basis (the mean, the first {self.components} principal components and the clipping scale) comes "
            f"from the public set {self.public or '(recorded in the model file)'!r}, which is not protected: it is "
            "assumed public and distinct from the private set. The synthetic images lie in its span; only the "
            "private coefficient moments are released with noise",
            CHECK_CAVEAT,
        ]
        if meta is not None and meta.get("basis_n"):
            out.append(f"public set: {meta['basis_source']}, {meta['basis_n']} images, sha256 "
                       f"{meta['basis_sha256'][:16]}…")  # fmt: skip
        return out
