"""mkdocs hooks (not published: ``exclude_docs`` in mkdocs.yml).

Links from docs/ to files of the repository outside it (benchmark results, the README, sources): mkdocs can only
link pages inside ``docs/``; such a link would be a warning, and ``--strict`` a failure. The hook checks that every
such target exists in the repository (a missing one fails the build: a broken link) and writes it as the repository
path in code, which a reader of the site can open in the repository.

Cross-references of the docstrings: they are written in the roles a reader of the code knows
(``:func:`privpix.fit```, ``:meth:`~Mechanism.privacy```), which the Google-style handler would print as raw text.
Each becomes the name in code, linked to its entry when the page documents it (the API reference is one page).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")
# A role as Markdown renders it: ":func:" then the name in code, "~" first for the last part only.
ROLE = re.compile(r":(?:func|meth|class|attr|mod|data|exc|obj):<code>(~?)([^<]+)</code>")
ANCHOR = re.compile(r'id="([A-Za-z_][\w.]*)"')


def on_page_markdown(markdown, page, config, files):  # mkdocs calls it with these four
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    here = (docs / page.file.src_path).parent

    def outside(m: re.Match) -> str:
        text, target = m.group(1), m.group(2)
        path = (here / target).resolve()
        if not path.exists():
            raise PluginError(f"{page.file.src_path}: link to {target} but {path} does not exist")
        rel = path.relative_to(repo).as_posix()
        return f"{text} (`{rel}`)" if text.strip("`") != rel else f"`{rel}`"

    return LINK.sub(outside, markdown)


def on_page_content(html, page, config, files):  # mkdocs calls it with these four
    anchors = set(ANCHOR.findall(html))

    def target(name: str) -> str | None:
        """The documented object ``name`` refers to: as written, or as the tail of a documented dotted name."""
        if name in anchors:
            return name
        tails = [a for a in anchors if a.endswith("." + name)]
        return tails[0] if len(tails) == 1 else None

    def crossref(m: re.Match) -> str:
        short, name = m.group(1) == "~", m.group(2).strip().rstrip("()")
        shown = name.rsplit(".", 1)[-1] if short else name
        found = target(name)
        return f'<a href="#{found}"><code>{shown}</code></a>' if found else f"<code>{shown}</code>"

    return ROLE.sub(crossref, html)
