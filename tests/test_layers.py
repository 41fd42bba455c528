"""The server package's layers (docs/architecture.md): every import points down, no import circle.

    foundation   sidecar.errors, sidecar.limits         (every layer may use them)
    storage      sidecar.storage.*                      bytes, nodes, trees, records
    state        sidecar.state.*                        one module per resource
    ops          sidecar.ops.*                          transactions over several resources
    api          sidecar.api.*                          gRPC, validation, wire conversion
    top          sidecar.server, sidecar.cli, sidecar.__main__

A module may import its own layer and the layers below, never one above. In ``state`` a resource module
imports no other resource module (only ``state.runstate``, the shared transaction context). Below ``api``
nothing imports protobuf or gRPC: the lower layers take and return Python values. Every import counts,
also one inside a function.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sidecar"
LAYERS = {"foundation": 0, "storage": 1, "state": 2, "ops": 3, "api": 4, "top": 5}
FOUNDATION = {"sidecar", "sidecar.errors", "sidecar.limits"}
STATE_SHARED = {"sidecar.state", "sidecar.state.runstate"}
WIRE_PACKAGES = ("agentstate.v1", "grpc", "google.protobuf", "google.rpc", "grpc_health", "grpc_reflection")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(name: str) -> str:
    if name in FOUNDATION:
        return "foundation"
    parts = name.split(".")
    if len(parts) >= 2 and parts[1] in ("storage", "state", "ops", "api"):
        return parts[1]
    return "top"


def imports_of(path: Path, name: str) -> list[str]:
    """Every module ``path`` imports (absolute names), wherever the import statement is."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            if node.module is None or node.level:
                # "from . import x" may name modules: count each that exists as one
                for a in node.names:
                    candidate = f"{prefix}.{a.name}"
                    out.append(candidate if _exists(candidate) else prefix)
            else:
                out.append(prefix)
    return out


def _exists(name: str) -> bool:
    rel = Path(*name.split("."))
    base = PACKAGE.parent / rel
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def graph() -> dict[str, list[str]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        out[name] = imports_of(path, name)
    return out


def test_every_import_points_down():
    problems = []
    for name, imported in graph().items():
        mine = layer_of(name)
        for target in imported:
            if target.startswith("sidecar"):
                theirs = layer_of(target if _exists(target) else target.rsplit(".", 1)[0])
                if LAYERS[theirs] > LAYERS[mine]:
                    problems.append(f"{name} ({mine}) imports {target} ({theirs})")
            elif LAYERS[mine] < LAYERS["api"] and target.startswith(WIRE_PACKAGES) and name not in FOUNDATION:
                problems.append(f"{name} ({mine}) imports {target}: wire types belong to the api layer")
    assert not problems, "\n".join(problems)


def test_only_the_top_layer_imports_the_metrics_library():
    """prometheus_client stays in sidecar.metrics (the top layer); below it, plain counters (storage/stats.py)."""
    problems = [f"{name} ({layer_of(name)}) imports {target}" for name, imported in graph().items()
                if layer_of(name) != "top" for target in imported if target.startswith("prometheus_client")]
    assert not problems, "\n".join(problems)
    assert any(t.startswith("prometheus_client") for t in graph()["sidecar.metrics"])


def private_helper_of(helper: str, owner: str) -> bool:
    """``sidecar.state.memory_filters`` is a private helper of ``sidecar.state.memory`` (its resource's module
    split in parts): only that module, and its other helpers, may import it."""
    return helper.startswith(owner + "_") and "." not in helper[len(owner) + 1:]


def test_private_helpers_are_imported_by_their_owner_only():
    problems = []
    for name, imported in graph().items():
        for target in imported:
            if layer_of(target) != "state" or target in STATE_SHARED:
                continue
            owner = target.rsplit("_", 1)[0] if "_" in target.rsplit(".", 1)[-1] else None
            if (owner and _exists(owner) and name not in (owner, target) and name.startswith("sidecar.state")
                    and not private_helper_of(name, owner)):  # the owner's helpers may use each other
                problems.append(f"{name} imports {target}, a private helper of {owner}")
    assert not problems, "\n".join(problems)
    assert private_helper_of("sidecar.state.memory_filters", "sidecar.state.memory")
    assert not private_helper_of("sidecar.state.memory_filters", "sidecar.state.threads")


def test_resource_modules_do_not_import_each_other():
    problems = []
    for name, imported in graph().items():
        if layer_of(name) != "state" or name in STATE_SHARED:
            continue
        for target in imported:
            owner = target.rsplit("_", 1)[0]
            if layer_of(target) == "state" and target not in STATE_SHARED and target != name \
                    and not private_helper_of(target, name) \
                    and not (private_helper_of(target, owner) and private_helper_of(name, owner)):
                problems.append(f"{name} imports {target}: compose them in sidecar.ops")
    assert not problems, "\n".join(problems)


def test_no_import_circle():
    g = {name: [t for t in targets if t.startswith("sidecar")] for name, targets in graph().items()}
    names = set(g)
    edges = {n: sorted({t for t in g[n] if t in names and t != n}) for n in g}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_checker_sees_what_it_must():
    """The checks above would catch a violation: relative imports resolve, function-level imports count."""
    g = graph()
    assert "sidecar.storage.store" in g["sidecar.storage.records"]
    assert "sidecar.errors" in g["sidecar.storage.store"]
    assert layer_of("sidecar.api.service") == "api" and layer_of("sidecar.server") == "top"
    assert layer_of("sidecar.state.runstate") == "state" and layer_of("sidecar.limits") == "foundation"


def test_enum_values_below_the_api_match_the_proto():
    """Layers below the api keep the numbers of a few enums of their own (they import no protobuf)."""
    from agentstate.v1 import effects_pb2, runs_pb2, threads_pb2
    from sidecar.state import effects, runstate
    from sidecar.storage import records

    assert records.THREAD_STATUS_IDLE == threads_pb2.THREAD_STATUS_IDLE
    for name in ("PENDING", "RUNNING", "SUCCESS", "ERROR", "CANCELLED", "INTERRUPTED", "TIMEOUT"):
        assert getattr(runstate, name) == getattr(runs_pb2, f"RUN_STATUS_{name}"), name
    for name in ("IDLE", "BUSY", "INTERRUPTED", "ERROR"):
        assert getattr(runstate, f"THREAD_{name}") == getattr(threads_pb2, f"THREAD_STATUS_{name}"), name
    for name in ("PENDING", "DONE", "FAILED", "UNKNOWN"):
        number = getattr(effects_pb2, f"EFFECT_STATE_{name}")
        assert getattr(effects, name) == number, name
        assert effects.STATE_NAMES[number] == effects_pb2.EffectState.Name(number), name


def test_run_enums_below_the_api_match_the_proto():
    """state/runs.py keeps agentstate.v1's MultitaskStrategy (numbers and names) and LeaseExpiry numbers."""
    from agentstate.v1 import runs_pb2
    from sidecar.state import runs

    for name in ("REJECT", "ENQUEUE", "INTERRUPT", "ROLLBACK", "FORK"):
        value = getattr(runs, name)
        assert value == getattr(runs_pb2, f"MULTITASK_STRATEGY_{name}"), name
        assert runs.STRATEGY_NAMES[value] == runs_pb2.MultitaskStrategy.Name(value), name
    assert set(runs.STRATEGY_NAMES) == set(runs_pb2.MultitaskStrategy.values()) - {0}
    for name in ("REQUEUE", "HOLD"):
        assert getattr(runs, name) == getattr(runs_pb2, f"LEASE_EXPIRY_{name}"), name


def test_conversation_enums_below_the_api_match_the_proto():
    """state/conversations.py keeps ItemKind, storage/records.py IdleAction and PolicySource."""
    from agentstate.v1 import conversations_pb2 as cpb
    from sidecar.state import conversations
    from sidecar.storage import records

    for name in ("MESSAGE", "TOOL_CALL", "TOOL_RESULT", "REASONING", "SUMMARY", "TOOL_DEFINITION", "OTHER"):
        assert getattr(conversations, name) == getattr(cpb, f"ITEM_KIND_{name}"), name
    assert set(conversations.KINDS) == set(cpb.ItemKind.values()) - {0}
    assert records.IDLE_CLOSE == cpb.IDLE_ACTION_CLOSE and records.IDLE_DELETE == cpb.IDLE_ACTION_DELETE
    for name in ("DEFAULT", "NAMESPACE", "THREAD"):
        assert getattr(records, f"SOURCE_{name}") == getattr(cpb, f"POLICY_SOURCE_{name}"), name


def test_context_enums_below_the_api_match_the_proto():
    """ops/assemble.py keeps ContextSource and Fate."""
    from agentstate.v1 import conversations_pb2 as cpb
    from sidecar.ops import assemble

    sources = {"PINNED": assemble.PINNED, "SUMMARY": assemble.FROM_SUMMARY, "ITEM": assemble.ITEM,
               "COMPRESSED_TOOL_CALL": assemble.COMPRESSED, "KNOWLEDGE": assemble.KNOWLEDGE}
    for name, value in sources.items():
        assert value == getattr(cpb, f"CONTEXT_SOURCE_{name}"), name
    fates = {"KEPT": assemble.KEPT, "SUMMARISED": assemble.SUMMARISED, "COMPRESSED": assemble.F_COMPRESSED,
             "DEDUPLICATED": assemble.DEDUPLICATED, "DROPPED_BUDGET": assemble.DROPPED_BUDGET,
             "DROPPED_ORPHAN": assemble.DROPPED_ORPHAN}
    for name, value in fates.items():
        assert value == getattr(cpb, f"FATE_{name}"), name
