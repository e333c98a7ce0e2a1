"""What the public-set check finds: copies of public faces resized, re-encoded, brightened or cropped, and how
often it flags a different face.

A mechanism that takes ``public=…`` refuses private images that are copies of public ones
(``privpix.data.overlap.check_distinct``): identical pixels, and near copies (``privpix.data.near_copy``). This
measures the near-copy check as the mechanisms run it: the public set loaded by ``load_public`` at the private
images' shape, then ``overlap.copies`` (identical or near).

- Detection: each of the 2,000 staged LFW faces (``lfw-gender``) transformed as a data owner might have published
  it (PIL: resized, JPEG re-encoded, brightened, cropped by a random share of each side), as the private set,
  against ``lfw-gender`` as the public set. Also transforms beyond what the check promises (bigger crops, a
  mirror), to show where it stops.
- False matches: different faces as the private set: the 4,559 CelebA faces against the 2,000 LFW ones, LFW
  people against other LFW people (the two splits), CelebA identities against others, and photos of the *same*
  person (LFW persons with several photos: one fold of their photos against the rest of LFW), where a different
  photo of one person must not count as a copy. Small sets (60 against 60, 50 draws): the whitening is then
  learned from few images.
- Where near copies are not looked for: the share of a public set's images with another one scoring
  ``near_copy.ALIKE`` or more (faces against digits, garments, one studio's portraits).
- Time: 4,000 CelebA faces against the 2,000 LFW ones, 125×125, one core (the check alone; the sets loaded).

Writes ``results/public_overlap.{json,md}``. Run: ``.venv/bin/python benchmarks/public_overlap.py`` (about 6
minutes on 2 cores, most of it resizing the public set to each shape; ``--render-only`` rewrites the markdown).
"""

from __future__ import annotations

import os

# One core, as stated in the results (set before numpy loads its BLAS).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import io  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from _results import RENDER_HELP, RENDER_ONLY, Col, Output, document, rerender, table, write  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SEED = 0
SMALL_DRAWS = 50


def _transforms() -> dict[str, tuple[str, int]]:
    """name → (what it promises: "caught" or "beyond", the private images' side)."""
    return {
        "resized to 125×125 (Lanczos)": ("caught", 125),
        "resized to 64×64 (bicubic)": ("caught", 64),
        "resized to 180×180 (bilinear)": ("caught", 180),
        "JPEG quality 75": ("caught", 250),
        "JPEG quality 50": ("caught", 250),
        "brightness +10 %": ("caught", 250),
        "brightness −15 %, JPEG 75": ("caught", 250),
        "cropped ≤ 5 % per side, 125×125": ("caught", 125),
        "cropped ≤ 10 % per side, 125×125": ("caught", 125),
        "cropped ≤ 10 %, JPEG 75, 125×125": ("caught", 125),
        "cropped ≤ 10 %, brightness +10 %, JPEG 50, 125×125": ("caught", 125),
        "cropped ≤ 15 % per side, 125×125": ("beyond", 125),
        "cropped ≤ 20 % per side, 125×125": ("beyond", 125),
        "mirrored, 125×125": ("beyond", 125),
    }


def _transform(name: str, img: np.ndarray, side: int, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image

    def jpeg(x: np.ndarray, q: int) -> np.ndarray:
        buf = io.BytesIO()
        Image.fromarray(x).save(buf, "JPEG", quality=q)
        return np.asarray(Image.open(buf).convert("RGB"))

    def bright(x: np.ndarray, f: float) -> np.ndarray:
        return np.clip(np.rint(x.astype(np.float32) * f), 0, 255).astype(np.uint8)

    def crop(x: np.ndarray, most: float) -> np.ndarray:
        h, w = x.shape[:2]
        t, b, left, r = rng.uniform(0, most, 4)
        part = x[round(t * h) : h - round(b * h), round(left * w) : w - round(r * w)]
        return np.asarray(Image.fromarray(part).resize((side, side), Image.Resampling.BICUBIC))

    def resized(x: np.ndarray, how: Image.Resampling) -> np.ndarray:
        return np.asarray(Image.fromarray(x).resize((side, side), how))

    if name.startswith("resized"):
        how = {"Lanczos": Image.Resampling.LANCZOS, "bicubic": Image.Resampling.BICUBIC}
        return resized(img, next((v for k, v in how.items() if k in name), Image.Resampling.BILINEAR))
    if name.startswith("JPEG"):
        return jpeg(img, int(name.split()[-1]))
    if name == "brightness +10 %":
        return bright(img, 1.1)
    if name.startswith("brightness −15 %"):
        return jpeg(bright(img, 0.85), 75)
    if name.startswith("mirrored"):
        return resized(img[:, ::-1].copy(), Image.Resampling.LANCZOS)
    most = float(name.split("≤ ")[1].split(" %")[0]) / 100
    out = crop(img, most)
    if "brightness" in name:
        out = bright(out, 1.1)
    if "JPEG" in name:
        out = jpeg(out, int(name.split("JPEG ")[1].split(",")[0]))
    return out


_PUBLICS: dict[tuple[int, int, int], object] = {}


def _public(shape: tuple[int, int, int]):
    """``lfw-gender`` as the mechanisms load a public set for private images of ``shape`` (kept: resizing 2,000
    faces takes a minute)."""
    from privpix.mechanisms.synthesis.public import load_public

    if shape not in _PUBLICS:
        _PUBLICS[shape] = load_public("lfw-gender", shape, 2, labelled=False)
    return _PUBLICS[shape]


def _found(public, private) -> np.ndarray:
    from privpix.data import overlap

    identical, near = overlap.copies(public, private)
    return identical if near is None else identical | near


def _best(public, private, stop: float) -> tuple[np.ndarray, np.ndarray]:
    from privpix.data import near_copy

    return near_copy.best_matches(near_copy.thumbnails(public.images), near_copy.thumbnails(private.images), stop=stop)


def detection(lfw) -> list[dict]:
    from privpix.data import ImageSet

    rows = []
    for k, (name, (promise, side)) in enumerate(_transforms().items()):
        rng = np.random.default_rng([SEED, k])
        private = ImageSet(np.stack([_transform(name, img, side, rng) for img in lfw.images]))
        public = _public(private.shape)
        found = _found(public, private)
        # Scores with every crop refined from 0.7: a score at the bar or above is then not a lower bound.
        score, which = _best(public, private, 1.0)
        rows.append({
            "transform": name, "promise": promise, "shape": list(private.shape), "n": len(private),
            "found": int(found.sum()), "right_original": int((which == np.arange(len(private))).sum()),
            "score_min": float(score.min()), "score_q001": float(np.quantile(score, 0.001)),
            "score_q01": float(np.quantile(score, 0.01)), "score_median": float(np.median(score)),
        })  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def false_matches(lfw125, cel125, celeba) -> list[dict]:
    from privpix.data import ImageSet, load_dataset

    rows = []

    def row(name: str, public, private, same: np.ndarray | None = None) -> None:
        found = _found(public, private)
        score, _ = _best(public, private, 1.0)
        rows.append({
            "comparison": name, "private": len(private), "public": len(public), "flagged": int(found.sum()),
            "score_max": float(score.max()), "score_q999": float(np.quantile(score, 0.999)),
            "flagged_same_person": None if same is None else int((found & same).sum()),
        })  # fmt: skip
        print(rows[-1], flush=True)

    pub125 = _public((125, 125, 3))
    row("CelebA (4,559) against LFW (2,000), 125×125", pub125, cel125)
    row("CelebA against LFW, at CelebA's own 218×178", _public(celeba.shape), celeba)
    test = np.isin(lfw125.names, load_dataset("lfw-gender:test", size=(8, 8)).names)
    row("LFW test people against LFW train people", lfw125.subset(~test), lfw125.subset(test))
    row("LFW train people against LFW test people", lfw125.subset(test), lfw125.subset(~test))
    ctest = cel125.subjects % 5 == 0
    row("CelebA test identities against train identities", cel125.subset(~ctest), cel125.subset(ctest))
    # The same person, another photo: LFW persons with several photos, their photos dealt in turn to two folds;
    # each fold against every other LFW photo (among them that person's other photos).
    subj = lfw125.subjects
    fold = np.full(len(lfw125), -1)
    for s in np.flatnonzero(np.bincount(subj) > 1):
        at = np.flatnonzero(subj == s)
        fold[at] = np.arange(len(at)) % 2
    for f in (0, 1):
        mine, rest = lfw125.subset(fold == f), lfw125.subset(fold != f)
        _, which = _best(rest, mine, 1.0)
        same = rest.subjects[which] == mine.subjects
        row(f"LFW photos of persons with several, fold {f + 1} of 2, against the rest of LFW",
            ImageSet(rest.images), ImageSet(mine.images), same)  # fmt: skip
    return rows


def small_sets(lfw125, cel125) -> dict:
    from privpix.data import ImageSet

    rng = np.random.default_rng([SEED, 99])
    draws = []
    for _ in range(SMALL_DRAWS):
        pub = lfw125.images[np.sort(rng.choice(len(lfw125), 60, replace=False))]
        priv = cel125.images[np.sort(rng.choice(len(cel125), 60, replace=False))]
        draws.append(int(_found(ImageSet(pub), ImageSet(priv)).sum()))
    return {"draws": SMALL_DRAWS, "size": 60, "flagged": sum(draws), "draws_with_any": sum(d > 0 for d in draws)}


def alike(lfw125, cel125) -> list[dict]:
    from privpix.data import load_dataset, near_copy

    sets = [("lfw-gender", "faces (LFW), 125×125", lfw125), ("celeba", "faces (CelebA), 125×125", cel125),
            ("builtin-mnist:train", "handwritten digits", None), ("digits", "handwritten digits (8×8 UCI)", None),
            ("fashion-mnist:test", "garments", None), ("orl", "one studio's portraits (ORL)", None),
            ("yale", "one studio's portraits (Yale)", None)]  # fmt: skip
    rows = []
    for spec, what, data in sets:
        data = data if data is not None else load_dataset(spec)
        thumbs = near_copy.thumbnails(data.images[:5000])
        sample = np.unique(np.linspace(0, len(thumbs) - 1, min(len(thumbs), near_copy.CALIBRATION)).astype(np.int64))
        score, _ = near_copy.best_matches(thumbs, thumbs[sample], exclude=sample, stop=near_copy.ALIKE)
        rows.append({"set": spec, "what": what, "n": len(thumbs), "alike": float(np.mean(score >= near_copy.ALIKE)),
                     "near_checked": near_copy.bar(thumbs) is not None})  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def timing(cel125) -> dict:
    from privpix.data import near_copy, overlap

    public, private = _public((125, 125, 3)), cel125.subset(np.arange(4000))
    near_copy._BARS.clear()
    t0 = time.perf_counter()
    overlap.copies(public, private)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    overlap.copies(public, private)
    again = time.perf_counter() - t0
    t0 = time.perf_counter()
    near_copy.thumbnails(public.images), near_copy.thumbnails(private.images)
    thumbs = time.perf_counter() - t0
    return {"private": len(private), "public": len(public), "first_s": first, "again_s": again, "thumbnails_s": thumbs}


def render(res: dict) -> str:
    from privpix.data import near_copy

    det = [
        [r["transform"], "yes" if r["promise"] == "caught" else "no (beyond)", f"{r['n']:,}",
         f"{r['found'] / r['n']:.2%}", f"{r['right_original'] / r['n']:.2%}", f"{r['score_q001']:.3f}",
         f"{r['score_q01']:.3f}", f"{r['score_median']:.3f}"]
        for r in res["detection"]
    ]  # fmt: skip
    fm = [
        [r["comparison"], f"{r['private']:,}", f"{r['public']:,}", f"{r['flagged']}",
         "–" if r["flagged_same_person"] is None else f"{r['flagged_same_person']}", f"{r['score_max']:.3f}",
         f"{r['score_q999']:.3f}"]
        for r in res["false_matches"]
    ]  # fmt: skip
    small = res["small_sets"]
    al = [[r["set"], r["what"], f"{r['n']:,}", f"{r['alike']:.1%}", "yes" if r["near_checked"] else "no"]
          for r in res["alike"]]  # fmt: skip
    t = res["timing"]
    caught = [r for r in res["detection"] if r["promise"] == "caught"]
    n_caught = sum(r["n"] for r in caught)
    found = sum(r["found"] for r in caught)
    distinct = [r for r in res["false_matches"] if r["flagged_same_person"] is None]
    flagged = sum(r["flagged"] for r in distinct)
    head = distinct[0]  # CelebA against LFW: other people, another data set
    same = [r for r in res["false_matches"] if r["flagged_same_person"] is not None]
    preamble = (
        f"Command: `.venv/bin/python benchmarks/public_overlap.py` ({res['machine']}, one core, {res['seconds']:.0f} s "
        f"in all). Bar: whitened correlation {res['bar']} at {near_copy.SIDE}×{near_copy.SIDE}; near copies are "
        f"looked for when at most {res['alike_limit']:.0%} of the public images have another one scoring "
        f"{res['alike_level']} or more. **Detection** of the copies the check promises: {found:,} of {n_caught:,} "
        f"({found / n_caught:.2%}). **False matches**: {head['flagged']} of the {head['private']:,} CelebA faces "
        f"against the {head['public']:,} LFW ones (95 % upper bound {3 / head['private']:.2%} by the rule of three "
        f"when none), {flagged} in all the comparisons of different people below; another photo of the same person: "
        f"{sum(r['flagged'] for r in same)} of {sum(r['private'] for r in same):,} flagged; small sets "
        f"({small['size']} against {small['size']}, {small['draws']} draws): {small['flagged']} flagged."
    )
    return document(
        "The public-set check: near copies found, different faces flagged",
        "## Detection: LFW faces transformed, against `lfw-gender`",
        "Each of the 2,000 staged LFW faces transformed (crops cut a uniform random share of each side), then "
        "resized to the side given; the public set is `lfw-gender` loaded at that shape, as the mechanisms load it. "
        "Found: refused as identical or near copy. Right original: the best match is the face it was made from. "
        "Scores: each image's best score, the crop refined from 0.7.",
        table(
            [
                Col("transform"),
                Col("promised"),
                Col("images", align="right"),
                Col("found", align="right"),
                Col("right original", align="right"),
                Col("score 0.1 %", align="right"),
                Col("score 1 %", align="right"),
                Col("median", align="right"),
            ],
            det,
        ),
        "## False matches: different faces",
        "Flagged: refused as copies. For the same persons' photos, how many flagged were matched to a photo of the "
        "same person.",
        table(
            [
                Col("private against public"),
                Col("private", align="right"),
                Col("public", align="right"),
                Col("flagged", align="right"),
                Col("same person", align="right"),
                Col("max score", align="right"),
                Col("score 99.9 %", align="right"),
            ],
            fm,
        ),
        f"Small sets: {small['draws']} draws of {small['size']} CelebA faces against {small['size']} LFW faces: "
        f"{small['flagged']} flagged, in {small['draws_with_any']} draws.",
        "## Where near copies are looked for",
        f"The share of each set's images (a sample of at most {near_copy.CALIBRATION}) with another image of the "
        f"set scoring {res['alike_level']} or more. Above {res['alike_limit']:.0%}, different images of the set look "
        "alike and only identical pixels are refused.",
        table(
            [
                Col("set"),
                Col("what"),
                Col("images", align="right"),
                Col("alike", align="right"),
                Col("near copies looked for"),
            ],
            al,
        ),
        "## Time",
        f"{t['private']:,} CelebA faces against the {t['public']:,} LFW faces, 125×125, one core of the 2-core "
        "reference machine while other runs used it: "
        f"{t['first_s']:.2f} s for the first check (the public set's own calibration included), {t['again_s']:.2f} s "
        f"for another private set against the same public one ({t['thumbnails_s']:.2f} s of it the thumbnails).",
        preamble=preamble,
    )


RESULT = Output(RESULTS / "public_overlap", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    from privpix.data import load_dataset, near_copy

    t0 = time.perf_counter()
    lfw, celeba = load_dataset("lfw-gender"), load_dataset("celeba")
    lfw125, cel125 = load_dataset("lfw-gender", size=(125, 125)), load_dataset("celeba", size=(125, 125))
    res: dict = {"machine": platform.machine(), "bar": near_copy.BAR, "alike_level": near_copy.ALIKE,
                 "alike_limit": near_copy.ALIKE_LIMIT, "timing": timing(cel125)}  # fmt: skip
    print(res["timing"], flush=True)
    res["detection"] = detection(lfw)
    res["false_matches"] = false_matches(lfw125, cel125, celeba)
    res["small_sets"] = small_sets(lfw125, cel125)
    res["alike"] = alike(lfw125, cel125)
    res["seconds"] = time.perf_counter() - t0
    write(RESULT, res)


if __name__ == "__main__":
    main()
