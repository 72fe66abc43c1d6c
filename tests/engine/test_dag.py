"""Tests for shoal.engine.dag: validation, ordering, readiness, critical paths."""

from __future__ import annotations

import time

import pytest

from shoal.engine.dag import (
    dependents,
    find_cycle,
    layers,
    ready_nodes,
    remaining_path_lengths,
    topological_order,
    validate_dag,
)
from shoal.errors import InvalidGraph

DIAMOND: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def chain(n: int) -> dict[int, list[int]]:
    """A chain 0 <- 1 <- ... <- n-1."""
    return {i: [i - 1] if i else [] for i in range(n)}


def test_empty_graph_is_valid() -> None:
    """An empty graph passes validation; the caller decides whether it is acceptable."""
    validate_dag({})


def test_diamond_is_valid() -> None:
    """A diamond is a DAG."""
    validate_dag(DIAMOND)


def test_two_cycle_reports_the_path() -> None:
    """A cycle of two is rejected and its path is in the details."""
    with pytest.raises(InvalidGraph, match="cycle") as info:
        validate_dag({"a": ["b"], "b": ["a"]})
    assert info.value.details == {"cycle": ["a", "b", "a"]}


def test_three_cycle_reports_the_path() -> None:
    """A cycle of three behind an acyclic entry is found with its exact path."""
    graph = {"x": [], "a": ["x", "b"], "b": ["c"], "c": ["a"]}
    with pytest.raises(InvalidGraph) as info:
        validate_dag(graph)
    assert info.value.details == {"cycle": ["a", "b", "c", "a"]}
    assert "'a' → 'b' → 'c' → 'a'" in info.value.message


def test_self_dependency_names_the_node() -> None:
    """A node depending on itself is reported as such, not as a cycle."""
    with pytest.raises(InvalidGraph, match="depends on itself") as info:
        validate_dag({"a": [], "b": ["b", "a"]})
    assert info.value.details == {"self_dependencies": ["b"]}


def test_dangling_dependency_names_node_and_missing() -> None:
    """A dependency on a node outside the graph names both ends."""
    with pytest.raises(InvalidGraph, match="not in the graph") as info:
        validate_dag({"a": ["ghost"]})
    assert info.value.details == {"dangling": [{"node": "a", "missing": "ghost"}]}


def test_too_many_nodes() -> None:
    """The node limit is enforced with the numbers in the details."""
    with pytest.raises(InvalidGraph, match="limit is 3") as info:
        validate_dag(chain(4), max_nodes=3)
    assert info.value.details == {"nodes": 4, "max_nodes": 3}


def test_too_many_edges() -> None:
    """The edge limit counts distinct dependencies."""
    validate_dag({"a": [], "b": ["a", "a"]}, max_edges=1)
    with pytest.raises(InvalidGraph, match="dependencies; the limit is 2"):
        validate_dag(DIAMOND, max_edges=2)


def test_find_cycle_none_for_dag() -> None:
    """A DAG has no cycle."""
    assert find_cycle(DIAMOND) is None


def test_long_chain_is_fast_and_recursion_free() -> None:
    """A chain of 10,000 nodes validates, orders and measures without recursion, quickly."""
    graph = chain(10_000)
    started = time.perf_counter()
    validate_dag(graph, max_nodes=10_000)
    assert topological_order(graph) == list(range(10_000))
    assert remaining_path_lengths(graph)[0] == 10_000.0
    assert len(layers(graph)) == 10_000
    assert time.perf_counter() - started < 2.0


def test_long_cycle_is_found() -> None:
    """A cycle through 5,000 nodes is found without recursion."""
    graph = chain(5_000)
    graph[0] = [4_999]
    with pytest.raises(InvalidGraph) as info:
        validate_dag(graph, max_nodes=5_000)
    assert len(info.value.details["cycle"]) == 5_001


def test_topological_order_breaks_ties_by_insertion() -> None:
    """Independent nodes keep the mapping's order; dependencies come first."""
    graph = {"z": [], "y": ["x"], "x": [], "w": []}
    assert topological_order(graph) == ["z", "x", "y", "w"]


def test_topological_order_rejects_cycles() -> None:
    """Ordering a cyclic graph raises InvalidGraph."""
    with pytest.raises(InvalidGraph, match="cycle"):
        topological_order({"a": ["b"], "b": ["a"]})


def test_layers_of_a_diamond() -> None:
    """A diamond has three layers, the middle one in insertion order."""
    assert layers(DIAMOND) == [["a"], ["b", "c"], ["d"]]


def test_layers_place_nodes_as_early_as_possible() -> None:
    """A node depending only on a root sits in layer 1 even if listed last."""
    graph = {"a": [], "b": ["a"], "c": ["b"], "e": ["a"]}
    assert layers(graph) == [["a"], ["b", "e"], ["c"]]


def test_layers_of_empty_graph() -> None:
    """An empty graph has no layers."""
    assert layers({}) == []


def test_ready_nodes_at_start() -> None:
    """At the start only roots are ready."""
    assert ready_nodes(DIAMOND, done=set(), started=set()) == ["a"]


def test_ready_nodes_excludes_started_and_done() -> None:
    """Started and done nodes are not ready; a join waits for all its dependencies."""
    assert ready_nodes(DIAMOND, done={"a"}, started={"b"}) == ["c"]
    assert ready_nodes(DIAMOND, done={"a", "b"}, started=set()) == ["c"]
    assert ready_nodes(DIAMOND, done={"a", "b", "c"}, started=set()) == ["d"]
    assert ready_nodes(DIAMOND, done=set(DIAMOND), started=set()) == []


def test_remaining_path_lengths_on_weighted_diamond() -> None:
    """Each node's length is its weight plus its heaviest dependent path."""
    weights = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}
    assert remaining_path_lengths(DIAMOND, weights=weights) == {
        "a": 7.0,
        "b": 6.0,
        "c": 3.0,
        "d": 1.0,
    }


def test_remaining_path_lengths_default_weight_is_one() -> None:
    """Without weights every node counts 1."""
    assert remaining_path_lengths(DIAMOND) == {"a": 3.0, "b": 2.0, "c": 2.0, "d": 1.0}


def test_remaining_path_lengths_skip_done_nodes() -> None:
    """Done nodes are not reported and add nothing to paths through them."""
    weights = {"a": 1.0, "b": 5.0, "c": 2.0, "d": 1.0}
    assert remaining_path_lengths(DIAMOND, weights=weights, done={"a", "b"}) == {
        "c": 3.0,
        "d": 1.0,
    }


def test_dependents_is_reverse_adjacency() -> None:
    """Dependents list every node, in insertion order, ignoring duplicates."""
    graph = {"a": [], "b": ["a", "a"], "c": ["a"], "d": ["b", "c"]}
    assert dependents(graph) == {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}


def test_dependents_ignores_dangling() -> None:
    """A dependency outside the graph does not become a key."""
    assert dependents({"a": ["ghost"]}) == {"a": []}


def test_works_with_uuid_keys() -> None:
    """Keys can be any hashable value, such as UUIDs."""
    import uuid

    a, b = uuid.uuid4(), uuid.uuid4()
    assert topological_order({b: [a], a: []}) == [a, b]
