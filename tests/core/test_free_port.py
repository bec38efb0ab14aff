"""free_port() picks loopback ports outside the kernel's ephemeral range (no Redis)."""

from __future__ import annotations

import socket

import pytest

from rsjobs import server
from tools.topology import cluster_args, cluster_port


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    lo, _ = server._ephemeral_range()
    ports = {server.free_port() for _ in range(20)}
    for port in ports:
        if lo > 12000:
            assert 10000 <= port < lo  # never the local end of an outgoing connection
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # and free


def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "_ephemeral_range", lambda: (1024, 65535))
    with socket.socket() as s:
        s.bind(("127.0.0.1", server.free_port()))


def test_a_server_started_on_a_port_another_redis_holds_is_not_taken_for_ours(
    tmp_path: object,
) -> None:
    """The other Redis answers PING on that port; ours exits (address in use): the start
    fails clearly instead of handing out a URL to someone else's server."""
    import pathlib

    from rsjobs.errors import RedisUnavailable

    base = pathlib.Path(str(tmp_path))
    for d in ("a", "b"):
        (base / d).mkdir()
    port = server.free_port()
    first = server.EmbeddedRedis(port=port, data_dir=str(base / "a")).start()
    try:
        with pytest.raises(RedisUnavailable):
            server.EmbeddedRedis(port=port, data_dir=str(base / "b")).start(timeout=5)
    finally:
        first.stop()


def test_a_port_it_picked_and_lost_before_the_bind_moves_to_another(tmp_path: object) -> None:
    """A port picked free and then taken by someone else before redis-server bound it (two
    suites starting servers side by side): the first start moves to a new port; a restart
    keeps the one it has."""
    import pathlib

    base = pathlib.Path(str(tmp_path))
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    redis = server.EmbeddedRedis(data_dir=str(base))
    redis.port = taken  # as if the port had been taken between the pick and the bind
    try:
        redis.start(timeout=5)
        assert redis.port != taken and redis.ping()
        moved = redis.port
        redis.restart()
        assert redis.port == moved and redis.ping()
    finally:
        holder.close()
        redis.cleanup()


@pytest.mark.integration  # (a real server)
def test_a_cluster_node_whose_bus_port_is_taken_moves_to_another_pair() -> None:
    """A cluster node listens on its port and its bus port (+10000): when the bus port was
    taken between the pick and the start, the first start moves to a new pair (the server
    exits with "Address already in use"), as a plain server's does."""
    port = cluster_port()
    picked: list[int] = []

    def again() -> int:
        picked.append(cluster_port())
        return picked[-1]

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port + 10000))
        blocker.listen()
        node = server.EmbeddedRedis(port, extra_args=cluster_args(5000), repick=again)
        try:
            node.start()
            assert picked and node.port == picked[-1] != port and node.ping()
        finally:
            node.stop()
            node.cleanup()
