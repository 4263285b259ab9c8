"""End-to-end: `agentkv pull` and `--model ORG/REPO` against a local mock hub (mock_hub.py).

Checks the huggingface_hub cache layout (blobs named by SHA-256 / git blob id, relative
snapshot links, refs/main), that cached files are not fetched again (ours or laid out by another
tool), offline use, resume after a dropped connection, a corrupted download leaving nothing in
the cache, 401/404, a gated repo with and without HF_TOKEN, GGUF quantization choice, and
`generate --model ORG/REPO`. Usage: pull_e2e.py AGENTKV TESTDATA
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mock_hub  # noqa: E402

agentkv, testdata = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="pull_e2e.")
hub = mock_hub.MockHub(mock_hub.default_repos(testdata))
failures = []


def check(name, got, want):
    if got != want:
        failures.append(name)
        print("FAIL: %s: got %r, want %r" % (name, got, want))
    else:
        print("ok: %s" % name)


def run(args, hf_home, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    e.update({"HF_HOME": hf_home, "HF_ENDPOINT": hub.endpoint}, **env)
    p = subprocess.run([agentkv] + args, env=e, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout.strip(), p.stderr


def pull(ref, hf_home, **env):
    return run(["pull", ref], hf_home, **env)


def repo_dir(hf_home, repo_id):
    return os.path.join(hf_home, "hub", "models--" + repo_id.replace("/", "--"))


def blob_names(hf_home, repo_id):
    d = os.path.join(repo_dir(hf_home, repo_id), "blobs")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


try:
    # 1. A sharded safetensors model: the files it needs, in the huggingface_hub layout.
    home = os.path.join(tmp, "home")
    repo = hub.repos["tiny/llama-sharded"]
    rc, out, err = pull("tiny/llama-sharded", home)
    check("pull exits 0", (rc, err if rc else ""), (0, ""))
    snap = os.path.join(repo_dir(home, "tiny/llama-sharded"), "snapshots", repo.commit)
    check("prints the snapshot directory", out, snap)
    check("the files a model needs", sorted(os.listdir(snap)), sorted(repo.files))
    check("same bytes", all(open(os.path.join(snap, p), "rb").read() == repo.files[p] for p in repo.files), True)
    s = repo.sibling("model-00001-of-00004.safetensors")
    check("LFS blob named by sha256, link relative",
          os.readlink(os.path.join(snap, "model-00001-of-00004.safetensors")), "../../blobs/" + s["lfs"]["sha256"])
    check("small file named by git blob id", os.readlink(os.path.join(snap, "config.json")),
          "../../blobs/" + repo.sibling("config.json")["blobId"])
    check("refs/main", open(os.path.join(repo_dir(home, "tiny/llama-sharded"), "refs", "main")).read(), repo.commit)
    check("no .incomplete left", [b for b in blob_names(home, "tiny/llama-sharded") if b.endswith(".incomplete")], [])

    # 2. Again: nothing is downloaded.
    before = hub.count("/resolve/")
    rc, out2, err = pull("tiny/llama-sharded", home)
    check("second pull: same directory, no download", (rc, out2, hub.count("/resolve/") - before), (0, snap, 0))

    # 3. Offline: the cache alone (the endpoint is unreachable); a model not cached says how to get it.
    rc, out3, err = pull("tiny/llama-sharded", home, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    check("offline pull from the cache", (rc, out3), (0, snap))
    rc, _, err = pull("tiny/stories", home, HF_HUB_OFFLINE="1")
    check("offline, not cached: error says to pull", (rc, "not in the cache" in err and "agentkv pull" in err), (1, True))

    # 4. A cache laid out by another tool (huggingface_hub's layout, written here by hand): found, not fetched.
    other = os.path.join(tmp, "other")
    stories = hub.repos["tiny/stories"]
    rd = repo_dir(other, "tiny/stories")
    for p, data in stories.files.items():
        sib = stories.sibling(p)
        blob = sib["lfs"]["sha256"] if "lfs" in sib else sib["blobId"]
        os.makedirs(os.path.join(rd, "blobs"), exist_ok=True)
        open(os.path.join(rd, "blobs", blob), "wb").write(data)
        os.makedirs(os.path.join(rd, "snapshots", stories.commit), exist_ok=True)
        os.symlink("../../blobs/" + blob, os.path.join(rd, "snapshots", stories.commit, p))
    os.makedirs(os.path.join(rd, "refs"))
    open(os.path.join(rd, "refs", "main"), "w").write(stories.commit)
    before = hub.count("/resolve/")
    rc, out4, err = pull("tiny/stories", other)
    check("another tool's cache: found without a download", (rc, hub.count("/resolve/") - before), (0, 0))

    # 5. generate --model ORG/REPO: pulled, then run (only the needed files: no reference.json).
    gen_home = os.path.join(tmp, "gen")
    rc, out5, err = run(["generate", "--model", "tiny/stories", "--prompt-ids", "1", "--max-tokens", "4"], gen_home)
    check("generate --model ORG/REPO", (rc, err if rc else ""), (0, ""))
    gen_snap = os.path.join(repo_dir(gen_home, "tiny/stories"), "snapshots", stories.commit)
    check("only needed files", "reference.json" in os.listdir(gen_snap) or "tok512.model" in os.listdir(gen_snap), False)

    # 6. A dropped connection mid-file: resumed with Range, verified.
    rc, out6, err = pull("tiny/flaky", os.path.join(tmp, "flaky"))
    flaky_file = os.path.join(out6, "model.safetensors")
    check("dropped connection: resumed", (rc, "resuming" in err), (0, True))
    check("resumed with a Range request", any(r and "/repos/" in p for p, r, _ in hub.requests), True)
    check("resumed file intact", open(flaky_file, "rb").read() == hub.repos["tiny/flaky"].files["model.safetensors"], True)

    # 7. A corrupted file: an error, and nothing of it left in the cache.
    chome = os.path.join(tmp, "corrupt")
    rc, _, err = pull("tiny/corrupt", chome)
    bad_sha = hub.repos["tiny/corrupt"].sibling("model.safetensors")["lfs"]["sha256"]
    check("sha256 mismatch fails", (rc, "corrupted" in err), (1, True))
    check("nothing of it in the cache", [b for b in blob_names(chome, "tiny/corrupt") if b.startswith(bad_sha)], [])

    # 8. Refusals: unknown repo, private repo, gated repo without and with a token, bad revision.
    h = os.path.join(tmp, "refusals")
    rc, _, err = pull("tiny/nope", h)
    check("unknown repo: 1, says check the id", (rc, "check the id" in err), (1, True))
    rc, _, err = pull("tiny/private", h)
    check("private repo without token: mentions HF_TOKEN", (rc, "HF_TOKEN" in err and "private" in err), (1, True))
    rc, _, err = pull("tiny/gated", h)
    check("gated without token: says accept and set HF_TOKEN", (rc, "gated" in err and "HF_TOKEN" in err), (1, True))
    rc, out8, err = pull("tiny/gated", h, HF_TOKEN="good-token")
    check("gated with HF_TOKEN", (rc, err if rc else ""), (0, ""))
    check("token never sent to the CDN", [p for p, _, a in hub.requests if a and "/repos/" in p], [])
    rc, _, err = pull("tiny/llama-sharded@nobranch", h)
    check("unknown revision", (rc, "no revision" in err), (1, True))

    # 9. GGUF: one quantization (both split parts), the default Q4_K_M, an absent one listing those present.
    g = os.path.join(tmp, "gguf")
    rc, out9, err = pull("tiny/gguf:q8_0", g)
    check("quant Q8_0: its split parts only", (rc, sorted(os.listdir(out9)) if rc == 0 else err),
          (0, ["tiny-Q8_0-00001-of-00002.gguf", "tiny-Q8_0-00002-of-00002.gguf"]))
    rc, out9, err = pull("tiny/gguf", os.path.join(tmp, "gguf2"))
    check("no quant: Q4_K_M", (rc, sorted(os.listdir(out9)) if rc == 0 else err), (0, ["tiny-Q4_K_M.gguf"]))
    rc, _, err = pull("tiny/gguf:Q5_K_S", g)
    check("absent quant lists those present", (rc, "Q4_K_M, Q8_0" in err), (1, True))
    rc, _, err = pull("not a repo", g)
    check("bad id", (rc, "ORG/REPO" in err), (1, True))

    # 10. A full disk: the error says so (the partial file is written to /dev/full).
    if os.path.exists("/dev/full"):
        full = os.path.join(tmp, "full")
        shard = hub.repos["tiny/llama-sharded"].sibling("model-00001-of-00004.safetensors")["lfs"]["sha256"]
        os.makedirs(os.path.join(repo_dir(full, "tiny/llama-sharded"), "blobs"))
        os.symlink("/dev/full", os.path.join(repo_dir(full, "tiny/llama-sharded"), "blobs", shard + ".incomplete"))
        rc, _, err = pull("tiny/llama-sharded", full)
        check("disk full: says so and what to do", (rc, "disk is full" in err and "HF_HOME" in err), (1, True))
    else:
        print("skip: no /dev/full")

    # 11. Two pulls of one model at once (two servers starting): each file is fetched once, both succeed.
    both = os.path.join(tmp, "both")
    before = hub.count("/repos/")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=both, HF_ENDPOINT=hub.endpoint)
    procs = [subprocess.Popen([agentkv, "pull", "tiny/llama-sharded"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    check("concurrent pulls succeed", [p.returncode for p in procs], [0, 0])
    check("each LFS file fetched once", hub.count("/repos/") - before, 4)
    check("same directory", outs[0][0], outs[1][0])
finally:
    hub.close()
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
