"""The metrics page: every family a control plane's `/metrics` serves, read from a fresh
`shoal.metrics.Metrics` registry (name as scraped, type, labels, help), and the values of its
closed label sets."""

from __future__ import annotations

from typing import Any

from ref_text import GENERATED, code, member_notes, table

from shoal import metrics
from shoal.metrics import Metrics, Outcome, StreamKind, WalCheckpoint
from shoal.states import TERMINAL_TASK

SUFFIX = {"counter": "_total"}


def families() -> list[Any]:
    return sorted(Metrics().registry.collect(), key=lambda f: f.name)


def row(family: Any) -> list[str]:
    labels = getattr(family, "_labelnames", ())  # the label names it was declared with
    return [code(family.name + SUFFIX.get(family.type, "")), family.type,
            ", ".join(code(label) for label in labels) or "—", family.documentation]


def label_values() -> str:
    outcomes = member_notes(Outcome)
    rows = [[code("outcome"), ", ".join(code(o.value) for o in Outcome),
             "; ".join(f"{code(v)}: {n}" for v, n in outcomes.items())],
            [code("status") + " (tasks)", ", ".join(sorted(code(s.value) for s in TERMINAL_TASK)),
             "the task's final status"],
            [code("stream"), ", ".join(code(k.value) for k in StreamKind), "a live client stream"],
            [code("kind") + " (checkpoints)", ", ".join(code(k.value) for k in WalCheckpoint),
             "; ".join(f"{code(v)}: {n}" for v, n in member_notes(WalCheckpoint).items())]]
    return table(["Label", "Values", "Meaning"], rows)


def page() -> str:
    return (
        "# Metrics\n\n" + GENERATED + "\n"
        "Every control plane serves Prometheus text at `/metrics`. Each copy counts what it "
        "drove: sum over copies in queries. No id is ever a label; `tool`, `model`, `workflow` "
        f"and `route` keep their first {metrics.MAX_LABELS} distinct values (routes: "
        f"{Metrics()._routes._limit}) and "
        f"then read {code(metrics.OTHER)}. Histograms are scraped as `_bucket`, `_sum` and "
        "`_count`. Queries an operator asks and the Grafana dashboard: "
        "[monitoring guide](../guides/monitoring.md).\n\n"
        + table(["Name", "Type", "Labels", "What it counts"], [row(f) for f in families()])
        + "\n## Label values\n\n" + label_values())
