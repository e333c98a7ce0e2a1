"""The ``privpix`` click group and the one place errors reach the user: every user error is one line on stderr
and a non-zero exit, never a traceback.

The command modules (:mod:`privpix.cli.evaluate`, ``release``, ``bench``, ``ldp``, ``neural``) import
:data:`main` from here and register their commands on it; this module never imports them back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from privpix.errors import PrivpixError, command_line
from privpix.version import __version__

# A wide console even when piped, so tables stay one row per line in logs. No emoji codes: a dataset split in a
# message ("builtin-mnist:train: ...") must print as typed, not as ":train:" turned into a picture.
console = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
err_console = Console(stderr=True, soft_wrap=True, emoji=False)


class _Group(click.Group):
    """The one place errors reach the user: every failure is one line on stderr, never a traceback.

    Exit codes: 2 for what the user or the environment can fix (bad arguments and files, permissions, full or
    read-only disks, too little memory), 1 for an internal error (a bug: please report it), 130 for Ctrl-C, 143
    for SIGTERM (handled as Ctrl-C is).
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
                names: list[str] = []  # the sub-command path under the root: `privpix` whatever it was run as
                while ctx.parent is not None:
                    names.append(ctx.info_name or "")  # click names every sub-command's context
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
            with _terminate_as_interrupt(), command_line():
                return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own: main() above reports them
        except Terminated:
            err_console.print("terminated: nothing partial was published")
            sys.exit(128 + signal.SIGTERM)
        except KeyboardInterrupt:
            err_console.print("interrupted: nothing partial was published")
            sys.exit(130)
        except Exception as exc:
            _report(exc, _debug(bool(ctx.find_root().params.get("debug"))))


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a job scheduler, ``kill``) raised where the command is, as Ctrl-C is: every cleanup
    runs (a ledger reservation of a run that published nothing is rolled back, a release's staging is removed or
    kept for ``--resume``), where the default action would end the process with its reservation held."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may install a handler; a command run elsewhere keeps the default
        return

    def raise_terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        hint = "a smaller --size or --limit; for a release a smaller --block-size, for training --batch-size"
        _fail(f"out of memory: {what} (try {hint})", 2)
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


def _fail(message: str, code: int, label: str = "error") -> NoReturn:
    """Print ``label: message`` as exactly one line (escaped: paths may hold rich markup) and exit."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    err_console.print(f"[red]{label}:[/red] {escape(text)}", highlight=False)
    sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privpix")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (also: PRIVPIX_DEBUG=1).")
def main(debug: bool) -> None:
    """Publish image data privately, and measure what the publication protects."""
