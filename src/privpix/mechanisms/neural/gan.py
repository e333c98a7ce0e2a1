"""``ppsgan``, ``ppapnet``, ``acgan``: paper 004's trained models as registered mechanisms (see :mod:`.ppsgan`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Capabilities, ConformanceCase, Mechanism, Param, register
from privpix.noise import RNG, torch_seed


class _TrainedGAN(Mechanism):
    """Release images through a model file written by ``privpix train-ppsgan``."""

    paper = "004"
    guarantee_model = "empirical"
    uses_epsilon = False
    params = (Param("model", str, "", "model file (privpix train-ppsgan --model KIND)"),)

    # A subclass's one line on where its noise goes (none for a plain GAN).
    noise_caveat: str | None = None
    generator_ = None
    meta_: dict | None = None
    loaded_from_: str | None = None

    def _check(self) -> None:
        if not self.model:
            raise ParameterError(f"{self.name}: give the trained model file with --param model=FILE")

    def capabilities(self) -> Capabilities:
        shape = None
        if self.meta_ is not None and self.loaded_from_ == self.model:
            c, h, w = self.meta_["shape"]
            shape = (h, w, c)
        return Capabilities(fits_on="model-file", fixed_shape=shape, needs_labels=self.needs_labels)

    needs_labels = False

    def _load(self):
        # A changed ``model`` parameter loads the new file: fitted state follows the parameters in force.
        if self.generator_ is None or self.loaded_from_ != self.model:
            from privpix.mechanisms.neural.ppsgan import load_model

            gen, meta = load_model(self.model)
            if meta["kind"] != self.name:
                raise ParameterError(f"{self.model}: a {meta['kind']} model, not {self.name}")
            self.generator_, self.meta_, self.loaded_from_ = gen, meta, self.model
        return self.generator_, self.meta_

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A tiny model trained on 50 built-in digits (seconds), released on 12 of them."""
        from privpix.data import load_dataset
        from privpix.mechanisms.neural.ppsgan import fit_model_file

        data = load_dataset("builtin-mnist").subset(np.arange(0, 5000, 100))
        tiny = {"d": 8, "width": 4, "ae_epochs": 1, "epochs": 1, "batch_size": 16, "n_critic": 1}
        path, _ = fit_model_file(cls.name, data, workdir / f"{cls.name}.pt", fitted_on="50 built-in digits", **tiny)
        return [ConformanceCase({"model": str(path)}, data.subset(np.arange(12)))]

    def fit(self, data: ImageSet | None = None) -> _TrainedGAN:
        """Load the trained model file (training is ``privpix train-ppsgan``)."""
        self._validate()
        self._load()
        return self

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """Empirical only: ε and δ of the model file are noise-scale knobs, not a DP guarantee."""
        _, meta = self._load()
        fitted_on = meta.get("fitted_on", "unrecorded data")
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
    summary = "PPSGAN selective latent anonymization with self-attention noise (paper 004); empirical only"
    noise_caveat = "the self-attention reweights the noise per image"
    soundness = "empirical only: ε, δ scale the latent noise; s_e is data-derived"


@register
class PPAPNet(_TrainedGAN):
    name = "ppapnet"
    summary = "PPAPNet: noise on the whole latent vector (paper 004's baseline); empirical only"
    noise_caveat = "the noise is on the whole latent vector"
    soundness = "empirical only: ε, δ scale the latent noise; s_e is data-derived"


@register
class ACGAN(_TrainedGAN):
    name = "acgan"
    summary = "ACGAN class-conditional synthetic images (paper 004's baseline); empirical only"
    needs_labels = True
    soundness = "empirical only: a non-private GAN trained on the data"
