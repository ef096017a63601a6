"""The per-peer connection cap, counted once for every listener of the Edge."""

from __future__ import annotations

import logging

import pytest

from iop_site.connection_limits import PeerConnections, raw_response


def open_until_refused(peers: PeerConnections, host: str, tries: int = 10) -> int:
    opened = 0
    for _ in range(tries):
        if peers.refuses(host):
            break
        peers.opened(host)
        opened += 1
    return opened


def test_a_peer_gets_its_cap_and_no_more_until_one_closes() -> None:
    peers = PeerConnections(limit=3, cap_loopback=False)

    assert open_until_refused(peers, "203.0.113.7") == 3
    assert not peers.refuses("203.0.113.8")  # another peer has its own count
    peers.closed("203.0.113.7")
    assert open_until_refused(peers, "203.0.113.7") == 1


def test_a_refused_peer_is_warned_about_once_until_it_goes_below_the_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peers = PeerConnections(limit=1, cap_loopback=False)
    peers.opened("203.0.113.7")

    with caplog.at_level(logging.WARNING, logger="edge.connections"):
        assert peers.refuses("203.0.113.7") and peers.refuses("203.0.113.7")
        peers.closed("203.0.113.7")
        peers.opened("203.0.113.7")
        assert peers.refuses("203.0.113.7")

    warnings = [r.getMessage() for r in caplog.records]
    assert (
        warnings
        == ["203.0.113.7 has 1 connections open: refusing more (IOP_MAX_CONNECTIONS_PER_PEER)"] * 2
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_loopback_is_capped_only_when_asked(host: str) -> None:
    assert open_until_refused(PeerConnections(limit=2, cap_loopback=False), host) == 10
    assert open_until_refused(PeerConnections(limit=2, cap_loopback=True), host) == 2


def test_no_cap_at_zero_and_closed_peers_are_forgotten() -> None:
    peers = PeerConnections(limit=0, cap_loopback=True)

    assert open_until_refused(peers, "203.0.113.7") == 10
    for _ in range(10):
        peers.closed("203.0.113.7")
    assert peers.open == {}


def test_a_raw_answer_carries_its_length_and_closes() -> None:
    assert raw_response(413, b"Request Entity Too Large", b'{"a": 1}') == (
        b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\n"
        b"Content-Length: 8\r\nConnection: close\r\n\r\n"
        b'{"a": 1}'
    )
