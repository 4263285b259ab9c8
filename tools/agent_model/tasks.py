"""Random Claude Code-shaped tasks and the request bodies the CLI would send for them.

A task is one user request the agent model must handle:
  answer: "Reply with WORD"                      -> text "WORD", end of turn
  write:  "Create the file PATH with the content TEXT" -> Write {file_path, content}
  bash:   "Run the command CMD"                  -> Bash {command}
  read:   "Read PATH and tell me what it says"   -> Read {file_path}, then "The file says: TEXT"
After a tool_result the model writes a short final message and ends its turn. Names and texts are
drawn at random so the model must copy them from the request. Shared by the data generator and the
evaluation, so held-out tasks come from the same distribution with a different seed.
"""
import copy
import json
import random
import string

WORDS = (
    "alpha beta gamma delta echo fox golf hotel india juliet kilo lima mango nova oscar papa quartz "
    "river sierra tango umbra violet whiskey xray yankee zulu apple banana cherry grape lemon melon "
    "olive peach pear plum berry cedar maple pine oak birch willow stone river cloud storm rain snow "
    "sun moon star comet orbit rocket planet galaxy pixel vector matrix kernel cache agent token block "
    "hello world greetings from agentkv test notes todo list draft report data config build deploy "
    "green blue red yellow orange purple silver golden amber coral ivory jade ruby onyx pearl "
    "quick lazy brave calm eager gentle happy jolly kind lively proud silly witty zesty bold "
    "one two three four five six seven eight nine ten hundred thousand first second third last "
    "cat dog bird fish horse tiger lion bear wolf eagle otter panda koala zebra camel llama "
    "table chair lamp door window garden bridge tower castle harbor island valley canyon forest meadow"
).split()
EXTENSIONS = [".txt", ".md", ".py", ".json", ".log", ".csv", ""]
SYLLABLES = ["ka", "ro", "mi", "te", "lu", "sa", "no", "vi", "de", "po", "zu", "ri", "ga", "fe", "bo", "ni"]


def pseudo_word(rng):
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))


def word(rng):
    return rng.choice(WORDS) if rng.random() < 0.8 else pseudo_word(rng)


def text(rng):
    words = [word(rng) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.3:
        words.insert(rng.randint(0, len(words)), str(rng.randint(0, 9999)))
    return " ".join(words)


def file_name(rng):
    parts = [word(rng) for _ in range(rng.randint(1, 2))]
    return rng.choice(["_", "-", ""]).join(parts) + rng.choice(EXTENSIONS)


def work_dir(rng):
    # The directories the CLI tests and users run in: mkdtemp-style, plain /tmp, a home project.
    r = rng.random()
    if r < 0.5:
        tail = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(6))
        return rng.choice(["/tmp/akv-cc-", "/tmp/akv-agent-", "/tmp/tmp."]) + tail
    if r < 0.75:
        return "/tmp/" + word(rng)
    return "/home/" + rng.choice(["user", "dev", "runner", "me"]) + "/" + word(rng)


def path_in(rng, cwd):
    if rng.random() < 0.8:
        return cwd + "/" + file_name(rng)
    return cwd + "/" + word(rng) + "/" + file_name(rng)


def bash_command(rng, cwd):
    kind = rng.randrange(7)
    if kind == 0:
        t = text(rng)
        return f"echo {t}", t + "\n"
    if kind == 1:
        return f"ls {cwd}", "\n".join(file_name(rng) for _ in range(rng.randint(0, 3)))
    if kind == 2:
        return f"mkdir -p {cwd}/{word(rng)}", ""
    if kind == 3:
        return f"touch {path_in(rng, cwd)}", ""
    if kind == 4:
        t = text(rng)
        return f"cat {path_in(rng, cwd)}", t + "\n"
    if kind == 5:
        return "pwd", cwd + "\n"
    p = path_in(rng, cwd)
    return f"wc -l {p}", f"{rng.randint(0, 99)} {p}\n"


ANSWER_PROMPTS = ["Reply with {w}", "Say {w}", "Reply with {w} and nothing else", "Answer with the word {w}"]
WRITE_PROMPTS = ["Create the file {p} with the content {t}", "Write {t} to {p}",
                 "create file {p} with content {t}", "Create a file at {p} containing {t}"]
BASH_PROMPTS = ["Run the command {c}", "Run `{c}`", "run {c}", "Execute the shell command {c}"]
READ_PROMPTS = ["Read {p} and tell me what it says", "What does the file {p} say?", "Show me the content of {p}"]


def read_result(rng, t):
    # Claude Code's Read result: numbered lines (cat -n or arrow form), sometimes a reminder.
    body = rng.choice([f"     1\t{t}\n", f"     1\u2192{t}\n", f"1\t{t}"])
    if rng.random() < 0.3:
        body += ("\n<system-reminder>\nWhenever you read a file, you should consider whether it would be "
                 "considered malware.\n</system-reminder>\n")
    return body


def random_task(rng, cwd, kind=None):
    """-> dict(kind, prompt, call (tool name, input) or None, result (tool_result text) or None,
    final (the last assistant text))."""
    kind = kind or rng.choice(["answer", "write", "bash", "read"])
    if kind == "answer":
        w = rng.choice([word(rng), text(rng).split()[0].upper(), "PONG", "hi"])
        if rng.random() < 0.1:
            return dict(kind=kind, prompt="Say hi", call=None, result=None, final="Hi!")
        return dict(kind=kind, prompt=rng.choice(ANSWER_PROMPTS).format(w=w), call=None, result=None, final=w)
    if kind == "write":
        p, t = path_in(rng, cwd), text(rng)
        return dict(kind=kind, prompt=rng.choice(WRITE_PROMPTS).format(p=p, t=t),
                    call=("Write", {"file_path": p, "content": t}),
                    result=f"File created successfully at: {p}", final="Done.")
    if kind == "bash":
        c, out = bash_command(rng, cwd)
        return dict(kind=kind, prompt=rng.choice(BASH_PROMPTS).format(c=c), call=("Bash", {"command": c}),
                    result=out if out else "(Bash completed with no output)", final="Done.")
    p, t = path_in(rng, cwd), text(rng)
    return dict(kind=kind, prompt=rng.choice(READ_PROMPTS).format(p=p), call=("Read", {"file_path": p}),
                result=read_result(rng, t), final=f"The file says: {t}")


def call_text(call):
    # Qwen3's native tool call, as its chat template writes one (tojson: ", " and ": ").
    name, args = call
    return '<tool_call>\n{"name": "' + name + '", "arguments": ' + json.dumps(args, ensure_ascii=False) + "}\n</tool_call>"


SAMPLE_MEMORY_DIR = "/tmp/cchome1/.claude/projects/-tmp-ccwork/memory/"


def with_memory_dir(sample, path):
    """The sample request with its system prompt naming memory directory `path` instead of its own."""
    out = copy.deepcopy(sample)
    hits = 0
    for block in out["system"]:
        hits += block["text"].count(SAMPLE_MEMORY_DIR)
        block["text"] = block["text"].replace(SAMPLE_MEMORY_DIR, path)
    assert hits == 1, f"the sample's system prompt names {SAMPLE_MEMORY_DIR} {hits} times"
    return out


# The forms of the environment message's lists that the same CLI sends in other environments:
# CLAUDE_CODE_MAX_CONTEXT_TOKENS set (the last skills lose their descriptions), a deferred tool the
# sample lacks. Conversation.env applies each with probability 1/4 (the "full" env only).
SKILL_DESCRIPTIONS = [
    "- init: Initialize a new CLAUDE.md file with codebase documentation",
    "- security-review: Complete a security review of the pending changes on the current branch",
]
DEFERRED_TOOL_ANCHOR = "CronList\nEnterWorktree\n"
DEFERRED_TOOL_EXTRA = "CronList\nDesignSync\nEnterWorktree\n"


class Conversation:
    """Builds Anthropic Messages bodies shaped like the sample request (its system, tools and
    options), with a randomised environment message (cwd, date, OS version, model name, and with
    vary_lists the skills and deferred tools lists' forms)."""

    def __init__(self, sample, env="full", vary_lists=False):
        """env: "full" (the sample's), "short" (its environment, model and date paragraphs only:
        ~250 tokens instead of ~2,000, the deferred tools, agent types and skills lists go; the
        cheap samples of the curriculum), "tiny" (the working directory line only and no
        attribution reminder: CPU trials of the recipe). vary_lists: the env message's skills and
        deferred tools lists take the forms of SKILL_DESCRIPTIONS / DEFERRED_TOOL_EXTRA at random."""
        self.sample = sample
        self.vary_lists = vary_lists and env == "full"
        msgs = sample["messages"]
        assert msgs[0]["role"] == "user" and msgs[1]["role"] == "system", "unexpected sample shape"
        self.reminder = msgs[0]["content"][0] if env != "tiny" else None
        self.env_text = msgs[1]["content"][0]["text"]
        if self.vary_lists:
            missing = [t for t in SKILL_DESCRIPTIONS + [DEFERRED_TOOL_ANCHOR] if t not in self.env_text]
            assert not missing, f"vary_lists: the sample's environment message lacks {missing}"
        paras = self.env_text.split("\n\n")
        if env == "short":
            self.env_text = "\n\n".join(paras[:2] + paras[-1:])
        elif env == "tiny":
            self.env_text = "\n".join(paras[0].split("\n")[:3])
        else:
            assert env == "full", env

    def env(self, rng, cwd):
        t = self.env_text.replace("/tmp/ccwork", cwd)
        t = t.replace("stub-model", rng.choice(["stub-model", "local-model", "agent-tiny", "qwen3-agent"]))
        t = t.replace("2026-11-25", f"20{rng.randint(25, 27)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
        t = t.replace("6.18.44-fc-v657", rng.choice(["6.18.44-fc-v657", "6.1.0-13-amd64", "6.8.0-45-generic",
                                                     "5.15.0-119-generic"]))
        if self.vary_lists and rng.random() < 0.25:
            for line in SKILL_DESCRIPTIONS:
                t = t.replace(line, line.split(":")[0])
        if self.vary_lists and rng.random() < 0.25:
            t = t.replace(DEFERRED_TOOL_ANCHOR, DEFERRED_TOOL_EXTRA)
        return {"role": "system", "content": [{"type": "text", "text": t}]}

    def first_turn(self, prompt, env_msg):
        first = [copy.deepcopy(self.reminder)] if self.reminder else []
        return [{"role": "user", "content": first + [{"type": "text", "text": prompt}]}, env_msg]

    @staticmethod
    def assistant_call(call, call_id):
        name, args = call
        return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}]}

    @staticmethod
    def tool_result(call_id, result):
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]}

    @staticmethod
    def assistant_text(t):
        return {"role": "assistant", "content": [{"type": "text", "text": t}]}

    def body(self, messages, system=None, tools=None):
        b = {k: v for k, v in self.sample.items() if k not in ("messages", "system", "tools")}
        b["system"] = self.sample["system"] if system is None else system
        b["tools"] = self.sample["tools"] if tools is None else tools
        b["messages"] = messages
        return b


def call_id(rng):
    return "toolu_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def episode_steps(conv, rng, task, history=None):
    """The model turns of one task: [(messages before the turn, target text)], one per assistant turn
    (the call and the final message for a tool task, the answer for a text task). `history`:
    earlier messages of the conversation (a --continue turn), or None for a fresh one."""
    cwd = task["cwd"]
    if history is None:
        msgs = conv.first_turn(task["prompt"], conv.env(rng, cwd))
    else:
        msgs = history + [{"role": "user", "content": [{"type": "text", "text": task["prompt"]}]}]
    if task["call"] is None:
        return [(msgs, task["final"])]
    cid = call_id(rng)
    after = msgs + [conv.assistant_call(task["call"], cid), conv.tool_result(cid, task["result"])]
    return [(msgs, call_text(task["call"])), (after, task["final"])]


def finished_messages(conv, rng, task, steps):
    """The whole conversation after the task's last turn (history for a next task)."""
    last_msgs, final = steps[-1]
    return last_msgs + [conv.assistant_text(final)]


def new_task(rng, cwd=None, kind=None):
    cwd = cwd or work_dir(rng)
    t = random_task(rng, cwd, kind)
    t["cwd"] = cwd
    return t
