#!/usr/bin/python3
"""A live RTSP test server on 127.0.0.1 (Debian's GStreamer RTSP server; run with /usr/bin/python3).

Usage: /usr/bin/python3 rtsp_server_gst.py PORT [USER PASSWORD]
Serves rtsp://127.0.0.1:PORT/live: a moving-ball test pattern (H.264, 320x240, 10 fps) plus a
440 Hz tone (PCMU). With USER and PASSWORD the mount requires Basic authentication. Prints
"ready" once listening. Installed by .ci/run (gir1.2-gst-rtsp-server-1.0 and GStreamer plugins).
"""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(sys.argv[1])
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(
    "( videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=10/1 "
    "! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! rtph264pay name=pay0 pt=96 "
    "audiotestsrc is-live=true wave=sine freq=440 ! audioconvert ! audioresample ! audio/x-raw,rate=8000,channels=1 "
    "! mulawenc ! rtppcmupay name=pay1 pt=0 )")
factory.set_shared(True)
if len(sys.argv) > 3:
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "user")
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(sys.argv[2], sys.argv[3]), token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_role_from_structure(Gst.Structure.new_from_string(
        "user, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"))
    factory.set_permissions(permissions)
server.get_mount_points().add_factory("/live", factory)
if server.attach(None) == 0:
    sys.exit(f"cannot listen on 127.0.0.1:{sys.argv[1]}")
print("ready", flush=True)
GLib.MainLoop().run()
