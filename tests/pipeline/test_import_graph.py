"""The pipeline's modules import each other without a cycle (checked on the source, by ast)."""

import ast
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


CORE = {
    "artifacts",
    "bundle",
    "costmodel",
    "devices",
    "experiment",
    "files",
    "profiles",
    "progress",
    "resources",
    "runs",
    "scalars",
    "sections",
    "set_storage",
    "storage",
    "tables",
    "verdicts",
    "workloads",
}


def _pipeline_graph() -> dict[str, set[str]]:
    return import_cycles.import_graph(ROOT / "pipeline")


def test_layers_core_then_experiments_then_registry_then_report_then_code_location():
    graph = _pipeline_graph()
    core = {f"pipeline.{m}" for m in CORE}
    assert core <= set(graph)
    for module in core:
        above = {
            t
            for t in graph[module]
            if t.startswith(("pipeline.experiments", "pipeline.instruments", "pipeline.reporting", "pipeline.cli"))
        }
        assert not above, f"{module} imports {above}"
    # Experiments build their pages with the page kit (the floor below them), never with the site builder
    for module, targets in graph.items():
        if module.startswith(("pipeline.experiments.", "pipeline.instruments.")):
            site = {t for t in targets if t.startswith("pipeline.reporting")}
            assert not site, f"{module} imports {site}"
            # the registry imports the experiments: an experiment that imported it back would close a loop;
            # an instrument (the regression baseline) reads it, from above
            if module.startswith("pipeline.experiments."):
                assert "pipeline.experiments" not in targets, f"{module} imports the registry"
            assert "pipeline.definitions" not in targets, module


def test_the_page_kit_is_a_floor_below_the_experiments_and_the_site_builder():
    graph = _pipeline_graph()
    kit = {m for m in graph if m.startswith("pipeline.pagekit")}
    assert {"pipeline.pagekit.render", "pipeline.pagekit.blocks", "pipeline.pagekit.repro_page"} <= kit
    above = (
        "pipeline.experiments",
        "pipeline.instruments",
        "pipeline.reporting",
        "pipeline.cli",
        "pipeline.definitions",
    )
    for module in kit:
        reached = {t for t in graph[module] if t.startswith(above)}
        assert not reached, f"{module} imports {reached}"
    # every experiment's page is written with it, and the site builder reads the pages through it
    users = {m for m, ts in graph.items() if any(t.startswith("pipeline.pagekit") for t in ts)}
    assert "pipeline.experiments.training.report" in users
    assert "pipeline.reporting.pages" in users


def test_reporting_never_imports_an_experiments_assets():
    graph = _pipeline_graph()
    readable = {"spec", "report", "rules"}
    for module, targets in graph.items():
        if not module.startswith("pipeline.reporting"):
            continue
        for t in targets:
            if t.startswith(("pipeline.experiments.", "pipeline.instruments.")):
                assert t.count(".") == 2 or t.rsplit(".", 1)[1] in readable, f"{module} imports {t}"


#: S's declarations (its pools' sizes): every experiment of the plan builds on S (S -> A/B/D/E), so reading
#: S's spec is the one cross-experiment edge allowed; S's asset code is not.
SHARED_DECLARATIONS = {"pipeline.experiments.toolkit.spec"}


def _folder(module: str) -> str | None:
    """The experiment folder of ``module`` (None outside pipeline.experiments.<folder>)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["pipeline", "experiments"] else None


def experiment_import_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of an experiment module that reaches another experiment or an instrument
    (:mod:`pipeline.instruments`, the wing above the experiments, which may read them)."""
    bad = []
    for module, targets in sorted(graph.items()):
        own = _folder(module)
        if own is None:
            continue
        for t in sorted(targets):
            other = _folder(t)
            crossing = other is not None and other != own and t not in SHARED_DECLARATIONS
            if crossing or t.startswith("pipeline.instruments"):
                bad.append(f"{module} -> {t}")
    return bad


def test_no_experiment_imports_another_experiment_or_an_instrument():
    assert experiment_import_violations(_pipeline_graph()) == []


def _as_pipeline(root: Path) -> dict[str, set[str]]:
    """The import graph of a made-up package at ``root``, its modules named as if it were ``pipeline``."""
    return {
        m.replace("pkg.", "pipeline.", 1): {t.replace("pkg.", "pipeline.", 1) for t in ts}
        for m, ts in import_cycles.import_graph(root).items()
    }


def test_the_experiment_import_rule_sees_a_crossing(tmp_path):
    root = _package(
        tmp_path,
        {
            "experiments/__init__.py": "",
            "experiments/a/__init__.py": "",
            "experiments/a/assets.py": "from ..b.assets import f\nfrom ..toolkit.spec import SIZES\n",
            "experiments/b/__init__.py": "",
            "experiments/b/assets.py": "def f():\n    from ...instruments.regression.matrix import run\n",
            "instruments/__init__.py": "",
            "instruments/regression/__init__.py": "",
            "instruments/regression/matrix.py": "from ...experiments.a.assets import x\n",
            "experiments/toolkit/__init__.py": "",
            "experiments/toolkit/spec.py": "",
        },
    )
    graph = _as_pipeline(root)
    # a reads b (a violation) and S's spec (allowed); b reads an instrument; the instrument may read a
    assert experiment_import_violations(graph) == [
        "pipeline.experiments.a.assets -> pipeline.experiments.b.assets",
        "pipeline.experiments.b.assets -> pipeline.instruments.regression.matrix",
    ]


def test_the_room_graph_is_the_layering_the_rules_above_hold():
    """``python scripts/import_cycles.py pipeline --layers`` prints this graph: the core imports no other
    room, an experiment imports the core, the page kit and another experiment's
    declarations only (its package record or its spec: B reads S's pools, a cost reads S's sizes)."""
    graph = _pipeline_graph()
    edges = import_cycles.room_graph(graph)
    assert not [(a, b) for a, b in edges if a == "core"]
    for a, b in edges:
        if a.startswith("experiments/"):
            assert b in ("core", "pagekit") or b.startswith("experiments/"), (a, b)
    assert edges[("reporting", "pagekit")] >= 1
    assert not [(a, b) for a, b in edges if a == "pagekit" and b != "core"]
    for module, targets in graph.items():
        a = import_cycles.room(module)
        if a is None or not a.startswith("experiments/"):
            continue
        for t in targets:
            b = import_cycles.room(t)
            if b is not None and b.startswith("experiments/") and b != a:
                package = "pipeline." + b.replace("/", ".")
                assert t in (package, package + ".spec"), f"{module} imports {t}, not {b}'s record or spec"
    assert edges[("registry", "core")] >= 1
    text = import_cycles.layers_text(_pipeline_graph())
    assert "instruments/regression -> core (" in text and "\nregistry -> core (" in text


def test_reproducers_reach_an_experiment_only_through_its_record():
    """The reproducer instrument, its builder and the ``repros`` command read the cases an experiment declares
    (``Experiment.reproducers``, from the registry); none imports an experiment's module by name."""
    graph = _pipeline_graph()
    for module in (
        "pipeline.instruments.diagnostics.reproducers",
        "pipeline.instruments.diagnostics.repro_build",
        "pipeline.instruments.diagnostics.cases",
        "pipeline.cli.repro_command",
    ):
        named = sorted(t for t in graph[module] if t.startswith("pipeline.experiments."))
        assert named == [], f"{module} imports {named}"
    assert "pipeline.experiments" in graph["pipeline.instruments.diagnostics.reproducers"]  # the registry
    assert "pipeline.experiments" in graph["pipeline.cli.repro_command"]


# --- an experiment's folder is its own: from outside, only its record and its spec ------------------------

#: The modules of an experiment's folder anything outside it may import: the package (its ``__init__``: the
#: record, and what the package itself offers, such as E's model for the Diagnostics) and ``spec`` (its id,
#: group and sizes). Everything else (assets, rules, report, cost, ...) is reached through the record.
PUBLIC_MODULES = {"spec"}
#: Code outside ``pipeline`` that runs in the same process as the experiments and is held to the same rule.
OUTSIDE = ("benchmarks", "scripts")


def _private_target(module: str, target: str) -> bool:
    """Whether ``target`` is a non-public module of an experiment's folder that ``module`` is outside of."""
    folder = _folder(target)
    parts = target.split(".")
    return folder is not None and _folder(module) != folder and len(parts) > 3 and parts[3] not in PUBLIC_MODULES


def private_import_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of an experiment's non-public module (:data:`PUBLIC_MODULES`) from outside its folder."""
    return [
        f"{module} -> {t}"
        for module, targets in sorted(graph.items())
        for t in sorted(targets)
        if _private_target(module, t)
    ]


def _outside_graph(folder: Path) -> dict[str, set[str]]:
    """The ``pipeline`` modules each script of ``folder`` imports (absolute imports; ``from pkg import x``
    counts x when it is a module), by ast as :mod:`import_cycles` reads the package."""
    modules = {import_cycles.module_name(p, ROOT / "pipeline") for p in (ROOT / "pipeline").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        graph[f"{folder.name}.{path.stem}"] = found
    return graph


def test_nothing_outside_an_experiments_folder_imports_its_insides():
    """The code location, the report, the CLI, the instruments, the cost model (the plan reads each experiment's
    cost through ``Experiment.cost``), the benchmarks and the scripts reach an experiment through its record
    and its spec only: a new experiment is found through the registry, never by an import of its modules."""
    graph = _pipeline_graph()
    for folder in OUTSIDE:
        graph |= _outside_graph(ROOT / folder)
    assert private_import_violations(graph) == []
    # the plan and the cost model are no exception: they import no experiment's module at all
    for module in ("pipeline.plan", "pipeline.costmodel", "pipeline.plan_calibration", "benchmarks.gpu_budget"):
        assert not {t for t in graph[module] if _folder(t)}, module


def test_the_inside_import_rule_sees_a_reach_into_an_experiment(tmp_path):
    root = _package(
        tmp_path,
        {
            "plan.py": "from .experiments.a.cost import costs\nfrom .experiments.a import EXPERIMENT\n",
            "experiments/__init__.py": "",
            "experiments/a/__init__.py": "from . import spec\n",
            "experiments/a/spec.py": "",
            "experiments/a/cost.py": "from .spec import ID\n",
            "instruments/__init__.py": "",
            "instruments/d/__init__.py": "",
            "instruments/d/div.py": "from ...experiments.a.spec import ID\nfrom ...experiments.a.cost import x\n",
        },
    )
    graph = _as_pipeline(root)
    graph["benchmarks.b"] = {"pipeline.experiments.a.cost"}
    # the record and the spec are public; the cost module is the experiment's own, whoever reaches for it
    assert private_import_violations(graph) == [
        "benchmarks.b -> pipeline.experiments.a.cost",
        "pipeline.instruments.d.div -> pipeline.experiments.a.cost",
        "pipeline.plan -> pipeline.experiments.a.cost",
    ]
