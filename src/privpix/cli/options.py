"""What the command modules share: parsing of option values (``--epsilon``, ``--param``, ``--size``,
``--method``), checks of output paths made before any work, the progress bar, and literal printing."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import click
from rich.markup import escape

from privpix.cli.app import console, err_console
from privpix.data.folders import INPUT_FOLDER  # noqa: F401  (re-exported: the commands name it from here)

INPUT_PAIR_HELP = (
    "A folder of your own images (flat, or one sub-folder per class), or Parquet / WebDataset shards, instead of "
    "--dataset: split in two halves (train, test) by a seeded permutation within each class."
)


def method_options(*, grid: bool = False, epsilon_help: str = "ε the mechanism claims (for DP mechanisms)."):
    """The options that name a mechanism and its privacy parameters, declared once for every command.

    One mechanism (``release``, ``fit``, ``audit``): ``--method``, ``--epsilon`` (one float), ``--delta``,
    ``--param`` (``params``). A grid (``evaluate``, ``bench``, whose own option names the methods): ``--epsilon``
    (``epsilons``, comma-separated), ``--delta``, ``--param`` applied to every method that has the parameter."""

    def decorate(f):
        if grid:
            f = click.option("--param", "params", multiple=True,
                             help="key=value for every method that has the parameter (repeatable).")(f)  # fmt: skip
            f = click.option("--delta", type=float, default=None,
                             help="δ for the mechanisms that claim (ε, δ); the others take none.")(f)  # fmt: skip
            return click.option("--epsilon", "epsilons", default="0.1,1,10", show_default=True,
                                help="Comma-separated ε values.")(f)  # fmt: skip
        f = click.option("--param", "params", multiple=True,
                         help="Mechanism parameter key=value (repeatable; see `privpix mechanisms`).")(f)  # fmt: skip
        f = click.option("--delta", type=float, default=None, help="δ for (ε, δ) mechanisms.")(f)
        f = click.option("--epsilon", type=float, default=None, help=epsilon_help)(f)
        name_help = "Mechanism name (see `privpix mechanisms`), optionally name[key=value,...]."
        return click.option("--method", required=True, help=name_help)(f)

    return decorate


def executor_options(f):
    """``--workers``, ``--engine``, ``--scheduler``: where a command's work runs (:mod:`privpix.executor`)."""
    f = click.option("--scheduler", default=None, help="Address of an existing Dask scheduler (tcp://host:8786).")(f)
    f = click.option(
        "--engine",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="local: processes on this machine; dask: a Dask LocalCluster, or the cluster at --scheduler.",
    )(f)
    return click.option("--workers", type=int, default=None, help="Worker processes (default: every core).")(f)


def print_note(msg: str) -> None:
    """A one-line note on stderr (what is being waited for, what was skipped or kept)."""
    err_console.print(f"[yellow]note:[/yellow] {escape(msg)}", highlight=False)


def notes_from_warnings() -> contextlib.AbstractContextManager[None]:
    """privpix's warnings raised inside (a fit too short for its data, say) printed as one-line notes; any other
    warning is shown as Python would have shown it."""
    from privpix.errors import privpix_warnings_to

    return privpix_warnings_to(print_note)


def plain(text: str) -> None:
    """Print text that holds user input (paths, name[key=value] labels) literally, not as rich markup."""
    console.print(escape(text), highlight=False)


def parse_floats(text: str | None, name: str) -> list[float]:
    """Comma-separated numbers > 0 for option ``name`` (``epsilon`` or ``--epsilon``); None → []."""
    from privpix.errors import ParameterError, check_positive

    if text is None:
        return []
    opt = name if name.startswith("-") else f"--{name}"
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            float(part)
        except ValueError:
            raise ParameterError(f"{opt}: {part!r} is not a number") from None
        out.append(check_positive(opt, part))  # the text, so the message quotes what was typed
    if not out:
        # An empty list would run nothing and still report success.
        raise ParameterError(f"{opt} {text!r}: no values given; expected comma-separated numbers, e.g. 0.1,1,10")
    return out


def parse_params(items: Sequence[str]) -> dict[str, str]:
    """``--param key=value`` options as a dict. A key given twice with two values, and ``epsilon`` or ``delta``
    (they have options of their own), are refused."""
    from privpix.errors import ParameterError

    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ParameterError(f"--param {item!r}: expected key=value")
        if key in ("epsilon", "delta"):
            raise ParameterError(f"--param {key}: give {key} with --{key}, not as a method parameter")
        # A repeat that disagrees would silently drop one value; the same value twice is harmless.
        if key in out and out[key] != value:
            raise ParameterError(f"--param {key}: given twice ({key}={out[key]} and {key}={value}); give it once")
        out[key] = value
    return out


# Beyond this one image no longer fits comfortably in memory (8192x8192 float32 RGB is 768 MiB); a bigger
# --size is a typo, and refusing it up front beats an allocation failure or the OOM killer half-way.
MAX_PIXELS = 8192 * 8192


def parse_size(text: str | None, name: str = "--size") -> tuple[int, int] | None:
    """HEIGHTxWIDTH for option ``name``; None when not given."""
    from privpix.errors import ParameterError

    if not text:
        return None
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ParameterError(f"{name} {text!r}: expected HEIGHTxWIDTH, e.g. 64x64") from None
    if h < 1 or w < 1:
        raise ParameterError(f"{name} {text!r}: both sides must be >= 1")
    if h * w > MAX_PIXELS:
        raise ParameterError(f"{name} {text!r}: at most {MAX_PIXELS} pixels per image (e.g. 8192x8192)")
    return h, w


def split_methods(spec: str, dataset: str | None = None) -> list[str]:
    """Split on commas outside brackets: 'a,b[x=1,y=2]' → ['a', 'b[x=1,y=2]']; an alias becomes the mechanism it
    stands for on ``dataset`` (``dp-synth`` → ``dp-teacher``, on faces ``dp-transport``), so rows and reports name
    the real method."""
    from privpix.data.loaders import dataset_domain
    from privpix.mechanisms.registry import canonical_spec

    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [canonical_spec(m, dataset_domain(dataset)) for m in out]


def check_methods(methods: Sequence[str], common: dict[str, str], option: str) -> None:
    """Every method known and its ``--param`` values consistent with what it pins, before any data is loaded."""
    from privpix.errors import ParameterError
    from privpix.mechanisms.registry import method_params

    if not methods:
        raise ParameterError(f"{option}: no method given")
    for m in methods:
        if not m:
            raise ParameterError(f"{option}: an empty method name in the list (a stray comma?)")
        method_params(m, params_for_method(m, common))


def params_for_method(method: str, common: dict[str, str]) -> dict[str, str]:
    """The ``--param`` values that ``method`` has a parameter for (others belong to other methods)."""
    from privpix.mechanisms import mechanism_class

    known = {p.name for p in mechanism_class(method).params}
    return {k: v for k, v in common.items() if k in known}


def progress_bar(total: int, desc: str, unit: str, quiet: bool):
    """A tqdm bar and the ``progress(msg)`` callback the evaluation code calls once per finished step."""
    from tqdm import tqdm

    bar = tqdm(total=total, disable=quiet, desc=desc, unit=unit)

    def step(msg: str) -> None:
        bar.set_postfix_str(msg[-60:])
        bar.update(1)

    return bar, step
