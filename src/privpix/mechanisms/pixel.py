"""Pixel-space mechanisms: LAP (Zhang, Fu & Meng 2020), DP-Pix (Fan 2018), and the conventional baselines of Kim &
Yang 2020 (noise, blur and filters)."""

from __future__ import annotations

import math

import numpy as np

from privpix.data import imageset
from privpix.data.imageset import ImageSet, blockwise, float64_block
from privpix.errors import ParameterError
from privpix.mechanisms.base import About, Capabilities, Claim, shape_of
from privpix.mechanisms.kinds import ImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.privacy.composition import LaplaceNoise, PureDP
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, OneImage, PixelColumn, Pixels
from privpix.privacy.noise import PIXEL_GRID, PIXEL_GRID_STEPS, RNG, add_gaussian, add_laplace, is_secure

_CLIP = param(True, "clip released values to the pixel range [0, 1] (post-processing)")
_RANGE = param(1.0, "declared range of one pixel value (images are in [0, 1])", minimum=1e-12)


def _ndimage():
    """scipy.ndimage, imported on first use: it takes about 0.25 s, which every release worker and every command
    would pay for the filters alone (privpix.mechanisms imports every mechanism module)."""
    from scipy import ndimage

    return ndimage


def _release_blocks(images: ImageSet, add_noise, clip: bool) -> np.ndarray:
    """:func:`blockwise` for a noise added value by value: ``add_noise(values, index)`` returns the noisy float64
    block, clipped here to [0, 1] when ``clip``, as the whole-array path does."""

    def noisy(values: np.ndarray, index: tuple) -> np.ndarray:
        v = add_noise(values, index)
        return np.clip(v, 0.0, 1.0, out=v) if clip else v

    return blockwise(images, noisy)


def _in_range(x: np.ndarray, pixel_range: float) -> np.ndarray:
    """Values clipped to the declared range [0, pixel_range] when it is narrower than [0, 1] (the range the inputs
    are checked to lie in): the sensitivity is computed for it, so it must hold whatever the input. The bound is
    rounded down to the secure mode's lattice (add_laplace's grid), so snapping to it cannot pass the range."""
    if pixel_range >= 1:
        return x
    top = math.floor(pixel_range * PIXEL_GRID_STEPS) / PIXEL_GRID_STEPS
    return np.minimum(x, top)


def _range_caveat(pixel_range: float) -> str:
    if pixel_range < 1:
        return (f"declared pixel range [0, {pixel_range:g}]: input values are clipped to it before the noise "
                "(float inputs are checked to lie in [0, 1])")  # fmt: skip
    return f"every pixel value lies in [0, 1], a range of width ≤ {pixel_range:g} (float inputs are checked)"


def _unit_size(unit: str, m: int, h: int, w: int) -> int:
    """Number of pixel positions in a neighbouring unit (its wording is the relation's: ``neighbours()``)."""
    if unit == "pixel":
        return 1
    if unit == "pixels":
        return min(m, h * w)
    if unit == "column":
        return h  # Zhang, Fu & Meng 2020, definition 1
    return h * w


@register
class PixelLaplace(ImageMechanism):
    """Laplace noise on every pixel value (Zhang, Fu & Meng 2020's LAP, eq. 5).

    ``sensitivity="data"`` is the paper: Δ = the image's own largest column L1 norm, computed per image. The
    noise scale then depends on the private image (an all-black image is published without noise), so the
    release is **not** ε-DP; the guarantee says so. ``sensitivity="bound"`` calibrates Δ from the declared
    pixel range and the neighbouring ``unit``: Δ = pixel_range · channels · (pixels in the unit), which is
    sound. Either way ``per_image_epsilon`` states what a whole image costs.
    """

    name = "pixel-laplace"
    summary = "Laplace noise on every pixel (Zhang, Fu & Meng 2020's LAP); data-derived or bound-based sensitivity"
    about = About(
        paper="Zhang, Fu & Meng 2020 (LAP)",
        guarantee_model="central-dp",
        soundness="default (paper) NOT DP: data-derived Δ; sensitivity=bound is sound",
        use="pixels",
    )
    sensitivity: str = param(
        "data",
        "'data': the paper's per-image largest column L1 norm (unsound); 'bound': from pixel_range and unit (sound)",
        choices=("data", "bound"),
    )
    unit: str = param(
        "column",
        "neighbouring unit: pixel, pixels (m of them), column, image",
        choices=("pixel", "pixels", "column", "image"),
    )
    m: int = param(1, "pixels in the unit when unit=pixels", minimum=1)
    pixel_range: float = _RANGE
    clip: bool = _CLIP
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def _check(self) -> None:
        if self.sensitivity == "data" and self.unit != "column":
            raise ParameterError(
                "sensitivity='data' is the paper's column rule: use unit=column, or "
                "sensitivity='bound' for another unit"
            )

    def bound_sensitivity(self, shape: tuple[int, int, int]) -> float:
        h, w, c = shape
        size = _unit_size(self.unit, self.m, h, w)
        return self.pixel_range * c * size

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        h, w, c = shape
        unit_text = self.neighbours().wording()
        if self.sensitivity == "data":
            return Guarantee(
                model="central-dp",
                epsilon=self.epsilon,
                unit=unit_text,
                per_image_epsilon=None,
                sound=False,
                caveats=(
                    "sensitivity computed from the data: Δ is each image's own largest column L1 norm, so the "
                    "noise scale reveals the image and an all-black image is released without noise",
                    "not ε-DP as Zhang, Fu & Meng 2020 claim; the ε is a noise knob. Use sensitivity=bound for a proof",
                ),
            )
        per_image = self.epsilon * (self.pixel_range * h * w * c) / self.bound_sensitivity(shape)
        caveats = [_range_caveat(self.pixel_range)]
        if self.unit != "image":
            caveats.append(f"protects {unit_text} at ε={self.epsilon:g}; a whole image only at ε={per_image:.4g}")
        return Guarantee(
            model="central-dp",
            epsilon=self.epsilon,
            unit=unit_text,
            per_image_epsilon=per_image,
            sound=True,
            caveats=tuple(caveats),
        )

    def neighbours(self) -> Neighbours:
        return {"pixel": Pixels(1), "pixels": Pixels(self.m), "column": PixelColumn()}.get(self.unit, OneImage())

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """sensitivity=bound: one Laplace release per pixel value. Replacing a whole image moves each of the h·w·c
        values by at most pixel_range against a noise scale Δ/ε, so the image's privacy loss is the composition of
        h·w·c one-dimensional Laplace pairs of ε·pixel_range/Δ each (per image ε: their sum); with ``secure``
        (lattice Laplace), h·w·c pure events of that ε. One unit of the neighbours (L1 sensitivity Δ) is one
        Laplace release of ε. sensitivity=data: nothing can be charged, and no curve holds."""
        shape = shape_of(data)
        guarantee = self._guarantee(shape)
        if self.sensitivity != "bound":
            return Claim(guarantee)
        h, w, c = shape
        each = self.epsilon * self.pixel_range / self.bound_sensitivity(shape)
        event = PureDP(each, count=h * w * c) if secure else LaplaceNoise(each, count=h * w * c)
        return Claim(guarantee, (event,), (LaplaceNoise(self.epsilon),))

    def data_sensitivity(self, x: np.ndarray) -> np.ndarray:
        """Zhang, Fu & Meng 2020's Δ₁A per image: max over columns j of Σ_i |a_ij| (channels summed). Shape (n,)."""
        return np.abs(x).sum(axis=(1, 3)).max(axis=1)

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        scale: np.ndarray | float  # per image (data), or one for all (bound)
        if self.sensitivity == "data":
            scale = (self.data_sensitivity(x) / self.epsilon)[:, None, None, None]
        else:
            scale = self.bound_sensitivity(x.shape[1:]) / self.epsilon
            x = _in_range(x, self.pixel_range)
        out = add_laplace(x, scale, rng)
        return np.clip(out, 0.0, 1.0) if self.clip else out

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        # Same output as _privatize on the float64 set, computed in blocks (bounded memory).
        x = images.images
        if self.sensitivity == "data":
            scales = self._data_scales(x)

            def scale_of(b: tuple) -> np.ndarray:
                return scales[b[0]][:, None, None, None] if isinstance(b[0], slice) else scales[b[0]]

        else:
            bound = self.bound_sensitivity(x.shape[1:]) / self.epsilon
            return _release_blocks(
                images, lambda v, b: add_laplace(_in_range(v, self.pixel_range), bound, rng), self.clip
            )
        return _release_blocks(images, lambda v, b: add_laplace(v, scale_of(b), rng), self.clip)

    def _data_scales(self, x: np.ndarray) -> np.ndarray:
        """Δ/ε per image, as ``data_sensitivity`` over the whole float64 set gives it. Computed on whole images
        (a row-by-row sum would add in another order), a group of small ones or one large one at a time."""
        n = x.shape[0]
        step = max(1, imageset.BLOCK_VALUES // max(1, int(np.prod(x.shape[1:], dtype=np.int64))))
        sens = np.empty(n)
        for i in range(0, n, step):
            v = float64_block(x[i : i + step])
            np.abs(v, out=v)  # in place: the values np.abs(x) has, without a second copy
            sens[i : i + step] = v.sum(axis=(1, 3)).max(axis=1)
        return sens / self.epsilon


@register
class DPPix(ImageMechanism):
    """DP-Pix (Fan 2018): average b×b cells, add Laplace, upsample back to the image size.

    Neighbouring images differ in at most ``m`` pixels. One changed pixel moves one cell mean by at most
    pixel_range / (cell size), so Δ = channels · m · pixel_range / k_min, with k_min the smallest cell (b² when
    b divides the image; border cells are smaller otherwise, and the bound uses them). Sound ε-DP.
    """

    name = "dp-pix"
    summary = "DP-Pix (Fan 2018): b×b cell means + Laplace(Δ = m·range/b²); sound for m-pixel neighbours"
    about = About(
        paper="Fan 2018 (DP-Pix)",
        guarantee_model="central-dp",
        soundness="sound ε-DP for neighbours differing in m pixels",
        use="pixels",
    )
    b: int = param(4, "cell side in pixels", minimum=1)
    m: int = param(1, "neighbouring images differ in at most m pixels", minimum=1)
    pixel_range: float = _RANGE
    clip: bool = _CLIP
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def _cells(self, h: int, w: int) -> tuple[int, int, int]:
        gh, gw = math.ceil(h / self.b), math.ceil(w / self.b)
        kmin = min(self.b, h - (gh - 1) * self.b) * min(self.b, w - (gw - 1) * self.b)
        return gh, gw, kmin

    def _guarantee(self, shape: tuple[int, int, int], secure: bool = False) -> Guarantee:
        h, w, c = shape
        gh, gw, kmin = self._cells(h, w)
        m = min(self.m, h * w)
        delta_unit = self._sensitivity(c, m, kmin, secure=False)
        delta_image = c * gh * gw * self.pixel_range  # every cell mean may move by the full range
        return Guarantee(
            model="central-dp",
            epsilon=self.epsilon,
            unit=self.neighbours().wording(),
            per_image_epsilon=self.epsilon * delta_image / delta_unit,
            sound=True,
            caveats=(
                f"cells of {self.b}x{self.b} pixels; Δ = {delta_unit:.4g} in [0, 1] pixel units"
                + (
                    f", plus {c * m} step(s) of the exact sampler's lattice of 1/{PIXEL_GRID_STEPS:,} (its snapping)"
                    if secure
                    else ""
                ),
                _range_caveat(self.pixel_range),
            ),
        )

    def neighbours(self) -> Neighbours:
        return Pixels(self.m)

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """Charged as the bare per-image ε (the default); one unit (m pixels, cell means of L1 sensitivity Δ) is
        one Laplace release of ε, the curve an audit of the unit reads; with ``secure``, a release of ε on the
        lattice, declared as no more than ε-DP (its noise is not the continuous Laplace's)."""
        unit = PureDP(self.epsilon) if secure else LaplaceNoise(self.epsilon)
        return Claim.of(self._guarantee(shape_of(data), secure), self.neighbours(), (unit,))

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        return self._cell_rows(x, rng, x.shape[1])

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        """The same output as :meth:`_privatize` on the float64 set, built in blocks: whole images, or runs of
        whole cell rows of one large image (the cell means, their noise in array order and the upsampling of a
        run are the whole image's), so memory stays a few tens of MB above the output."""
        h = images.shape[0]
        return blockwise(images, lambda v, b: self._cell_rows(v, rng, h), rows_multiple=self.b)

    def _cell_rows(self, x: np.ndarray, rng: RNG, h_image: int) -> np.ndarray:
        """Released rows of cells: ``x`` (n, h, w, c) float64 starts on a cell row of images ``h_image`` high
        (the smallest cell, hence the noise scale, is the whole image's)."""
        n, h, w, c = x.shape
        x = _in_range(x, self.pixel_range)
        _, _, kmin = self._cells(h_image, w)
        gh, gw, _ = self._cells(h, w)
        pad_h, pad_w = gh * self.b - h, gw * self.b - w
        # Sum over each cell, counting only real pixels (padding contributes zeros and is not counted).
        xp = np.pad(x, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
        sums = xp.reshape(n, gh, self.b, gw, self.b, c).sum(axis=(2, 4))
        ones = np.pad(np.ones((h, w)), ((0, pad_h), (0, pad_w)))
        counts = ones.reshape(gh, self.b, gw, self.b).sum(axis=(1, 3))[None, :, :, None]
        means = sums / counts
        m = min(self.m, h_image * w)  # the whole image's: a block of rows holds fewer pixels than m may count
        noisy = add_laplace(means, self._scale(c, m, kmin, is_secure(rng)), rng)
        up = np.repeat(np.repeat(noisy, self.b, axis=1), self.b, axis=2)[:, :h, :w, :]
        return np.clip(up, 0.0, 1.0) if self.clip else up

    def _sensitivity(self, c: int, m: int, kmin: int, secure: bool) -> float:
        """The L1 sensitivity Δ of the cell means for one unit: c·m·pixel_range/k_min. In secure mode the exact
        lattice sampler is private only for values on its lattice (:data:`~privpix.privacy.noise.PIXEL_GRID`), and a
        cell mean is a multiple of 1/(255·k), on it only when k divides 64 (8-bit pixels): snapping can take two
        neighbours' means one step further apart, so Δ counts one step for each of the c·m means a unit moves."""
        sensitivity = c * m * self.pixel_range / kmin
        if secure:
            sensitivity += c * m * PIXEL_GRID
        return sensitivity

    def _scale(self, c: int, m: int, kmin: int, secure: bool) -> float:
        """The Laplace scale of a cell mean, Δ/ε."""
        return self._sensitivity(c, m, kmin, secure) / self.epsilon


class _NoGuarantee(ImageMechanism):
    about = About(
        guarantee_model="none", uses_epsilon=False, paper="Kim & Yang 2020 (conventional baseline)", use="baseline"
    )
    caveat = ""

    def capabilities(self) -> Capabilities:
        # A filter draws nothing; Gaussian pixel noise is floating point (Box–Muller): no exact sampler either way.
        return Capabilities(secure=None)

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        return Claim.of(Guarantee.none(self.caveat), self.neighbours())


@register
class PixelGaussian(_NoGuarantee):
    """Additive Gaussian pixel noise with a fixed standard deviation (no calibration, no privacy claim)."""

    name = "pixel-gaussian"
    summary = "Gaussian noise of std sigma on every pixel value; no privacy claim"
    caveat = "fixed-scale Gaussian noise, not calibrated to any sensitivity: no DP guarantee"
    sigma: float = param(0.1, "noise standard deviation in [0, 1] pixel units", minimum=0.0)
    clip: bool = _CLIP

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        out = add_gaussian(x, self.sigma, rng)
        return np.clip(out, 0.0, 1.0) if self.clip else out

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        # Same output as _privatize on the float64 set, computed in blocks (bounded memory).
        return _release_blocks(images, lambda v, b: add_gaussian(v, self.sigma, rng), self.clip)


@register
class GaussianBlur(_NoGuarantee):
    """Gaussian blur (deterministic): faces stay recognisable to machines; no privacy claim."""

    name = "gaussian-blur"
    summary = "Gaussian blur of std sigma pixels; deterministic, no privacy claim"
    caveat = "deterministic blur: no randomness, no DP guarantee; blurred faces are often re-identifiable"
    sigma: float = param(2.0, "blur standard deviation in pixels", minimum=0.0)

    def capabilities(self) -> Capabilities:
        return Capabilities(randomized=False)

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        # A weighted mean of values in [0, 1]; the clip only removes rounding error (found by the conformance suite).
        return np.clip(_ndimage().gaussian_filter(x, sigma=(0, self.sigma, self.sigma, 0), mode="reflect"), 0.0, 1.0)

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        # scipy's kernel reaches int(truncate·σ + 0.5) pixels, truncate = 4 (its default, used above).
        return blockwise(images, lambda v, b: self._privatize(v, rng), int(4.0 * self.sigma + 0.5))


class _WindowFilter(_NoGuarantee):
    """A deterministic filter over size×size windows of each channel."""

    caveat = "deterministic filter: no randomness, no DP guarantee"
    size: int = param(5, "window side in pixels", minimum=1)

    @staticmethod
    def window_filter(x: np.ndarray, size: int) -> np.ndarray:
        raise NotImplementedError

    def capabilities(self) -> Capabilities:
        return Capabilities(randomized=False)

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        # Means and medians of values in [0, 1]: the clip only removes the box filter's rounding error above 1.
        return np.clip(self.window_filter(x, self.size), 0.0, 1.0)

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        # A size×size window reaches size // 2 rows either way (scipy centres an even window one row down).
        return blockwise(images, lambda v, b: self._privatize(v, rng), self.size // 2)


@register
class MedianFilter(_WindowFilter):
    """Median filter over a size×size window (deterministic; no privacy claim)."""

    name = "median-filter"
    summary = "median filter over size×size windows; deterministic, no privacy claim"

    @staticmethod
    def window_filter(x: np.ndarray, size: int) -> np.ndarray:
        return _ndimage().median_filter(x, size=(1, size, size, 1), mode="reflect")


@register
class UniformFilter(_WindowFilter):
    """Mean (box) filter over a size×size window (deterministic; no privacy claim)."""

    name = "uniform-filter"
    summary = "box (mean) filter over size×size windows; deterministic, no privacy claim"

    @staticmethod
    def window_filter(x: np.ndarray, size: int) -> np.ndarray:
        # scipy's uniform_filter keeps a running sum along each line, whose rounding depends on where the line
        # starts. Columns are cut into blocks of rows, so down the columns each mean is summed directly
        # (correlate1d); rows are never cut, so along them the running sum (O(1) per value) stays.
        ndimage = _ndimage()
        columns = ndimage.correlate1d(x, np.full(size, 1.0 / size), axis=1, mode="reflect")
        return ndimage.uniform_filter1d(columns, size, axis=2, mode="reflect")
