"""The layer rules of ARCHITECTURE.md hold: import-linter's contracts (pyproject.toml), no import cycle, small files.

The contracts and the cycle check read the import graph of the four packages (grimp, the library
import-linter builds on, run in a subprocess on the sources as they are on disk), every import counted: module level, inside functions, under
``TYPE_CHECKING``. Each check also runs on a copy of the sources with one back-import added, so a
check that stopped seeing back-imports would fail here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("plugin", "tools", "perception", "memory")
MAX_LINES = 600

#: run import-linter's own command line (``lint-imports``) on the contracts of ``pyproject.toml``
_LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", _LINT, "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def import_cycles(root: Path) -> list[list[str]]:
    """Every set of modules that import one another, directly or through others (strongly connected)."""
    code = ("import json, sys, grimp; g = grimp.build_graph(*sys.argv[1:]); "
            "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))")
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code, *PACKAGES], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    graph: dict[str, list[str]] = json.loads(out)
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module only."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def sources_with_back_imports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages' Python sources and pyproject.toml, copied, with two imports against the rules added."""
    root = tmp_path_factory.mktemp("layers")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            target = root / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    # memory importing the composition root (a back-arrow across layers) ...
    errors = root / "memory" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom plugin.errors import PluginError  # noqa: E402,F401\n")
    # ... and a detector importing the registry that builds it (a cycle inside one layer)
    body = root / "perception" / "detectors" / "body.py"
    body.write_text(body.read_text() + "\nfrom perception.detectors.backends import Perceivers  # noqa: E402,F401\n")
    return root


def test_import_linter_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_import_linter_fails_on_a_back_import(sources_with_back_imports: Path) -> None:
    result = lint_imports(sources_with_back_imports)
    assert result.returncode != 0
    assert "memory.errors -> plugin.errors" in result.stdout, result.stdout
    assert "1 broken" in result.stdout, result.stdout


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert import_cycles(ROOT) == []


def test_the_cycle_check_sees_a_cycle(sources_with_back_imports: Path) -> None:
    cycles = import_cycles(sources_with_back_imports)
    assert ["perception.detectors.backends", "perception.detectors.body"] in cycles, cycles


def test_no_source_file_is_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for package in PACKAGES for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concept: {long}"

