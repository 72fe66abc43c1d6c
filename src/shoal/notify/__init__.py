"""Notifications: users hear by webhook or email when a task ends or a checkpoint waits.

`payload` says which events of the log are worth a notification and what it says; `targets`
are a user's webhooks and email address; `outbox` the deliveries table, filled from the log
and emptied by the senders (`webhooks`, signed as `signing` says, and `email`); `notifier`
runs both loops beside the runtime. docs/guides/notifications.md is the receiver's guide.
"""

from __future__ import annotations

from shoal.notify.notifier import Notifier

__all__ = ["Notifier"]
