"""Command channel over real ROUTER/DEALER sockets: acks, error replies, timeouts."""

from __future__ import annotations

import asyncio
import json

import pytest
import zmq
import zmq.asyncio

from daq.run.commands import CommandClient, CommandError, CommandRefused, CommandServer, CommandTimeout


def handlers(log: list) -> dict:
    async def set_force(force_N: float) -> dict:
        if not 0 <= force_N <= 1000:
            raise ValueError(f"force {force_N} N out of range")
        log.append(force_N)
        return {"accepted": force_N}

    def status() -> dict:  # plain functions work too
        return {"n": len(log)}

    async def slow(delay: float) -> dict:
        await asyncio.sleep(delay)
        log.append("slow done")
        return {}

    return {"set_force": set_force, "status": status, "slow": slow}


async def test_ack_errors_and_server_survives():
    log: list = []
    async with CommandServer(handlers=handlers(log)) as server, CommandClient(server.endpoint) as client:
        assert await client.request("set_force", force_N=250.0) == {"accepted": 250.0}
        assert (await client.request("ping"))["pong"] is True
        with pytest.raises(CommandError, match="unknown command 'launch'"):
            await client.request("launch")
        with pytest.raises(CommandError, match="bad arguments"):
            await client.request("set_force", force=1.0)
        with pytest.raises(CommandError, match="out of range"):
            await client.request("set_force", force_N=-5.0)
        assert await client.request("status") == {"n": 1}
        assert log == [250.0]
        assert server.served == 6 and server.errors == 3


async def test_garbage_requests_get_error_replies():
    async with CommandServer(handlers={}) as server:
        ctx = zmq.asyncio.Context.instance()
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(server.endpoint)
        try:
            for body in [b"\xff\x00", b"[1,2]", b'{"cmd": 5}', b'{"cmd": "ping", "args": [1]}']:
                await raw.send_multipart([b"", body])
                reply = json.loads((await asyncio.wait_for(raw.recv_multipart(), 5))[-1])
                assert reply["ok"] is False and reply["error"]
            await raw.send_multipart([b"", b'{"id": "x", "cmd": "ping", "args": {}}'])
            reply = json.loads((await asyncio.wait_for(raw.recv_multipart(), 5))[-1])
            assert reply["ok"] is True and reply["id"] == "x"
        finally:
            raw.close(linger=0)


async def test_timeout_when_no_server():
    ctx = zmq.asyncio.Context.instance()
    probe = ctx.socket(zmq.ROUTER)
    port = probe.bind_to_random_port("tcp://127.0.0.1")
    probe.close(linger=0)  # a port nobody listens on any more
    async with CommandClient(f"tcp://127.0.0.1:{port}") as client:
        with pytest.raises(CommandTimeout):
            await client.request("ping", timeout=0.2)


async def test_slow_handler_times_out_and_late_reply_is_not_mistaken():
    log: list = []
    async with CommandServer(handlers=handlers(log)) as server, CommandClient(server.endpoint) as client:
        with pytest.raises(CommandTimeout):
            await client.request("slow", timeout=0.1, delay=0.3)
        # the late reply to "slow" arrives while we wait for this one; it must be skipped
        assert await client.request("status", timeout=5) == {"n": 1}
        assert log == ["slow done"]


async def test_request_past_its_deadline_is_not_executed():
    log: list = []
    async with CommandServer(handlers=handlers(log)) as server:
        ctx = zmq.asyncio.Context.instance()
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(server.endpoint)
        try:
            req = {"id": "late", "cmd": "set_force", "args": {"force_N": 10.0}, "deadline": 1.0}
            await raw.send_multipart([b"", json.dumps(req).encode()])
            reply = json.loads((await asyncio.wait_for(raw.recv_multipart(), 5))[-1])
        finally:
            raw.close(linger=0)
    assert reply["ok"] is False and "deadline" in reply["error"] and log == []


async def test_non_finite_numbers_are_refused_before_any_handler_runs():
    log: list = []
    async with CommandServer(handlers=handlers(log)) as server, CommandClient(server.endpoint) as client:
        for value in [float("nan"), float("inf"), float("-inf")]:
            with pytest.raises(CommandRefused, match="non-finite"):
                await client.request("set_force", force_N=value)
        ctx = zmq.asyncio.Context.instance()
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(server.endpoint)
        try:
            for args in ['{"force_N": NaN}', '{"force_N": 1e999}', '{"force_N": [1, {"x": -Infinity}]}']:
                await raw.send_multipart([b"", f'{{"id": "r", "cmd": "set_force", "args": {args}}}'.encode()])
                reply = json.loads((await asyncio.wait_for(raw.recv_multipart(), 5))[-1])
                assert reply["ok"] is False and reply["refused"] is True, reply
            deep = "[" * 10_000 + "]" * 10_000
            await raw.send_multipart([b"", f'{{"cmd": "set_force", "args": {{"force_N": {deep}}}}}'.encode()])
            reply = json.loads((await asyncio.wait_for(raw.recv_multipart(), 5))[-1])
            assert reply["ok"] is False
        finally:
            raw.close(linger=0)
        assert log == []  # no handler ran
        assert await client.request("set_force", force_N=10.0) == {"accepted": 10.0}
    assert server.refused == 7 and log == [10.0]


async def test_a_handler_refuses_a_command_with_its_own_reason():
    applied: list = []

    async def set_force(force_N: float) -> dict:
        if force_N > 1000.0:
            raise CommandRefused(f"setpoint {force_N:g} N above the plan's limit 1000 N")
        applied.append(force_N)
        return {}

    async with CommandServer(handlers={"set_force": set_force}) as server, CommandClient(
        server.endpoint
    ) as client:
        with pytest.raises(CommandRefused, match="99999 N above the plan's limit"):
            await client.request("set_force", force_N=99_999.0)
        await client.request("set_force", force_N=500.0)
    assert applied == [500.0] and server.refused == 1
