"""rsjobs.web stays importable without the worker: none of its modules imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import rsjobs.web

WEB = Path(rsjobs.web.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_web_modules_do_not_import_the_worker() -> None:
    modules = sorted(WEB.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        for name in imported_modules(path):
            assert "worker" not in name.split("."), f"{path.name} imports {name}"


def test_static_files_are_shipped() -> None:
    assert {p.name for p in (WEB / "static").iterdir()} >= {"index.html", "app.js", "style.css"}
