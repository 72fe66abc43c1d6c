"""When a failed subtask is tried again, and how long it waits first.

Pure: the random number for jitter is passed in, so a test (or a replay) gets the same delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `max_attempts` tries; before try n+1 wait `delays[n-1]` (the last one repeats).

    Each delay is spread by ±`jitter` (a fraction) so that retries of many subtasks that failed
    together do not all come back at the same moment.
    """

    max_attempts: int = 3
    delays: tuple[float, ...] = (10.0, 30.0, 60.0)
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInput(
                f"max_attempts must be at least 1, not {self.max_attempts}.",
                details={"max_attempts": self.max_attempts},
            )
        if any(d < 0 for d in self.delays):
            raise InvalidInput(
                f"Retry delays must not be negative: {list(self.delays)}.",
                details={"delays": list(self.delays)},
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidInput(
                f"Retry jitter must be between 0 and 1, not {self.jitter}.",
                details={"jitter": self.jitter},
            )

    def should_retry(self, attempts_made: int) -> bool:
        """Whether another attempt is allowed after `attempts_made` attempts have failed."""
        return attempts_made < self.max_attempts

    def delay(self, attempts_made: int, *, rand: float) -> float:
        """Seconds to wait before the next attempt; `rand` is a uniform number in [0, 1)."""
        if not self.delays:
            return 0.0
        base = self.delays[min(max(attempts_made, 1) - 1, len(self.delays) - 1)]
        return max(0.0, base * (1.0 + self.jitter * (2.0 * rand - 1.0)))
