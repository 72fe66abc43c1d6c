"""Tests for shoal.engine.planning: parsing planner output, templates, fallbacks, user plans."""

from __future__ import annotations

import json
import random
from types import MappingProxyType
from typing import Any

import pytest

from shoal.engine.dag import remaining_path_lengths, validate_dag
from shoal.engine.fallback_plans import decompose, simple_plan, template_plan
from shoal.engine.planning import (
    Plan,
    PlannedSubtask,
    parse_planner_output,
    planner_instructions,
    user_plan,
)
from shoal.errors import InvalidGraph

ITEMS: list[dict[str, Any]] = [
    {"name": "Model", "description": "Write the model.", "dependencies": [],
     "recommended_tool": "claude_code", "complexity": 2},
    {"name": "API", "description": "Write the API.", "dependencies": [0],
     "recommended_tool": None, "complexity": 3},
    {"name": "Tests", "description": "Write tests.", "dependencies": [0, 1]},
]


def keys_and_deps(plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
    """Each subtask's key and dependencies."""
    return [(s.key, s.dependencies) for s in plan.subtasks]


# ---- parse_planner_output ----------------------------------------------------------------


def test_parses_plain_array() -> None:
    """A bare JSON array becomes subtasks s1..sN with key dependencies."""
    plan = parse_planner_output(json.dumps(ITEMS))
    assert plan.source == "planner"
    assert plan.notes == ()
    assert plan.subtasks[0] == PlannedSubtask(
        "s1", "Model", "Write the model.", (), "claude_code", 2
    )
    assert keys_and_deps(plan) == [("s1", ()), ("s2", ("s1",)), ("s3", ("s1", "s2"))]


def test_parses_fenced_json() -> None:
    """JSON inside ```json fences is found."""
    text = f"```json\n{json.dumps(ITEMS, indent=2)}\n```"
    assert len(parse_planner_output(text).subtasks) == 3


def test_parses_chatty_json() -> None:
    """Prose and bracketed asides around the JSON are skipped."""
    text = (
        "Sure! Here is the plan [as requested] with {some} notes:\n"
        f"{json.dumps(ITEMS)}\nLet me know if you need [anything] else."
    )
    assert [s.name for s in parse_planner_output(text).subtasks] == ["Model", "API", "Tests"]


def test_skips_unrelated_json_object_before_the_plan() -> None:
    """A JSON object that is not a plan does not hide the array after it."""
    text = f'Config: {{"mode": "fast"}}\nPlan: {json.dumps(ITEMS)}'
    assert len(parse_planner_output(text).subtasks) == 3


def test_parses_object_form() -> None:
    """An object with a "subtasks" array is accepted."""
    plan = parse_planner_output(json.dumps({"subtasks": ITEMS, "summary": "x"}))
    assert len(plan.subtasks) == 3


def test_dependencies_by_name_case_insensitive() -> None:
    """Dependencies may name other subtasks, ignoring case; duplicates collapse."""
    items = [
        {"name": "Model", "description": "d"},
        {"name": "API", "description": "d", "dependencies": ["model", "Model", 0]},
    ]
    assert keys_and_deps(parse_planner_output(json.dumps(items)))[1] == ("s2", ("s1",))


def test_dependencies_as_digit_strings() -> None:
    """A dependency written as "0" is read as an index."""
    items = [{"name": "A", "description": "d"}, {"name": "B", "description": "d",
                                                  "dependencies": ["0"]}]
    assert keys_and_deps(parse_planner_output(json.dumps(items)))[1] == ("s2", ("s1",))


def test_complexity_is_clamped_and_defaulted() -> None:
    """Planner complexity is clamped to 1..5 and odd values default to 3."""
    items = [
        {"name": "A", "description": "d", "complexity": 9},
        {"name": "B", "description": "d", "complexity": 0},
        {"name": "C", "description": "d", "complexity": "hard"},
        {"name": "D", "description": "d", "complexity": 2.4},
        {"name": "E", "description": "d"},
    ]
    plan = parse_planner_output(json.dumps(items))
    assert [s.complexity for s in plan.subtasks] == [5, 1, 3, 2, 3]


def test_planner_cannot_pin_tools() -> None:
    """A "tool" key in planner output is ignored; only users pin tools."""
    items = [{"name": "A", "description": "d", "tool": "echo", "recommended_tool": ""}]
    subtask = parse_planner_output(json.dumps(items)).subtasks[0]
    assert subtask.tool is None
    assert subtask.recommended_tool is None


def test_long_planner_names_are_truncated() -> None:
    """A planner's overlong name is shortened, not refused."""
    items = [{"name": "x" * 500, "description": "d"}]
    assert len(parse_planner_output(json.dumps(items)).subtasks[0].name) == 200


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I could not do it.", "not valid JSON"),
        ('[{"name": "A", "description": "d"', "not valid JSON"),
        ("[]", "no subtasks"),
        ('{"plan": []}', "without a \"subtasks\" array"),
        ('"just a string"', "not valid JSON"),
        ("[1, 2]", "is a number, not an object"),
        ('[{"description": "d"}]', "\"name\""),
        ('[{"name": "A"}]', "\"description\""),
        ('[{"name": "A", "description": "d", "dependencies": 0}]', "not a list"),
        ('[{"name": "A", "description": "d", "dependencies": [3]}]', "neither an index"),
        ('[{"name": "A", "description": "d", "dependencies": ["Ghost"]}]', "'Ghost'"),
        ('[{"name": "A", "description": "d", "dependencies": [true]}]', "True"),
        (f'[{{"name": "A", "description": "d", "dependencies": ["{"9" * 5000}"]}}]', "neither"),
        ('[{"name": "A", "description": "d", "dependencies": [0]}]', "depends on itself"),
    ],
)
def test_rejects_bad_output(text: str, message: str) -> None:
    """Malformed planner output raises InvalidGraph with a clear message."""
    with pytest.raises(InvalidGraph, match=message):
        parse_planner_output(text)


def test_rejects_duplicate_names() -> None:
    """Two subtasks with the same name (ignoring case) are refused, naming both."""
    items = [{"name": "Tests", "description": "d"}, {"name": "tests", "description": "d"}]
    with pytest.raises(InvalidGraph, match="unique name") as info:
        parse_planner_output(json.dumps(items))
    assert info.value.details["indices"] == [0, 1]


def test_rejects_cycles_with_names_in_details() -> None:
    """A dependency cycle is refused and the details name the subtasks on it."""
    items = [
        {"name": "A", "description": "d", "dependencies": [2]},
        {"name": "B", "description": "d", "dependencies": [0]},
        {"name": "C", "description": "d", "dependencies": ["B"]},
    ]
    with pytest.raises(InvalidGraph, match="cycle") as info:
        parse_planner_output(json.dumps(items))
    assert info.value.details == {"cycle": ["A", "C", "B", "A"]}


def test_rejects_too_many_subtasks() -> None:
    """More subtasks than the limit are refused with the numbers."""
    items = [{"name": f"S{i}", "description": "d"} for i in range(6)]
    with pytest.raises(InvalidGraph, match="limit is 5") as info:
        parse_planner_output(json.dumps(items), max_subtasks=5)
    assert info.value.details == {"subtasks": 6, "max_subtasks": 5}


def test_pathological_brackets_are_bounded() -> None:
    """A long run of unbalanced brackets fails quickly instead of hanging."""
    with pytest.raises(InvalidGraph):
        parse_planner_output("[" * 100_000)


# ---- user_plan ---------------------------------------------------------------------------


def test_user_plan_with_pinned_tool() -> None:
    """A user's plan may pin tools and refer to dependencies by name."""
    plan = user_plan(
        [
            {"name": "Model", "description": "d", "tool": "ollama"},
            {"name": "API", "description": "d", "dependencies": ["Model"], "complexity": 4},
        ]
    )
    assert plan.source == "user"
    assert plan.subtasks[0].tool == "ollama"
    assert plan.subtasks[1] == PlannedSubtask("s2", "API", "d", ("s1",), None, 4, None)


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"name": "A", "description": "d", "complexity": 7}, "complexity"),
        ({"name": "A", "description": "d", "complexity": "3"}, "complexity"),
        ({"name": "A", "description": "d", "tool": 5}, "tool"),
        ({"name": "A", "description": "d", "recommended_tool": ["x"]}, "recommended_tool"),
        ({"name": "A" * 201, "description": "d"}, "name"),
        ({"name": "A", "description": ""}, "description"),
    ],
)
def test_user_plan_is_strict(item: dict[str, Any], field: str) -> None:
    """A user's wrong types are refused with the item index and field in the details."""
    with pytest.raises(InvalidGraph) as info:
        user_plan([{"name": "ok", "description": "d"}, item])
    assert info.value.details == {"index": 1, "field": field}


def test_user_plan_bad_reference_details() -> None:
    """A dangling reference names the item, the field and the reference."""
    with pytest.raises(InvalidGraph) as info:
        user_plan([{"name": "A", "description": "d", "dependencies": ["nope"]}])
    assert info.value.details == {"index": 0, "field": "dependencies", "reference": "nope"}


def test_a_plan_knows_each_subtasks_longest_chain_ahead() -> None:
    """The lengths found while a plan is checked are the graph's longest chains from each
    subtask to the end (the `dag` workflow's priorities), for random plans of every shape,
    references by index and by name, repeats included; a plan made otherwise (a template)
    finds them when asked."""
    rng = random.Random(7)
    for _ in range(200):
        count = rng.randint(1, 30)
        items = []
        for at in range(count):
            refs: list[int | str] = [rng.randrange(at) for _ in range(rng.randint(0, 3))] \
                if at else []
            refs += [f"S{ref}" for ref in refs[:1]]  # the same subtask by its name too
            items.append({"name": f"s{at}", "description": "d", "dependencies": refs})
        order = list(range(count))
        rng.shuffle(order)  # dependencies may point forward: the plan's order is the user's
        shuffled = [items[at] for at in order]
        new_at = {old: new for new, old in enumerate(order)}
        for item in shuffled:
            item["dependencies"] = [new_at[r] if isinstance(r, int) else r
                                    for r in item["dependencies"]]
        plan = user_plan(shuffled)
        assert plan.path_lengths() == remaining_path_lengths(plan.graph())
        assert len(plan.lengths) == count
    template = template_plan("Add authentication to my app")
    assert template is not None
    assert template.lengths == ()
    assert template.path_lengths() == remaining_path_lengths(template.graph())


def test_an_item_reads_the_same_as_a_dict_or_any_mapping() -> None:
    """A plan's items as plain dicts (read in one go) give the same plan as the same items in
    another mapping (read field by field): names and descriptions stripped, blank hints
    dropped, complexity defaulted, dependencies by index or name."""
    items = [
        {"name": "  Model ", "description": " Write it.\n", "recommended_tool": "  ",
         "tool": " ollama "},
        {"name": "API", "description": "d", "dependencies": [0, "model", "0"],
         "complexity": 5, "recommended_tool": "codex", "tool": None},
        {"name": "Docs", "description": "d", "dependencies": None, "complexity": None},
    ]
    plan = user_plan(items)
    assert plan == user_plan([MappingProxyType(item) for item in items])
    assert plan.subtasks[0] == PlannedSubtask("s1", "Model", "Write it.", (), None, 3, "ollama")
    assert plan.subtasks[1].dependencies == ("s1",)
    for item, field in (({"name": " ", "description": "d"}, "name"),
                        ({"name": "A", "description": "d", "dependencies": "0"},
                         "dependencies"),
                        ({"name": "A", "description": "d", "complexity": True}, "complexity")):
        with pytest.raises(InvalidGraph) as info:
            user_plan([item])
        assert info.value.details == {"index": 0, "field": field}


def test_user_plan_must_be_a_list() -> None:
    """A string is not a plan."""
    with pytest.raises(InvalidGraph, match="list of subtasks"):
        user_plan("do it")  # type: ignore[arg-type]


def test_user_plan_limit() -> None:
    """The subtask limit applies to user plans too."""
    with pytest.raises(InvalidGraph, match="limit is 1"):
        user_plan([{"name": "A", "description": "d"}, {"name": "B", "description": "d"}],
                  max_subtasks=1)


# ---- templates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("description", "first_name", "count"),
    [
        ("Add authentication to my app", "Create User model and database schema", 6),
        ("Build an auth system", "Create User model and database schema", 6),
        ("Build a CRUD service", "Create Resource model and schema", 7),
        ("Expose REST API endpoints for books", "Create Resource model and schema", 7),
        ("Refactoring the billing module", "Analyse the current code", 5),
        ("Build an admin dashboard", "Design the dashboard layout", 5),
        ("Make a UI for the tool", "Design the dashboard layout", 5),
    ],
)
def test_template_matches(description: str, first_name: str, count: int) -> None:
    """Each rule template matches its keywords."""
    plan = template_plan(description)
    assert plan is not None
    assert plan.source == "template"
    assert plan.subtasks[0].name == first_name
    assert len(plan.subtasks) == count


@pytest.mark.parametrize(
    "description",
    ["Build a guide for new users", "Write the author bio page", "Fix the build", "Quick fix"],
)
def test_template_does_not_match_inside_words(description: str) -> None:
    """'ui' inside 'build'/'guide' and 'auth' inside 'author' do not match."""
    assert template_plan(description) is None


def test_crud_template_uses_resource_name() -> None:
    """The CRUD template names the resource from the requirements."""
    plan = template_plan("crud api", {"resource_name": "Blog Post"})
    assert plan is not None
    assert plan.subtasks[0].name == "Create Blog Post model and schema"
    assert plan.subtasks[1].name == "Implement GET /blog-posts endpoint"
    assert plan.subtasks[-1].dependencies == ("s2", "s3", "s4", "s5", "s6")


@pytest.mark.parametrize("description", ["auth", "crud", "refactor", "dashboard"])
def test_templates_are_valid_dags(description: str) -> None:
    """Every template is a valid DAG whose dependencies point at earlier subtasks."""
    plan = template_plan(description)
    assert plan is not None
    validate_dag(plan.graph())
    keys = [s.key for s in plan.subtasks]
    for at, subtask in enumerate(plan.subtasks):
        assert all(keys.index(dep) < at for dep in subtask.dependencies)


# ---- simple_plan -------------------------------------------------------------------------


def test_simple_plan_single_sentence() -> None:
    """One sentence gives one subtask holding the whole description."""
    plan = simple_plan("Build a CLI todo app with tests.")
    assert plan.source == "simple"
    assert [(s.name, s.description) for s in plan.subtasks] == [
        ("Build a CLI todo app with tests", "Build a CLI todo app with tests.")
    ]


def test_simple_plan_sentences_plus_integration() -> None:
    """Several sentences become independent subtasks plus a final integration step."""
    plan = simple_plan("Create a parser. Add a CLI, e.g. with typer. Write docs!")
    assert [s.name for s in plan.subtasks] == [
        "Create a parser",
        "Add a CLI, e.g. with typer",
        "Write docs",
        "Integrate and verify",
    ]
    assert keys_and_deps(plan)[-1] == ("s4", ("s1", "s2", "s3"))
    assert all(not s.dependencies for s in plan.subtasks[:3])


def test_simple_plan_bullets_keep_context() -> None:
    """Bullet and numbered lines are the clauses; other lines are context."""
    plan = simple_plan("Build a todo app:\n- add items\n* list items\n3. delete items")
    assert [s.name for s in plan.subtasks] == [
        "Add items", "List items", "Delete items", "Integrate and verify"
    ]
    assert plan.subtasks[0].description == "add items\n\nPart of the task: Build a todo app:"


def test_simple_plan_caps_at_eight_clauses() -> None:
    """More than eight clauses are merged into the eighth, so nothing is dropped."""
    plan = simple_plan("\n".join(f"- step {i}" for i in range(12)))
    assert len(plan.subtasks) == 9
    assert plan.subtasks[7].description.startswith("step 7\nstep 8")
    assert "step 11" in plan.subtasks[7].description


def test_simple_plan_respects_small_limit() -> None:
    """With room for one subtask, the whole description goes into it."""
    plan = simple_plan("Do A. Do B. Do C.", max_subtasks=1)
    assert len(plan.subtasks) == 1
    assert plan.subtasks[0].description == "Do A. Do B. Do C."


def test_simple_plan_long_and_duplicate_names() -> None:
    """Long clauses get short names; repeated clauses get numbered names."""
    plan = simple_plan(f"- {'word ' * 40}\n- Add tests\n- add tests")
    names = [s.name for s in plan.subtasks]
    assert len(names[0]) <= 80
    assert names[0].endswith("…")
    assert names[1:3] == ["Add tests", "Add tests (2)"]


def test_simple_plan_blank_description() -> None:
    """Even a blank description yields one runnable subtask."""
    assert [s.name for s in simple_plan("  ").subtasks] == ["Complete the task"]


# ---- decompose ---------------------------------------------------------------------------


def test_decompose_uses_valid_planner_output() -> None:
    """Valid planner output wins and carries no notes."""
    plan = decompose(json.dumps(ITEMS), "Build auth")
    assert plan.source == "planner"
    assert plan.notes == ()


def test_decompose_invalid_json_falls_back_to_template() -> None:
    """Invalid planner JSON falls back to a matching template, saying why."""
    plan = decompose("not json at all", "Add authentication")
    assert plan.source == "template"
    assert len(plan.notes) == 1
    assert plan.notes[0].startswith("Planner output was not valid JSON")
    assert "'auth' template" in plan.notes[0]


def test_decompose_cycle_falls_back_with_note() -> None:
    """A cyclic plan is refused and the note mentions the cycle."""
    items = [{"name": "A", "description": "d", "dependencies": [1]},
             {"name": "B", "description": "d", "dependencies": [0]}]
    plan = decompose(json.dumps(items), "Refactor the parser")
    assert plan.source == "template"
    assert "cycle" in plan.notes[0]
    assert "'refactor' template" in plan.notes[0]


def test_decompose_timeout_without_template_uses_simple() -> None:
    """No planner answer and no template gives the simple split, with a note."""
    plan = decompose(None, "Write a parser. Write a printer.")
    assert plan.source == "simple"
    assert len(plan.subtasks) == 3
    assert "failed or timed out" in plan.notes[0]
    assert "into 3 subtasks" in plan.notes[0]


def test_decompose_too_many_planned_subtasks_falls_back() -> None:
    """A plan over the limit falls back, and the fallback respects the limit too."""
    items = [{"name": f"S{i}", "description": "d"} for i in range(5)]
    plan = decompose(json.dumps(items), "Build an auth system. Then test it.", max_subtasks=4)
    assert plan.source == "simple"
    assert len(plan.subtasks) <= 4
    assert "limit is 4" in plan.notes[0]


def test_decompose_passes_requirements_to_template() -> None:
    """Requirements reach the CRUD template."""
    plan = decompose(None, "CRUD for notes", {"resource_name": "Note"})
    assert plan.subtasks[0].name == "Create Note model and schema"


# ---- planner_instructions ----------------------------------------------------------------


def test_planner_instructions_mention_task_tools_and_format() -> None:
    """The prompt carries the task, requirements, tools and the JSON-only rule."""
    prompt = planner_instructions(
        "Build a todo app", {"language": "python"}, ["claude_code", "ollama"], max_subtasks=12
    )
    assert "Build a todo app" in prompt
    assert '"language": "python"' in prompt
    assert '"claude_code", "ollama"' in prompt
    assert "at most 12 subtasks" in prompt
    assert "ONLY with a JSON array" in prompt


def test_planner_instructions_without_tools_or_requirements() -> None:
    """No tools and no requirements still give a usable prompt."""
    prompt = planner_instructions("Do it", None, [])
    assert "(none known)" in prompt
    assert "Requirements: {}" in prompt
