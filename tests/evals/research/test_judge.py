"""The judge over HTTP, against a fake OpenAI-compatible server scripted to answer as a judge:
a verdict becomes a score, an answer without one is no judgement, and the prompt carries the
part, the gold answer and the report."""

from __future__ import annotations

from starlette.applications import Starlette

from shoal.demo.fake.server import create_fake_app, running_fake_server
from shoal.demo.fake.wire import Conversation, Reply
from shoal.evals.research.goldset import load_set
from shoal.evals.research.judge import Judge

PARTS = [p for p in load_set().chosen(["libffi-safety"]).questions[0].parts if p.answerable]


def _judge_saying(verdicts: dict[str, str], seen: list[str]) -> Starlette:
    """A model that answers each part's question by `verdicts` (by a word of the part)."""
    def decide(conversation: Conversation) -> Reply:
        prompt = conversation.texts("user")[-1]
        seen.append(prompt)
        word = next(w for w in verdicts if w in prompt.split("Gold answer:")[0])
        return Reply(text=verdicts[word])
    return create_fake_app(decide)


async def test_verdicts_become_scores_and_a_reply_without_one_is_none() -> None:
    """'partial' scores 0.5; prose without a verdict is None, not 0."""
    seen: list[str] = []
    app = _judge_saying({"thread-safe": 'Sure. {"verdict": "partial", "why": "vaguer"}',
                         "memory": "I cannot tell."}, seen)
    async with running_fake_server(app) as root:
        judge = Judge(f"{root}/v1", "judge-model")
        assert await judge.verdicts(PARTS, "libffi is not completely thread-safe [1].") == [
            0.5, None]
    assert "Gold answer: Not completely" in seen[0]
    assert "<report>\nlibffi is not completely thread-safe [1].\n</report>" in seen[0]


async def test_an_unreachable_judge_gives_no_judgement() -> None:
    """A refused connection is None for every part, not an error of the run."""
    judge = Judge("http://127.0.0.1:9/v1", "judge-model", timeout=5)
    assert await judge.verdicts(PARTS, "report") == [None, None]
