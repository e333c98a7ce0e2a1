"""One-run audit (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run"): a lower bound on
ε from a single fit of a dataset-level mechanism, for mechanisms too expensive to refit thousands of times (DP
synthesizers, DP-SGD).

The auditor builds the private set: a base of correctly labelled images, and m canary slots. Each slot holds its
canary (an image with a wrong label: an outlier the mechanism should not be able to show) with probability 1/2,
independently, and otherwise, under the replace-one relation, the same image with its true label, or, under
add/remove, nothing. One fit; then a score per canary computed from the release alone, and the k highest scores
guessed "in", the k lowest "out". If the mechanism is (ε, δ)-DP in each slot's choice, the number v of correct
guesses among the r = 2k made is at most Binomial(r, e^ε/(1 + e^ε)) in distribution, up to a δ term (their
Theorem 3, Appendix D): P[W ≥ v] ≤ P[Bin(r, q) ≥ v] + 2mδ·max_i P[v − i ≤ Bin(r, q) < v] / i. The bound is the
largest ε whose p-value is still below 1 − confidence, for the best of a few k fixed in advance (their
confidence split equally: a Bonferroni correction).

Scores, from what the mechanism declares:

* ``Auditable.released_statistic`` (a synthesizer's noisy embedding): the least-squares coefficients of the
  noisy statistic on the canaries' noise-free effects (each slot switched on alone, the others off). The
  effects are computed from the canary design, not from the draw of slots, so the guesses are post-processing.
* ``Mechanism.membership_score`` (a released model, e.g. DP-SGD): how well the model fits each canary's
  (image, wrong label), e.g. minus its cross-entropy.
* A mechanism that fits nothing but releases a batch at once (``pca-inverse`` with a private or DP basis: its
  output for one image depends on the whole batch, and every release recomputes a basis): the canary is the
  slot's image, its replacement the image inverted (1 − x); the score is the projection of the slot's released
  image on the difference, centred between the two. One release of the whole set replaces thousands.

One run gives far less power than thousands of refits: at ε = 1 the bound is typically a small fraction of ε.
Its use is catching a broken implementation (noise far too small, canaries memorised) at the cost of one fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import optimize, stats

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import Auditable, Mechanism
from privpix.mechanisms.kinds import ModelMechanism

CONFIDENCE = 0.95
# Guesses per side as shares of the canaries, fixed before the release is seen.
K_SHARES = (0.05, 0.1, 0.25, 0.5)


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[at least ``v`` of ``r`` guesses correct] for an (ε, δ)-DP mechanism with ``m`` canary slots (the tail
    of Binomial(r, e^ε/(1 + e^ε)) plus the δ term of Steinke et al., Theorem 3)."""
    if not 0 <= v <= r <= m:
        raise ParameterError(f"one-run audit: need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    # P[v − i ≤ Bin < v] for i = 1..v, divided by i: the most δ can move the count.
    below = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
    spread = float(np.max(below / np.arange(1, v + 1)))
    return min(tail + spread * delta * 2 * m, 1.0)


def epsilon_lower(m: int, r: int, v: int, delta: float, level: float) -> float:
    """The largest ε with :func:`p_value` ≤ ``level`` (0 when even ε = 0 is not rejected)."""
    if r == 0 or p_value(m, r, v, 0.0, delta) > level:
        return 0.0
    hi = 1.0
    while p_value(m, r, v, hi, delta) <= level:
        hi *= 2
        if hi > 100:
            return math.inf
    return float(optimize.brentq(lambda e: p_value(m, r, v, e, delta) - level, 0.0, hi, xtol=1e-6))


def bound_from_scores(scores: np.ndarray, inside: np.ndarray, delta: float,
                      confidence: float = CONFIDENCE) -> dict[str, Any]:  # fmt: skip
    """The one-run bound from canary ``scores`` (higher: more likely in) and the true slots ``inside`` (bool):
    for each k of ``K_SHARES``·m, guess the k highest in and the k lowest out; the best k's bound at level
    (1 − confidence)/len(ks). Returns the bound, its k, guesses and correct guesses, and the ceiling (all right)."""
    scores, inside = np.asarray(scores, dtype=np.float64), np.asarray(inside, dtype=bool)
    m = len(scores)
    ks = sorted({max(1, int(m * s)) for s in K_SHARES if 2 * max(1, int(m * s)) <= m})
    if not ks:
        raise ParameterError(f"one-run audit: needs at least 2 canaries, got {m}")
    level = (1.0 - confidence) / len(ks)
    order = np.argsort(-scores, kind="stable")
    best = {"epsilon_lower": 0.0, "k": ks[0], "guesses": 2 * ks[0], "correct": 0}
    for k in ks:
        correct = int(inside[order[:k]].sum() + (~inside[order[m - k :]]).sum())
        eps = epsilon_lower(m, 2 * k, correct, delta, level)
        if eps > best["epsilon_lower"] or (eps == best["epsilon_lower"] and correct > best["correct"]):
            best = {"epsilon_lower": eps, "k": k, "guesses": 2 * k, "correct": correct}
    best["ceiling"] = max(epsilon_lower(m, 2 * k, 2 * k, delta, level) for k in ks)
    best["level"] = level
    return best


def design(images: ImageSet, canaries: int, removes: bool, n_classes: int, rng: np.random.Generator,
           pixels: bool = False) -> tuple[ImageSet, ImageSet, ImageSet | None, int]:  # fmt: skip
    """(base, canaries, replacements or None, base size): the canaries are ``canaries`` labelled images with a
    wrong label drawn uniformly among the others; their replacements (replace-one) are the same images with their
    true labels; the base is every other image. With ``pixels`` (a mechanism that releases the images themselves):
    the canaries are the images as they are and their replacements the same images inverted, labels kept."""
    n = len(images)
    if not 2 <= canaries <= n - 2:
        raise ParameterError(f"one-run audit: canaries must be in 2..{n - 2} for {n} images, got {canaries}")
    pick = rng.permutation(n)
    slots, base = np.sort(pick[:canaries]), np.sort(pick[canaries:])
    if pixels:
        x = images.as_float()[slots]
        labels = None if images.labels is None else np.asarray(images.labels)[slots]
        names = images.class_names
        return (images.subset(base), ImageSet(x, labels=labels, source="canaries", class_names=names),
                ImageSet(1.0 - x, labels=labels, source="canaries inverted", class_names=names), len(base))  # fmt: skip
    if images.labels is None:
        raise ParameterError("one-run audit: needs labelled images (the canaries carry wrong labels)")
    true = np.asarray(images.labels)[slots].astype(np.int64)
    wrong = (true + rng.integers(1, n_classes, canaries)) % n_classes
    names = images.class_names
    canary_set = ImageSet(images.as_float()[slots], labels=wrong, source="canaries", class_names=names)
    replacements = None if removes else ImageSet(images.as_float()[slots], labels=true, source="canaries",
                                                 class_names=names)  # fmt: skip
    return images.subset(base), canary_set, replacements, len(base)


def _private_set(base: ImageSet, canary_set: ImageSet, replacements: ImageSet | None, inside: np.ndarray) -> ImageSet:
    """The base, then slot i: the canary where ``inside``, else its replacement (or nothing, under add/remove)."""
    x, y = [base.as_float()], [None if base.labels is None else np.asarray(base.labels)]
    if replacements is None:
        x.append(canary_set.images[inside])
        y.append(None if canary_set.labels is None else canary_set.labels[inside])
    else:
        x.append(np.where(inside[:, None, None, None], canary_set.images, replacements.images))
        c_labels, r_labels = canary_set.labels, replacements.labels
        y.append(None if c_labels is None or r_labels is None else np.where(inside, c_labels, r_labels))
    known = [v for v in y if v is not None]
    labels = np.concatenate(known).astype(np.int64) if len(known) == len(y) else None
    return ImageSet(np.concatenate(x).astype(np.float32), labels=labels, source="one-run audit set",
                    class_names=base.class_names)  # fmt: skip


def statistic_scores(mech: Mechanism, base: ImageSet, canary_set: ImageSet, replacements: ImageSet | None,
                     inside: np.ndarray, rng, fixed: int,
                     progress: Callable[[str], None] | None = None) -> np.ndarray:  # fmt: skip
    """Least-squares scores of the canaries on one noisy release of the mechanism's statistic: each canary's
    noise-free effect (its slot on, all others off) is a column of A; the scores solve min ‖s̃ − s_off − A·b‖."""
    if not isinstance(mech, Auditable):
        raise ParameterError(f"{mech.name}: has no released statistic to audit")
    m = len(canary_set)
    off = np.zeros(m, dtype=bool)
    s_off = np.asarray(mech.released_statistic(_private_set(base, canary_set, replacements, off), None, seed=fixed))
    cols = []
    for i in range(m):
        one = off.copy()
        one[i] = True
        on = np.asarray(mech.released_statistic(_private_set(base, canary_set, replacements, one), None, seed=fixed))
        if len(on) != len(s_off):
            # Add/remove changes n; a statistic that is a mean changes shape only if it is not one. Refuse.
            raise ParameterError(f"{mech.name}: its released statistic changes size with the data")
        cols.append(on - s_off)
        if progress is not None and (i + 1) % max(1, m // 10) == 0:
            progress(f"one-run audit {mech.name}: canary effects {i + 1}/{m}")
    a = np.stack(cols, axis=1)
    noisy = np.asarray(mech.released_statistic(_private_set(base, canary_set, replacements, inside), rng, seed=fixed))
    coef, *_ = np.linalg.lstsq(a, noisy - s_off, rcond=None)
    return coef


def audit_one_run(mech: Mechanism, images: ImageSet, canaries: int | None = None, seed: int = 0,
                  confidence: float = CONFIDENCE, progress: Callable[[str], None] | None = None):  # fmt: skip
    """One-run audit of a mechanism under a dataset-level relation, fitted on the private set or releasing a batch
    at once (see the module docstring). ``images`` (labelled, for a fitted mechanism) supply the base and the
    canaries (default: half of them, at most 1,000).
    Returns an :class:`~privpix.evaluation.audit.AuditResult` (``trials`` = 1 fit, ``pair`` naming the design)."""
    from privpix.evaluation.audit import AuditResult, claim_fields, claimed, not_audited

    if not isinstance(images, ImageSet):
        # Its canaries are images; a records release is audited per release (privpix audit without --canaries).
        raise ParameterError(
            f"{mech.name}: the one-run audit plants canary images, and the data given holds "
            f"{type(images).__name__}; audit records without --canaries"
        )
    t0 = time.perf_counter()
    caps, relation = mech.capabilities(), mech.neighbours()
    batch_release = caps.fits_on == "nothing" and caps.output == "images"
    if not (relation.dataset_level and (caps.fits_on == "private" or batch_release)):
        raise ParameterError(f"{mech.name}: the one-run audit is for mechanisms under a dataset-level relation, "
                             "fitted on the private set or releasing a batch at once; use the per-release "
                             "audit")  # fmt: skip
    if batch_release and relation.removes:  # pragma: no cover - no such mechanism; the design replaces
        raise ParameterError(f"{mech.name}: the pixel design replaces slots; an add/remove batch release is not "
                             "supported")  # fmt: skip
    if not 0.5 <= confidence < 1:
        raise ParameterError(f"confidence must be in [0.5, 1), got {confidence}")
    m = canaries if canaries is not None else min(1000, len(images) // 2)
    rng = np.random.default_rng(seed)
    if batch_release:
        n_classes = 0
    else:
        if images.labels is None:
            raise ParameterError("one-run audit: needs labelled images (the canaries carry wrong labels)")
        # The mechanism's K, else the data set's declared classes (its public schema), else what the labels show.
        declared = len(images.class_names) if images.class_names else int(np.max(images.labels)) + 1
        n_classes = int(mech.get_params().get("n_classes") or declared)
        if n_classes < 2:
            raise ParameterError("one-run audit: the canaries' wrong labels need at least 2 classes")
    base, canary_set, replacements, n_base = design(images, m, relation.removes, n_classes, rng, batch_release)
    inside = rng.random(m) < 0.5
    fixed = int(rng.integers(0, 2**31))
    noise = np.random.default_rng(int(rng.integers(0, 2**63)))
    claim_eps, claim_delta = claimed(mech, images)
    if batch_release:
        shown = mech.release(_private_set(base, canary_set, replacements, inside), noise).values()[n_base:]
        assert replacements is not None  # an image-by-image release is replace-one: inverted images replace canaries
        c, a = canary_set.flat().astype(np.float64), replacements.flat().astype(np.float64)
        scores = ((shown - 0.5 * (c + a)) * (c - a)).sum(axis=1)
        how = "projection of each slot's released image on (image − inverted image), centred between them"
    elif isinstance(mech, Auditable) and mech.released_statistic(base, None, seed=fixed) is not None:
        scores = statistic_scores(mech, base, canary_set, replacements, inside, noise, fixed, progress)
        how = "least-squares coefficients of the released statistic on the canaries' noise-free effects"
    elif not isinstance(mech, ModelMechanism) or type(mech).membership_score is ModelMechanism.membership_score:
        return not_audited(mech, images, "not audited: the mechanism declares neither a released statistic "
                            "nor a membership score for a one-run audit")  # fmt: skip
    else:
        fresh = type(mech)(**{k: v for k, v in mech.get_params().items() if k != "model"})
        fresh.fit(_private_set(base, canary_set, replacements, inside), seed=int(noise.integers(0, 2**31)))
        scores = fresh.membership_score(canary_set)
        how = "membership score of the fitted model on each canary (image, wrong label)"
    b = bound_from_scores(scores, inside, claim_delta, confidence)
    bound = b["epsilon_lower"]
    n_private = n_base + (m if replacements is not None else int(inside.sum()))
    return AuditResult(
        **claim_fields(mech, images),
        audited_epsilon_lower=bound,
        max_auditable_epsilon=b["ceiling"],
        trials=1,
        verdict="no-claim" if claim_eps is None else ("violated" if bound > claim_eps else "consistent"),
        pair=f"one run: {m} canary slots ({'image or its inverse' if batch_release else 'wrong labels'}) beside "
        f"{n_base} images ({n_private} private images)",
        statistic=f"{how}; {b['correct']} of {b['guesses']} guesses right (k = {b['k']} per side)",
        false_positive_rate=float("nan"),
        false_negative_rate=float("nan"),
        seconds=time.perf_counter() - t0,
        refutable=claim_eps is not None and claim_eps < b["ceiling"],
        confidence=confidence,
        pairs_tried=["one run"],
        raw_epsilon_lower=bound,
        refuted_by="one-run" if claim_eps is not None and bound > claim_eps else "",
        kind="one-run",
    )
