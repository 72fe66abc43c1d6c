"""Step options and outputs are typed inside the engine and stored as the JSON they always were."""

from __future__ import annotations

from shoal.engine.model import Deadline, StepOutput, TaskMeta
from shoal.engine.options import Correction, StepOptions


def test_a_step_output_round_trips_with_the_keys_clients_read() -> None:
    stored = {"text": "t", "files": [{"path": "a.py", "size": 3, "sha256": "f" * 64}],
              "rejected_files": [{"path": "../x", "reason": "escapes"}], "usage": {"cost_usd": 1},
              "parsed": None, "parse_error": "not JSON", "approval_requests": [{"tool": "Bash"}],
              "accepted": True, "corrected_by": "c"}
    assert StepOutput.from_json(stored).to_json() == stored
    plain = {"text": "", "files": [], "rejected_files": [], "usage": {}}
    assert StepOutput.from_json(plain).to_json() == plain  # no `parsed` unless it answers


def test_options_split_the_engines_keys_from_the_tools() -> None:
    stored = {"delay": 0.5, "files": ["a.py"], "round": 2, "cycle": 1, "repair": "bad JSON",
              "exclude_workers": ["w1"], "pinned_worker": "w2", "prefer_worker": "w3",
              "correction": Correction(source="review", guidance="g").to_json(),
              "questions": [{"id": "q1", "question": "Who?"}], "serves": ["q1"]}
    options = StepOptions.from_json(stored)
    assert options.tool == {"delay": 0.5, "files": ["a.py"]}
    assert (options.questions, options.serves) == ((("q1", "Who?"),), ("q1",))
    assert (options.round, options.cycle, options.repair) == (2, 1, "bad JSON")
    assert options.exclude_workers == ("w1",)
    assert options.correction == Correction(source="review", guidance="g")
    assert options.to_json() == stored


def test_an_engine_key_of_another_type_stays_the_tools() -> None:
    """A user's plan may carry any options for its tool; the engine takes only what fits."""
    stored = {"round": "two", "pinned_worker": 7, "exclude_workers": "w1", "correction": "x"}
    options = StepOptions.from_json(stored)
    assert options == StepOptions(tool=stored)
    assert options.to_json() == stored


def test_options_read_with_shoals_own_set_over_them() -> None:
    """A planned subtask's options: the user's, with the run's own (its round, its MCP
    servers) set over any the user sent, as the record is made."""
    options = StepOptions.from_json({"seq": 9, "delay": 1, "round": 2}, seq=3, mcp_servers=())
    assert (options.seq, options.round, options.tool) == (3, 2, {"delay": 1})
    assert StepOptions.from_json({"seq": 9}, seq=None).seq is None


def test_task_meta_keeps_the_requirements_and_shoals_settings_apart() -> None:
    stored = {"language": "python", "shoal.permissions": {"commands": "ask"},
              "shoal.quality": "off",
              "shoal.checkpoint_deadline": {"seconds": 60.0, "action": "approve"}}
    meta = TaskMeta.from_json(stored)
    assert meta == TaskMeta(requirements={"language": "python"},
                            permissions={"commands": "ask"}, quality=False,
                            checkpoint_deadline=Deadline(60.0, "approve"))
    assert meta.to_json() == stored
    assert TaskMeta.from_json({}).to_json() == {}
