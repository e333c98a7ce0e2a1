"""``ppsgan``, ``ppapnet``, ``acgan``: paper 004's trained models as registered mechanisms (see :mod:`.ppsgan`)."""

from __future__ import annotations

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Mechanism, Param, register
from privpix.noise import RNG, torch_seed


class _TrainedGAN(Mechanism):
    """Release images through a model file written by ``privpix train-ppsgan``."""

    paper = "004"
    model = "empirical"
    uses_epsilon = False
    params = (Param("model", str, "", "model file (privpix train-ppsgan --model KIND)"),)

    def _check(self) -> None:
        if not self.values["model"]:
            raise ParameterError(f"{self.name}: give the trained model file with --param model=FILE")
        self._gen = None

    def _load(self):
        if self._gen is None:
            from privpix.mechanisms.neural.ppsgan import load_model

            gen, meta = load_model(self.values["model"])
            if meta["kind"] != self.name:
                raise ParameterError(f"{self.values['model']}: a {meta['kind']} model, not {self.name}")
            self._gen, self._meta = gen, meta
        return self._gen, self._meta

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """Empirical only: ε and δ of the model file are noise-scale knobs, not a DP guarantee."""
        _, meta = self._load()
        if self.name == "acgan":
            caveats = (
                "no formal privacy guarantee: images are drawn from a GAN trained without DP on "
                f"{meta.get('fitted_on', 'unrecorded data')}; a GAN can memorise its training images",
            )
        else:
            caveats = (
                f"no formal privacy guarantee: the model's ε = {meta.get('epsilon')} and δ = {meta.get('delta')} only "
                "scale the latent noise; its sensitivity s_e is computed from the training images and "
                + ("the self-attention reweights the noise per image" if self.name == "ppsgan" else "the noise is on")
                + (" the whole latent vector" if self.name == "ppapnet" else ""),
                f"the model was fitted on {meta.get('fitted_on', 'unrecorded data')}; privacy is what attacks measure",
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
        if self.name == "acgan" and images.labels is None:
            raise ParameterError("acgan draws one synthetic image per input of the same class: the images need labels")
        return np.clip(anonymize(gen, images.as_float(), images.labels, seed=torch_seed(rng)), 0.0, 1.0)


@register
class PPSGAN(_TrainedGAN):
    name = "ppsgan"
    summary = "PPSGAN selective latent anonymization with self-attention noise (paper 004); empirical only"
    soundness = "empirical only: ε, δ scale the latent noise; s_e is data-derived"


@register
class PPAPNet(_TrainedGAN):
    name = "ppapnet"
    summary = "PPAPNet: noise on the whole latent vector (paper 004's baseline); empirical only"
    soundness = "empirical only: ε, δ scale the latent noise; s_e is data-derived"


@register
class ACGAN(_TrainedGAN):
    name = "acgan"
    summary = "ACGAN class-conditional synthetic images (paper 004's baseline); empirical only"
    soundness = "empirical only: a non-private GAN trained on the data"
