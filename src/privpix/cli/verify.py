"""``privpix verify``: check a release folder against its manifest, and finish or remove one a killed run left."""

from __future__ import annotations

import click
from rich.markup import escape

from privpix.cli.app import console, err_console, main
from privpix.cli.options import print_note


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--repair", is_flag=True, help="Finish (or remove) a release that a killed run left half-swapped.")
def verify(folder: str, repair: bool) -> None:
    """Check a release folder against its manifest: every file's sha256, none missing, none extra.

    Exits 0 when they match, 1 with the differences listed when they do not. Read-only unless --repair."""
    import sys

    from privpix.publishing.release import verify_manifest

    problems = verify_manifest(folder, note=print_note, repair=repair)
    for p in problems:
        console.print(escape(p), highlight=False)
    if problems:
        err_console.print(f"[red]{len(problems)} problem(s)[/red] in {escape(folder)}", highlight=False)
        sys.exit(1)
    console.print(f"{escape(folder)}: every file matches its manifest", highlight=False)
