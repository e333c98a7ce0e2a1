"""mkdocs hook: links from docs/ to files of the repository outside it (benchmark results, the README, sources).

mkdocs can only link pages inside ``docs/``; such a link would be a warning, and ``--strict`` a failure. The hook
checks that every such target exists in the repository (a missing one fails the build: a broken link) and writes
it as the repository path in code, which a reader of the site can open in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


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
