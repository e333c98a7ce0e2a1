"""Folders of image files: the scan (hidden files, links, duplicates, headers, sizes), ordered listing and
loading in batches (:func:`list_image_files`, :func:`iter_folder`, :func:`load_folder`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from privpix.data.files import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    ImageHeader,
    check_max_pixels,
    is_image_file,
    read_header,
    read_image,
)
from privpix.data.imageset import ImageSet
from privpix.data.resize import resize
from privpix.errors import DataError, ParameterError
from privpix.fileio import sha256_file

# How an --input folder is described when --record-source is not given (a path can name a person): a description
# that says nothing of which images it holds.
INPUT_FOLDER = "the --input folder"


def concat_sets(sets: list[ImageSet]) -> ImageSet:
    """One ImageSet of ``sets`` in order (labels, subjects, attributes and names alike); the first set's source and
    class names stand for all."""
    first = sets[0]
    return ImageSet(
        np.concatenate([s.images for s in sets]),
        labels=None if first.labels is None else np.concatenate([s.labels for s in sets]),
        subjects=None if first.subjects is None else np.concatenate([s.subjects for s in sets]),
        attributes={k: np.concatenate([s.attributes[k] for s in sets]) for k in first.attributes},
        names=np.concatenate([s.names for s in sets]),
        source=first.source,
        class_names=first.class_names,
    )


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class _FolderEntry:
    path: Path
    cls: str | None
    header: ImageHeader


def walk_files(root: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Every regular file under ``root`` in sorted path order (symlinked folders followed once each), and the
    entries passed over with why: hidden files and files in hidden folders, broken links, special files, and
    folders reached a second time through a link (which would otherwise give their images twice)."""
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    # Hidden folders are walked only to report their files; they keep their own record of folders seen, so a
    # visible link into a hidden folder still releases its images.
    seen_visible = {os.path.realpath(root): root}
    seen_hidden: dict[str, Path] = {}

    def visit(folder: Path, hidden_in: str | None) -> None:
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            raise DataError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from None
        for name in names:
            p = folder / name
            rel = _rel(p, root)
            hidden = hidden_in or (rel if name.startswith(".") else None)
            if p.is_dir():
                seen = seen_visible if hidden is None else seen_hidden
                real = os.path.realpath(p)
                if real in seen:
                    if hidden is None:
                        skipped.append((p, f"same folder as {_rel(seen[real], root) or '.'} (link)"))
                    continue
                seen[real] = p
                visit(p, hidden)
            elif hidden is not None:
                skipped.append((p, "hidden file" if hidden == rel else f"in hidden folder {hidden}"))
            elif p.is_file():
                files.append(p)
            elif p.is_symlink():
                skipped.append((p, "broken link"))
            else:
                skipped.append((p, "not a regular file"))

    visit(root, None)
    return files, skipped


# Files per task of the scan's first pass on the workers (headers, and digests of same-size files): about 20 ms of
# work each on small JPEGs, against about a millisecond to hand a task to a worker.
PROBE_CHUNK = 256
# Below this many files the first pass stays in this process: handing it out would cost more than it saves. On
# 1,500 small JPEGs (2 cores) it takes 0.1 s here, against 0.2-0.4 s on workers that must first start (0.06-0.09 s
# on running ones); the workers start meanwhile (see executor._start_forkserver) and are ready for the shards.
PROBE_MIN = 4096

_Probed = tuple[ImageHeader | None, str | None, tuple[int, str] | None]


def _probe(task: tuple[list[Path], list[bool], int | None]) -> list[_Probed]:
    """``(header, sha256 or None, error)`` of each file; ``error`` is ``(0, message)`` for an unreadable header,
    ``(1, message)`` for a file that cannot be hashed, so the caller raises the first in input order."""
    paths, hashed, max_pixels = task
    out: list[_Probed] = []
    for path, digest in zip(paths, hashed, strict=True):
        try:
            header = read_header(path, max_pixels)
        except DataError as exc:
            out.append((None, None, (0, str(exc))))
            continue
        try:
            out.append((header, sha256_file(path) if digest else None, None))
        except OSError as exc:
            out.append((None, None, (1, f"{path}: cannot be read ({exc.strerror or exc})")))
    return out


def _probe_all(paths: list[Path], hashed: list[bool], max_pixels: int | None) -> list[_Probed]:
    """:func:`_probe` of every file, in their order: on the workers of the command's executor when it has several
    and the folder is large (the scan was the serial part of a release), else here. The same result either way."""
    from privpix.executor import active

    executor = active()
    if executor.workers < 2 or len(paths) < PROBE_MIN:
        return _probe((paths, hashed, max_pixels))
    # Absolute paths: a worker of a cluster runs in another folder (each header gets the caller's path back).
    absolute = [p.absolute() for p in paths]
    tasks = [(absolute[i : i + PROBE_CHUNK], hashed[i : i + PROBE_CHUNK], max_pixels)
             for i in range(0, len(paths), PROBE_CHUNK)]  # fmt: skip
    parts = dict(executor.map_unordered(_probe, tasks))
    merged = [item for i in range(len(tasks)) for item in parts[i]]
    return [(replace(h, path=p) if h is not None else None, d, e) for p, (h, d, e) in zip(paths, merged, strict=True)]


def scan_folder(
    folder: str | os.PathLike, max_pixels: int | None
) -> tuple[Path, list[_FolderEntry], list[tuple[Path, str]]]:
    """``(root, images, skipped)``: every image once, with its class folder and header (sizes checked against
    ``max_pixels`` before any decoding), and every other file with the reason it was passed over."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: input folder does not exist")
    check_max_pixels(max_pixels)
    paths, skipped = walk_files(root)
    real_root = root.resolve()
    # One file reached by two names (symlink, hard link) is one record: release it once.
    by_inode: dict[tuple[int, int], Path] = {}
    candidates: list[tuple[Path, str | None]] = []
    sizes: dict[Path, int] = {}
    real_dirs: dict[Path, Path] = {}  # a folder's real path, resolved once for all its files
    for p in paths:
        if p.is_symlink():
            real = p.resolve()
        else:
            parent = real_dirs.get(p.parent)
            if parent is None:
                parent = real_dirs[p.parent] = p.parent.resolve()
            real = parent / p.name
        if not real.is_relative_to(real_root):
            # A link planted in an upload must not publish files from elsewhere on the machine.
            skipped.append((p, "link to a file outside the input folder"))
            continue
        st = p.stat()
        sizes[p] = st.st_size
        key = (st.st_dev, st.st_ino)
        if key in by_inode:
            skipped.append((p, f"same file as {_rel(by_inode[key], root)} (link)"))
            continue
        by_inode[key] = p
        if p.suffix.lower() not in IMAGE_EXTENSIONS and not is_image_file(p):
            skipped.append((p, "not an image"))
            continue
        parts = p.relative_to(root).parts
        candidates.append((p, parts[0] if len(parts) > 1 else None))
    # Byte-identical copies are one record too. Only files whose sizes collide are hashed.
    same_size: dict[int, int] = {}
    for p, _ in candidates:
        same_size[sizes[p]] = same_size.get(sizes[p], 0) + 1
    hashed = [same_size[sizes[p]] > 1 for p, _ in candidates]
    probed = _probe_all([p for p, _ in candidates], hashed, max_pixels)
    # The first unreadable header in input order, else the first unreadable copy: the error a serial scan gives.
    for which in (0, 1):
        for _header, _digest, error in probed:
            if error is not None and error[0] == which:
                raise DataError(error[1])
    by_digest: dict[str, Path] = {}
    images: list[_FolderEntry] = []
    for (p, cls), (header, digest, _) in zip(candidates, probed, strict=True):
        assert header is not None
        if digest is not None:
            if digest in by_digest:
                skipped.append((p, f"duplicate of {_rel(by_digest[digest], root)}"))
                continue
            by_digest[digest] = p
        images.append(_FolderEntry(p, cls, header))
    if images and any(e.cls is None for e in images) and any(e.cls is not None for e in images):
        raise DataError(f"{root}: mixes images at the top level with class sub-folders; use one layout")
    if not images:
        raise DataError(f"{root}: no image files found (PNG, JPEG, PGM, GIF, BMP, TIFF, WebP)")
    skipped.sort(key=lambda item: item[0].relative_to(root).parts if item[0].is_relative_to(root) else ())
    return root, images, skipped


def list_image_files(
    folder: str | os.PathLike, *, max_pixels: int | None = DEFAULT_MAX_PIXELS
) -> tuple[list[tuple[Path, str | None]], list[tuple[Path, str]]]:
    """Image files under ``folder``: flat, or one sub-folder per class. Returns ``(images, skipped)``.

    ``images`` pairs each file with its class folder name (``None`` when flat); each image appears once: a
    second name for the same file (symlink, hard link) or a byte-identical copy is skipped, since releasing
    one image twice doubles its privacy cost. ``skipped`` pairs every file passed over with a one-line reason:
    ``"hidden file"``, ``"in hidden folder .x"``, ``"not an image"``, ``"duplicate of a.png"``, ``"same file as
    a.png (link)"``, ``"same folder as cats (link)"``, ``"broken link"``, ``"not a regular file"``.

    Every image header is read (nothing is decoded): a file over ``max_pixels`` pixels, or an unreadable file
    with an image extension, raises :class:`DataError` naming it.
    """
    _, images, skipped = scan_folder(folder, max_pixels)
    return [(e.path, e.cls) for e in images], skipped


def iter_folder(
    folder: str | os.PathLike,
    batch_size: int = 256,
    mode: str | None = None,
    size: tuple[int, int] | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    on_skip: Callable[[Path, str], None] | None = None,
) -> Iterator[ImageSet]:
    """Stream a folder as ImageSet batches of up to ``batch_size`` images (see :func:`list_image_files` for what
    is read). All images must share one size unless ``size`` resizes them. ``mode`` ('L' or 'RGB') is the same
    for every batch; when not given it is 'L' only if every file is grey by its header (:func:`set_mode`),
    else 'RGB'. Each image is decoded as docs/decoding.md states, after its header passed ``max_pixels``.

    An image whose decoded pixels equal an earlier one's (the same picture saved twice, in another format or at
    another compression) is released once: it is skipped and ``on_skip(path, reason)`` is told."""
    if mode not in (None, "L", "RGB"):
        raise ParameterError(f"mode must be 'L', 'RGB' or None, got {mode!r}")
    if batch_size < 1:
        raise ParameterError(f"batch size must be >= 1, got {batch_size}")
    root, files, _ = scan_folder(folder, max_pixels)
    if mode is None:
        mode = "L" if all(e.header.grey for e in files) else "RGB"
    classes = sorted({e.cls for e in files if e.cls is not None})
    class_index = {c: i for i, c in enumerate(classes)}
    shape = None
    seen: dict[str, Path] = {}
    for start in range(0, len(files), batch_size):
        chunk = files[start : start + batch_size]
        batch = None
        kept: list[_FolderEntry] = []
        for e in chunk:
            img = read_image(e.path, mode, max_pixels=max_pixels)
            digest = hashlib.sha256(np.ascontiguousarray(img).data).hexdigest() + str(img.shape)
            if digest in seen:
                if on_skip is not None:
                    on_skip(e.path, f"same pixels as {_rel(seen[digest], root)}")
                continue
            seen[digest] = e.path
            i = len(kept)
            kept.append(e)
            if size is not None:
                img = resize(img, size)
            if shape is None:
                shape = img.shape
            elif img.shape != shape:
                raise DataError(
                    f"{e.path}: image is {img.shape[1]}x{img.shape[0]}x{img.shape[2]}, but earlier images are "
                    f"{shape[1]}x{shape[0]}x{shape[2]}; pass a resize size to make them equal"
                )
            # Decoded straight into the batch array: no list of images plus a stacked copy.
            if len(chunk) == 1:
                batch = img[None]
            else:
                if batch is None:
                    batch = np.empty((len(chunk), *shape), np.uint8)
                batch[i] = img
            del img
        if not kept:
            continue
        # scan_folder refuses a folder that mixes class sub-folders with top-level images: all have a class, or none.
        labels = np.array([class_index[e.cls] for e in kept if e.cls is not None]) if classes else None
        names = np.array([str(e.path.relative_to(root)) for e in kept])
        assert batch is not None  # set with the first image kept
        batch = batch[: len(kept)]
        out = ImageSet(batch, labels=labels, names=names, source=str(root), class_names=tuple(classes) or None)
        batch = None
        yield out
        del out  # the consumer holds the batch; this generator must not keep it alive while decoding the next


def load_folder(
    folder: str | os.PathLike,
    mode: str | None = None,
    size: tuple[int, int] | None = None,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> ImageSet:
    """A whole folder as one ImageSet (see :func:`iter_folder`)."""
    batches = list(iter_folder(folder, batch_size=1 << 30, mode=mode, size=size, max_pixels=max_pixels))
    return batches[0] if len(batches) == 1 else concat_sets(batches)
