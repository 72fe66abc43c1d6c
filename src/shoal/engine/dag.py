"""Dependency graphs: validation, ordering, readiness and critical-path lengths.

A graph is a mapping from each node to the nodes it depends on (`Mapping[K, Collection[K]]`).
Every function here is pure and iterative, so a chain of ten thousand nodes costs no recursion.
Orders are deterministic: ties are broken by the insertion order of the mapping.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Hashable, Mapping, Set
from typing import TypeVar

from shoal.errors import InvalidGraph

K = TypeVar("K", bound=Hashable)


def validate_dag(
    graph: Mapping[K, Collection[K]], *, max_nodes: int = 500, max_edges: int | None = None
) -> None:
    """Raise `InvalidGraph` unless `graph` is a DAG within the limits.

    Checks, in order: node and edge limits, self dependencies, dependencies on nodes that are
    not in the graph, and cycles (`details["cycle"]` holds one cycle path, e.g. `[a, b, a]`).
    An empty graph is valid; whether that is acceptable is the caller's decision.
    """
    _check_limits(graph, max_nodes=max_nodes, max_edges=max_edges)
    _check_self_dependencies(graph)
    _check_dangling(graph)
    cycle = find_cycle(graph)
    if cycle is not None:
        _raise_cycle(cycle)


def find_cycle(graph: Mapping[K, Collection[K]]) -> list[K] | None:
    """One dependency cycle as a path that ends where it starts, or None if there is none.

    Dependencies on nodes outside the graph are ignored.
    """
    colour: dict[K, int] = {}  # absent: unvisited, 1: on the current path, 2: finished
    for root in graph:
        if root not in colour:
            cycle = _cycle_from(graph, root, colour)
            if cycle is not None:
                return cycle
    return None


def topological_order(graph: Mapping[K, Collection[K]]) -> list[K]:
    """Every node after all of its dependencies; ties go to the node inserted first.

    Raises `InvalidGraph` for dangling dependencies or cycles.
    """
    unique = _deduplicated(graph)
    return _order(graph, unique, _dependents(graph, unique))


def _order(
    graph: Mapping[K, Collection[K]], unique: dict[K, list[K]], users: dict[K, list[K]]
) -> list[K]:
    """`topological_order`, given the graph's dependencies without repeats and its
    dependents (a caller that needs them too computes them once)."""
    _check_dangling(graph, unique)
    index = {node: i for i, node in enumerate(graph)}
    nodes = list(graph)
    waiting = {node: len(deps) for node, deps in unique.items()}
    heap = [index[node] for node, count in waiting.items() if count == 0]
    heapq.heapify(heap)
    order: list[K] = []
    while heap:
        node = nodes[heapq.heappop(heap)]
        order.append(node)
        for user in users[node]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(heap, index[user])
    if len(order) < len(nodes):
        _raise_cycle(find_cycle(graph) or [])
    return order


def layers(graph: Mapping[K, Collection[K]]) -> list[list[K]]:
    """Kahn layers: layer 0 has no dependencies, layer n depends only on earlier layers.

    Each node sits in the earliest layer its dependencies allow; within a layer nodes keep
    the mapping's insertion order. Raises `InvalidGraph` like `topological_order`.
    """
    depth: dict[K, int] = {}
    for node in topological_order(graph):
        depth[node] = 1 + max((depth[dep] for dep in graph[node]), default=-1)
    result: list[list[K]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in graph:
        result[depth[node]].append(node)
    return result


def ready_nodes(
    graph: Mapping[K, Collection[K]], *, done: Set[K], started: Set[K]
) -> list[K]:
    """Nodes not done and not started whose dependencies are all done, in insertion order."""
    return [
        node
        for node, deps in graph.items()
        if node not in done and node not in started and all(dep in done for dep in deps)
    ]


def remaining_path_lengths(
    graph: Mapping[K, Collection[K]],
    *,
    weights: Mapping[K, float] | None = None,
    done: Set[K] = frozenset(),
) -> dict[K, float]:
    """For each node not done, the heaviest path from it (inclusive) to any sink.

    A path runs from a node through its dependents; each node on it adds its weight (default
    1.0), except done nodes, which add nothing. Ready subtasks with the longest remaining path
    are on the critical path and should be dispatched first. Raises `InvalidGraph` like
    `topological_order`.
    """
    weight = weights or {}
    unique = _deduplicated(graph)
    users = _dependents(graph, unique)
    length: dict[K, float] = {}
    for node in reversed(_order(graph, unique, users)):
        own = 0.0 if node in done else weight.get(node, 1.0)
        length[node] = own + max((length[user] for user in users[node]), default=0.0)
    return {node: length[node] for node in graph if node not in done}


def dependents(graph: Mapping[K, Collection[K]]) -> dict[K, list[K]]:
    """Reverse adjacency: each node to the nodes that depend on it, in insertion order.

    Keys are exactly the graph's nodes; dependencies outside the graph are ignored.
    """
    return _dependents(graph, _deduplicated(graph))


def _dependents(graph: Mapping[K, Collection[K]], unique: dict[K, list[K]]) -> dict[K, list[K]]:
    result: dict[K, list[K]] = {node: [] for node in graph}
    for node, deps in unique.items():
        for dep in deps:
            users = result.get(dep)
            if users is not None:
                users.append(node)
    return result


def _deduplicated(graph: Mapping[K, Collection[K]]) -> dict[K, list[K]]:
    """Each node's dependencies without repeats, in order: made once per call of a public
    function here, which reads them up to three times (a submitted plan's every step)."""
    return {node: list(dict.fromkeys(deps)) for node, deps in graph.items()}


def _unique(deps: Collection[K]) -> list[K]:
    return list(dict.fromkeys(deps))


def _check_limits(
    graph: Mapping[K, Collection[K]], *, max_nodes: int, max_edges: int | None
) -> None:
    if len(graph) > max_nodes:
        raise InvalidGraph(
            f"The graph has {len(graph)} nodes; the limit is {max_nodes}. "
            "Split the work into fewer, larger steps.",
            details={"nodes": len(graph), "max_nodes": max_nodes},
        )
    if max_edges is None:
        return
    edges = sum(len(_unique(deps)) for deps in graph.values())
    if edges > max_edges:
        raise InvalidGraph(
            f"The graph has {edges} dependencies; the limit is {max_edges}. "
            "Remove dependencies that are implied by others.",
            details={"edges": edges, "max_edges": max_edges},
        )


def _check_self_dependencies(graph: Mapping[K, Collection[K]]) -> None:
    selfish = [node for node, deps in graph.items() if node in deps]
    if selfish:
        names = ", ".join(repr(node) for node in selfish)
        raise InvalidGraph(
            f"{names} {'depends' if len(selfish) == 1 else 'depend'} on "
            f"{'itself' if len(selfish) == 1 else 'themselves'}. Remove that dependency.",
            details={"self_dependencies": selfish},
        )


def _check_dangling(
    graph: Mapping[K, Collection[K]], unique: dict[K, list[K]] | None = None
) -> None:
    dangling = [
        {"node": node, "missing": dep}
        for node, deps in (unique if unique is not None else _deduplicated(graph)).items()
        for dep in deps
        if dep not in graph
    ]
    if dangling:
        first = dangling[0]
        raise InvalidGraph(
            f"{first['node']!r} depends on {first['missing']!r}, which is not in the graph"
            f"{f' ({len(dangling)} such dependencies in all)' if len(dangling) > 1 else ''}. "
            "Depend only on steps that exist.",
            details={"dangling": dangling},
        )


def _raise_cycle(cycle: list[K]) -> None:
    path = " → ".join(repr(node) for node in cycle)
    raise InvalidGraph(
        f"The dependencies form a cycle: {path}. Remove one of these dependencies.",
        details={"cycle": cycle},
    )


def _cycle_from(
    graph: Mapping[K, Collection[K]], root: K, colour: dict[K, int]
) -> list[K] | None:
    """Iterative depth-first search from `root`; returns the first cycle it closes."""
    path: list[K] = [root]
    position = {root: 0}
    stack: list[tuple[list[K], int]] = [(list(graph[root]), 0)]
    colour[root] = 1
    while stack:
        deps, at = stack[-1]
        if at == len(deps):
            finished = path.pop()
            del position[finished]
            colour[finished] = 2
            stack.pop()
            continue
        stack[-1] = (deps, at + 1)
        dep = deps[at]
        if dep not in graph or colour.get(dep) == 2:
            continue
        if colour.get(dep) == 1:
            return [*path[position[dep]:], dep]
        colour[dep] = 1
        position[dep] = len(path)
        path.append(dep)
        stack.append((list(graph[dep]), 0))
    return None
