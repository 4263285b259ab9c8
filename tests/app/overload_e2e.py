#!/usr/bin/env python3
"""End-to-end: slow and abusive clients cannot starve `agentkv serve`.

1. 40 connections that each send half a request body hold 40 admission slots: /health and
   /metrics still answer within a second, and a real request still completes.
2. A client that trickles header bytes, and the 40 half bodies, are cut at their deadlines
   (--header-timeout-s / --body-timeout-s) and their slots are released.
3. With --max-queue 4 and 4 generation requests in flight, a burst of more gets 529
   overloaded_error (Anthropic) / 429 (OpenAI) at once, and /health still answers.
4. Idle keep-alive connections on every worker close when a new connection waits for one.

Usage: overload_e2e.py AGENTKV_BIN TESTDATA_DIR
"""
import http.client
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

AGENTKV, TESTDATA = sys.argv[1], sys.argv[2]
MODEL = f"{TESTDATA}/models/stories260K/hf"


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(name, condition, detail=""):
    if not condition:
        fail(f"{name} {detail}")
    print(f"ok: {name} {detail}")


class Server:
    def __init__(self, *flags):
        self.log = tempfile.NamedTemporaryFile("w+")
        self.proc = subprocess.Popen([AGENTKV, "serve", "--model", MODEL, "--port", "0", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            self.log.seek(0)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.05)
        self.stop()
        fail("server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def request(self, method, path, body=None, timeout=30):
        """(status, body text, seconds) of one request on a fresh connection."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"content-type": "application/json"})
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode(), time.monotonic() - start
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), time.monotonic() - start

    def metric(self, name):
        _, text, _ = self.request("GET", "/metrics")
        m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        return float(m.group(1)) if m else None

    def wait_metric(self, name, value, seconds):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            if self.metric(name) == value:
                return True
            time.sleep(0.05)
        return False

    def half_body(self, path="/v1/messages"):
        """A connection that sends its headers and half of its body, then nothing."""
        s = socket.create_connection(("127.0.0.1", self.port))
        body = json.dumps({"model": "m", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "x" * 400}]}).encode()
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
        return s


def closed_by_server(sock, seconds):
    """Seconds until the server closes `sock` (reads whatever reply comes first), or None."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def generate(server, path):
    body = {"model": "m", "max_tokens": 4, "temperature": 0}
    if path == "/v1/completions":
        body["prompt"] = "Once upon a time"
    else:
        body["messages"] = [{"role": "user", "content": "Once upon a time"}]
    return server.request("POST", path, body)


# 1-2: 40 half bodies against the default queue (64 generation slots + 16 other workers).
server = Server("--header-timeout-s", "2", "--body-timeout-s", "8")
try:
    holders = [server.half_body() for _ in range(40)]
    check("40 half bodies hold 40 admission slots", server.wait_metric("agentkv_requests_in_flight", 40, 5))
    status, _, took = server.request("GET", "/health")
    check("/health answers at once", status == 200 and took < 1.0, f"({status} in {took:.2f} s)")
    status, _, took = server.request("GET", "/metrics")
    check("/metrics answers at once", status == 200 and took < 1.0, f"({status} in {took:.2f} s)")
    status, text, took = generate(server, "/v1/completions")
    check("a real request completes", status == 200 and "choices" in text, f"({status} in {took:.2f} s)")

    trickle = socket.create_connection(("127.0.0.1", server.port))
    started = time.monotonic()
    stop_trickle = threading.Event()

    def drip():
        for byte in b"GET /health HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 1000:
            if stop_trickle.is_set():
                return
            try:
                trickle.send(bytes([byte]))
            except OSError:
                return
            time.sleep(0.2)

    dripper = threading.Thread(target=drip)
    dripper.start()
    cut_after = closed_by_server(trickle, 10)
    stop_trickle.set()
    dripper.join()
    check("a client trickling its headers is cut at the header deadline",
          cut_after is not None and 1.5 < time.monotonic() - started < 5,
          f"(after {time.monotonic() - started:.1f} s)")
    cut = [closed_by_server(s, 12) for s in holders]
    check("the half bodies are cut at the body deadline", all(c is not None for c in cut),
          f"({sum(c is None for c in cut)} still open)")
    check("their slots are released", server.wait_metric("agentkv_requests_in_flight", 0, 5))
    check("cut requests are counted", server.wait_metric("agentkv_http_requests_cut_total", 41, 5),
          f"({server.metric('agentkv_http_requests_cut_total')})")
    status, _, _ = generate(server, "/v1/messages")
    check("served again afterwards", status == 200)
finally:
    server.stop()

# 3: the queue limit is reachable: 4 generation requests in flight, then a burst.
server = Server("--max-queue", "4")
try:
    holders = [server.half_body() for _ in range(4)]
    check("4 generation requests hold the queue", server.wait_metric("agentkv_requests_in_flight", 4, 5))
    results = []

    def one(path):
        results.append((path,) + generate(server, path))

    burst = [threading.Thread(target=one, args=(p,)) for p in ["/v1/messages", "/v1/chat/completions"] * 10]
    for t in burst:
        t.start()
    status, _, took = server.request("GET", "/health")
    for t in burst:
        t.join()
    check("/health answers during the burst", status == 200 and took < 1.0, f"({status} in {took:.2f} s)")
    anthropic = [r for r in results if r[0] == "/v1/messages"]
    openai = [r for r in results if r[0] != "/v1/messages"]
    check("Anthropic: 529 overloaded_error at once",
          all(r[1] == 529 and json.loads(r[2])["error"]["type"] == "overloaded_error" and r[3] < 1.0 for r in anthropic),
          str(sorted({(r[1], round(r[3], 1)) for r in anthropic})))
    check("OpenAI: 429 at once", all(r[1] == 429 and r[3] < 1.0 for r in openai),
          str(sorted({(r[1], round(r[3], 1)) for r in openai})))
    for s in holders:
        s.close()
    check("closed holders release their slots", server.wait_metric("agentkv_requests_in_flight", 0, 5))

    # 4: idle keep-alive connections on every worker (4 + 16) give way to a new connection.
    idle = []
    for _ in range(20):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        c.request("GET", "/health")
        c.getresponse().read()
        idle.append(c)
    status, _, took = server.request("GET", "/health")
    check("idle keep-alive connections give their workers up", status == 200 and took < 1.0,
          f"({status} in {took:.2f} s)")
    for c in idle:
        c.close()
    status, _, _ = generate(server, "/v1/chat/completions")
    check("served again once the queue drains", status == 200)
finally:
    server.stop()
print("all overload checks passed")
