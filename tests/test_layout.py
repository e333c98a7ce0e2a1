"""The package's shape: no import circles in src/privpix, no module using another's private names, benchmarks on the
public API only, the CLI a package."""

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
    inside functions included), mechanisms never reach evaluation, report, publishing or the command line, the
    mechanism families import one another only through the shared modules, and generic code imports no family."""
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


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(mods: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Every place a module of the package reaches into another module's ``_``-name: ``from privpix.x import _name``
    (relative forms included) or ``x._name`` where ``x`` names a module of the package. A package's ``__init__``
    counts as a module like any other: it re-exports its submodules' public names only, and a submodule takes
    nothing private from its ``__init__``. A private module (``_name.py``) is imported by its own package only.
    Dunder names (``__version__``) are public."""
    found = []
    for name, path in sorted(mods.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(root).as_posix()
        modules: dict[str, str] = {}  # local name -> the package module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
                if base.split(".")[0] != "privpix":
                    continue
                for a in node.names:
                    if f"{base}.{a.name}" in mods:
                        modules[a.asname or a.name] = f"{base}.{a.name}"
                        # A private module is its own package's.
                        if _private(a.name) and not (name == base or name.startswith(base + ".")):
                            found.append(f"{where}:{node.lineno} imports {base}.{a.name}")
                    elif _private(a.name) and base != name:
                        found.append(f"{where}:{node.lineno} imports {base}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "privpix":
                        modules[a.asname or "privpix"] = a.name if a.asname else "privpix"
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                target = ".".join([modules[value.id], *reversed(chain)])
                if target in mods and target != name:
                    found.append(f"{where}:{node.lineno} reads {target}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names(tmp_path):
    """A ``_``-name is its module's own: what another module needs is public, with a docstring for its callers.
    The check itself is tried on a planted package, so that it is known to catch each form."""
    assert not private_imports(_modules()), private_imports(_modules())
    pkg = tmp_path / "privpix"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "a.py").write_text("_hidden = 1\nshown = 2\nfrom privpix.sub import _inner\n")
    (pkg / "sub" / "_inner.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from privpix import _own\n")
    (pkg / "_own.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "import privpix.a\nfrom privpix import __version__, a\nfrom privpix.a import _hidden, shown\n"
        "from .. import a as aa\nx = a._hidden + privpix.a._hidden + aa._hidden + shown\n"
    )
    planted = {"privpix": pkg / "__init__.py", "privpix.a": pkg / "a.py", "privpix._own": pkg / "_own.py",
               "privpix.sub": pkg / "sub" / "__init__.py", "privpix.sub._inner": pkg / "sub" / "_inner.py",
               "privpix.sub.b": pkg / "sub" / "b.py"}  # fmt: skip
    got = private_imports(planted, tmp_path)
    assert got == [
        "privpix/a.py:3 imports privpix.sub._inner",
        "privpix/sub/b.py:3 imports privpix.a._hidden",
        "privpix/sub/b.py:5 reads privpix.a._hidden",
        "privpix/sub/b.py:5 reads privpix.a._hidden",
        "privpix/sub/b.py:5 reads privpix.a._hidden",
    ], got


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
        "lazy",
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
