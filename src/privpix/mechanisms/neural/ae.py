"""``ae-obfuscator``: paper 003's trained obfuscator as a registered mechanism (see :mod:`.obfuscator`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Capabilities, ConformanceCase, Mechanism, Param, register
from privpix.noise import RNG, torch_seed


@register
class AEObfuscator(Mechanism):
    """Release images through a trained obfuscator with the provider's own f (K) and g (sigma2).

    f needs each image's true utility label, read from the ImageSet attribute named by ``utility`` (default:
    the feature the model was trained for), e.g. CelebA's ``Smiling``.
    """

    name = "ae-obfuscator"
    summary = "autoencoder obfuscator with adjustable f (K) and g (noise) (paper 003); empirical only"
    paper = "003"
    guarantee_model = "empirical"
    soundness = "empirical only: privacy is the measured adversary accuracy"
    uses_epsilon = False
    params = (
        Param("model", str, "", "obfuscator model file (privpix train-obfuscator)"),
        Param("sigma2", float, 0.0, "g: noise multiplier on the R output (× its mean |activation|)", minimum=0.0),
        Param("K", float, 3000.0, "f: the non-true class's log-probability is set to −K", minimum=0.0),
        Param("use_f", bool, True, "apply f (needs the utility labels)"),
        Param("utility", str, "", "attribute holding the utility labels (default: the model's)"),
        Param("keep_label", bool, True, "records: publish the utility label column beside the features"),
    )

    net_ = None
    meta_: dict | None = None
    loaded_from_: str | None = None

    def _check(self) -> None:
        if not self.model:
            raise ParameterError("ae-obfuscator: give the trained model file with --param model=FILE")

    def capabilities(self) -> Capabilities:
        # g's noise is the only randomness: with sigma2 = 0 the release is a deterministic function of the image.
        return Capabilities(fits_on="model-file", fixed_shape=(64, 64, 3), randomized=self.sigma2 > 0)

    def _load(self):
        if self.net_ is None or self.loaded_from_ != self.model:
            from privpix.mechanisms.neural.obfuscator import load_obfuscator

            self.net_, self.meta_ = load_obfuscator(self.model)
            self.loaded_from_ = self.model
        return self.net_, self.meta_

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A one-epoch image obfuscator on 20 random 64x64 colour images with a binary ``smile`` attribute."""
        from privpix.mechanisms.neural.obfuscator import save_obfuscator, train_obfuscator

        rng = np.random.default_rng(0)
        x = rng.random((20, 64, 64, 3), dtype=np.float32)
        y = np.arange(20) % 2
        net, hist = train_obfuscator("image", x[:16], y[:16], x[16:], y[16:], epochs=1, batch_size=8, seed=0)
        meta = {"utility": "smile", "private": "none", "fitted_on": "20 random images", "n_features": 0}
        path = save_obfuscator(workdir / "obfuscator.pt", net, {**meta, "history": hist})
        images = ImageSet((x * 255).astype(np.uint8), attributes={"smile": y})
        return [
            ConformanceCase({"model": str(path)}, images),
            ConformanceCase({"model": str(path), "use_f": False, "sigma2": 2.0}, images),
        ]

    def fit(self, data: ImageSet | None = None) -> AEObfuscator:
        """Load the trained model file (training is ``privpix train-obfuscator``)."""
        self._validate()
        self._load()
        return self

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """Empirical only, whatever the shape; carries the adversary accuracies measured into the model file."""
        _, meta = self._load()
        caveats = (
            "no formal privacy guarantee: privacy is measured as the accuracy of adversaries inferring the private "
            f"feature ({meta.get('private', 'unknown')}) from released data",
            f"trained to keep {meta.get('utility', 'the utility feature')}; the model file was fitted on "
            f"{meta.get('fitted_on', 'unrecorded data')}",
        )
        rows = meta.get("measured", [])
        settings = [r for r in rows if r["sigma2"] is not None]
        match = [r for r in settings if (r["sigma2"], r["K"], r["use_f"]) == (self.sigma2, self.K, self.use_f)]
        base = [r["weak"] for r in rows if r["sigma2"] is None]
        measured = {"adversary_accuracy_on_original": base[0]} if base else {}
        if match:
            measured.update({f"{k}_adversary_accuracy": match[0][k] for k in ("weak", "strong") if k in match[0]})
            measured["utility_accuracy"] = match[0]["utility"]
            caveats += ("measured on the model's validation split at these σ², K and f",)
        elif settings:
            done = ", ".join(f"σ²={r['sigma2']:g} K={r['K']:g}" for r in settings)
            caveats += (f"not measured at these settings (the model file has: {done})",)
        return Guarantee(model="empirical", unit="n/a", caveats=caveats, measured=measured)

    def _privatize_records(self, records: RecordSet, rng: RNG) -> pd.DataFrame:
        """Obfuscate UCI-Adult-style records with a ``tabular`` model: the model's one-hot/min–max columns
        (values in [0, 1]) plus the utility label column when ``keep_label``."""
        from privpix.mechanisms.neural.obfuscator import obfuscate
        from privpix.mechanisms.neural.records import encode_records

        net, meta = self._load()
        enc = meta.get("record_encoding")
        if net.kind != "tabular" or not enc:
            raise ParameterError(f"{self.model}: an {net.kind} model; use it on images, not records")
        x = encode_records(records, enc)
        labels = records.labels if self.use_f else None
        out = obfuscate(net, x, labels, sigma2=self.sigma2, K=self.K, use_f=self.use_f, seed=torch_seed(rng))
        frame = pd.DataFrame(np.clip(out, 0, 1), columns=enc["columns"])
        if self.keep_label:
            frame[records.label_column] = records.frame[records.label_column].to_numpy()
        return frame

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        from privpix.mechanisms.neural.obfuscator import obfuscate

        net, meta = self._load()
        if net.kind != "image":
            raise ParameterError(f"{self.model}: a {net.kind} model; use it on records, not images")
        if images.shape != (64, 64, 3):
            raise ParameterError(
                f"ae-obfuscator: the model takes 64x64 RGB images, got {images.shape}; resize with --size 64x64"
            )
        labels = None
        if self.use_f:
            attr = self.utility or meta.get("utility", "")
            if attr not in images.attributes:
                raise ParameterError(
                    f"ae-obfuscator: f needs each image's '{attr}' label, which these images do not carry; "
                    "use a dataset with that attribute or --param use_f=false"
                )
            labels = (np.asarray(images.attributes[attr]) > 0).astype(np.int64)
        out = obfuscate(
            net, images.as_float(), labels, sigma2=self.sigma2, K=self.K, use_f=self.use_f, seed=torch_seed(rng)
        )
        return np.clip(out, 0, 1)
