"""The ``privpix`` command. Every user error is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from privpix import __version__
from privpix.errors import PrivpixError

# A wide console even when piped, so tables stay one row per line in logs.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


class _Group(click.Group):
    """The one place errors reach the user: every failure is one line on stderr, never a traceback.

    Exit codes: 2 for what the user or the environment can fix (bad arguments and files, permissions, full or
    read-only disks, too little memory), 1 for an internal error (a bug: please report it), 130 for Ctrl-C.
    ``--debug`` (or ``PRIVPIX_DEBUG=1``) re-raises instead, so the traceback shows.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `privpix` or `privpix ldp` (click >= 8.2)
                exc.show()  # the help, as it is, not squeezed onto an error line
                sys.exit(exc.exit_code)
            ctx = exc.ctx
            hint = ""
            if ctx is not None:
                names = []  # the sub-command path under the root, which is `privpix` whatever it was run as
                while ctx.parent is not None:
                    names.append(ctx.info_name)
                    ctx = ctx.parent
                hint = f" (see `{' '.join(['privpix', *reversed(names)])} --help`)"
            _fail(exc.format_message() + hint, 2)
        except click.exceptions.ClickException as exc:  # e.g. FileError: not a usage mistake, no help hint
            _fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Abort:
            err_console.print("[red]aborted[/red]")
            sys.exit(1)
        except Exception as exc:  # raised outside any command, e.g. while converting an option's value
            argv = kwargs.get("args", args[0] if args else None)
            argv = sys.argv[1:] if argv is None else argv
            _report(exc, _debug("--debug" in argv))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own: main() above reports them
        except KeyboardInterrupt:
            err_console.print("interrupted: nothing partial was published")
            sys.exit(130)
        except Exception as exc:
            _report(exc, _debug(bool(ctx.find_root().params.get("debug"))))


def _report(exc: Exception, debug: bool) -> None:
    """One line for ``exc`` and the exit code of its kind; with ``debug``, re-raise it for the traceback."""
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        raise exc  # stdout closed early (`privpix mechanisms | head`): click exits quietly
    if debug:
        raise exc
    if isinstance(exc, PrivpixError):
        _fail(str(exc), 2)
    if isinstance(exc, OSError):
        _fail(_os_error_text(exc), 2)
    if isinstance(exc, MemoryError):
        what = str(exc) or "an allocation failed"
        _fail(f"out of memory: {what} (try a smaller --size, --limit or --batch-size)", 2)
    why = f"{type(exc).__name__}: {exc}"
    if len(why) > 300:  # torch lists every mismatched tensor; the first ones say enough
        why = why[:300].rstrip() + "…"
    _fail(f"{why} (rerun with --debug for the traceback; please report it)", 1, "internal error")


def _debug(flag: bool) -> bool:
    """``privpix --debug`` or a PRIVPIX_DEBUG other than empty/0/false: let tracebacks through."""
    env = os.environ.get("PRIVPIX_DEBUG", "").strip().lower()
    return flag or env not in ("", "0", "false", "no", "off")


def _os_error_text(exc: OSError) -> str:
    """'PATH: Permission denied' (both paths for a failed rename or copy), naming the file the OS refused."""
    what = exc.strerror or str(exc)
    files = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{' → '.join(files)}: {what}" if files else what


def _plain(text: str) -> None:
    """Print text that holds user input (paths, name[key=value] labels) literally, not as rich markup."""
    console.print(escape(text), highlight=False)


def _fail(message: str, code: int, label: str = "error") -> NoReturn:
    """Print ``label: message`` as exactly one line (escaped: paths may hold rich markup) and exit."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    err_console.print(f"[red]{label}:[/red] {escape(text)}", highlight=False)
    sys.exit(code)


def _floats(text: str | None, name: str) -> list[float]:
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


def _params(items: Sequence[str]) -> dict[str, str]:
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


def _size(text: str | None, name: str = "--size") -> tuple[int, int] | None:
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


def _check_resize_fits(n: int, hw: tuple[int, int] | None, channels: int, what: str = "--size") -> None:
    """Refuse a resize of ``n`` images to ``hw`` that cannot fit in memory, before allocating any of it.

    Resizing holds each image as float64 while stacking, then a float32 copy: about 20 bytes a pixel at peak.
    Linux overcommits, so an oversized resize is often not a MemoryError but the OOM killer's silent SIGKILL.
    """
    from privpix.errors import ParameterError

    if hw is None:
        return
    need = 20 * n * hw[0] * hw[1] * max(channels, 1)
    have = _available_memory()
    if have is not None and need > have:
        raise ParameterError(
            f"{what} {hw[0]}x{hw[1]}: resizing {n} images needs about {need / 2**30:.1f} GiB of memory, but only "
            f"{have / 2**30:.1f} GiB is available (use a smaller size or --limit)"
        )


# Longest file name (bytes) on Linux file systems, and what an atomic write adds for its temporary file
# (".NAME.XXXXXXXX.tmp"): a name that fits but whose temporary file does not would fail only at the end.
NAME_MAX = 255
ATOMIC_SUFFIX = 14


def _check_output_path(path: str | os.PathLike, option: str, *, folder: bool = False) -> None:
    """Refuse an output that cannot be written before any work is done: a name too long for the file system,
    a parent that is a file, or a folder that cannot be written in (permissions, read-only file system).

    ``folder``: ``path`` is a folder the command creates and fills; else a file written atomically beside."""
    from privpix.errors import ParameterError

    p = Path(path)
    for part in p.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise ParameterError(f"{option} {p}: the name {part[:24]}… is {size} bytes; at most {NAME_MAX} fit")
    if not folder and len(os.fsencode(p.name)) > NAME_MAX - ATOMIC_SUFFIX:
        raise ParameterError(
            f"{option} {p}: the file name is {len(os.fsencode(p.name))} bytes; at most {NAME_MAX - ATOMIC_SUFFIX} "
            f"fit (it is written through a temporary file {ATOMIC_SUFFIX} bytes longer)"
        )
    if folder and p.exists() and not p.is_dir():
        raise ParameterError(f"{option} {p}: exists and is not a folder")
    base = p if folder else p.parent
    while not base.exists():  # the nearest folder that exists is where the first write happens
        base = base.parent
    if not base.is_dir():
        raise ParameterError(f"{option} {p}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ParameterError(f"{option} {p}: cannot write in {base} (permission denied or read-only file system)")


@contextlib.contextmanager
def _writing(path: str | os.PathLike, option: str) -> Iterator[None]:
    """Name ``option PATH`` in an OS error that names no file: a full disk or quota fails in write(), whose
    error carries no file name, so the one-line message would not say what could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno in (None, errno.EPIPE):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), f"{option} {path}") from exc


def _available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable), or the physical total; None where neither is known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privpix")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (also: PRIVPIX_DEBUG=1).")
def main(debug: bool) -> None:
    """Publish image data privately, and measure what the publication protects."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the datasets live (default: $PRIVPIX_DATA or ../shared/datasets).",
)
def datasets(data_dir: str | None) -> None:
    """List the datasets privpix knows, where they were found, and their sizes."""
    from privpix.data.loaders import DATASETS, resolve_data_dir

    try:
        root: Path | None = resolve_data_dir(data_dir)
    except PrivpixError as exc:
        if data_dir is not None:
            raise
        root = None
        err_console.print(f"[yellow]note:[/yellow] {escape(str(exc))}", highlight=False)
    table = Table(title=escape(f"datasets (data directory: {root or 'not found'})"))
    for col in ("name", "found", "where", "size on disk", "description", "splits", "terms"):
        table.add_column(col)
    for info in DATASETS.values():
        if info.folder is None:
            found, where, size = "yes", "inside an installed package", "—"
        else:
            p = root / info.folder if root else None
            ok = p is not None and p.is_dir()
            found = "yes" if ok else "no"
            where = escape(str(p)) if p else "—"
            size = f"{sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 1e6:.1f} MB" if ok else "—"
        table.add_row(info.name, found, where, size, info.description, ",".join(info.splits), info.terms)
    console.print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def mechanisms(as_json: bool) -> None:
    """List every mechanism with its guarantee model and parameters."""
    from privpix.mechanisms import MECHANISMS

    items = []
    for name in sorted(MECHANISMS):
        cls = MECHANISMS[name]
        items.append(
            {
                "name": name,
                "model": cls.guarantee_model,
                "soundness": cls.soundness,
                "uses_epsilon": cls.uses_epsilon,
                "paper": cls.paper,
                "summary": cls.summary,
                "parameters": [
                    {
                        "name": p.name,
                        "type": p.kind.__name__,
                        "default": p.default,
                        "help": p.help,
                        **({"choices": list(p.choices)} if p.choices else {}),
                    }
                    for p in cls.params
                ],
            }
        )
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    table = Table(title="mechanisms")
    for col in ("name", "guarantee model", "what holds", "ε", "paper", "parameters (default)", "summary"):
        table.add_column(col)
    for it in items:
        params = "\n".join(f"{p['name']}={p['default']}" for p in it["parameters"])
        table.add_row(
            it["name"],
            it["model"],
            it["soundness"],
            "yes" if it["uses_epsilon"] else "no",
            it["paper"],
            params,
            it["summary"],
        )
    console.print(table)


@main.command()
@click.option("--dataset", required=True, help="Dataset NAME with train/test splits (e.g. orl, mnist).")
@click.option(
    "--method",
    "methods",
    required=True,
    multiple=True,
    help="Mechanism(s): comma-separated and/or repeated; name[key=value,...] pins parameters.",
)
@click.option("--epsilon", "epsilons", default="0.1,1,10", show_default=True, help="Comma-separated ε values.")
@click.option("--repeats", type=int, default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--param", "params", multiple=True, help="key=value for every method that has the parameter.")
@click.option("--limit", type=int, default=None, help="Use at most this many train and test images (seeded).")
@click.option("--size", default=None, help="Resize to HEIGHTxWIDTH first.")
@click.option("--grayscale", is_flag=True, help="Convert colour images to grey first.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write rows as JSON.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Write HTML report.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--quiet", "-q", is_flag=True)
def evaluate(
    dataset, methods, epsilons, repeats, seed, params, limit, size, grayscale, json_path, report_path, data_dir, quiet
) -> None:
    """Utility (PCA + SVM) and quality of each (method, ε, repeat) on a dataset's train/test split."""
    from privpix.errors import ParameterError

    if repeats < 1:
        raise ParameterError(f"--repeats must be >= 1, got {repeats}")
    method_list = [m for spec in methods for m in _split_methods(spec)]
    eps_list = _floats(epsilons, "epsilon")
    common = _params(params)
    _check_methods(method_list, common, "--method")
    for opt, path in (("--json", json_path), ("--report", report_path)):
        if path:
            _check_output_path(path, opt)  # before the evaluation, not after it
    name = _pair_name(dataset)
    train, test = _load_pair(name, data_dir, limit, seed, _size(size), grayscale)
    rows = _run_evaluation(train, test, method_list, eps_list, repeats, seed, common, name, quiet)
    _print_summary(rows, quiet)
    if json_path:
        from privpix.accounting import write_text_atomic

        with _writing(json_path, "--json"):
            write_text_atomic(Path(json_path), json.dumps(rows, indent=2, default=float))
        if not quiet:
            console.print(f"wrote {escape(json_path)}", highlight=False)
    if report_path:
        with _writing(report_path, "--report"):
            _write_report(report_path, rows, test, method_list, eps_list, seed, name, common)
        if not quiet:
            console.print(f"wrote {escape(report_path)}", highlight=False)


def _split_methods(spec: str) -> list[str]:
    """Split on commas outside brackets: 'a,b[x=1,y=2]' → ['a', 'b[x=1,y=2]']."""
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
    return out


def _check_methods(methods: Sequence[str], common: dict[str, str], option: str) -> None:
    """Every method known and its ``--param`` values consistent with what it pins, before any data is loaded."""
    from privpix.errors import ParameterError
    from privpix.mechanisms.base import method_params

    if not methods:
        raise ParameterError(f"{option}: no method given")
    for m in methods:
        if not m:
            raise ParameterError(f"{option}: an empty method name in the list (a stray comma?)")
        method_params(m, _method_params(m, common))


def _pair_name(spec: str) -> str:
    """The dataset name of ``spec`` for commands that use its train and test splits both: a split named there
    would be ignored, so it is refused (a misspelt one as much as a real one)."""
    from privpix.data.loaders import parse_dataset_spec
    from privpix.errors import ParameterError

    name, split = parse_dataset_spec(spec)
    if split is not None:
        raise ParameterError(
            f"--dataset {spec}: this command uses both the train and the test split; give the name only ({name})"
        )
    return name


def _load_pair(name, data_dir, limit, seed, hw, grayscale):
    import numpy as np

    from privpix.data import ImageSet, load_dataset
    from privpix.errors import ParameterError

    name = _pair_name(name)
    train = load_dataset(f"{name}:train", data_dir)
    test = load_dataset(f"{name}:test", data_dir)
    if not isinstance(train, ImageSet):
        raise ParameterError(f"--dataset {name}: holds records, not images")
    if limit is not None:
        if limit < 2:
            raise ParameterError(f"--limit must be >= 2, got {limit}")
        rng = np.random.default_rng(seed)
        if len(train) > limit:
            train = train.subset(np.sort(rng.choice(len(train), limit, replace=False)))
        if len(test) > limit:
            test = test.subset(np.sort(rng.choice(len(test), limit, replace=False)))
    if grayscale:
        train, test = train.grayscale(), test.grayscale()
    if hw is not None:
        _check_resize_fits(len(train) + len(test), hw, train.shape[2])
        train, test = train.resized(*hw), test.resized(*hw)
    return train, test


def _method_params(method: str, common: dict[str, str]) -> dict[str, str]:
    """The ``--param`` values that ``method`` has a parameter for (others belong to other methods)."""
    from privpix.mechanisms import mechanism_class

    known = {p.name for p in mechanism_class(method).params}
    return {k: v for k, v in common.items() if k in known}


def _progress(total: int, desc: str, unit: str, quiet: bool):
    """A tqdm bar and the ``progress(msg)`` callback the evaluation code calls once per finished step."""
    from tqdm import tqdm

    bar = tqdm(total=total, disable=quiet, desc=desc, unit=unit)

    def step(msg: str) -> None:
        bar.set_postfix_str(msg[-60:])
        bar.update(1)

    return bar, step


def _run_evaluation(train, test, methods, epsilons, repeats, seed, common, dataset, quiet):
    from privpix.evaluation import evaluate as run
    from privpix.mechanisms import mechanism_class

    per_method = {m: _method_params(m, common) for m in methods}
    cells = sum(repeats * (len(epsilons) if mechanism_class(m).uses_epsilon else 1) for m in methods)
    bar, step = _progress(cells, "evaluate", "cell", quiet)

    rows = run(
        train, test, methods, epsilons, repeats=repeats, seed=seed, params=per_method, dataset=dataset, progress=step
    )
    bar.close()
    return rows


def _print_summary(rows, quiet):
    if quiet:
        return
    from privpix.report.html import summary_rows

    table = Table(title="evaluation (mean over repeats)")
    for col in ("method", "ε", "accuracy", "F1", "acc. release-all", "PSNR", "SSIM", "entropy", "guarantee"):
        table.add_column(col)
    for s in summary_rows(rows):
        table.add_row(
            escape(s["method"]),  # name[key=value] labels are not markup
            "—" if s["epsilon"] is None else f"{s['epsilon']:g}",
            f"{s['accuracy']:.3f}",
            f"{s['f1']:.3f}",
            f"{s['accuracy_release_all']:.3f}",
            f"{s['psnr']:.1f}",
            f"{s['ssim']:.3f}",
            f"{s['entropy']:.2f}",
            escape(s["guarantee_compact"]),
        )
    console.print(table)


def _write_report(path, rows, test, methods, epsilons, seed, dataset, common, notes=()):
    import numpy as np

    from privpix.data.loaders import credit
    from privpix.mechanisms import mechanism_class, ready_mechanism
    from privpix.noise import make_rng
    from privpix.report import sample_grid_png, write_report

    k = min(8, len(test))
    idx = np.linspace(0, len(test) - 1, k).astype(int)
    sample = test.subset(idx)
    grids = []
    for eps in sorted(set(epsilons)) or [None]:
        released = {}
        for m in methods:
            uses_eps = mechanism_class(m).uses_epsilon
            mech = ready_mechanism(m, eps if uses_eps else None, params=_method_params(m, common), private=test)
            released[m] = mech.release(sample, make_rng(seed)).images.as_float()
        png = sample_grid_png(sample.as_float(), released)
        grids.append(
            (
                f"Test images of {dataset} and their releases at ε={eps} (methods without ε: their "
                "fixed setting)." + credit(dataset),
                png,
            )
        )
    write_report(path, rows, f"privpix evaluation: {dataset}", dataset, grids, notes)


DEMO_METHODS = (
    "pixel-laplace",
    "pixel-laplace[sensitivity=bound,unit=pixel]",
    "dp-pix[b=4,m=1]",
    "sra",
    "pca-inverse",
    "ldp-pixel",
    "gaussian-blur[sigma=1.5]",
)


@main.command()
@click.option("--output", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option(
    "--dataset",
    default="builtin-mnist",
    show_default=True,
    help="A built-in dataset (no download, no data directory needed).",
)
@click.option("--epsilon", "epsilons", default="0.5,2,8", show_default=True)
@click.option("--limit", type=int, default=1000, show_default=True, help="Train and test images used.")
@click.option("--audit-trials", type=int, default=1000, show_default=True, help="Audit releases per side.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--quiet", "-q", is_flag=True)
def demo(output, dataset, epsilons, limit, audit_trials, seed, quiet) -> None:
    """Offline demo: `privpix bench` over a few mechanisms and ε on built-in data (utility, attacks, ε audit)
    → report.html, results.csv, results.json. Replaces an earlier demo in --output."""
    from privpix.bench import BenchConfig, run_bench
    from privpix.cli_bench import print_audit_table
    from privpix.errors import ParameterError

    t0 = time.perf_counter()
    out = Path(output)
    eps = _floats(epsilons, "epsilon")
    train, test = _load_pair(dataset, None, limit, seed, None, False)
    cfg = out / "config.json"
    if out.is_dir() and any(out.iterdir()):
        # A demo starts afresh, but only ever removes the files of an earlier privpix run.
        try:
            stored = json.loads(cfg.read_text())
            ours = isinstance(stored, dict) and {"dataset", "seed", "audit_trials"} <= set(stored)
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise ParameterError(f"--output {out}: not empty and not an earlier privpix demo or bench; choose another")
        for name in ("config.json", "cells.jsonl", "audits.jsonl"):
            (out / name).unlink(missing_ok=True)
    config = BenchConfig(
        dataset=dataset,
        methods=list(DEMO_METHODS),
        epsilons=eps,
        seed=seed,
        limit=limit,
        cnn_epochs=0,
        audit_trials=audit_trials,
    )
    if not quiet:
        console.print(
            escape(
                f"privpix demo: {dataset} ({len(train)} train / {len(test)} test images), "
                f"{len(DEMO_METHODS)} mechanisms, ε ∈ {eps}: utility, attacks and an ε audit per cell"
            ),
            highlight=False,
        )
    bar, step = _progress(2 * len(DEMO_METHODS) * len(eps), "demo", "step", quiet)
    res = run_bench(train, test, config, out, progress=step)
    bar.close()
    if quiet:
        return
    print_audit_table(res, "demo: claimed versus audited ε, utility and re-identification")
    console.print(
        "NO in 'sound' means the ε is a paper's noise knob, not a DP guarantee; 'violated' means the audit "
        "refuted the claim."
    )
    console.print(
        escape(f"wrote {out / 'report.html'}, results.csv, results.json in {time.perf_counter() - t0:.0f} s"),
        highlight=False,
    )


from privpix import cli_bench, cli_ldp, cli_neural, cli_release  # noqa: E402,F401  (registers the sub-commands)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
