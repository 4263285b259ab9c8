"""A local stand-in for the Hugging Face hub, for tests (Python standard library only).

Serves the shared tiny models under the hub's API shapes: GET /api/models/ORG/REPO/revision/REV
(sha + siblings with blobId, size, lfs.sha256), GET /ORG/REPO/resolve/REV/PATH (small files
directly with ETag and X-Repo-Commit; LFS files by a 302 to a CDN on another port, with
X-Linked-Etag and X-Linked-Size), Range requests on the CDN, X-Error-Code on refusals. Repos
with a behaviour: tiny/gated (401 GatedRepo without `Bearer good-token`), tiny/private (401
RepoNotFound without it), tiny/flaky (each LFS file's first transfer is cut halfway),
tiny/corrupt (model.safetensors arrives with a flipped byte). The CDN refuses a request that
carries an Authorization header (as a signed URL does). `requests` records (path, range).
"""
import hashlib
import os
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

GOOD_TOKEN = "good-token"
LFS_SUFFIXES = (".safetensors", ".gguf", ".model")


def _git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, gated=False, private=False, flaky=False, corrupt=()):
        self.files = dict(files)  # path -> bytes
        self.gated, self.private, self.flaky, self.corrupt = gated, private, flaky, set(corrupt)
        h = hashlib.sha1()
        for path in sorted(self.files):
            h.update(path.encode() + hashlib.sha256(self.files[path]).digest())
        self.commit = h.hexdigest()

    def is_lfs(self, path):
        return path.endswith(LFS_SUFFIXES)

    def sibling(self, path):
        data = self.files[path]
        s = {"rfilename": path, "size": len(data)}
        if self.is_lfs(path):
            sha = hashlib.sha256(data).hexdigest()
            pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha.encode(), len(data))
            s["blobId"] = _git_blob_id(pointer)
            s["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": len(pointer)}
        else:
            s["blobId"] = _git_blob_id(data)
        return s

    def body(self, path):
        data = self.files[path]
        if path in self.corrupt:
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        return data


def _dir_files(path, names=None):
    out = {}
    for name in sorted(os.listdir(path)):
        if names is None or name in names:
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def default_repos(testdata):
    models = os.path.join(testdata, "models")
    tiny = os.path.join(models, "tiny-random")
    qwen = _dir_files(os.path.join(tiny, "qwen3-qknorm-tied"), {"config.json", "generation_config.json", "model.safetensors"})
    rng = random.Random(7)
    blob = lambda n: bytes(rng.getrandbits(8) for _ in range(n))
    gguf = {
        "README.md": b"# tiny GGUF\n",
        "tiny-Q4_K_M.gguf": b"GGUF" + blob(3000),
        "tiny-Q8_0-00001-of-00002.gguf": b"GGUF" + blob(2500),
        "tiny-Q8_0-00002-of-00002.gguf": b"GGUF" + blob(2100),
        "mmproj-tiny-F16.gguf": b"GGUF" + blob(900),
    }
    return {
        "tiny/llama-sharded": Repo(_dir_files(os.path.join(tiny, "llama3-rope-scaled-sharded"))),
        "tiny/stories": Repo(_dir_files(os.path.join(models, "stories260K", "hf"))),
        "tiny/gguf": Repo(gguf),
        "tiny/gated": Repo(qwen, gated=True),
        "tiny/private": Repo(qwen, private=True),
        "tiny/flaky": Repo(qwen, flaky=True),
        "tiny/corrupt": Repo(qwen, corrupt={"model.safetensors"}),
    }


class MockHub:
    """Two servers on free loopback ports: the hub (`endpoint`) and its CDN."""

    def __init__(self, repos):
        self.repos = repos
        self.requests = []  # (path, Range header or None, Authorization header or None)
        self.cut = set()  # (repo, path) already cut once (tiny/flaky)
        self.lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(self._hub_get))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(self._cdn_get))
        self.endpoint = "http://127.0.0.1:%d" % self.hub.server_address[1]
        self.cdn_origin = "http://127.0.0.1:%d" % self.cdn.server_address[1]
        for s in (self.hub, self.cdn):
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def count(self, fragment):
        with self.lock:
            return sum(1 for p, _, _ in self.requests if fragment in p)

    def _handler(self, get):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with hub.lock:
                    hub.requests.append((self.path, self.headers.get("Range"), self.headers.get("Authorization")))
                get(self)

            def reply(self, status, body=b"", headers=(), content_type="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _refusal(self, h, repo_id, repo, what):
        """An error reply, or None when the request may go on."""
        if repo is None:
            return h.reply(401, b'{"error":"Repository not found"}', [("X-Error-Code", "RepoNotFound")])
        if (repo.gated or repo.private) and h.headers.get("Authorization") != "Bearer " + GOOD_TOKEN:
            code = "GatedRepo" if repo.gated else "RepoNotFound"
            return h.reply(401, b'{"error":"%s"}' % code.encode(), [("X-Error-Code", code)])
        return "ok"

    def _hub_get(self, h):
        url = urlparse(h.path)
        parts = unquote(url.path).split("/")
        import json
        if parts[1:3] == ["api", "models"] and len(parts) >= 7 and parts[5] == "revision":
            repo_id, rev = parts[3] + "/" + parts[4], "/".join(parts[6:])
            repo = self.repos.get(repo_id)
            if self._refusal(h, repo_id, repo, rev) != "ok":
                return
            if rev not in ("main", repo.commit):
                return h.reply(404, b'{"error":"Invalid rev id"}', [("X-Error-Code", "RevisionNotFound")])
            body = {"_id": "x", "id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": repo.private,
                    "gated": "manual" if repo.gated else False,
                    "siblings": [repo.sibling(p) for p in sorted(repo.files)]}
            return h.reply(200, json.dumps(body).encode())
        if len(parts) >= 6 and parts[3] == "resolve":
            repo_id, rev, path = parts[1] + "/" + parts[2], parts[4], "/".join(parts[5:])
            repo = self.repos.get(repo_id)
            if self._refusal(h, repo_id, repo, path) != "ok":
                return
            if rev not in ("main", repo.commit):
                return h.reply(404, b'{"error":"Invalid rev id"}', [("X-Error-Code", "RevisionNotFound")])
            if path not in repo.files:
                return h.reply(404, b'{"error":"Entry not found"}', [("X-Error-Code", "EntryNotFound")])
            s = repo.sibling(path)
            common = [("X-Repo-Commit", repo.commit)]
            if "lfs" in s:
                location = "%s/repos/%s/%s" % (self.cdn_origin, repo_id.replace("/", "--"), s["lfs"]["sha256"])
                return h.reply(302, b"", common + [("Location", location), ("ETag", '"%s"' % s["blobId"]),
                                                   ("X-Linked-Etag", '"%s"' % s["lfs"]["sha256"]),
                                                   ("X-Linked-Size", str(s["size"]))])
            return h.reply(200, repo.body(path), common + [("ETag", '"%s"' % s["blobId"])], "application/octet-stream")
        return h.reply(404, b'{"error":"no route"}')

    def _cdn_get(self, h):
        if h.headers.get("Authorization"):
            return h.reply(400, b"<Error>Only one auth mechanism allowed</Error>", content_type="application/xml")
        parts = urlparse(h.path).path.split("/")
        repo_id = parts[2].replace("--", "/") if len(parts) == 4 else ""
        repo = self.repos.get(repo_id)
        match = [p for p in (repo.files if repo else {}) if repo.is_lfs(p) and repo.sibling(p)["lfs"]["sha256"] == parts[3]]
        if not match:
            return h.reply(404, b"<Error>NoSuchKey</Error>", content_type="application/xml")
        path = match[0]
        data = repo.body(path)
        start = 0
        rng = h.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return h.reply(416, b"", [("Content-Range", "bytes */%d" % len(data))])
        h.send_response(206 if rng else 200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("ETag", '"%s"' % hashlib.sha256(repo.files[path]).hexdigest())
        h.send_header("Accept-Ranges", "bytes")
        if rng:
            h.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        h.end_headers()
        with self.lock:
            cut = repo.flaky and (repo_id, path) not in self.cut
            self.cut.add((repo_id, path))
        if cut:  # half the bytes, then the connection drops
            h.wfile.write(data[start:start + (len(data) - start) // 2])
            h.wfile.flush()
            h.close_connection = True
            import socket
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.wfile.write(data[start:])


if __name__ == "__main__":
    import sys
    hub = MockHub(default_repos(sys.argv[1]))
    print(hub.endpoint, flush=True)
    threading.Event().wait()
