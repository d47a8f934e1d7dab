"""More than one fleet: regions slice every leased identity space, a fleet knows its ID, peer fleets
that overlap stop issuing, and the Python client refuses servers of overlapping fleets.

The fleet runs use real ``idmint serve`` processes: on the embedded backend with separate state directories (two
hosts), and on two etcd namespaces of the session's real etcd (two etcd clusters).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from idmint_client import Client, FleetOverlapError

from app.errors import ConfigError
from app.main import create_app
from app.schemes import schemes
from app.schemes.pool import region_of, region_slice
from app.schemes.snowflake import NAMED_LAYOUTS
from app.settings import Settings, load_settings
from app.storage.draw import draw
from app.storage.embedded import open_embedded
from tests.helpers import make_settings
from tests.support.order import soak_size
from tests.support.server import Server, free_port, until_available

SLICED = tuple(name for name, s in schemes().items() if s.uniqueness == "identity")
"""eight-byte, hlc-ulid, siq, snowflake: uniqueness rests on a leased identity that regions slice."""
RANDOM = tuple(name for name in schemes() if name not in SLICED)


# -- the slice arithmetic ------------------------------------------------------------------------------------------
@given(low=st.integers(0, 1000), size=st.integers(1, 70_000), regions=st.integers(1, 256))
def test_region_slices_are_disjoint_contiguous_and_cover_the_space(low: int, size: int, regions: int) -> None:
    space = (low, low + size - 1)
    slices = [region_slice(space, r, regions) for r in range(regions)]
    assert slices[0][0] == low and slices[-1][1] == space[1]
    for (_, last), (first, _) in zip(slices, slices[1:], strict=False):
        assert first == last + 1
    sizes = [last - first + 1 for first, last in slices]
    assert max(sizes) - min(sizes) <= 1
    for probe in {space[0], space[1], low + size // 2, low + size // 3}:
        r = region_of(space, regions, probe)
        assert r is not None and slices[r][0] <= probe <= slices[r][1]
    assert region_of(space, regions, space[1] + 1) is None


def test_draws_start_at_a_random_identity_not_the_lowest() -> None:
    pool = schemes()["siq"].identity_pool(Settings())
    assert pool is not None
    firsts = {next(draw(pool)) for _ in range(40)}
    assert len(firsts) > 10  # lowest-first would give {0}
    order = list(draw(pool, held={firsts.pop()}))
    assert sorted(order) == sorted(set(order)) and len(order) == 255  # every free identity, once


# -- settings: a slice is checked at start-up ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"regions": 2, "region": 2}, r"IDMINT_REGION must be in 0\.\.1 \(IDMINT_REGIONS=2\), got 2"),
        (
            {"regions": 2, "region": 1, "eight_byte_pool": "0-99"},
            r"eight-byte: IDMINT_EIGHT_BYTE_POOL=0-99 lies outside region 1 of 2 \(eight-byte generator_ids "
            r"1024\.\.2047\)",
        ),
        (
            {"regions": 2, "region": 0, "siq_shard": 200},
            r"siq: IDMINT_SIQ_SHARD=200 lies outside region 0 of 2 \(siq shards 0\.\.127\)",
        ),
        (
            {"regions": 256, "region": 3, "eight_byte_generators": 9},
            r"eight-byte: IDMINT_REGIONS=256 leaves region 3 a slice of 8 generator_id\(s\) \(0\.\.2047 split 256 "
            r"ways\), fewer than the 9 this node claims",
        ),
        (
            {"regions": 4, "region": 0, "snowflake_layout": "custom:0:1:41/1/21"},
            r"snowflake: IDMINT_REGIONS=4 leaves region 0 a slice of 0 worker_id\(s\) \(0\.\.1 split 4 ways\)",
        ),
    ],
)
def test_a_slice_that_cannot_hold_the_settings_fails_start_up_naming_the_numbers(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        create_app(load_settings(state_dir=tmp_path, **settings))


def test_schemes_and_fleet_show_regions_and_decode_names_the_region(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, regions=4, region=2, eight_byte_generators=2)
    with TestClient(create_app(settings)) as client:
        catalogue = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
        eight = catalogue["eight-byte"]
        assert eight["uniqueness"]["rests_on"] == "leased identity"
        assert eight["identity"] | {"held": None} == {
            "kind": "generator_id",
            "minimum": 0,
            "maximum": 2047,
            "region": 2,
            "regions": 4,
            "slice": [1024, 1535],
            "size": 512,
            "held": None,
        }
        assert eight["identity"]["held"] == 2
        assert all(1024 <= g <= 1535 for g in eight["node"]["identities"])
        assert catalogue["siq"]["identity"]["slice"] == [128, 191]
        assert catalogue["hlc-ulid"]["identity"]["slice"] == [32768, 49151]
        assert catalogue["snowflake"]["identity"]["slice"] == [512, 767]
        for name in RANDOM:
            assert catalogue[name]["uniqueness"]["rests_on"] == "random bits", name
            assert catalogue[name]["uniqueness"]["note"], name
        assert catalogue["muid"]["identity"]["region"] is None  # drawn at random from the whole space

        fleet = client.get("/v1/fleet").json()
        assert fleet["region"] == 2 and fleet["regions"] == 4 and fleet["backend"] == "embedded"
        assert len(fleet["fleet_id"]) == 36 and set(fleet["schemes"]) == set(SLICED)
        assert fleet["schemes"]["eight-byte"] == {
            "kind": "generator_id",
            "slice": [1024, 1535],
            "pool": [1024, 1535],
            "group": "0",
            "group_in_id": True,
        }
        # The fleet ID is written once in the state directory: a restart keeps it.
        assert (tmp_path / "fleet.json").read_text().count(fleet["fleet_id"]) == 1

        issued = client.get("/v1/ids/eight-byte", params={"format": "hex"}).json()["ids"][0]
        decoded = client.get(f"/v1/decode/eight-byte/{issued}").json()
        assert decoded["region"] == {
            "kind": "generator_id",
            "identity": decoded["fields"]["generator_id"],
            "region": 2,
            "regions": 4,
        }
        wiji = client.get("/v1/ids/wiji").json()["ids"][0]
        assert client.get(f"/v1/decode/wiji/{wiji}").json()["region"] is None
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/fleet").json()["fleet_id"] == fleet["fleet_id"]


def test_an_embedded_fleet_reachable_from_other_hosts_with_one_region_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(create_app(make_settings(tmp_path, host="0.0.0.0"))) as client:
        metrics = client.get("/metrics").text
    assert 'idmint_region_configured{backend="embedded",exposed="true"} 0.0' in metrics
    assert "claims the same identities and issues the same IDs" in caplog.text
    caplog.clear()
    with TestClient(create_app(make_settings(tmp_path / "b", host="0.0.0.0", regions=2))) as client:
        metrics = client.get("/metrics").text
    assert 'idmint_region_configured{backend="embedded",exposed="true"} 1.0' in metrics
    assert "claims the same identities" not in caplog.text


# -- real processes ------------------------------------------------------------------------------------------------


def readyz_when(node: Server, scheme: str, words: str, timeout: float = 60.0) -> dict[str, Any]:
    """``/readyz`` of ``node`` once ``scheme``'s reason holds ``words`` (it must be not ready by then). Waits for
    the node to listen first: one started beside another may not have bound its port yet."""
    node.wait("/healthz")
    deadline = time.monotonic() + timeout
    while True:
        ready = node.get("/readyz")
        if words in ready.json()["schemes"][scheme].get("reason", ""):
            assert ready.status_code == 503
            return ready.json()
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.1)


@contextlib.contextmanager
def peer_pair(tmp_path: Path, envs: list[dict[str, str]]) -> Iterator[list[Server]]:
    """Two ``idmint serve`` processes started together, each listing the other in IDMINT_PEER_FLEETS."""
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    nodes = [Server(tmp_path, {**env, "IDMINT_PEER_FLEETS": urls[1 - i]}, port=ports[i]) for i, env in enumerate(envs)]
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def stream(url: str, scheme: str, count: int) -> list[bytes]:
    """``count`` IDs of ``scheme`` streamed from ``url`` (the whole stream must arrive; a 503 + Retry-After before
    it starts is asked again)."""
    r = until_available(lambda: httpx.get(f"{url}/v1/ids/{scheme}/stream", params={"count": count}, timeout=300))
    assert r.status_code == 200, r.text
    body = r.content
    lines = body.split(b"\n")
    assert lines[-1] == b"" and len(lines) == count + 1, (url, scheme, len(lines) - 1)
    return lines[:-1]


def duplicates(batches: list[list[bytes]]) -> int:
    seen: set[bytes] = set()
    total = 0
    for batch in batches:
        seen.update(batch)
        total += len(batch)
    return total - len(seen)


def stream_everywhere(urls: list[str], scheme: str, count: int) -> list[list[bytes]]:
    """Every replica streams ``count`` IDs of ``scheme`` at the same time."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(urls)) as pool:
        return list(pool.map(lambda url: stream(url, scheme, count), urls))


@contextlib.contextmanager
def fleet_of(tmp_path: Path, size: int, env: dict[str, str]) -> Iterator[list[Server]]:
    nodes = [Server(tmp_path, env) for _ in range(size)]
    try:
        for node in nodes:
            node.wait("/readyz")
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.mark.integration
def test_two_embedded_hosts_in_two_regions_issue_no_duplicates(tmp_path: Path) -> None:
    env = {"IDMINT_REGIONS": "2", "IDMINT_EIGHT_BYTE_GENERATORS": "4", "IDMINT_SNOWFLAKE_WORKERS": "4"}
    # Each host its own state directory (Server's default), each the other's peer: different regions, so ready.
    with peer_pair(tmp_path, [{**env, "IDMINT_REGION": str(i)} for i in range(2)]) as nodes:
        for node in nodes:
            node.wait("/readyz")
        fleets = [node.get("/v1/fleet").json() for node in nodes]
        assert fleets[0]["fleet_id"] != fleets[1]["fleet_id"]
        for scheme in SLICED:
            got = stream_everywhere([n.url for n in nodes], scheme, 200_000)
            assert duplicates(got) == 0, scheme


@pytest.mark.integration
def test_peer_fleets_in_one_region_never_issue_the_overlapping_schemes(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    env = {"IDMINT_PEER_CHECK_INTERVAL": "60"}  # the first round waits up to this long for a peer starting too
    issued: dict[str, int] = {}
    stop = threading.Event()

    def hammer() -> None:  # asks both servers for every guarded scheme from before they start
        with httpx.Client(timeout=5) as http:
            while not stop.is_set():
                for url in urls:
                    for scheme in SLICED:
                        with contextlib.suppress(httpx.TransportError):
                            if http.get(f"{url}/v1/ids/{scheme}").status_code == 200:
                                issued[scheme] = issued.get(scheme, 0) + 1

    worker = threading.Thread(target=hammer)
    worker.start()
    nodes: list[Server] = []
    try:
        nodes = [Server(tmp_path, {**env, "IDMINT_PEER_FLEETS": urls[1 - i]}, port=ports[i]) for i in range(2)]
        for node, peer in zip(nodes, reversed(urls), strict=True):
            ready = node.wait("/readyz", status=503)
            deadline = time.monotonic() + 60
            while not all(peer in ready.json()["schemes"][s].get("reason", "") for s in SLICED):
                assert time.monotonic() < deadline, ready.text
                time.sleep(0.1)
                ready = node.get("/readyz")
            for scheme in SLICED:
                reason = ready.json()["schemes"][scheme]["reason"]
                assert "overlap" in reason and "give each fleet its own IDMINT_REGION" in reason, reason
                refused = node.get(f"/v1/ids/{scheme}")
                assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
            for scheme in RANDOM:  # random bits: not guarded, still issuing
                assert ready.json()["schemes"][scheme]["ready"], scheme
                assert node.get(f"/v1/ids/{scheme}").status_code == 200
    finally:
        stop.set()
        worker.join()
        for node in nodes:
            node.stop()
    assert issued == {}, f"IDs issued while two fleets overlapped: {issued}"


@pytest.mark.integration
def test_the_client_refuses_two_overlapping_fleets_and_serves_one_fleet_of_two_servers(tmp_path: Path) -> None:
    two_hosts = [Server(tmp_path, {}), Server(tmp_path, {})]  # separate state dirs, one region: overlap
    shared = {"IDMINT_STATE_DIR": str(tmp_path / "shared")}
    one_fleet = [Server(tmp_path, shared), Server(tmp_path, shared)]
    try:
        for node in two_hosts + one_fleet:
            node.wait("/readyz")
        with Client([n.url for n in two_hosts]) as client, pytest.raises(FleetOverlapError) as info:
            client.new_id("eight-byte")
        message = str(info.value)
        assert two_hosts[0].url in message and two_hosts[1].url in message and "IDMINT_REGION" in message
        assert info.value.scheme in SLICED
        with Client([n.url for n in one_fleet]) as client:
            ids = client.ids("eight-byte", 5_000) + client.ids("eight-byte", 5_000)
            assert len(set(ids)) == 10_000
            assert len(set(client.ids("snowflake", 2_000))) == 2_000
    finally:
        for node in two_hosts + one_fleet:
            node.stop()


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_async_client_refuses_two_overlapping_fleets(tmp_path: Path) -> None:
    from idmint_client import AsyncClient

    nodes = [Server(tmp_path, {}), Server(tmp_path, {})]
    try:
        for node in nodes:
            node.wait("/readyz")
        async with AsyncClient([n.url for n in nodes]) as client:
            with pytest.raises(FleetOverlapError):
                await client.ids("siq", 10)
    finally:
        for node in nodes:
            node.stop()


# -- two etcd fleets x 3 replicas ----------------------------------------------------------------------------------
FLEET_ENV = {
    "IDMINT_ETCD_LEASE_TTL": "5",
    "IDMINT_ETCD_SAFETY_MARGIN": "1",
    "IDMINT_EIGHT_BYTE_GENERATORS": "8",
    "IDMINT_SNOWFLAKE_WORKERS": "16",
}
PER_REPLICA = soak_size(200_000, 50_000)
"""IDs each of the six replicas streams per scheme in the two-region hunt (a soak: 200,000 in ``scripts/soak.sh``,
1.2 million per scheme over both fleets). Two fleets sharing an identity repeat IDs as soon as their streams
overlap in time: test_two_etcd_fleets_without_regions_do_repeat_ids finds repeats with sonyflake's slow clock."""


def two_etcd_fleets(tmp_path: Path, etcd_server: Any, namespace: str, **env: str) -> list[dict[str, str]]:
    return [
        {
            **FLEET_ENV,
            "IDMINT_ETCD_ENDPOINTS": etcd_server.endpoint,
            "IDMINT_ETCD_NAMESPACE": f"{namespace}{name}/",
            **env,
        }
        for name in ("east", "west")
    ]


@pytest.mark.soak
@pytest.mark.parametrize("layout", list(NAMED_LAYOUTS))
def test_two_etcd_fleets_in_two_regions_never_repeat_an_id(
    tmp_path: Path, etcd_server: Any, etcd_namespace: str, layout: str
) -> None:
    """One test per snowflake layout (each its own six servers, so pytest-xdist can run them side by side); the
    first layout's fleets also stream every other sliced scheme and muid."""
    spec = NAMED_LAYOUTS[layout]
    workers = str(min(16, (spec.worker_max + 1) // 2 // 3))  # three replicas in half the worker IDs (js53: 5)
    envs = [
        {
            **env,
            "IDMINT_REGIONS": "2",
            "IDMINT_REGION": str(region),
            "IDMINT_SNOWFLAKE_LAYOUT": layout,
            "IDMINT_SNOWFLAKE_WORKERS": workers,
        }
        for region, env in enumerate(two_etcd_fleets(tmp_path, etcd_server, etcd_namespace))
    ]
    with fleet_of(tmp_path, 3, envs[0]) as east, fleet_of(tmp_path, 3, envs[1]) as west:
        assert east[0].get("/v1/fleet").json()["fleet_id"] != west[0].get("/v1/fleet").json()["fleet_id"]
        urls = [n.url for n in east + west]
        first = layout == next(iter(NAMED_LAYOUTS))
        for scheme in (*SLICED, "muid") if first else ("snowflake",):  # muid: random medallions
            got = stream_everywhere(urls, scheme, PER_REPLICA)
            assert duplicates(got) == 0, (scheme, layout)


def test_two_etcd_fleets_without_regions_do_repeat_ids(tmp_path: Path, etcd_server: Any, etcd_namespace: str) -> None:
    """The hole regions close, kept visible: two fleets on one slice (here pinned to the same three identities, as
    lowest-first claiming did for every unconfigured fleet) issue the same IDs."""
    envs = two_etcd_fleets(
        tmp_path,
        etcd_server,
        etcd_namespace,
        IDMINT_EIGHT_BYTE_GENERATORS="1",
        IDMINT_EIGHT_BYTE_POOL="0-2",
        IDMINT_SNOWFLAKE_WORKERS="1",
        IDMINT_SNOWFLAKE_POOL="0-2",
        IDMINT_SNOWFLAKE_LAYOUT="sonyflake",  # 25,600 IDs/s per worker ID: the six streams overlap in time
    )
    with fleet_of(tmp_path, 3, envs[0]) as east, fleet_of(tmp_path, 3, envs[1]) as west:
        urls = [n.url for n in east + west]
        for scheme in ("eight-byte", "snowflake"):
            got = stream_everywhere(urls, scheme, 100_000)
            assert duplicates(got) > 0, scheme


# -- review findings: copied fleet IDs, layouts, static medallions, peers that answer badly ----------------------
def test_overlap_rule_is_one_on_the_server_and_in_the_client() -> None:
    from idmint_client._fleet import overlap as client_overlap

    from app.issuing.fleet import overlap

    twitter = {"pool": [0, 511], "group": "twitter", "group_in_id": False}
    cases = [
        (twitter, {**twitter, "pool": [512, 1023]}, False),  # one layout, disjoint regions
        (twitter, {**twitter, "pool": [500, 600]}, True),
        # two layouts cannot be compared by worker numbers (682 << 12 == 2728 << 10): an overlap
        ({**twitter, "pool": [682, 682]}, {"pool": [2728, 2728], "group": "custom-x", "group_in_id": False}, True),
        # eight-byte on two cluster IDs: the cluster ID is in every ID
        (
            {"pool": [0, 9], "group": "0", "group_in_id": True},
            {"pool": [0, 9], "group": "1", "group_in_id": True},
            False,
        ),
    ]
    for ours, theirs, expected in cases:
        assert overlap(ours, theirs) is expected and client_overlap(ours, theirs) is expected, (ours, theirs)


@pytest.mark.parametrize(
    "doc",
    [
        {"fleet_id": "not-a-uuid", "region": 0, "regions": 1, "schemes": {}},
        {"fleet_id": str(uuid.uuid4()), "region": "0", "regions": 1, "schemes": {}},
        {"fleet_id": str(uuid.uuid4()), "region": 0, "regions": 1, "schemes": {"siq": {"pool": "0-1023"}}},
        {"fleet_id": str(uuid.uuid4()), "region": 0, "regions": 1, "schemes": {"siq": {"group": "", "group_in_id": 1}}},
        {
            "fleet_id": str(uuid.uuid4()),
            "region": 0,
            "regions": 1,
            "schemes": {"siq": {"pool": [0, True], "group": "", "group_in_id": False}},
        },
        [],
        None,
    ],
)
def test_a_malformed_peer_document_decides_nothing(doc: object) -> None:
    from app.issuing.fleet import valid_document

    assert valid_document(doc) is None


def test_peer_urls_with_credentials_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="peer_fleets must not carry a user or password"):
        load_settings(state_dir=tmp_path, peer_fleets="http://idmint:s3cret@peer:8000")


def test_a_damaged_fleet_file_is_named_and_the_server_still_starts(tmp_path: Path) -> None:
    (tmp_path / "fleet.json").write_text("")
    with TestClient(create_app(make_settings(tmp_path))) as client:
        assert client.get("/v1/fleet").json()["fleet_id"] is None
        assert client.get("/v1/ids/wiji").status_code == 200


@pytest.mark.anyio
async def test_a_peer_that_drips_its_answer_is_given_up_within_the_timeout(tmp_path: Path) -> None:
    from app.issuing.fleet import PEER_TIMEOUT_S, FleetGuard

    handlers: list[asyncio.Task[None] | None] = []

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
            for _ in range(60):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.5)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(drip, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peer = f"http://127.0.0.1:{port}"
    settings = make_settings(tmp_path, peer_fleets=peer)
    guard = FleetGuard(settings, open_embedded(settings, time.time_ns), {}, lambda *_: None)
    try:
        async with httpx.AsyncClient() as client:
            started = time.monotonic()
            assert await guard._ask(client, peer, str(uuid.uuid4())) is None
            assert time.monotonic() - started < PEER_TIMEOUT_S + 1.5
        assert guard.peer_status()[peer]["reachable"] is False
    finally:
        for task in handlers:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in handlers if t is not None), return_exceptions=True)
        server.close()
        await server.wait_closed()


@pytest.mark.integration
def test_a_copied_state_directory_is_another_fleet_to_peers_and_to_the_client(tmp_path: Path) -> None:
    original = tmp_path / "original"
    with TestClient(create_app(make_settings(original))):
        pass  # writes fleet.json, marks and locks
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    with peer_pair(tmp_path, [{"IDMINT_STATE_DIR": str(state)} for state in (original, copy)]) as nodes:
        fleets = []
        for node in nodes:
            node.wait("/healthz")
            fleets.append(node.get("/v1/fleet").json())
        assert fleets[0]["fleet_id"] == fleets[1]["fleet_id"]  # copied along
        assert fleets[0]["member"] != fleets[1]["member"]
        assert nodes[0].get(f"/v1/fleet/members/{fleets[1]['member']}").json()["live"] is False
        readyz_when(nodes[0], "snowflake", "copied state directory")
        # The copy is also a store whose history changed (another directory): that reason comes first there.
        readyz_when(nodes[1], "snowflake", "storage went back in time or was replaced (directory_inode")
        for node in nodes:
            assert node.get("/v1/ids/snowflake").status_code == 503
        with Client([n.url for n in nodes]) as client, pytest.raises(FleetOverlapError):
            client.new_id("wiji")


@pytest.mark.integration
def test_a_static_medallion_shared_by_two_fleets_is_an_overlap(tmp_path: Path) -> None:
    env = {"IDMINT_REGIONS": "2", "IDMINT_MUID_MEDALLION": str(0x1ABCDEF0123)}
    with peer_pair(tmp_path, [{**env, "IDMINT_REGION": str(i)} for i in range(2)]) as nodes:
        for node in nodes:
            node.wait("/healthz")
            assert node.get("/v1/fleet").json()["schemes"]["muid"]["pool"] == [0x1ABCDEF0123, 0x1ABCDEF0123]
            ready = readyz_when(node, "muid", "overlap")
            assert ready["schemes"]["eight-byte"]["ready"]  # regions keep the other schemes apart


def test_the_client_reads_a_404_fleet_again_after_a_while() -> None:
    from idmint_client._fleet import NOT_SERVED_RECHECK_S, FleetCheck

    now = [0.0]
    check = FleetCheck(clock=lambda: now[0])
    check.learn("http://a", httpx.Response(404), lambda *_: None)
    assert check.unread(["http://a"]) == []
    now[0] += NOT_SERVED_RECHECK_S
    assert check.unread(["http://a"]) == ["http://a"]


# -- the peer guard fails closed until it knows ------------------------------------------------
async def _answering(body: bytes, status: str = "200 OK") -> tuple[asyncio.Server, str]:
    """A loopback HTTP server answering every request with ``status`` and ``body`` (a peer that is not idmint)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("peer_kind", "words"),
    [("closed", "cannot connect"), ("404", "answered HTTP 404"), ("not-fleet", "not a fleet document")],
)
async def test_a_peer_that_never_answers_keeps_the_guarded_schemes_not_ready_naming_why(
    tmp_path: Path, peer_kind: str, words: str
) -> None:
    """A peer URL mistyped (a closed port, a wrong path, another service) used to turn the guard off after the first
    round: the issue's two fleets with each other's URL mistyped issued the same snowflakes. Now it keeps them
    not ready, naming the peer and what was wrong, and idmint_peer_fleet_up{peer} says 0."""
    from app.issuing.fleet import FleetGuard
    from app.metrics import Metrics

    server = None
    if peer_kind == "closed":
        peer = f"http://127.0.0.1:{free_port()}"
    else:
        server, peer = (
            await _answering(b'{"detail": "Not Found"}', "404 Not Found")
            if peer_kind == "404"
            else (await _answering(b'{"status": "ok"}'))
        )
    settings = make_settings(tmp_path, peer_fleets=peer, peer_check_interval=0.5)
    storage = open_embedded(settings, time.time_ns)
    pools = {"snowflake": schemes()["snowflake"].identity_pool(settings)}
    blocked: dict[str, str | None] = {}
    changed = asyncio.Event()

    def block(scheme: str, why: str | None) -> None:
        blocked[scheme] = why
        changed.set()

    metrics = Metrics(list(schemes()), "0")
    guard = FleetGuard(settings, storage, pools, block, metrics)
    task = asyncio.create_task(guard.run())
    try:
        with anyio.fail_after(60):
            while "never answered" not in (blocked.get("snowflake") or ""):
                changed.clear()
                await changed.wait()
        reason = blocked["snowflake"] or ""
        assert peer in reason and words in reason, reason
        assert guard.peer_status()[peer]["known"] is False and words in guard.peer_status()[peer]["problem"]
        assert metrics.registry.get_sample_value("idmint_peer_fleet_up", {"peer": peer}) == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if server is not None:
            server.close()
            await server.wait_closed()


@pytest.mark.integration
def test_a_peer_known_once_is_judged_by_its_last_document_while_down_and_after_a_restart(tmp_path: Path) -> None:
    """Region 0 lists region 1's server: ready once it answered; ready still while region 1 is down (its
    remembered ranges do not overlap), and after a restart of region 0 with region 1 still down. A fresh fleet
    (another state directory) that never read region 1 is not ready."""
    peer_port = free_port()
    peer_url = f"http://127.0.0.1:{peer_port}"
    peer = Server(tmp_path, {"IDMINT_REGIONS": "2", "IDMINT_REGION": "1"}, port=peer_port)
    env = {
        "IDMINT_REGIONS": "2",
        "IDMINT_REGION": "0",
        "IDMINT_PEER_FLEETS": peer_url,
        "IDMINT_PEER_CHECK_INTERVAL": "0.5",
        "IDMINT_STATE_DIR": str(tmp_path / "region-0"),
    }
    try:
        peer.wait("/readyz")
        node = Server(tmp_path, env)
        node.wait("/readyz")
        assert node.get("/v1/fleet").json()["peers"][peer_url]["known"] is True
    finally:
        peer.stop()
    try:
        until_down = time.monotonic() + 60
        while node.get("/v1/fleet").json()["peers"][peer_url]["reachable"] is not False:
            assert time.monotonic() < until_down
            time.sleep(0.1)
        assert node.get("/readyz").status_code == 200
        assert 'idmint_peer_fleet_up{peer="' + peer_url + '"} 0.0' in node.metrics_text()
        assert node.get("/v1/ids/snowflake").status_code == 200
    finally:
        node.stop()
    again = Server(tmp_path, env)
    fresh = Server(tmp_path, {**env, "IDMINT_STATE_DIR": str(tmp_path / "fresh")})
    try:
        again.wait("/readyz")  # remembered across the restart
        assert again.get("/v1/ids/snowflake").status_code == 200
        ready = readyz_when(fresh, "snowflake", "never answered")
        assert peer_url in ready["schemes"]["snowflake"]["reason"]
        assert fresh.get("/v1/ids/snowflake").status_code == 503
        assert fresh.get("/v1/ids/wiji").status_code == 200  # random bits: not guarded
    finally:
        again.stop()
        fresh.stop()
