"""The architecture as a checked contract: the import layers (pyproject.toml, import-linter) and private names.

The layers themselves are checked by ``lint-imports`` (run by ``make test`` before pytest, and here); this file
adds what import-linter does not check: no module takes another module's private (underscore) names.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "quco"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_imports(path: Path, root: Path = SRC) -> list[str]:
    """``from quco.x import _name`` and ``quco.x._name`` attribute reads of another module, in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _module_name(path, root)
    found: list[str] = []
    imported_modules: dict[str, str] = {}  # local alias -> quco module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("quco"):
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and node.module != own:
                    found.append(
                        f"{path.relative_to(root.parent)}:{node.lineno} from {node.module} import {alias.name}"
                    )
                if not private:
                    imported_modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("quco"):
                    imported_modules[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported_modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in _private_imports(path)]
    assert found == [], "private names taken across modules:\n" + "\n".join(found)


def test_the_private_name_check_sees_both_forms(tmp_path: Path) -> None:
    # the check itself must be able to fail: a file under a scratch quco tree with both forms
    root = tmp_path / "quco"
    (root / "a").mkdir(parents=True)
    bad = root / "a" / "b.py"
    bad.write_text(
        "from quco.c import _hidden, visible\nimport quco.d as d\nx = d._inner\nfrom quco.a.b import _own\n"
    )
    hits = _private_imports(bad, root)
    assert [h.split(" ", 1)[1] for h in hits] == ["from quco.c import _hidden", "d._inner"]


def test_the_layer_contract_holds() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is part of the dev extra (pip install -e '.[dev]')"
    # the contract is read for the sources of this tree, whichever copy of quco is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([lint], cwd=SRC.parents[1], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
