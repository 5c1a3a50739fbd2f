"""bench/'s layout holds: its import graph has no circle, and imports only point down the stages (the helpers every
stage shares, then data, training and yardsticks, analysis, report, orchestration, the speed measurements, and the
commands on top), so that the top of bench/ holds the commands alone."""

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
# a module's stage is its subpackage; the top-level modules are the commands (bench/export: a command package above
# them, which rebuilds a run's objective as bench.downstream does)
STAGES = {"common": 0, "data": 1, "training": 2, "yardsticks": 2, "analysis": 3, "report": 4, "orchestration": 5,
          "speed": 6, "commands": 7, "export": 8}
COMMANDS = {"compare", "downstream", "gpu_experiment", "perf", "positions", "tune"}  # each a `python -m bench.<name>`


def import_graph() -> dict[str, set[str]]:
    """module -> the bench modules it imports (at module level or inside functions)."""
    modules = {".".join(path.relative_to(BENCH.parent).with_suffix("").parts).removesuffix(".__init__"): path
               for path in BENCH.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                          for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {module for module in found if module in modules and module != name}
    return graph


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or parts[1] in STAGES else "commands"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, path, done = [], [], set()

    def visit(module: str) -> None:
        path.append(module)
        for imported in sorted(graph[module]):
            if imported in path:
                found.append(path[path.index(imported):] + [imported])
            elif imported not in done:
                visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return found


def test_the_import_graph_of_bench_has_no_circle():
    assert circles(import_graph()) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]  # the search finds one


def test_imports_point_down_the_stages():
    upward = [(module, imported) for module, imports in import_graph().items() for imported in imports
              if STAGES[stage(imported)] > STAGES[stage(module)]
              or (STAGES[stage(imported)] == STAGES[stage(module)] and stage(imported) != stage(module))]
    assert upward == []
    assert stage("bench.training.loop") == "training" and stage("bench.compare") == "commands"
    assert stage("bench.common.files") == "common" and stage("bench.data") == "data"


def test_the_top_of_bench_holds_its_commands_alone():
    top = {path.stem for path in BENCH.glob("*.py")} - {"__init__"}
    assert top == COMMANDS
    assert all('if __name__ == "__main__":' in (BENCH / f"{name}.py").read_text() for name in COMMANDS)
