"""The one grid every comparison runs: (method, ε, repeat) cells, each released by a mechanism fitted once as it
declares, scored for utility and quality, optionally attacked, and one ε audit per (method, ε).

``privpix evaluate`` is this grid without attacks and audit; ``privpix bench`` (:mod:`privpix.evaluation.bench`) adds
both and stores the records in a resumable folder. Records are plain JSON objects, typed here (:class:`CellRecord`,
:class:`AuditRecord`) so that every reader agrees on their keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import privpix_warnings_to
from privpix.evaluation.quality import entropy
from privpix.evaluation.runner import cell_seed, evaluate_cell
from privpix.executor import Executor
from privpix.mechanisms.base import Auditable, Mechanism, takes_delta
from privpix.mechanisms.registry import mechanism_class, method_params, ready_mechanism
from privpix.threads import one_thread

if TYPE_CHECKING:
    from privpix.evaluation.audit import AuditResult

AUDIT_MAX_SIDE = 32


class CellRecord(TypedDict):
    """One (method, ε, repeat) cell, as ``privpix evaluate --json`` and the bench's ``cells.jsonl`` store it.

    Scores: ``accuracy``/``recall``/``f1`` (train on released, test on original), the same with
    ``_release_all`` (train and test on released), ``psnr`` (dB), ``ssim``, ``entropy`` (bits) of released test
    images and ``entropy_original``; ``seconds`` of the two releases. ``output``: what the mechanism releases (its
    :class:`~privpix.mechanisms.Capabilities` ``output``; for ``"model"`` no images are released, and the scores
    are the released model's own predictions on the original test images). Bench cells add ``attribute``, the attack
    scores (``reid_*``, ``attr_*``, ``mia_*``, ``recon_*``, ...) and ``cell_seconds``."""

    dataset: str
    method: str
    repeat: int
    epsilon: float | None
    seed: int
    accuracy: float
    recall: float
    f1: float
    psnr: float
    ssim: float
    entropy: float
    parameters: dict[str, Any]
    guarantee: dict[str, Any]
    output: NotRequired[str]
    attribute: NotRequired[str]
    cell_seconds: NotRequired[float]


class AuditRecord(TypedDict):
    """One (method, ε) audit in the bench's ``audits.jsonl``: the requested ε and
    :meth:`privpix.evaluation.audit.AuditResult.to_dict` (claimed and audited ε, unit, verdict, ...)."""

    method: str
    claimed_epsilon_requested: float | None
    claimed_epsilon: float | None
    audited_epsilon_lower: float
    verdict: str
    unit: str
    sound: bool


@dataclass(frozen=True)
class GridPoint:
    """One (method, ε) of a grid; ``epsilon`` is None for a mechanism that takes no ε."""

    method: str
    epsilon: float | None

    @property
    def key(self) -> tuple[str, str]:
        """A hashable key that tells 1 from 1.0 apart no more than JSON does."""
        return self.method, eps_key(self.epsilon)

    @property
    def label(self) -> str:
        return "release" if self.epsilon is None else f"ε={self.epsilon:g}"


def eps_key(eps: float | None) -> str:
    return "none" if eps is None else repr(float(eps))


def grid_points(methods: Sequence[str], epsilons: Sequence[float]) -> list[GridPoint]:
    """Every (method, ε) of a grid, in order; a mechanism that takes no ε gets one point with ε = None."""
    return [
        GridPoint(m, e) for m in methods for e in (list(epsilons) if mechanism_class(m).about.uses_epsilon else [None])
    ]


class FittedMechanisms:
    """The mechanism of each grid point, fitted once as it declares (on the training images when it fits on the
    private set, e.g. a GAN it trains) and reused by every cell, the audit and the sample grids of that point.
    ``delta`` is given to the mechanisms that take one (an (ε, δ) claim) and to no other."""

    def __init__(
        self,
        params: dict[str, dict[str, Any]],
        train: ImageSet,
        seed: int = 0,
        data_dir: str | None = None,
        delta: float | None = None,
    ) -> None:
        self.params, self.train, self.seed, self.data_dir, self.delta = params, train, seed, data_dir, delta
        self._cache: dict[tuple[str, str], Mechanism] = {}

    def __call__(self, point: GridPoint) -> Mechanism:
        if point.key not in self._cache:
            self._cache[point.key] = ready_mechanism(
                point.method,
                point.epsilon,
                self.delta if self._takes_delta(point.method) else None,
                params=self.params.get(point.method, {}),
                private=self.train,
                data_dir=self.data_dir,
                seed=self.seed,
            )
        return self._cache[point.key]

    def adopt(self, point: GridPoint, mech: Mechanism) -> None:
        """Keep a mechanism a worker fitted for ``point`` (so the sample grids do not fit it again)."""
        self._cache[point.key] = mech

    def __getstate__(self) -> dict[str, Any]:
        # A worker gets the settings, not the fitted mechanisms of other points.
        return {**self.__dict__, "_cache": {}}

    def _takes_delta(self, method: str) -> bool:
        return takes_delta(mechanism_class(method), method_params(method, self.params.get(method, {})))


@dataclass
class AttackSettings:
    """What the bench attacks with: the attribute the inference attack targets and the CNN inversion's epochs."""

    attribute: str = ""
    cnn_epochs: int = 3


def attack_scores(
    mech: Mechanism, train: ImageSet, test: ImageSet, rel_train, rel_test, settings: AttackSettings, seed: int
) -> dict[str, float]:
    """Re-identification, attribute inference, membership and reconstruction scores of one cell. For synthetic
    images only the attacks that apply to them: membership by each real image's distance to the closest synthetic
    one and to the synthetic set's principal subspace (a synthetic image is no transform of the input at its
    index, so linkage, attribute inference from the paired image and reconstruction have nothing to attack)."""
    from privpix.evaluation import attacks

    if mech.capabilities().output == "synthetic-images":
        return attacks.membership_inference(train, rel_train.images, test, seed=seed)
    row: dict[str, float] = {}
    row.update(attacks.reidentification(test, rel_test.images, train, rel_train.images, seed=seed))
    if settings.attribute:
        row.update(
            attacks.attribute_inference(train, rel_train.images, test, rel_test.images, settings.attribute, seed=seed)
        )
    query_rng = np.random.default_rng(seed + 1)

    def query(s: ImageSet) -> ImageSet:
        out = mech.release(s, query_rng).images
        assert out is not None  # the attacks run on image releases only (rel_test.images)
        return out

    row.update(attacks.membership_inference(train, rel_train.images, test, query=query, seed=seed))
    row.update(attacks.reconstruction(train, rel_train.images, test, rel_test.images, settings.cnn_epochs, seed=seed))
    return row


# Why the bench leaves a mechanism fitted on the private set unaudited when its fit releases no statistic to test.
NOT_AUDITED_REFIT = (
    "not audited: fitted on the private set and no released statistic to test; refitting the whole mechanism on "
    "both sides of every trial is too slow at a bench's trials (`privpix audit --target output`, with few trials)"
)


def bench_audit(
    mech: Mechanism, images: ImageSet, trials: int, seed: int, max_trials: int | None = None
) -> AuditResult:
    """The grid's ε audit of one point. A mechanism fitted on the private set under a dataset-level relation is
    audited on the one DP statistic its fit releases (a refit of that per trial is cheap); a released model (DP-SGD)
    by its white-box experiment (``Auditable.white_box_trials``: gradient canaries, thousands of trials in one run)
    or, without one, by the one-run audit, one fit with half the audit images as canaries (little power at this
    size, but a real verdict); with neither, the record says it is not audited rather than spending 4 × ``trials``
    whole fits. Claims up to ε = 10 get as many trials as it takes to be refutable (see ``bench_trials``), at most
    ``max_trials`` per side when given (a claim that needs more is audited at that, and reported not refutable)."""
    from privpix.evaluation.audit import audit, not_audited

    if mech.capabilities().fits_on == "private" and mech.neighbours().dataset_level:
        if not isinstance(mech, Auditable) or mech.released_statistic(images, None, seed=seed) is None:
            if mech.capabilities().output == "model":
                res = audit(mech, images, trials=bench_trials(mech, images, trials, max_trials), seed=seed)
                if res.verdict != "not-audited":  # the mechanism's own white-box experiment
                    return res
                from privpix.evaluation.audit.one_run import audit_one_run

                return audit_one_run(mech, images, canaries=len(images) // 2, seed=seed)
            return not_audited(mech, images, NOT_AUDITED_REFIT)
        return audit(mech, images, trials=bench_trials(mech, images, trials, max_trials), seed=seed, target="statistic")
    return audit(mech, images, trials=bench_trials(mech, images, trials, max_trials), seed=seed)


# The bench raises its audit trials until every claim up to this ε could be refuted (a claim beyond the audit's
# range says nothing); larger claims keep the trials asked for.
REFUTE_UP_TO = 10.0


def bench_trials(mech: Mechanism, images: ImageSet, trials: int, max_trials: int | None = None) -> int:
    """The audit trials per side the bench runs for ``mech``: ``trials``, or more (doubling, at most
    ``trials_to_refute``'s cap or ``max_trials``) when a claim ≤ ``REFUTE_UP_TO`` is beyond what ``trials`` could
    refute and that many could: randomized response needs 64,000 per side at ε = 10."""
    from privpix.evaluation.audit import MAX_ADAPTIVE_TRIALS, claimed, trials_to_refute

    claim = claimed(mech, images)[0]
    if claim is None or claim > REFUTE_UP_TO:
        return trials
    cap = MAX_ADAPTIVE_TRIALS if max_trials is None else max(trials, max_trials)
    return trials_to_refute(mech, images, trials, cap=cap)


def audit_images(mech: Mechanism, test: ImageSet) -> ImageSet:
    """At most 64 test images, downscaled so the longer side is ≤ 32 px (the audit's cost is thousands of
    releases); a mechanism bound to one shape (a public PCA basis, a trained network) keeps it."""
    imgs = test.subset(np.arange(min(64, len(test))))
    h, w, _ = imgs.shape
    if max(h, w) <= AUDIT_MAX_SIDE or mech.capabilities().fixed_shape is not None:
        return imgs
    scale = AUDIT_MAX_SIDE / max(h, w)
    return imgs.resized(max(2, round(h * scale)), max(2, round(w * scale)))


@dataclass(frozen=True)
class _PointTask:
    """One grid point's work (its cells and its audit), sent whole to a worker."""

    point: GridPoint
    fitted: FittedMechanisms
    train: ImageSet
    test: ImageSet
    dataset: str
    repeats: int
    seed: int
    attacks: AttackSettings | None
    audit_trials: int | None
    audit_max_trials: int | None
    skip_cells: frozenset
    audit: bool
    src_entropy: float


def _run_point(task: _PointTask) -> tuple[Mechanism, list[CellRecord], AuditRecord | None, list[str]]:
    """Fit the point's mechanism, run its cells and its audit; returns them with the progress lines. One torch
    thread wherever it runs, so a point's numbers do not depend on the executor (:func:`one_thread`)."""
    with one_thread():
        return _point(task)


def _point(task: _PointTask) -> tuple[Mechanism, list[CellRecord], AuditRecord | None, list[str]]:
    point, train, test = task.point, task.train, task.test
    lines: list[str] = []
    # A fit's advice (a generator trained too briefly, say) goes into the progress lines, not raw to a worker's stderr.
    with privpix_warnings_to(lambda message: lines.append(f"{point.method} ε={point.epsilon}: note: {message}")):
        mech = task.fitted(point)
    cells: list[CellRecord] = []
    for rep in range(task.repeats):
        if (*point.key, rep) in task.skip_cells:
            continue
        t0 = time.perf_counter()
        s = cell_seed(task.seed, point.method, point.epsilon, rep)
        row, rel_train, rel_test = evaluate_cell(mech, train, test, s, task.src_entropy)
        cell: dict[str, Any] = {"dataset": task.dataset, "method": point.method, "repeat": rep, **row}
        if task.attacks is not None:
            cell["attribute"] = task.attacks.attribute
            # The attacks compare images; a feature release has the audit, a model release has no images.
            if rel_test is not None and rel_test.images is not None:
                cell.update(attack_scores(mech, train, test, rel_train, rel_test, task.attacks, s))
            cell["cell_seconds"] = time.perf_counter() - t0
        cells.append(cell)  # type: ignore[arg-type]
        extra = f" re-id {cell['reid_best']:.2f}" if "reid_best" in cell else ""
        lines.append(f"{point.method} ε={point.epsilon} rep {rep}: acc {cell['accuracy']:.3f}{extra}")
    audit: AuditRecord | None = None
    if task.audit_trials is not None and task.audit:
        res = bench_audit(mech, audit_images(mech, test), task.audit_trials, task.seed, task.audit_max_trials)
        # res.to_dict() is a plain dict[str, Any]: the checker cannot see that it holds the audit record's keys.
        audit = {"claimed_epsilon_requested": point.epsilon, **res.to_dict(), "method": point.method}  # type: ignore[assignment]
        lines.append(f"{point.method} ε={point.epsilon} audit: ≥ {res.audited_epsilon_lower:.2f} ({res.verdict})")
    return mech, cells, audit, lines


def run_grid(
    train: ImageSet,
    test: ImageSet,
    points: Iterable[GridPoint],
    fitted: FittedMechanisms,
    *,
    dataset: str,
    repeats: int = 1,
    seed: int = 0,
    attacks: AttackSettings | None = None,
    audit_trials: int | None = None,
    audit_max_trials: int | None = None,
    skip_cells: set[tuple[str, str, int]] = frozenset(),  # type: ignore[assignment]
    skip_audits: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
    on_cell: Callable[[CellRecord], None] | None = None,
    on_audit: Callable[[AuditRecord], None] | None = None,
    progress: Callable[[str], None] | None = None,
    executor: Executor | None = None,
) -> list[CellRecord]:
    """Run every cell (and, with ``audit_trials``, every audit, raised to at most ``audit_max_trials`` per side when
    given) of ``points`` not in the skip sets; each record
    goes to ``on_cell``/``on_audit`` as soon as it is done (a bench appends it to its JSONL file). Returns the
    cells run, in grid order. Each cell is seeded by :func:`~privpix.evaluation.runner.cell_seed` alone, so a
    cell's result does not depend on which other cells run, nor on the ``executor`` (:mod:`privpix.executor`)
    that spreads the grid points over processes or a cluster (one point, with its repeats and audit, per task)."""
    src_entropy = float(np.mean(entropy(test.as_float())))
    tasks = [
        _PointTask(
            point,
            fitted,
            train,
            test,
            dataset,
            repeats,
            seed,
            attacks,
            audit_trials,
            audit_max_trials,
            frozenset(skip_cells),
            point.key not in skip_audits,
            src_entropy,
        )
        for point in points
    ]
    # Points whose every cell and audit is done are not sent anywhere (their mechanism is fitted when asked).
    tasks = [
        t
        for t in tasks
        if (t.audit and audit_trials is not None) or any((*t.point.key, r) not in skip_cells for r in range(repeats))
    ]
    by_point: dict[int, list[CellRecord]] = {}
    runs = (executor or Executor(1)).map_unordered(_run_point, tasks)
    for i, (mech, cells, audit, lines) in runs:
        fitted.adopt(tasks[i].point, mech)
        by_point[i] = cells
        for cell in cells:
            if on_cell is not None:
                on_cell(cell)
        if audit is not None and on_audit is not None:
            on_audit(audit)
        for line in lines:
            if progress is not None:
                progress(line)
    return [c for i in sorted(by_point) for c in by_point[i]]


def evaluate(
    train: ImageSet,
    test: ImageSet,
    methods: Sequence[str],
    epsilons: Sequence[float],
    repeats: int = 1,
    seed: int = 0,
    params: dict[str, dict[str, Any]] | None = None,
    dataset: str = "",
    progress: Callable[[str], None] | None = None,
    data_dir: str | None = None,
    delta: float | None = None,
) -> list[CellRecord]:
    """The grid without attacks and audit: for each (method, ε, repeat), release train and test, score PCA+SVM
    utility under both protocols (``accuracy``/``recall``/``f1`` are train-on-released, test-on-original;
    ``*_release_all`` train and test on released) and image quality of the released test images (PSNR, SSIM vs
    source, entropy, and the source's entropy). Methods without ε run once per repeat with ``epsilon`` = None;
    ``delta`` goes to the methods that take one.

    Each cell uses its own seed derived from (seed, method, ε, repeat), so rows are reproducible one by one."""
    fitted = FittedMechanisms(params or {}, train, seed, data_dir, delta)
    return run_grid(
        train,
        test,
        grid_points(methods, epsilons),
        fitted,
        dataset=dataset or train.source,
        repeats=repeats,
        seed=seed,
        progress=progress,
    )


def sample_grids(
    points: Sequence[GridPoint], fitted: FittedMechanisms, test: ImageSet, seed: int, caption: str = "", k: int = 6
) -> list[tuple[str, str]]:
    """One sample grid per method (a row of ``k`` test images, then its release at each ε), as (caption,
    base64 PNG) for the report; each release is seeded with ``seed``."""
    from privpix.report.plots import sample_grid_png

    sample = test.subset(np.linspace(0, len(test) - 1, min(k, len(test))).astype(int))
    by_method: dict[str, dict[str, np.ndarray]] = {}
    for point in points:
        if fitted(point).capabilities().output == "model":
            continue  # releases no images to show
        released = fitted(point).release(sample, np.random.default_rng(seed))
        if released.images is not None:
            by_method.setdefault(point.method, {})[point.label] = released.images.as_float()
    return [(m + "." + caption, sample_grid_png(sample.as_float(), rel)) for m, rel in by_method.items()]
