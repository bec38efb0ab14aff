"""The package's import graph: ``rsjobs.workflows`` has no HTTP and never imports
``rsjobs.web``; ``rsjobs.web`` never imports the worker. Read from the source (imports
inside functions included), and checked again by importing each side in a fresh
interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rsjobs

PACKAGE = Path(rsjobs.__file__).parent


def _module(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, wherever the import statement is."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def offenders(package: str, forbidden: str) -> list[str]:
    out = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for name in sorted(imports_of(path)):
            if name == forbidden or name.startswith(forbidden + "."):
                out.append(f"{path.relative_to(PACKAGE)} imports {name}")
    return out


def test_imports_of_reads_relative_and_lazy_imports() -> None:
    # the check itself: a relative import inside a function is seen
    found = imports_of(PACKAGE / "web" / "http.py")
    assert "rsjobs.codec" in found and "rsjobs.ids" in found  # at the top
    assert "rsjobs.errors" in found  # inside a function


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("workflows", "rsjobs.web"), ("web", "rsjobs.worker"), ("store", "rsjobs.web")],
)
def test_source_imports(package: str, forbidden: str) -> None:
    assert offenders(package, forbidden) == []


@pytest.mark.parametrize(
    ("package", "forbidden"), [("workflows", "rsjobs.web"), ("web", "rsjobs.worker")]
)
def test_importing_every_module(package: str, forbidden: str) -> None:
    names = sorted(_module(p) for p in (PACKAGE / package).rglob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m == {forbidden!r} "
        f"or m.startswith({forbidden + '.'!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
