"""Every hop of a network source is checked and pinned: redirects, HLS entries, DNS answers, IPv6 spellings.

The policy allows 127.0.0.1/32 only; a listener on 127.0.0.2 stands in for a forbidden internal
service and counts the connections it accepts, which must stay 0. Names are answered by a resolver
the test controls (the fetcher's DNS layer), so nothing leaves loopback.
"""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path

import pytest

from perception.errors import MediaError
from perception.media.addresses import classify
from perception.media.fetch import FetchRefused, NetGuard, open_media
from perception.media.sources import SourceError, VideoIn, make_source
from tests.network.hop_servers import file_route, redirect_route, serving, text_route
from tests.plugin.stream_media import make_clip
from tools.access import AccessDenied, AccessPolicy

ALLOWED, FORBIDDEN = "127.0.0.1", "127.0.0.2"

SPELLINGS = {
    # IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64 (well-known and local-use), 6to4, Teredo, ISATAP
    "::ffff:169.254.169.254": "metadata", "::ffff:0:a9fe:a9fe": "metadata", "::169.254.169.254": "metadata",
    "64:ff9b::a9fe:a9fe": "metadata", "2002:a9fe:a9fe::": "metadata", "2001:0:a9fe:a9fe::": "metadata",
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "loopback",  # Teredo client 127.0.0.1 (stored inverted)
    "fe80::5efe:7f00:1": "link-local", "2001:4860::5efe:a9fe:a9fe": "metadata",
    "::127.0.0.1": "loopback", "::ffff:127.0.0.2": "loopback", "64:ff9b::7f00:1": "loopback",
    "2002:7f00:1::": "loopback", "64:ff9b::a00:1": "private", "2002:c0a8:101::1": "private",
    "64:ff9b:1::1": "private", "::ffff:100.64.0.1": "private",
    # plain forms
    "169.254.169.254": "metadata", "fd00:ec2::254": "metadata", "100.100.100.200": "metadata",
    "168.63.129.16": "metadata", "169.254.1.1": "link-local", "fe80::1%eth0": "link-local",
    "fec0::1": "private", "fd12:3456::1": "private", "fc00::1": "private", "100.64.0.1": "private",
    "10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "ff02::1": "multicast",
    "224.0.0.1": "multicast", "::": "unspecified", "0.0.0.0": "unspecified", "::1": "loopback",
    "127.0.0.1": "loopback", "255.255.255.255": "broadcast", "240.0.0.1": "reserved", "2001:db8::1": "reserved",
    "192.0.2.1": "reserved", "8.8.8.8": "public", "2606:4700::1111": "public", "64:ff9b::808:808": "public",
    "2002:808:808::": "public",
}


@pytest.mark.parametrize("address,kind", sorted(SPELLINGS.items()))
def test_every_spelling_of_an_address_is_classified_by_where_it_leads(address: str, kind: str) -> None:
    assert classify(address) == kind


def test_the_policy_refuses_forbidden_space_in_every_spelling_and_allows_only_what_it_lists() -> None:
    policy = AccessPolicy(roots=[], networks=(ipaddress.ip_network("127.0.0.1/32"),), lan=False)
    ok = policy.address_ok
    assert ok(ipaddress.ip_address("127.0.0.1")) and ok(ipaddress.ip_address("::ffff:127.0.0.1"))
    for text in ("127.0.0.2", "::ffff:127.0.0.2", "::127.0.0.2", "64:ff9b::7f00:2", "2002:7f00:2::", "::1",
                 "::ffff:0:7f00:2", "10.0.0.1", "fd00::1"):
        assert not ok(ipaddress.ip_address(text)), text
    default = AccessPolicy(roots=[])  # LAN and public allowed, as shipped
    assert ok(ipaddress.ip_address("8.8.8.8"))  # public stays allowed: only LAN is off
    for text in [a for a, k in SPELLINGS.items() if k in ("metadata", "link-local", "loopback", "multicast",
                                                          "unspecified", "broadcast", "reserved")]:
        assert not default.address_ok(ipaddress.ip_address(text.split("%")[0])), text
    assert default.address_ok(ipaddress.ip_address("64:ff9b::808:808"))  # NAT64 to a public host is public


def test_tool_options_keep_rtsp_on_tcp() -> None:
    policy = AccessPolicy(roots=[])
    assert policy.clamp_options({"rtsp_transport": "tcp"}) == {"rtsp_transport": "tcp"}
    for transport in ("udp", "http", "udp_multicast", "https", ["tcp"]):
        with pytest.raises(AccessDenied, match="can only be tcp"):
            policy.clamp_options({"rtsp_transport": transport})


def _policy(resolve=None) -> AccessPolicy:  # type: ignore[no-untyped-def]
    return AccessPolicy(roots=[], networks=(ipaddress.ip_network(f"{ALLOWED}/32"),), lan=False, public=False,
                        resolve=resolve)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("hop") / "clip.ts", seconds=2.0, fmt="mpegts")


def _frames(uri: str, guard: NetGuard, n: int = 3) -> int:
    source = make_source(uri, {"live": False, "open_timeout_s": 5, "read_timeout_s": 5}, guard=guard)
    count = 0
    stream = source.open_stream(threading.Event())
    try:
        for item in stream:
            count += isinstance(item, VideoIn)
            if count >= n:
                break
    finally:
        stream.close()
    return count


def test_redirects_are_followed_hop_by_hop_and_never_to_a_forbidden_host(clip: Path) -> None:
    guard = _policy().net_guard()
    with serving(FORBIDDEN, {"/clip.ts": file_route(clip)}) as bad:
        p = bad.port
        targets = [f"http://{FORBIDDEN}:{p}/clip.ts", f"http://[::ffff:{FORBIDDEN}]:{p}/clip.ts",
                   f"http://[::{FORBIDDEN}]:{p}/clip.ts", f"http://2130706434:{p}/clip.ts", f"http://[::1]:{p}/",
                   "file:///etc/passwd", f"rtsp://{FORBIDDEN}:{p}/x", f"//{FORBIDDEN}:{p}/clip.ts",
                   "http://169.254.169.254/latest/meta-data/"]
        routes = {f"/r{i}-{code}": redirect_route(t, code) for i, t in enumerate(targets) for code in (301, 302, 307)}
        routes["/clip.ts"] = file_route(clip)
        routes["/hop1"] = redirect_route("/hop2", 302)
        routes["/hop2"] = redirect_route("/clip.ts", 308)
        routes["/twice"] = redirect_route("/hop1-then-away", 302)
        routes["/hop1-then-away"] = redirect_route(targets[0], 303)
        routes["/loop"] = redirect_route("/loop", 302)
        with serving(ALLOWED, routes) as good:
            base = f"http://{ALLOWED}:{good.port}"
            assert _frames(f"{base}/hop1", guard) == 3  # allowed redirects are followed
            refused = []
            for path in [*routes.keys() - {"/clip.ts", "/hop1", "/hop2", "/hop1-then-away", "/loop"}]:
                with pytest.raises(FetchRefused) as exc:
                    open_media(f"{base}{path}", guard, 2, 2)
                refused.append(str(exc.value))
            with pytest.raises(MediaError, match="redirects"):
                open_media(f"{base}/loop", guard, 2, 2)
            with pytest.raises(SourceError, match="not on a network"):
                _frames(f"{base}/r0-302", guard)
        assert bad.connections == 0
    assert len(refused) == len(targets) * 3 + 1


def _playlist(*uris: str, ended: bool = True, head: str = "") -> str:
    body = "".join(f"#EXTINF:2.0,\n{u}\n" for u in uris)
    return f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n{head}{body}" + ("#EXT-X-ENDLIST\n" if ended else "")


def test_hls_playlists_are_read_here_and_every_entry_is_checked(clip: Path) -> None:
    guard = _policy().net_guard()
    with serving(FORBIDDEN, {"/clip.ts": file_route(clip), "/media.m3u8": text_route(_playlist("clip.ts"))}) as bad:
        away = f"http://{FORBIDDEN}:{bad.port}"
        routes = {
            "/clip.ts": file_route(clip),
            "/good.m3u8": text_route(_playlist("clip.ts", "/clip.ts")),
            "/master.m3u8": text_route("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=100\ngood.m3u8\n"),
            "/second-away.m3u8": text_route(_playlist("clip.ts", f"{away}/clip.ts")),
            "/first-away.m3u8": text_route(_playlist(f"{away}/clip.ts")),
            "/mapped-away.m3u8": text_route(_playlist(f"http://[::ffff:{FORBIDDEN}]:{bad.port}/clip.ts")),
            "/variant-away.m3u8": text_route(f"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=9\n{away}/media.m3u8\n"),
            "/map-away.m3u8": text_route(_playlist("clip.ts", head=f'#EXT-X-MAP:URI="{away}/clip.ts"\n')),
            "/file-entry.m3u8": text_route(_playlist("file:///etc/passwd")),
            "/as-text.m3u8": text_route(_playlist(f"{away}/clip.ts"), "text/plain"),  # sniffed by name and #EXTM3U
            "/sniffed": text_route(_playlist(f"{away}/clip.ts"), "application/octet-stream"),
            "/live.m3u8": text_route(_playlist("clip.ts", f"{away}/clip.ts", ended=False)),
            "/redirect-to-list": redirect_route(f"{away}/media.m3u8"),
            "/concat.ts": text_route(f"ffconcat version 1.0\nfile {away}/clip.ts\n", "video/mp2t"),
            "/dash.mpd": text_route("<?xml version='1.0'?><MPD></MPD>", "application/dash+xml"),
        }
        with serving(ALLOWED, routes) as good:
            base = f"http://{ALLOWED}:{good.port}"
            assert _frames(f"{base}/good.m3u8", guard, n=25) == 25  # both segments, through the reader
            assert _frames(f"{base}/master.m3u8", guard) == 3
            for path in routes.keys() - {"/clip.ts", "/good.m3u8", "/master.m3u8"}:
                with pytest.raises(SourceError):
                    _frames(f"{base}{path}", guard, n=40)  # 40 frames: more than the first segment holds
            no_lists = NetGuard(allow=guard.allow, playlists=False)
            with pytest.raises(FetchRefused, match="playlists are not accepted"):
                open_media(f"{base}/good.m3u8", no_lists)
        assert bad.connections == 0


def test_a_name_is_checked_on_every_lookup_so_a_rebinding_answer_never_connects(clip: Path) -> None:
    answers = iter([[ALLOWED], [FORBIDDEN], [FORBIDDEN], [ALLOWED, FORBIDDEN], [f"::ffff:{FORBIDDEN}"]])
    lookups: list[str] = []

    def resolve(host: str) -> list[str]:  # the DNS layer: first the allowed answer, then the forbidden ones
        lookups.append(host)
        return next(answers)

    policy = _policy(resolve)
    with serving(FORBIDDEN, {"/clip.ts": file_route(clip)}) as bad:
        url = f"http://rebind.test:{bad.port}/clip.ts"
        assert policy.check_url(url) == url  # the early check saw the allowed answer
        for _ in range(4):  # the fetch, and every reconnect, looks up and checks again
            with pytest.raises(SourceError, match="not on a network"):
                _frames(url, policy.net_guard())
        with pytest.raises(AccessDenied):
            policy.check_url(url)  # the answers have run out: the name no longer resolves
    assert bad.connections == 0 and lookups == ["rebind.test"] * 6


def test_a_pinned_fetch_connects_to_the_checked_address_and_keeps_the_name(clip: Path) -> None:
    seen: list[str] = []
    with serving(ALLOWED, {"/clip.ts": lambda h: (seen.append(h.headers["Host"]) or 200, {}, clip.read_bytes())}) as good:
        guard = _policy(lambda _h: [ALLOWED]).net_guard()
        assert _frames(f"http://cam.test:{good.port}/clip.ts", guard) == 3
        assert guard.pinned_url(f"rtsp://u:p@cam.test:{good.port}/live") == f"rtsp://u:p@{ALLOWED}:{good.port}/live"
    assert seen == [f"cam.test:{good.port}"]


def test_rtsp_goes_through_a_relay_on_the_checked_address_that_lets_no_redirect_through(clip: Path) -> None:
    from tests.network.rtsp_fake import FakeRtsp

    guard = _policy(lambda _h: [ALLOWED]).net_guard()
    forbidden = FakeRtsp(FORBIDDEN, clip)
    camera = FakeRtsp(ALLOWED, clip)
    moved = FakeRtsp(ALLOWED, redirect=f"rtsp://{FORBIDDEN}:{forbidden.port}/live")
    later = FakeRtsp(ALLOWED, redirect=f"rtsp://{FORBIDDEN}:{forbidden.port}/live", redirect_after_play=True)
    try:
        assert _frames(f"rtsp://user:pw@cam.test:{camera.port}/live", guard) == 3  # by name, pinned, relayed
        with pytest.raises(SourceError, match="redirect"):
            _frames(f"rtsp://cam.test:{moved.port}/live", guard)
        with pytest.raises(SourceError):
            _frames(f"rtsp://cam.test:{later.port}/live", guard)
        with pytest.raises(SourceError, match="not on a network"):
            _frames(f"rtsp://[::ffff:{FORBIDDEN}]:{forbidden.port}/live", guard)
    finally:
        for server in (forbidden, camera, moved, later):
            server.close()
    assert camera.requests[:4] == ["OPTIONS", "DESCRIBE", "SETUP", "PLAY"]
    assert moved.requests[:2] == ["OPTIONS", "DESCRIBE"] and later.requests[:4] == ["OPTIONS", "DESCRIBE", "SETUP", "PLAY"]
    assert forbidden.connections == 0


def test_rtsps_is_relayed_with_tls_to_the_camera_under_its_name(clip: Path, tmp_path: Path) -> None:
    import shutil
    import ssl
    import subprocess

    from tests.network.rtsp_fake import FakeRtsp

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the camera's test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=cam.test", "-days", "1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str] = []
    context.sni_callback = lambda _sock, name, _ctx: names.append(name)  # type: ignore[assignment,func-returns-value]
    camera = FakeRtsp(ALLOWED, clip, tls=context)
    try:
        assert _frames(f"rtsps://cam.test:{camera.port}/live", _policy(lambda _h: [ALLOWED]).net_guard()) == 3
    finally:
        camera.close()
    assert names == ["cam.test"] and camera.requests[:4] == ["OPTIONS", "DESCRIBE", "SETUP", "PLAY"]


def _digest_route(clip: Path, user: str, password: str, seen: list[str]):  # type: ignore[no-untyped-def]
    import hashlib
    import re

    realm, nonce = "cam", "n0nce"

    def route(handler):  # type: ignore[no-untyped-def]
        auth = handler.headers.get("Authorization") or ""
        seen.append(auth.split(" ", 1)[0])
        fields = {k: a or b for k, a, b in re.findall(r'(\w+)=(?:"([^"]*)"|([^\s,]+))', auth)}
        if auth.startswith("Digest ") and fields.get("username") == user:
            md5 = lambda t: hashlib.md5(t.encode()).hexdigest()  # noqa: E731
            ha1, ha2 = md5(f"{user}:{realm}:{password}"), md5(f"GET:{fields['uri']}")
            want = md5(f"{ha1}:{nonce}:{fields['nc']}:{fields['cnonce']}:auth:{ha2}")
            if fields.get("response") == want and fields["uri"] == handler.path:
                return 200, {"Content-Type": "video/mp2t"}, clip.read_bytes()
        return 401, {"WWW-Authenticate": f'Digest realm="{realm}", nonce="{nonce}", qop="auth", algorithm=MD5'}, b""

    return route


def test_credentials_answer_basic_and_digest_on_their_origin_and_never_follow_a_redirect_elsewhere(clip: Path) -> None:
    seen: list[str] = []
    other_seen: list[str | None] = []
    guard = _policy().net_guard()
    with serving(ALLOWED, {"/x.ts": lambda h: (other_seen.append(h.headers.get("Authorization")) or 200, {},
                                                clip.read_bytes())}) as other:
        routes = {"/cam.ts": _digest_route(clip, "bob", "s3cret", seen),
                  "/elsewhere": redirect_route(f"http://{ALLOWED}:{other.port}/x.ts")}
        with serving(ALLOWED, routes) as good:
            assert _frames(f"http://bob:s3cret@{ALLOWED}:{good.port}/cam.ts", guard) == 3
            with pytest.raises(SourceError, match="401"):
                _frames(f"http://bob:wrong@{ALLOWED}:{good.port}/cam.ts", guard)
            assert _frames(f"http://bob:s3cret@{ALLOWED}:{good.port}/elsewhere", guard) == 3
    assert seen[:2] == ["Basic", "Digest"] and other_seen == [None]


def test_a_phone_upload_that_is_a_playlist_is_not_followed(clip: Path) -> None:
    from perception.media.sources import PhoneSource

    with serving(FORBIDDEN, {"/clip.ts": file_route(clip)}) as bad:
        source = PhoneSource("phone:pocket", {"read_timeout_s": 2})
        source.feed.write(f"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\nhttp://{FORBIDDEN}:{bad.port}/clip.ts\n"
                          "#EXT-X-ENDLIST\n".encode())
        source.feed.restart()
        with pytest.raises(SourceError):
            list(source.open_stream(threading.Event()))
    assert bad.connections == 0
