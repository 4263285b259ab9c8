"""Token ids exactly as agentkv serves them: Anthropic Messages bodies through `agentkv render`
(the server's request parser, chat template engine and tokenizer)."""
import json
import subprocess


def render(agentkv, model_dir, bodies, print_text=False):
    """-> [ids] (or [(ids, text)] with print_text), one per body. Raises on any refused body."""
    cmd = [agentkv, "render", "--model", model_dir] + (["--print-text"] if print_text else [])
    stdin = "".join(json.dumps(b, ensure_ascii=False) + "\n" for b in bodies)
    out = subprocess.run(cmd, input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = out.stdout.decode().splitlines()
    if len(lines) != len(bodies):
        raise RuntimeError(f"agentkv render: {len(lines)} results for {len(bodies)} bodies: {out.stderr.decode()}")
    results = []
    for i, line in enumerate(lines):
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(f"agentkv render refused body {i}: {r['error']}")
        results.append((r["tokens"], r["text"]) if print_text else r["tokens"])
    return results
