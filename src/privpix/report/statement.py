"""The one-page HTML statement of a release (``privpix report FOLDER``): what was published, the guarantee that
holds and its caveats, the noise, what it cost, whether the folder matches its manifest, and a few released
images. Rendered from the manifest, the check's result and the images by the report's Jinja2 template system, with
autoescaping; the words are the dataset card's (:mod:`privpix.report.release_text`)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from privpix.report.release_text import contents, ledger_text, noise_text, num_text, params_text, why_not
from privpix.version import __version__

CSS = """
body{font-family:system-ui,sans-serif;max-width:900px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:6px 10px;text-align:left}
th{background:#f2f2f2;width:30%}.bad{color:#b00020;font-weight:600}.good{color:#1b5e20;font-weight:600}
.big{font-size:1.25em}
"""


def render_statement(manifest: dict[str, Any], problems: list[str], images: np.ndarray | None, folder: str) -> str:
    """The statement page of the release in ``folder`` (its name, as the page names it): ``manifest`` as read,
    ``problems`` from checking the folder against it (empty: it matches), ``images`` (k, h, w, c) uint8 to show
    (or ``None``)."""
    from privpix.report.html import template

    g = manifest["guarantee"]
    _, what = contents(manifest)
    return str(
        template("statement.html.j2").render(
            title=f"privpix release statement: {folder}",
            css=CSS,
            version=manifest.get("privpix_version", __version__),
            mechanism=manifest.get("mechanism") or "local-DP reports",
            what=what[0].upper() + what[1:],
            params=params_text(manifest.get("parameters", {})),
            sound=bool(g.get("sound")),
            why_not=why_not(g),
            epsilon=num_text(g.get("per_image_epsilon")),
            delta=num_text(g.get("delta")),
            unit=g.get("unit", ""),
            model=g.get("model", ""),
            noise=noise_text(manifest.get("rng")),
            ledger=ledger_text(manifest.get("ledger")),
            verified=not problems,
            problems=problems[:10],
            caveats=list(g.get("caveats") or []),
            grid=_mosaic(images) if images is not None and len(images) else "",
            grid_caption=f"{0 if images is None else len(images)} of the released images, as published",
            folder=folder,
        )
    )


def _mosaic(images: np.ndarray, columns: int = 8) -> str:
    """Base64 PNG of up to ``columns`` images a row, each framed by a grey line (a white image stays visible)."""
    from PIL import Image

    k, h, w, c = images.shape
    rows = -(-k // columns)
    pad = 2
    canvas = np.full((rows * (h + pad) + pad, min(k, columns) * (w + pad) + pad, 3), 160, np.uint8)
    for i, img in enumerate(images):
        r, col = divmod(i, columns)
        y, x = pad + r * (h + pad), pad + col * (w + pad)
        canvas[y : y + h, x : x + w] = img if c == 3 else np.repeat(img[..., :1], 3, axis=2)
    scale = max(1, 96 // max(h, w))  # small images shown at a size a reader can see
    size = (canvas.shape[1] * scale, canvas.shape[0] * scale)
    picture = Image.fromarray(canvas).resize(size, Image.Resampling.NEAREST)
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()
