"""Jamshidi et al. 2023's trained obfuscator (see :mod:`.obfuscator`) as two registered mechanisms, one per output
kind: ``ae-obfuscator`` releases 64x64 RGB images (the paper's CelebA flow), ``ae-obfuscator-records`` tabular
records (its UCI Adult flow). Each trains, reads and writes only model files of its own kind, and refuses the
other's naming the file and the mechanism that takes it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import DataError, ParameterError, arg
from privpix.mechanisms.base import About, Capabilities, ConformanceCase
from privpix.mechanisms.kinds import ImageMechanism, RecordMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.trained import TrainedModel
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, torch_seed

if TYPE_CHECKING:  # pandas (0.4 s to import) only where records are handled
    import pandas as pd


_ABOUT = About(
    paper="Jamshidi et al. 2023",
    guarantee_model="empirical",
    soundness="empirical only: privacy is the measured adversary accuracy",
    uses_epsilon=False,
    use="paper",
)


class _Obfuscator(TrainedModel):
    """What the image and the record obfuscator share: the model file, f (``K``, ``use_f``) and g (``sigma2``),
    Algorithm 1's training parameters and the empirical guarantee. Each kind declares its ``utility``,
    ``private`` and ``measure_k`` (their defaults differ) and turns its data into the network's arrays
    (:meth:`_arrays`)."""

    about = _ABOUT
    # What it trains on and releases (the data class, in words) and the network kind its model files hold.
    data_type: ClassVar[type[ImageSet] | type[RecordSet]]
    data_words: ClassVar[str]
    net_kind: ClassVar[str]
    model: str = param("", "obfuscator model file; empty: fit() trains one on the data it is given")
    sigma2: float = param(0.0, "g: noise multiplier on the R output (× its mean |activation|)", minimum=0.0)
    K: float = param(3000.0, "f: the non-true class's log-probability is set to −K", minimum=0.0)
    use_f: bool = param(True, "apply f (needs the utility labels)")
    epochs: int = param(20, "training: epochs (Algorithm 1)", minimum=1)
    batch_size: int = param(64, "training: minibatch size", minimum=1)
    lr: float = param(1e-3, "training: Adam learning rate", minimum=1e-12)
    patience: int = param(3, "training: early stopping on validation loss", minimum=1)
    val_fraction: float = param(0.1, "training: fraction held out for validation", minimum=1e-9)
    measure: str = param(
        "",
        "training: comma-separated σ² values at which weak/strong adversaries and the "
        "utility provider are measured on the validation split and stored in the model file",
    )

    # Parameters that only shape training; the model file records them (utility and private at its top level).
    training: ClassVar[dict[str, str]] = {
        "utility": "utility",
        "private": "private",
        **{k: k for k in ("epochs", "batch_size", "lr", "patience", "val_fraction", "measure", "measure_k")},
    }

    def _check(self) -> None:
        if not self.val_fraction < 1:
            raise ParameterError(f"{self.name}: val_fraction must be in (0, 1), got {self.val_fraction}")
        _sigma2s(self.measure, self.name)

    def _read_model(self, path: str):
        from privpix.mechanisms.neural.obfuscator import load_obfuscator

        net, meta = load_obfuscator(path)
        if net.kind != self.net_kind:
            other = _KINDS[net.kind]
            raise ParameterError(
                f"{path}: an obfuscator of {other.data_words}, and {self.name} releases {self.data_words}; release "
                f"it with {_method(other)}"
            )
        return net, {**meta.get("training", {}), **meta}

    def _train(self, data, seed: int | None):
        """Algorithm 1 on the data :meth:`_arrays` reads."""
        if not isinstance(data, self.data_type):
            other = next((c for c in _KINDS.values() if isinstance(data, c.data_type)), None)
            hint = "" if other is None else f" ({other.data_words}): fit {_method(other)} on them"
            raise ParameterError(f"{self.name}: fit() trains on {self.data_words}, got {type(data).__name__}{hint}")
        return _train(self.name, self.net_kind, *self._arrays(data), self._training(), 0 if seed is None else seed)

    def _arrays(self, data) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        """What the model file records of the data (``utility``, ``private``, ``fitted_on``'s source,
        ``n_features``, ``record_encoding``), the inputs in [0, 1], the utility and the private labels (0/1)."""
        raise NotImplementedError

    def _write_model(self, path: Path) -> Path:
        from privpix.mechanisms.neural.obfuscator import save_obfuscator

        net, meta = self._load()
        training = set(self.training) - {"utility", "private"}
        return save_obfuscator(path, net, {k: v for k, v in meta.items() if k != "format" and k not in training})

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """Empirical only, whatever the shape; carries the adversary accuracies measured into the model file."""
        _, meta = self._load()
        caveats: tuple[str, ...] = (
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


@register
class AEObfuscator(_Obfuscator, ImageMechanism, params_before="epochs"):
    """Release 64x64 RGB images through a trained obfuscator with the provider's own f (K) and g (sigma2).

    f needs each image's true utility label, read from the ImageSet attribute named by ``utility`` (default:
    the feature the model was trained for), e.g. CelebA's ``Smiling``. Tabular records are
    ``ae-obfuscator-records``'s."""

    name = "ae-obfuscator"
    data_type = ImageSet
    data_words = "64x64 RGB images"
    net_kind = "image"
    summary = (
        "autoencoder obfuscator of images with adjustable f (K) and g (noise) (Jamshidi et al. 2023); empirical only"
    )
    utility: str = param(
        "",
        "utility feature: an image attribute (training default Smiling); at release, the attribute holding each "
        "image's utility label (default: the model's)",
    )
    private: str = param("", "training: the private attribute recorded in the model (default Male)")
    measure_k: float = param(0.0, "training: K for measure (0: 3000, the paper's)", minimum=0.0)

    def capabilities(self) -> Capabilities:
        # g's noise is the only randomness: with sigma2 = 0 the release is a deterministic function of the image.
        return Capabilities(fits_on=self._fits_on(), fixed_shape=(64, 64, 3), output=self.output,
                            randomized=self.sigma2 > 0, **self._secure())  # fmt: skip

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A one-epoch image obfuscator on 20 random 64x64 colour images with binary ``smile`` and ``male``
        attributes: trained by fit, and written to a model file and loaded from it."""
        rng = np.random.default_rng(0)
        x = (rng.random((20, 64, 64, 3)) * 255).astype(np.uint8)
        attrs = {"smile": np.arange(20) % 2, "male": (np.arange(20) // 2) % 2}
        images = ImageSet(x, attributes=attrs, source="20 random images")
        tiny: dict[str, Any] = {"utility": "smile", "private": "male", **_TINY}
        path = cls(**tiny).fit(images, seed=0).save_model(workdir / "obfuscator.pt")
        return [
            ConformanceCase(tiny, images),
            ConformanceCase({"model": str(path)}, images),
            ConformanceCase({"model": str(path), "use_f": False, "sigma2": 2.0}, images),
        ]

    def _adopt_training(self, meta: dict) -> None:
        # At release, utility names the images' attribute holding the utility labels, which may be spelled
        # otherwise than the training data's: it is not held to the file.
        utility = self.utility
        super()._adopt_training({**meta, "utility": None})
        self.utility = utility

    def _arrays(self, data: ImageSet) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        """CelebA-style images with the ``utility`` and ``private`` attributes, resized to 64x64."""
        from privpix.data import celeba_64

        utility, private = self.utility or "Smiling", self.private or "Male"
        for opt, attr in (("utility", utility), ("private", private)):
            if attr not in data.attributes:
                raise ParameterError(f"{self.name}: {opt}={attr} is not an attribute of {data.source or 'the images'}")
        data = celeba_64(data) if data.shape != (64, 64, 3) else data
        y = (np.asarray(data.attributes[utility]) > 0).astype(np.int64)
        priv = (np.asarray(data.attributes[private]) > 0).astype(np.int64)
        about = {"utility": utility, "private": private, "source": data.source, "n_features": 0,
                 "record_encoding": None}  # fmt: skip
        return about, data.as_float(), y, priv

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        from privpix.mechanisms.neural.obfuscator import obfuscate

        net, meta = self._load()
        if images.shape != (64, 64, 3):
            raise ParameterError(
                f"{self.name}: the model takes 64x64 RGB images, got {images.shape}; resize with "
                f"{arg('--size 64x64', 'ImageSet.resized(64, 64)')}"
            )
        labels = None
        if self.use_f:
            attr = self.utility or meta.get("utility", "")
            if attr not in images.attributes:
                raise ParameterError(
                    f"{self.name}: f needs each image's '{attr}' label, which these images do not carry; "
                    f"use a dataset with that attribute or {arg('--param use_f=false', 'use_f=False')}"
                )
            labels = (np.asarray(images.attributes[attr]) > 0).astype(np.int64)
        out = obfuscate(
            net, images.as_float(), labels, sigma2=self.sigma2, K=self.K, use_f=self.use_f, seed=torch_seed(rng)
        )
        return np.clip(out, 0, 1)


@register
class AERecordObfuscator(_Obfuscator, RecordMechanism, params_before="epochs"):
    """Release tabular records (UCI-Adult-style) through a trained obfuscator with the provider's own f (K) and g
    (sigma2): the model's one-hot/min–max feature columns (values in [0, 1]), plus the utility label column when
    ``keep_label``. f reads each record's utility label from its label column. Images are ``ae-obfuscator``'s."""

    name = "ae-obfuscator-records"
    data_type = RecordSet
    data_words = "tabular records"
    net_kind = "tabular"
    summary = "the autoencoder obfuscator of tabular records (Jamshidi et al. 2023's Adult flow); empirical only"
    utility: str = param("", "training: the utility feature, the records' label column (the default)")
    keep_label: bool = param(True, "publish the utility label column beside the features")
    private: str = param("", "training: the private column recorded in the model, binary (default sex)")
    measure_k: float = param(0.0, "training: K for measure (0: 50)", minimum=0.0)

    def capabilities(self) -> Capabilities:
        # g's noise is the only randomness: with sigma2 = 0 the release is a deterministic function of the record.
        return Capabilities(fits_on=self._fits_on(), output=self.output, randomized=self.sigma2 > 0,
                            **self._secure())  # fmt: skip

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A one-epoch record obfuscator on 40 random records (a numeric and a categorical column, a binary
        ``sex`` and the ``income`` label): trained by fit, and written to a model file and loaded from it."""
        import pandas as pd

        rng = np.random.default_rng(0)
        frame = pd.DataFrame({
            "age": rng.integers(17, 90, 40),
            "work": rng.choice(["private", "state", "self"], 40),
            "sex": rng.choice(["Female", "Male"], 40),
            "income": rng.choice(["<=50K", ">50K"], 40),
        })  # fmt: skip
        records = RecordSet(frame, "income", "40 random records")
        path = cls(**_TINY).fit(records, seed=0).save_model(workdir / "obfuscator.pt")
        return [
            ConformanceCase(dict(_TINY), records),
            ConformanceCase({"model": str(path)}, records),
            ConformanceCase({"model": str(path), "use_f": False, "sigma2": 2.0, "keep_label": False}, records),
        ]

    def _arrays(self, data: RecordSet) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        """UCI-Adult-style records (label column = utility), complete rows only, as the paper."""
        from privpix.mechanisms.neural.records import encode_records, fit_record_encoding

        utility, private = self.utility or data.label_column, self.private or "sex"
        if utility != data.label_column:
            raise ParameterError(f"{self.name}: utility must be the records' label column {data.label_column!r}")
        if private not in data.frame.columns:
            raise ParameterError(f"{self.name}: private={private} is not a column of the records")
        data = data.complete()  # the paper drops records with missing values
        encoding = fit_record_encoding(data, private)
        x = encode_records(data, encoding)
        values = sorted(data.frame[private].unique())
        if len(values) != 2:
            raise ParameterError(f"{self.name}: private={private} must be a binary column, has {len(values)} values")
        priv = (data.frame[private] == values[1]).to_numpy(dtype=np.int64)
        about = {"utility": utility, "private": private, "source": data.source, "n_features": x.shape[1],
                 "record_encoding": encoding}  # fmt: skip
        return about, x, data.labels, priv

    def _privatize_records(self, records: RecordSet, rng: RNG) -> pd.DataFrame:
        from privpix.mechanisms.neural.obfuscator import obfuscate
        from privpix.mechanisms.neural.records import encode_records

        net, meta = self._load()
        enc = meta.get("record_encoding")
        if not enc:
            raise DataError(
                f"{self.model or 'the fitted model'}: records no record encoding (columns and ranges); refit it"
            )
        x = encode_records(records, enc)
        labels = records.labels if self.use_f else None
        out = obfuscate(net, x, labels, sigma2=self.sigma2, K=self.K, use_f=self.use_f, seed=torch_seed(rng))
        import pandas as pd

        frame = pd.DataFrame(np.clip(out, 0, 1), columns=enc["columns"])
        if self.keep_label:
            frame[records.label_column] = records.frame[records.label_column].to_numpy()
        return frame


# Each obfuscator by the network kind its model files hold.
_KINDS: dict[str, type[_Obfuscator]] = {cls.net_kind: cls for cls in (AEObfuscator, AERecordObfuscator)}
# The conformance cases' training: one epoch on a few items.
_TINY: dict[str, Any] = {"epochs": 1, "batch_size": 8, "val_fraction": 0.2}


def _method(cls: type[_Obfuscator]) -> str:
    """How a refusal names the obfuscator of the other kind: the option under the command line, else the name."""
    return arg(f"--method {cls.name}", repr(cls.name))


def _sigma2s(text: str, name: str) -> list[float]:
    """The ``measure`` parameter: comma-separated σ² values >= 0."""
    out = []
    for part in filter(None, (t.strip() for t in text.split(","))):
        try:
            v = float(part)
        except ValueError:
            raise ParameterError(f"{name}: measure: {part!r} is not a number") from None
        if not np.isfinite(v) or v < 0:
            raise ParameterError(f"{name}: measure: σ² must be finite and >= 0, got {part!r}")
        out.append(v)
    return out


def _train(name: str, kind: str, about: dict[str, Any], x: np.ndarray, y: np.ndarray, priv: np.ndarray, training: dict,
           seed: int) -> tuple[object, dict]:  # fmt: skip
    """Algorithm 1 on the inputs ``x`` with utility labels ``y`` (``training``: the mechanism's training
    parameters): the network and the model file's description (``about``, training parameters, history and, with
    ``measure``, the accuracies measured against the private labels ``priv``)."""
    import time

    from privpix.mechanisms.neural.obfuscator import train_obfuscator

    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(x))
    n_val = max(2, round(training["val_fraction"] * len(x)))
    val, tr = perm[:n_val], perm[n_val:]
    if len(tr) < 2:
        raise ParameterError(f"{name}: {len(x)} records leave nothing to train on after validation")
    t0 = time.perf_counter()
    net, hist = train_obfuscator(
        kind, x[tr], y[tr], x[val], y[val], epochs=training["epochs"], batch_size=training["batch_size"],
        lr=training["lr"], patience=training["patience"], seed=seed, progress=False,
    )  # fmt: skip
    meta = {
        "utility": about["utility"],
        "private": about["private"],
        "fitted_on": f"{about['source'] or 'the given data'} ({len(tr)} train / {len(val)} validation records, "
        f"seed {seed})",
        "n_features": about["n_features"],
        "record_encoding": about["record_encoding"],
        "training": {k: v for k, v in training.items() if k not in ("utility", "private")},
        "seed": seed,
        "history": hist,
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    sigma2s = _sigma2s(training["measure"], name)
    if sigma2s:
        k = training["measure_k"] or (3000.0 if kind == "image" else 50.0)
        meta["measured"] = _measure(net, x, y, priv, tr, val, sigma2s, k)
    return net, meta


def _measure(net, x, y, priv, tr, val, sigma2s: list[float], K: float) -> list[dict]:
    """Weak/strong adversary and utility-provider accuracies on the validation split, per σ² (with f, K)."""
    from privpix.mechanisms.neural.obfuscation import AttributeData, measure_release, obfuscator_release, train_inferrer

    train, test = AttributeData(x[tr], y[tr], priv[tr]), AttributeData(x[val], y[val], priv[val])
    weak = train_inferrer(train, "private")
    rows = [{"sigma2": None, "K": None, "use_f": None, "weak": weak.score(test.x, test.private)}]
    for s2 in sigma2s:
        r = measure_release(obfuscator_release(net, sigma2=s2, K=K, use_f=True), train, test, weak_adversary=weak)
        rows.append({"sigma2": s2, "K": K, "use_f": True, **r})
    return rows
