"""``ppsgan``, ``ppapnet``, ``acgan``: the trained models of Kim & Yang 2020 as registered mechanisms (see
:mod:`.ppsgan`)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import About, Capabilities, ConformanceCase
from privpix.mechanisms.kinds import ImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.trained import TrainedModel
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, torch_seed

# The training parameters and the model file's description keys they are recorded under.
_TRAINING = {
    "noise_epsilon": "epsilon",
    "noise_delta": "delta",
    "d": "d",
    "width": "width",
    "ae_epochs": "ae_epochs",
    "epochs": "epochs",
    "batch_size": "batch_size",
    "n_critic": "n_critic",
    "recipe": "recipe",
    "resensitize_every": "resensitize_every",
}


class _TrainedGAN(TrainedModel, ImageMechanism):
    """Release images through a trained PPSGAN, PPAPNet or ACGAN: the model file named by ``model``, or a model that
    :meth:`fit` trains on the images it is given (``model`` empty). Training is this mechanism's fit:
    ``privpix fit --method ppsgan --dataset mnist:train --output m.pt`` trains and writes the file, and every
    training parameter below is recorded in it. With a model file, the training parameters in force are the
    file's (``get_params`` reports them after :meth:`fit`), and giving a different one is an error."""

    about = About(paper="Kim & Yang 2020", guarantee_model="empirical", uses_epsilon=False, use="paper")
    noise_epsilon: float = param(1.0, "training: the paper's ε, a noise-scale knob (not a DP ε)", minimum=1e-12)
    noise_delta: float = param(0.0, "training: the paper's δ knob; 0 → Laplace, > 0 → Gaussian", minimum=0.0)
    d: int = param(128, "training: latent size d", minimum=1)
    width: int = param(128, "training: first conv width (paper 128; 32 on a CPU)", minimum=1)
    ae_epochs: int = param(5, "training: autoencoder pretraining epochs", minimum=0)
    epochs: int = param(5, "training: adversarial epochs (Algorithm 1)", minimum=1)
    batch_size: int = param(256, "training: minibatch size", minimum=1)
    n_critic: int = param(5, "training: critic steps per generator step", minimum=1)
    recipe: str = param(
        "paper",
        "training: paper (§3.4 as written) or authors (the released code's losses)",
        choices=("paper", "authors"),
    )
    resensitize_every: int = param(1000, "training, recipe=authors: generator steps between s_e updates", minimum=1)

    training = _TRAINING
    # A subclass's one line on where its noise goes (none for a plain GAN).
    noise_caveat: str | None = None
    needs_labels = False

    def _check(self) -> None:
        if self.noise_delta >= 1:
            raise ParameterError(f"{self.name}: noise_delta must be < 1, got {self.noise_delta}")

    def capabilities(self) -> Capabilities:
        shape = None
        if self.meta_ is not None and self.is_fitted:
            c, h, w = self.meta_["shape"]
            shape = (h, w, c)
        return Capabilities(
            fits_on=self._fits_on(), fixed_shape=shape, needs_labels=self.needs_labels, **self._secure()
        )

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A tiny model trained on 50 built-in digits (seconds), released on 12 of them: once trained by fit,
        once written to a model file and loaded from it."""
        from privpix.data import load_dataset

        data = load_dataset("builtin-mnist").subset(np.arange(0, 5000, 100))
        assert isinstance(data, ImageSet)  # the built-in digits are images
        tiny = {"d": 8, "width": 4, "ae_epochs": 1, "epochs": 1, "batch_size": 16, "n_critic": 1}
        path = cls(**tiny).fit(data, seed=0).save_model(workdir / f"{cls.name}.pt")
        return [ConformanceCase(tiny, data), ConformanceCase({"model": str(path)}, data.subset(np.arange(12)))]

    def _read_model(self, path: str):
        from privpix.mechanisms.neural.ppsgan import load_model

        gen, meta = load_model(path)
        if meta["kind"] != self.name:
            raise ParameterError(f"{path}: a {meta['kind']} model, not {self.name}")
        return gen, meta

    def _train(self, data, seed: int | None):
        """Train on labelled images ((h, w) 28 or 32) with the training parameters (``seed`` None: 0)."""
        seed = 0 if seed is None else seed
        if not isinstance(data, ImageSet) or data.labels is None:
            raise ParameterError(f"{self.name}: training needs labelled images")
        from privpix.mechanisms.neural.ppsgan import train_ppsgan

        t0 = time.perf_counter()
        train = {key: getattr(self, param) for param, key in _TRAINING.items()}
        gen, hist = train_ppsgan(self.name, data.as_float(), data.labels, seed=seed, **train)
        hist.pop("autoencoder", None)  # tensors; the model file holds the trained weights
        h, w, c = data.shape
        meta = {
            "shape": [c, h, w],
            **train,
            "seed": seed,
            "history": hist,
            "fitted_on": f"{data.source or 'the given images'} ({len(data)} images, seed {seed})",
            "train_seconds": round(time.perf_counter() - t0, 1),
        }
        return gen, meta

    def _write_model(self, path: Path) -> Path:
        from privpix.mechanisms.neural.ppsgan import save_model

        gen, meta = self._load()
        return save_model(path, gen, {k: v for k, v in meta.items() if k not in ("kind", "classes", "format")})

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """Empirical only: ε and δ of the model file are noise-scale knobs, not a DP guarantee."""
        _, meta = self._load()
        fitted_on = meta.get("fitted_on", "unrecorded data")
        caveats: tuple[str, ...]
        if self.noise_caveat is None:
            caveats = (
                f"no formal privacy guarantee: images are drawn from a GAN trained without DP on {fitted_on}; a GAN "
                "can memorise its training images",
            )
        else:
            caveats = (
                f"no formal privacy guarantee: the model's ε = {meta.get('epsilon')} and δ = {meta.get('delta')} only "
                "scale the latent noise; its sensitivity s_e is computed from the training images and "
                + self.noise_caveat,
                f"the model was fitted on {fitted_on}; privacy is what attacks measure",
            )
        measured = {k: float(v) for k, v in meta.get("measured", {}).items()}
        return Guarantee(model="empirical", unit="n/a", caveats=caveats, measured=measured)

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        from privpix.mechanisms.neural.ppsgan import anonymize

        gen, meta = self._load()
        c, h, w = meta["shape"]
        if images.shape != (h, w, c):
            raise ParameterError(
                f"{self.name}: the model takes {h}x{w} images with {c} channel(s), got {images.shape}; "
                f"resize with --size {h}x{w}"
            )
        if self.needs_labels and images.labels is None:
            raise ParameterError(
                f"{self.name} draws one synthetic image per input of the same class: the images need labels"
            )
        return np.clip(anonymize(gen, images.as_float(), images.labels, seed=torch_seed(rng)), 0.0, 1.0)


@register
class PPSGAN(_TrainedGAN):
    name = "ppsgan"
    summary = "PPSGAN selective latent anonymization with self-attention noise (Kim & Yang 2020); empirical only"
    about = replace(
        _TrainedGAN.about,
        paper="Kim & Yang 2020 (PPSGAN)",
        soundness="empirical only: ε, δ scale the latent noise; s_e is data-derived",
    )
    noise_caveat = "the self-attention reweights the noise per image"


@register
class PPAPNet(_TrainedGAN):
    name = "ppapnet"
    summary = "PPAPNet: noise on the whole latent vector (Kim & Yang 2020's baseline); empirical only"
    about = replace(
        _TrainedGAN.about,
        paper="Kim & Yang 2020 (PPAPNet baseline)",
        soundness="empirical only: ε, δ scale the latent noise; s_e is data-derived",
    )
    noise_caveat = "the noise is on the whole latent vector"


@register
class ACGAN(_TrainedGAN):
    name = "acgan"
    summary = "ACGAN class-conditional synthetic images (Kim & Yang 2020's baseline); empirical only"
    about = replace(
        _TrainedGAN.about,
        paper="Kim & Yang 2020 (ACGAN baseline)",
        soundness="empirical only: a non-private GAN trained on the data",
    )
    needs_labels = True
