"""The documentation site: docs/ and the API reference (mkdocstrings) build with ``--strict``, so a broken link,
a missing anchor or a link to a repository file that is gone fails the suite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"

pytestmark = pytest.mark.integration


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    assert MKDOCS.is_file(), "mkdocs is a dev dependency: pip install -e '.[dev]'"
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_site_builds_with_no_warning(tmp_path):
    r = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    # The API reference is generated from the code: the user API and the protocol are documented.
    for name in ("privpix.PrivacyLedger", "privpix.mechanisms.base.Capabilities", "privpix.testing.conformance"):
        assert f'id="{name}"' in api, name
    # A link from docs/ to a benchmark result outside it is checked and printed as its repository path.
    synthesis = (tmp_path / "site" / "synthesis" / "index.html").read_text(encoding="utf-8")
    assert "<code>benchmarks/results/" in synthesis
    # The docstrings' cross-references render as code, linked where the page documents the target; none is raw.
    for role in (":func:", ":meth:", ":class:", ":attr:", ":mod:"):
        assert role not in api, role
    assert '<a href="#privpix.privacy.accounting.open_ledger"><code>open_ledger</code></a>' in api
    # The build's hooks are not a page of the site.
    assert not (tmp_path / "site" / "hooks.py").exists()
    # Every list renders as a list: no page shows a "- " item as text.
    pages = sorted((tmp_path / "site").glob("*/index.html"))
    assert pages
    for page in pages:
        html = re.sub(r"<pre.*?</pre>", "", page.read_text(encoding="utf-8"), flags=re.S)
        assert not re.search(r"^- \S|<p>- ", html, re.M), page
    # A reader starts from the guide: the getting-started and which-method pages, and a nav grouped by purpose.
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    for group in ("Guide", "Methods", "Privacy", "Reference"):
        assert group in home, group
    assert (tmp_path / "site" / "getting_started" / "index.html").exists()
    assert (tmp_path / "site" / "which_method" / "index.html").exists()


@pytest.mark.parametrize(
    ("link", "message"),
    [
        ("[a page](missing.md)", "not found among documentation files"),
        ("[an anchor](#nowhere)", "no such anchor"),
        ("[a result](../benchmarks/results/missing.md)", "does not exist"),
    ],
)
def test_a_broken_link_fails_the_build(tmp_path, link, message):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hooks.py").write_text((ROOT / "docs" / "hooks.py").read_text())
    (docs / "index.md").write_text(f"# Home\n\n[the readme](../README.md) and {link}\n")
    (tmp_path / "README.md").write_text("# readme\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        "site_name: t\ndocs_dir: docs\nstrict: true\nhooks: [docs/hooks.py]\n"
        "validation: {omitted_files: warn, absolute_links: warn, unrecognized_links: warn, anchors: warn}\n"
    )
    r = _build(config, tmp_path / "site")
    assert r.returncode != 0 and message in r.stderr, r.stderr[-2000:]
    # The same page without the broken link builds: the failure is the link's.
    (docs / "index.md").write_text("# Home\n\n[the readme](../README.md)\n")
    assert _build(config, tmp_path / "site2").returncode == 0
