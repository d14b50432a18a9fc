"""A serial line (``socket://``) whose device drops the connection in the middle of a query: the driver's
error says the connection was lost, as the Modbus and SCPI drivers' errors do (before, it passed pyserial's
words on: ``'ID?': read failed: [Errno 104] Connection reset by peer``), and the next query connects again."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from drivers.errors import DeviceConnectionError
from drivers.serial_transport import SerialLine


def _device(server: socket.socket, plan: list[str]) -> None:
    """Accept one connection per step of ``plan`` and read its command; then "answer" it, "close" the
    connection (FIN) or "reset" it (RST: a device that restarts, a link that drops)."""
    for step in plan:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            if step == "answer":
                conn.sendall(b"ID laser sensor\r\n")
                conn.recv(64)  # until the driver closes
            elif step == "reset":  # SO_LINGER 0: the close sends a reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize("drop", ["reset", "close"])
async def test_a_device_dropping_the_connection_mid_query_is_a_lost_connection_then_one_reconnects(drop):
    with socket.create_server(("127.0.0.1", 0)) as server:
        device = threading.Thread(target=_device, args=(server, [drop, "answer"]), daemon=True)
        device.start()
        line = SerialLine("B0_vertical", {"url": f"socket://127.0.0.1:{server.getsockname()[1]}",
                                          "timeout": 5.0, "connect_timeout": 5.0})
        await line.connect()
        with pytest.raises(DeviceConnectionError) as lost:
            await line.query("ID?")
        assert "connection lost" in str(lost.value) and "'ID?'" in str(lost.value), str(lost.value)
        assert not line.connected
        assert await line.query("ID?") == "ID laser sensor"  # connects again on its own
        line.close()
        device.join(10)
        assert not device.is_alive()
