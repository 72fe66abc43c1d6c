"""`benchmarks/alternate.py` runs one tuning constant at several values, task by task in one
run: each value is in force while its own tasks run, the original comes back afterwards, and
what is not a module's number is refused with a clear message."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from _workloads import workloads
from alternate import Knob, alternate, main, table, values_of

from shoal.runtime import executes


def test_a_constant_is_named_by_module_and_name_and_must_be_a_number() -> None:
    knob = Knob.parse("shoal.runtime.executes:FIRST_SEND")
    assert (knob.module, knob.name, knob.original) == (executes, "FIRST_SEND",
                                                       executes.FIRST_SEND)
    for spec, says in (("shoal.runtime.executes", "package.module:NAME"),
                       ("shoal.no_such_module:X", "no module"),
                       ("shoal.runtime.executes:Executes", "not a number"),
                       ("shoal.runtime.executes:NOT_THERE", "not a number")):
        with pytest.raises(ValueError, match=says):
            Knob.parse(spec)
    assert values_of("1000000, 32,16") == [1000000.0, 32.0, 16.0]
    for text, says in (("32", "two or more"), ("32,32", "two or more"), ("a,b", "numbers")):
        with pytest.raises(ValueError, match=says):
            values_of(text)


def test_bad_arguments_stop_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in ((["shoal.runtime.executes:FIRST_SEND", "1"], "two or more"),
                       (["nope:X", "1,2"], "no module"),
                       (["shoal.runtime.executes:FIRST_SEND", "1,2", "--repeat", "0"],
                        "--repeat must be 1 or more"),
                       (["shoal.runtime.executes:FIRST_SEND", "1,2", "--only", "W9"],
                        "names no workload")):
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err


async def test_each_value_is_in_force_for_its_own_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []  # FIRST_SEND as each commit's dispatch read it
    send = executes.Executes.send

    async def watched(self: Any, dispatches: Any) -> None:
        if dispatches:
            seen.append(executes.FIRST_SEND)
        await send(self, dispatches)

    monkeypatch.setattr(executes.Executes, "send", watched)
    knob = Knob.parse("shoal.runtime.executes:FIRST_SEND")
    original = executes.FIRST_SEND
    chain = workloads(quick=True, only="W2")
    [spans] = await alternate(knob, [1000, 7], chain, db="sqlite", repeat=2)
    assert original == executes.FIRST_SEND  # put back
    assert sorted(spans.by_value) == [7, 1000]
    assert all(len(ms) == 2 and all(m > 0 for m in ms) for ms in spans.by_value.values())
    steps = len(chain[0].dag)  # one dispatch a step: the warm-up, then 1000, 7, 1000, 7
    assert seen == [original] * steps + ([1000] * steps + [7] * steps) * 2
    rendered = table(knob, [spans])
    assert [c.header for c in rendered.columns][:3] == ["workload", "value", "median"]
