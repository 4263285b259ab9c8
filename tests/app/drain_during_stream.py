#!/usr/bin/env python3
"""Drains a replica while one of its streams runs: opens the stream, waits for its first text
delta (generation under way), then - without reading further, so the stream stays in flight -
asks POST /admin/drain and GET /health; then reads the stream to its end. Prints one JSON line:
the drain's status code, the health status seen during the stream, and the message_stop count.
Usage: drain_during_stream.py PORT BODY_JSON"""
import http.client
import json
import sys

port, body = int(sys.argv[1]), sys.argv[2]
stream = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
stream.request("POST", "/v1/messages", body=body,
               headers={"content-type": "application/json", "x-agent-id": "streamer"})
resp = stream.getresponse()
if resp.status != 200:
    sys.exit(f"the stream answered {resp.status}: {resp.read()[:200]!r}")
while True:
    line = resp.readline()
    if not line:
        sys.exit("the stream ended before its first text delta")
    if line.startswith(b"event: content_block_delta"):
        break

control = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
control.request("POST", "/admin/drain", body=b"")
drain = control.getresponse()
drain.read()
control.request("GET", "/health")
health = json.loads(control.getresponse().read())["status"]

stops = resp.read().count(b'"type":"message_stop"')
print(json.dumps({"drain": drain.status, "health": health, "message_stop": stops}))
