"""The agents dashboard in a real browser: headless Chromium (Debian `chromium`) driven over the
DevTools protocol on a pipe (Python standard library only).

`agentkv serve --model tiny/stories --api-key ...` (pulled from the mock hub of tests/hub),
two agents of one tenant and one of another make requests; the page at / must ask for the key,
refuse a wrong one, then show the tenant's two agents only, with their hit rate after a second
turn, their TTFT and its history; pin, unpin and evict work through its buttons; after a
restart an agent's next turn shows a restore. A script error on the page fails the test.
A screenshot is saved for review. Usage: dashboard_browser.py AGENTKV TESTDATA SCREENSHOT.png
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hub"))
import mock_hub  # noqa: E402

agentkv, testdata, screenshot = sys.argv[1], sys.argv[2], sys.argv[3]
PROMPT = ("Once upon a time there was a little girl named Lily who loved to play outside in the park with her "
          "friends and her dog. One day she saw a big red ball")


class Browser:
    """Chromium with --remote-debugging-pipe: JSON messages ended by NUL on fds 3 (in) and 4 (out)."""

    def __init__(self, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():  # via fresh copies: a pipe end that already is 3 or 4 would keep its close-on-exec flag
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            raise SystemExit("FAIL: chromium is not installed (apt-get install chromium)")
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-dev-shm-usage", "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.replies = {}
        self.events = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Runtime.enable", "Page.enable"):
            self.call(method, session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1500, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self.cv:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cv.notify_all()

    def call(self, method, params=None, session=False, timeout=30):
        with self.cv:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        with self.cv:
            if not self.cv.wait_for(lambda: mid in self.replies, timeout):
                raise RuntimeError("no reply to " + method)
            reply = self.replies.pop(mid)
        if "error" in reply:
            raise RuntimeError("%s: %s" % (method, reply["error"]))
        return reply["result"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      session=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, name, expression, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:  # the page may still be loading: an error counts as "not yet"
            if self.eval("(() => { try { return %s; } catch (e) { return false; } })()" % expression):
                print("ok: " + name)
                return
            time.sleep(0.2)
        fail(name + ": timed out waiting for " + expression)

    def page_errors(self):
        with self.cv:
            return [e for e in self.events
                    if e.get("method") == "Runtime.exceptionThrown"
                    or (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error")]

    def close(self):
        self.proc.kill()
        self.proc.wait()


def fail(message):
    print("FAIL: " + message)
    if server_log and os.path.exists(server_log):
        print(open(server_log).read()[-3000:])
    if browser is not None:
        try:
            print("page text:", browser.eval("document.body.innerText")[:2000])
        except Exception as e:  # noqa: BLE001 - best effort diagnostics
            print("(page text unavailable: %s)" % e)
    raise SystemExit(1)


def check(name, got, want):
    if got != want:
        fail("%s: got %r, want %r" % (name, got, want))
    print("ok: " + name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, path, key, body=None, agent=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else b"" if method == "POST" else None)
    req.add_header("x-api-key", key)
    req.add_header("content-type", "application/json")
    if agent:
        req.add_header("x-agent-id", agent)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def turn(key, agent):
    return http("POST", "/v1/completions", key, {"model": "m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}, agent)


def start_server():
    global proc
    env = dict(os.environ, HF_HOME=os.path.join(tmp, "hf"), HF_ENDPOINT=hub.endpoint)
    log = open(server_log, "w")
    proc = subprocess.Popen([agentkv, "serve", "--model", "tiny/stories", "--port", str(port), "--kv-dir",
                             os.path.join(tmp, "kv"), "--block-size", "16", "--api-key", "k1", "--api-key", "k2"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            fail("the server exited")
        if re.search(r"on http://127\.0\.0\.1:%d" % port, open(server_log).read()):
            return
        time.sleep(0.1)
    fail("the server did not start")


def stop_server():
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def row(agent, field):
    return 'document.querySelector(\'tr[data-agent="%s"] [data-field="%s"]\')?.textContent' % (agent, field)


tmp = tempfile.mkdtemp(prefix="dashboard_browser.")
server_log = os.path.join(tmp, "server.log")
hub = mock_hub.MockHub(mock_hub.default_repos(testdata))
browser = None
proc = None
port = free_port()
try:
    start_server()
    for key, agent in (("k1", "alice"), ("k1", "bob"), ("k1", "alice"), ("k1", "bob"), ("k2", "carol")):
        turn(key, agent)

    browser = Browser(os.path.join(tmp, "profile"))
    browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % port}, session=True)
    shown = 'getComputedStyle(document.querySelector("%s")).display !== "none"'
    browser.wait("the page asks for the API key", 'document.body.dataset.state === "auth" && ' + shown % "#key-form")
    check("no data before the key", browser.eval(shown % "#main"), False)
    browser.eval('document.querySelector("#key").value = "wrong"; document.querySelector("#key-submit").click(); true')
    browser.wait("a wrong key is refused", 'document.querySelector("#key-error").textContent.includes("refused")')
    browser.eval('document.querySelector("#key").value = "k1"; document.querySelector("#key-submit").click(); true')
    browser.wait("the tenant's agents are listed", 'document.querySelectorAll("#agents tbody tr").length === 2')
    check("the key form is gone", browser.eval(shown % "#key-form"), False)
    check("agents shown", browser.eval('[...document.querySelectorAll("#agents tbody tr")].map(r => r.dataset.agent).sort()'),
          ["alice", "bob"])
    check("alice: requests", browser.eval(row("alice", "requests")), "2")
    check("alice: a cache hit on the second turn", browser.eval(row("alice", "hit_rate")), "50%")
    check("alice: last TTFT shown", bool(re.fullmatch(r"[0-9.]+ ms", browser.eval(row("alice", "ttft")) or "")), True)
    check("alice: TTFT history of two turns",
          browser.eval('document.querySelector(\'tr[data-agent="alice"] [data-field="history"] svg\').dataset.points'), "2")
    check("alice: blocks on the device", browser.eval(row("alice", "device")) != "0 B", True)
    browser.wait("engine: requests counted", 'Number(document.querySelector(\'#engine [data-field="requests_finished"]\').textContent) >= 5')
    check("disk tier shown", "blocks" in browser.eval('document.querySelector(\'.tier[data-tier="disk"] .text\').textContent'), True)

    browser.eval('document.querySelector(\'tr[data-agent="alice"] button[data-action="pin"]\').click(); true')
    browser.wait("pin: the row shows it", 'document.querySelector(\'tr[data-agent="alice"]\')?.dataset.pinned === "true"')
    check("pin: the agents API agrees", http("GET", "/v1/agents/alice", "k1")["pinned"], True)
    browser.eval('document.querySelector(\'tr[data-agent="alice"] button[data-action="unpin"]\').click(); true')
    browser.wait("unpin: the row shows it", 'document.querySelector(\'tr[data-agent="alice"]\')?.dataset.pinned === "false"')
    check("unpin: the agents API agrees", http("GET", "/v1/agents/alice", "k1")["pinned"], False)
    browser.eval('document.querySelector(\'tr[data-agent="bob"] button[data-action="evict"]\').click(); true')
    browser.wait("evict: bob's device bytes go to 0", row("bob", "device") + ' === "0 B"')
    check("evict: the agents API agrees", http("GET", "/v1/agents/bob", "k1")["bytes"]["device"], 0)

    stop_server()
    start_server()
    turn("k1", "alice")
    browser.wait("after a restart, alice's turn is a restore", row("alice", "restores") + ' === "1"', timeout=30)
    # The TTFT history is the running server's (kept in memory): one turn since the restart.
    browser.wait("the new process's TTFT history", 'document.querySelector(\'tr[data-agent="alice"] [data-field="history"] svg\')'
                 '?.dataset.points === "1"')
    shot = browser.call("Page.captureScreenshot", {"format": "png"}, session=True)
    with open(screenshot, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print("screenshot: " + screenshot)
    check("no script errors on the page", browser.page_errors(), [])
finally:
    if browser is not None:
        browser.close()
    if proc is not None and proc.poll() is None:
        proc.kill()
    hub.close()
    shutil.rmtree(tmp, ignore_errors=True)
print("all checks passed")
