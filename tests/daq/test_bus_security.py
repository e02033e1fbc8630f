"""CurveZMQ on real sockets: the right key receives, anything else receives nothing."""
import stat
import time

import numpy as np
import pytest
import zmq

from daq.bus import Publisher, Subscriber
from daq.security import CurveClient, CurveServer, KeyFileError, generate_keys, load_keypair, load_secret

QUIET_S = 1.5  # how long an unauthorized subscriber is watched while frames keep flowing
FORCE = dict(kind="force", rate_hz=1000.0, channels=["fz"], units=["N"])


@pytest.fixture
def keys(tmp_path):
    d = tmp_path / "keys"
    server = generate_keys(d, "bus")
    client = generate_keys(d / "clients", "recorder")
    stranger = generate_keys(tmp_path / "other", "stranger")
    return dict(dir=d, server=server, client=client, stranger=stranger)


def test_generate_keys_writes_a_zmq_auth_keypair(keys):
    public_path, secret_path = keys["server"]
    assert public_path.name == "bus.key" and secret_path.name == "bus.key_secret"
    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    public, secret = load_secret(secret_path)
    assert load_keypair(public_path) == (public, None)
    # an independent check of the pair: zmq derives the same public key from the secret
    assert zmq.curve_public(secret) == public
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        generate_keys(public_path.parent, "bus")
    new_public, _ = generate_keys(public_path.parent, "bus", overwrite=True)
    assert load_keypair(new_public)[0] != public


def test_bad_key_files_are_named(tmp_path, keys):
    with pytest.raises(KeyFileError, match="not found"):
        load_keypair(tmp_path / "nope.key")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("hello\n")
    with pytest.raises(KeyFileError, match="garbage.key"):
        load_keypair(garbage)
    with pytest.raises(KeyFileError, match="no secret"):
        load_secret(keys["server"][0])
    with pytest.raises(ValueError, match="plain file stem"):
        generate_keys(tmp_path, "../evil")


def receives(sub, pub, hang_guard_s=60.0):
    """Publish until ``sub`` gets a frame; True once it does (however slowly a loaded machine runs)."""
    end = time.monotonic() + hang_guard_s
    while time.monotonic() < end:
        pub.publish("fp/1", np.ones((1, 1)), **FORCE)
        if sub.recv(0.05) is not None:
            return True
    return False


def frames_received(sub, pub, seconds):
    """Publish continuously for ``seconds`` and count what ``sub`` gets."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pub.publish("fp/1", np.ones((1, 1)), **FORCE)
        if sub.recv(0.01) is not None:
            n += 1
    return n


def test_curve_endpoint_serves_only_subscribers_with_the_server_key(keys):
    server = CurveServer.from_files(keys["server"][1])
    # CurveZMQ on loopback proves the mechanism without opening a port to the network
    with Publisher("tcp://127.0.0.1:*", curve=server) as pub:
        good = Subscriber(pub.endpoint, ["fp/1"], curve=CurveClient.from_files(keys["server"][0]))
        plain = Subscriber(pub.endpoint, ["fp/1"])
        wrong = Subscriber(pub.endpoint, ["fp/1"], curve=CurveClient.from_files(keys["stranger"][0]))
        with good, plain, wrong:
            assert pub.wait_for_subscribers(1, 10.0)
            assert good.wait_connected(10.0)
            assert receives(good, pub)
            assert frames_received(plain, pub, QUIET_S) == 0
            assert frames_received(wrong, pub, QUIET_S) == 0
            assert pub.subscribers == 1  # the two others never completed a handshake
            for sub in (plain, wrong):
                assert sub.missing() == ["fp/1"] and sub.malformed == 0
                assert not sub.wait_connected(0.1)


def test_authorized_clients_only(keys):
    server = CurveServer.from_files(keys["server"][1], authorized_dir=keys["dir"] / "clients")
    assert len(server.authorized_clients) == 1
    with Publisher("tcp://127.0.0.1:*", curve=server) as pub:
        member = Subscriber(pub.endpoint, ["fp/1"],
                            curve=CurveClient.from_files(keys["server"][0], keys["client"][1]))
        # knows the server key but its own key is not authorized
        outsider = Subscriber(pub.endpoint, ["fp/1"], curve=CurveClient.ephemeral(server.public_key))
        with member, outsider:
            assert pub.wait_for_subscribers(1, 10.0) and member.wait_connected(10.0)
            assert receives(member, pub)
            assert frames_received(outsider, pub, QUIET_S) == 0
            assert pub.subscribers == 1


def test_all_interfaces_bind_is_allowed_with_keys(keys):
    server = CurveServer.from_files(keys["server"][1])
    with Publisher("tcp://0.0.0.0:*", curve=server) as pub:
        port = pub.endpoint.rsplit(":", 1)[1]
        with Subscriber(f"tcp://127.0.0.1:{port}", ["fp/1"], curve=CurveClient.from_files(keys["server"][0])) as sub:
            assert pub.wait_for_subscribers(1, 10.0) and sub.wait_connected(10.0)
            assert receives(sub, pub)


def loopback_host_name():
    """This host's name if it resolves to a loopback address, else None.

    Such a name is "remote-style": the bus cannot prove it is loopback, so it demands keys, yet the
    traffic never leaves the machine (tests send nothing to any other address).
    """
    import ipaddress
    import socket

    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return None
    return name if infos and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos) else None


def test_remote_style_endpoint_needs_keys_and_reports_no_latency(keys):
    """Connect through a host name, as a second lab PC would: refused without keys, served with them,
    and no latency figures (monotonic clocks of two hosts are not comparable)."""
    from daq.bus import EndpointError

    server = CurveServer.from_files(keys["server"][1])
    with Publisher("tcp://0.0.0.0:*", curve=server) as pub:
        port = pub.endpoint.rsplit(":", 1)[1]
        with pytest.raises(EndpointError, match="without CurveZMQ keys"):
            Subscriber(f"tcp://lab-pc-2.invalid:{port}", ["fp/1"])  # refused before any connection
        name = loopback_host_name()
        remote = f"tcp://{name or '127.0.0.1'}:{port}"
        if name is not None:
            with pytest.raises(EndpointError, match="without CurveZMQ keys"):
                Subscriber(remote, ["fp/1"])
        with Subscriber(remote, ["fp/1"], curve=CurveClient.from_files(keys["server"][0])) as sub:
            assert pub.wait_for_subscribers(1, 10.0) and sub.wait_connected(10.0)
            assert receives(sub, pub)
            latency = sub.stats()["fp/1"].latency_p50_s
            assert (latency is None) if name is not None else (latency > 0)
