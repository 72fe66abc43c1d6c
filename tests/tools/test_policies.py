"""Pure pieces of the tools layer: Retry-After parsing, backoff, permissions, the journal."""

from __future__ import annotations

import datetime as dt
import uuid
from email.utils import format_datetime
from pathlib import Path

import pytest

from shoal.errors import InvalidInput
from shoal.protocol import Usage
from shoal.tools.agent_loop import TOOLS, RetryPolicy
from shoal.tools.journal import Journal
from shoal.tools.models.base import ModelAnswer, ModelCall, Turn, retry_after_seconds, status_error
from shoal.tools.permissions import PermissionPolicy


def test_retry_after_in_seconds_milliseconds_and_dates() -> None:
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    waited = retry_after_seconds({"retry-after": format_datetime(later, usegmt=True)})
    assert waited is not None
    assert 25 <= waited <= 30
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "-4"}) == 0.0


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    policy = RetryPolicy(max_retries=5, base=1.0, cap=4.0)
    for retry in range(1, 6):
        assert 0 <= policy.delay(retry, None) <= min(4.0, 2 ** (retry - 1))
    assert policy.delay(1, 10.0) == 10.0  # never sooner than the server asked


def test_status_errors_say_whether_to_retry() -> None:
    assert status_error("u", "m", 429, "slow down", {"retry-after": "3"}, "K").retry_after == 3
    assert status_error("u", "m", 503, "busy", None, "K").retryable
    assert not status_error("u", "m", 500, "no", {"x-should-retry": "false"}, "K").retryable
    refused = status_error("u", "m", 401, "bad key", None, "MY_KEY")
    assert not refused.retryable
    assert "MY_KEY" in refused.message
    assert not status_error("u", "m", 400, "bad", None, "K").retryable


def test_permission_policy_defaults_and_rules(tmp_path: Path) -> None:
    policy = PermissionPolicy.from_options({})
    assert policy.edit("a/b.py", tmp_path).allowed
    assert policy.edit(str(tmp_path / "x.py"), tmp_path).allowed
    assert not policy.edit("../x.py", tmp_path).allowed
    assert not policy.edit("/etc/passwd", tmp_path).allowed
    assert policy.command("ls").allowed
    strict = PermissionPolicy.from_options({"permissions": {"edits": "deny",
                                                            "commands": "ask"}})
    assert not strict.edit("a.py", tmp_path).allowed
    asked = strict.command("rm -rf build")
    assert not asked.allowed
    assert asked.needs_human


@pytest.mark.parametrize(("options", "field"), [
    ({"permissions": "all"}, "permissions"),
    ({"permissions": {"network": "allow"}}, "permissions.network"),
    ({"permissions": {"edits": "yes"}}, "permissions.edits"),
])
def test_bad_permission_options_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        PermissionPolicy.from_options(options)
    assert caught.value.details == {"field": field}


def test_journal_survives_a_torn_line_and_keys_on_the_whole_request(tmp_path: Path) -> None:
    subtask = uuid.uuid4()
    journal = Journal.open(tmp_path, subtask)
    turns = [Turn("user", "do it")]
    key = Journal.key("openai", "m", "sys", turns, TOOLS)
    answer = ModelAnswer("ok", (ModelCall("c1", "write_file", '{"path": "a"}'),),
                         Usage(input_tokens=3, output_tokens=4))
    journal.put(key, answer)
    assert journal.path is not None
    with journal.path.open("a", encoding="utf-8") as handle:
        handle.write('{"key": "cut sho')  # a crash in the middle of a write
    again = Journal.open(tmp_path, subtask)
    assert again.get(key) == answer
    assert len(again) == 1
    assert Journal.key("openai", "m", "sys", [Turn("user", "do it!")], TOOLS) != key
    assert Journal.key("anthropic", "m", "sys", turns, TOOLS) != key
    again.discard()
    assert not journal.path.exists()


def test_cost_from_list_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal.tools.pricing import price_of, with_cost

    usage = Usage(input_tokens=1_000_000, output_tokens=100_000)
    assert with_cost(usage, "gpt-5").cost_usd == 1.25 + 1.0
    assert with_cost(usage, "gpt-5-mini-2025-08-07").cost_usd == 0.25 + 0.2  # longest prefix
    assert with_cost(usage, "models/gemini-2.5-pro").cost_usd == 1.25 + 1.0
    assert with_cost(usage, "llama3.1").cost_usd == 0.0  # local or unknown: no guess
    reported = Usage(input_tokens=10, output_tokens=10, cost_usd=0.5)
    assert with_cost(reported, "gpt-5").cost_usd == 0.5  # the tool's own figure wins
    assert with_cost(reported, "gpt-5").model == "gpt-5"  # named for metrics by model
    assert with_cost(usage.model_copy(update={"model": "o3"}), "gpt-5").model == "o3"
    monkeypatch.setenv("SHOAL_MODEL_PRICES", '{"llama3.1": [1, 2]}')
    assert price_of("llama3.1:8b") == (1.0, 2.0)
