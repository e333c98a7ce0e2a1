"""``privpix verify`` (check a release folder against its manifest, and finish or remove one a killed run left) and
``privpix report`` (the one-page HTML statement of a release)."""

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


@main.command()
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--output", type=click.Path(dir_okay=False), default=None,
              help="The HTML file to write (default: FOLDER.html beside the folder; never inside it).")  # fmt: skip
@click.option("--images", "n_images", type=int, default=16, show_default=True, help="Released images shown.")
def report(folder: str, output: str | None, n_images: int) -> None:
    """Write the one-page statement of a release folder: what was published, the guarantee that holds and its
    caveats, the noise, what it cost, whether every file still matches the manifest, and a few released images."""
    from pathlib import Path

    from privpix.errors import ParameterError
    from privpix.fileio import write_text_atomic
    from privpix.publishing.outputs import check_output_path, writing
    from privpix.publishing.release import read_manifest, verify_manifest
    from privpix.report.statement import render_statement

    src = Path(folder)
    manifest = read_manifest(src) if src.is_dir() else None
    if manifest is None:
        raise ParameterError(f"{folder}: holds no privpix release (no manifest.json)")
    out = Path(output) if output is not None else src.resolve().parent / f"{src.resolve().name}.html"
    if out.resolve().is_relative_to(src.resolve()):
        raise ParameterError(f"--output {out}: inside the release folder, where it would be a file the manifest "
                             "does not list; write it beside the folder")  # fmt: skip
    check_output_path(out, "--output")
    if n_images < 0:
        raise ParameterError(f"--images must be >= 0, got {n_images}")
    problems = verify_manifest(src)
    images = None
    if n_images and "images" in manifest and not problems:
        from privpix.data.formats import open_source

        source = open_source(src)
        images = source.read(0, min(n_images, len(source))).as_uint8()
    with writing(out, "--output"):
        write_text_atomic(out, render_statement(manifest, problems, images, src.resolve().name))
    console.print(f"wrote {escape(str(out))}", highlight=False)
