"""Every command runs on uvloop, as uvicorn runs `shoal serve`: the embedded control plane of
`shoal up` and the workers run on the loop the deployed copies run on."""

from __future__ import annotations

import asyncio

import uvloop

from shoal.cli.base import run


async def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_a_command_runs_on_uvloop() -> None:
    assert isinstance(run(_loop), uvloop.Loop)
