"""The pipeline's modules import each other without a cycle (checked on the source, by ast)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "scripts" / "import_cycles.py")
assert _spec and _spec.loader
import_cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_cycles)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_pipeline_has_no_import_cycle():
    graph = import_cycles.import_graph(ROOT / "pipeline")
    assert import_cycles.cycles(graph) == []
    # the graph is real: the code location imports the report asset, which imports none of it back
    assert "pipeline.reporting.asset" in graph["pipeline.definitions"]
    assert "pipeline.definitions" not in graph["pipeline.reporting.asset"]


def test_a_deferred_import_inside_a_function_counts_as_a_cycle(tmp_path):
    root = _package(
        tmp_path,
        {
            "defs.py": "from .sub.report import build\n",
            "sub/__init__.py": "",
            "sub/report.py": "def build():\n    from ..defs import x\n    return x\n",
            "leaf.py": "import os\n",
        },
    )
    graph = import_cycles.import_graph(root)
    assert graph["pkg.defs"] == {"pkg.sub.report"}
    assert graph["pkg.sub.report"] == {"pkg.defs"}
    assert graph["pkg.leaf"] == set()
    assert import_cycles.cycles(graph) == [["pkg.defs", "pkg.sub.report"]]


def test_absolute_and_package_relative_imports_resolve_to_modules(tmp_path):
    root = _package(
        tmp_path,
        {
            "a.py": "import pkg.b\n",
            "b.py": "from . import c\n",
            "c.py": "from pkg.a import name\n",
            "d.py": "from pkg import c\n",
        },
    )
    graph = import_cycles.import_graph(root)
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg.c"}
    assert import_cycles.cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_script_exit_status_names_the_cycle(tmp_path):
    root = _package(tmp_path, {"x.py": "from . import y\n", "y.py": "from .x import f\n"})
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_cycles.py"), str(root)], capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert bad.stdout.strip() == "cycle: pkg.x <-> pkg.y"
    good = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_cycles.py"), str(ROOT / "pipeline")],
        capture_output=True,
        text=True,
    )
    assert good.returncode == 0, good.stdout
