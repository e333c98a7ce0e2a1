"""The package's shape: no import circles in src/privpix, benchmarks on the public API only, the CLI a package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "privpix"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(mods: dict[str, Path], name: str) -> set[str]:
    """Modules of the package that ``name`` imports, at module or function level (a package's own submodules
    that it imports are not counted back as importing it)."""
    path = mods[name]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in mods and t != name and not name.startswith(t + ".")}
    return found


@pytest.mark.integration
def test_the_layers_hold():
    """pyproject.toml's import-linter contracts: each layer imports only from the layers below it (lazy imports
    inside functions included), and mechanisms never reach evaluation, report, publishing or the command line."""
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.is_file(), "import-linter is a dev dependency: pip install -e '.[dev]'"
    r = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_no_import_circles_in_the_package():
    mods = _modules()
    graph = {m: _imports(mods, m) for m in mods}
    circles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        if start in seen:
            circles.append(start)
    assert not circles, f"modules in an import circle: {sorted(circles)}"


def test_benchmarks_use_the_public_api_only():
    private = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "privpix":
                names = node.module.split(".") + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [p for a in node.names if a.name.split(".")[0] == "privpix" for p in a.name.split(".")]
            else:
                continue
            # Private names, and the command's internals (a benchmark calls the library, as a user's script would).
            sub = names[1] if len(names) > 1 else ""
            if any(n.startswith("_") for n in names) or sub == "cli" or sub.startswith("cli_"):
                private.append(f"{path.name}:{node.lineno}")
    assert not private, f"benchmarks import private names or the CLI's: {private}"


@pytest.mark.integration
def test_the_cli_is_a_package_run_as_a_module_too():
    assert (PACKAGE / "cli" / "__init__.py").is_file() and not (PACKAGE / "cli.py").exists()
    r = subprocess.run([sys.executable, "-m", "privpix", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Usage:" in r.stdout and "release" in r.stdout, r.stderr


def test_no_global_torch_seeding_in_the_package():
    """Training draws from local generators (privpix.training): seeding torch's global RNG would change the
    caller's random state and interleave with other threads' draws."""
    import re

    pattern = re.compile(r"\btorch(\.random|\.cuda)?\.manual_seed(_all)?\(")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"torch's global RNG seeded at {found}; use privpix.training.generator(seed)"


def test_the_layers_are_packages_and_the_root_holds_only_infrastructure():
    """The privacy primitives, publishing and the checks are packages of their own; the root keeps the
    user API and the infrastructure every layer uses."""
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert root == [
        "__init__",
        "__main__",
        "errors",
        "executor",
        "fileio",
        "spill",
        "strict_json",
        "threads",
        "training",
        "version",
    ]
    for pkg in ("privacy", "publishing", "testing"):
        assert (PACKAGE / pkg / "__init__.py").is_file()


OLD_FLAT_PATHS = (
    "privpix.accounting",
    "privpix.bench",
    "privpix.composition",
    "privpix.conformance",
    "privpix.evaluation.curves",
    "privpix.evaluation.one_run",
    "privpix.gaussian_release",
    "privpix.guarantees",
    "privpix.learners",
    "privpix.mechanisms.dp_sgd",
    "privpix.mechanisms.dp_sgd_net",
    "privpix.neighbours",
    "privpix.noise",
    "privpix.noise_kernels",
    "privpix.publish",
    "privpix.release_folder",
    "privpix.sharded",
    "privpix.stattests",
)


@pytest.mark.parametrize("name", OLD_FLAT_PATHS)
def test_the_flat_module_paths_of_before_the_layers_are_gone(name):
    """Each module lives at one path, in its layer's package: the flat names of before import nothing (one name
    per module keeps a monkeypatch from patching an alias the code never reads)."""
    import importlib

    import privpix  # noqa: F401  (importing the package must not bring an alias back)

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)
    assert not (PACKAGE / (name.removeprefix("privpix.").replace(".", "/") + ".py")).exists(), name


def test_no_module_holds_more_than_700_lines():
    """A module is small enough to read as one job: a file past 700 lines is split by job."""
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert not {name: n for name, n in lines.items() if n > 700}
