"""The package's layers, read from the source: imports run one way, down
commands -> ros -> planner -> decoding -> runtime -> model, with the value types at the bottom.

Imports inside functions count as much as those at the top: a lazy import is still a dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ddrive_ros"
ROS_PACKAGES = {"rclpy", "rosgraph_msgs", "sensor_msgs", "nav_msgs", "std_msgs", "geometry_msgs", "visualization_msgs",
                "diagnostic_msgs", "rcl_interfaces", "builtin_interfaces", "lifecycle_msgs", "tf2_msgs",
                "autoware_planning_msgs", "rosidl_runtime_py"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """module -> ddrive_ros modules it imports; module -> top-level third-party packages it imports."""
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    internal: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for name, path in files.items():
        deps, ext = set(), set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t.startswith("ddrive_ros"):
                    # `from ddrive_ros.x import y`: y is a submodule when the file exists, else a name in x
                    deps.add(t if t in files else t.rsplit(".", 1)[0] if t.rsplit(".", 1)[0] in files else t)
                else:
                    ext.add(t.split(".")[0])
        internal[name] = {d for d in deps if d in files and d != name}
        external[name] = ext
    # cli.py assembles the subcommands by name (importlib), which is an import too
    cli = ROOT / "cli.py"
    for node in ast.walk(ast.parse(cli.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ddrive_ros.commands."):
            internal["ddrive_ros.cli"].add(node.value)
    return internal, external


GRAPH, EXTERNAL = _scan()


def _closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for d in GRAPH.get(m, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def _in(module: str, package: str) -> bool:
    return module == f"ddrive_ros.{package}" or module.startswith(f"ddrive_ros.{package}.")


def test_the_scan_sees_the_package():
    assert len(GRAPH) > 60 and "ddrive_ros.planner" in GRAPH and "ddrive_ros.commands.bench" in GRAPH
    assert "ddrive_ros.decoding.block_loop" in GRAPH["ddrive_ros.planner"]


def test_only_the_cli_imports_the_command_layer():
    offenders = {m: sorted(d for d in deps if _in(d, "commands"))
                 for m, deps in GRAPH.items() if not _in(m, "commands") and m != "ddrive_ros.cli"}
    assert {m: d for m, d in offenders.items() if d} == {}
    assert all(f"ddrive_ros.commands.{n}" in GRAPH["ddrive_ros.cli"]
               for n in ("schema", "model_info", "bench", "make_bag", "train", "eval", "replay", "demo", "export"))


def test_no_import_cycle_anywhere():
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(GRAPH[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_ros_never_reaches_the_synthetic_world():
    reached = {m: sorted(d for d in _closure(m) if _in(d, "sim")) for m in GRAPH if _in(m, "ros")}
    assert {m: d for m, d in reached.items() if d} == {}


def test_only_ros_imports_rclpy_and_ros_messages():
    outside = {m: sorted(EXTERNAL[m] & ROS_PACKAGES) for m in GRAPH if not _in(m, "ros")}
    assert {m: p for m, p in outside.items() if p} == {}
    assert "rclpy" in EXTERNAL["ddrive_ros.ros.node"]


LOWER_MAY_NOT_IMPORT = {  # a layer never imports any layer above it
    "model": ("runtime", "decoding", "planner", "reflection", "ros", "commands", "sim", "bags", "training", "evaluation"),
    "runtime": ("decoding", "planner", "reflection", "ros", "commands", "sim", "bags", "training", "evaluation"),
    "decoding": ("planner", "ros", "commands", "sim", "bags", "training", "evaluation"),
    "planner": ("ros", "commands", "sim", "bags", "training", "evaluation"),
    "scaffold": ("model", "runtime", "decoding", "planner", "ros", "commands", "sim", "bags", "training", "evaluation"),
    "bags": ("model", "runtime", "decoding", "planner", "ros", "commands", "sim", "training"),
    "sim": ("model", "runtime", "decoding", "planner", "ros", "commands", "training"),
    # the safety check is plain numpy over plans and boxes: the decoder, the node and the sim use it
    "reflection": ("model", "runtime", "decoding", "planner", "ros", "commands", "sim", "bags", "training",
                   "evaluation"),
}
BOTTOM = ("trajectory", "observation", "plan", "timeline", "camera", "planner_options", "observation_recipe")


@pytest.mark.parametrize("layer", sorted(LOWER_MAY_NOT_IMPORT))
def test_layers_import_downwards(layer):
    bad = {m: sorted(d for d in deps if any(_in(d, up) for up in LOWER_MAY_NOT_IMPORT[layer]))
           for m, deps in GRAPH.items() if _in(m, layer)}
    assert {m: d for m, d in bad.items() if d} == {}


def test_value_types_at_the_bottom_import_only_each_other():
    allowed = {f"ddrive_ros.{b}" for b in BOTTOM} | {"ddrive_ros"}
    bad = {m: sorted(d for d in _closure(m) if d not in allowed) for m in allowed if m in GRAPH}
    assert {m: d for m, d in bad.items() if d} == {}
