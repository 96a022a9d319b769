#!/usr/bin/env python3
"""A hostile pass over headroom-cli's input surfaces (issue 32): config.json fields, training-config
keys, files that are not files (FIFOs, devices, folders, links, huge or empty ones), command-line
values and --out targets. Each case runs the real CLI and is held to the promises of
docs/security.md:

- it ends within 10 s, never by a signal, with exit 0, 1 or 2;
- a refusal (exit 2) is one line on stderr that names a field or flag (" = ");
- nothing it prints holds a control character (a terminal escape, a forged line);
- an estimate it gives has no negative byte count;
- a file planted where --out writes (a link's target, a FIFO, /dev/null) is left as it was.

    scripts/hostile.py CLI [EXPLORER [PROBE]]
        e.g. build/dev/app/headroom-cli build/dev/app/gui/headroom build/dev/probes/headroom-probe
        prints one line per failure, then a count; with the explorer its files, with the probe its
        requests (a valid one runs a real CPU step of a tiny model)

Exit 1 when any case breaks a promise. ctest runs it (`hostile`).
"""
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile

BASE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512}
# Raw JSON texts, so values JSON libraries would not write (2^64 - 1, huge exponents) go in as typed.
BAD_VALUES = ["0", "-1", "2147483648", "9223372036854775807", "18446744073709551615", "1e308", "-1e308",
              "1.5", "\"12\"", "null", "[]", "{}", "true", "\"\\u001b[2J\\nheadroom-cli: ok\"", "1e400"]
CONFIG_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim", "model_type",
                 "tie_word_embeddings", "rope_scaling", "torch_dtype", "sliding_window"]
YAML_KEYS = ["micro_batch_size", "sequence_len", "gradient_accumulation_steps", "lora_r", "lora_alpha",
             "lora_dropout", "optimizer", "adapter", "learning_rate", "gradient_checkpointing", "\"\\e[2Jkey\""]
YAML_VALUES = ["0", "-1", "1e15", "1e400", "abc", "null", "[1, 2]", "{a: 1}", "\"\\e[31mred\\nforged\"",
               "../../../../etc/passwd", "500_000", ""]
QT_NOTICES = ("This plugin does not support propagateSizeHints()", "QStandardPaths: XDG_RUNTIME_DIR")
FLAGS = ["--batch", "--seq", "--grad-accum", "--lora-rank", "--gpus", "--zero", "--reserve", "--lora-dropout",
         "--gpu", "--precision", "--optimizer", "--checkpoint-layers"]
FLAG_VALUES = ["0", "-1", "1e9", "abc", "", "\x1b[2J", "99999999999999999999", "nan", "inf", "0x10"]


class Pass:
    def __init__(self, cli, root):
        self.cli, self.root, self.cases, self.failures = cli, root, 0, []

    def run(self, name, args, out_json=False, victims=(), exe=None, timeout=10, env=None, codes=(0, 1, 2)):
        self.cases += 1
        before = {v: fingerprint(v) for v in victims}
        try:
            p = subprocess.run([exe or self.cli] + args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                               env=env)
        except subprocess.TimeoutExpired:
            return self.fail(name, f"ran past {timeout} s")
        except OSError as e:
            return self.fail(name, f"cannot start {exe or self.cli}: {e.strerror}")
        out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        # Qt's own offscreen-platform notices are not Headroom's words.
        err = "".join(l for l in err.splitlines(True) if not l.startswith(QT_NOTICES))
        if p.returncode not in codes:
            return self.fail(name, f"exit {p.returncode}: {err.strip()[-200:]}")
        # The JSON library's own exception escaping (type_error.302 once reached the explorer);
        # a parse error is reported as "not valid JSON" with the parser's position, which is fine.
        if "json.exception" in err and "not valid JSON" not in err:
            return self.fail(name, f"a raw JSON library message: {err.strip()[:200]}")
        for text, where in ((out, "stdout"), (err, "stderr")):
            bad = [c for c in text if ord(c) < 32 and c not in "\n\t"]
            if bad:
                return self.fail(name, f"a control character ({ord(bad[0]):#x}) on {where}")
        if p.returncode == 2 or (p.returncode not in (0, 1) and codes != (0, 1, 2)):
            lines = [l for l in err.split("\n") if l]
            if len(lines) != 1 or " = " not in lines[0]:
                return self.fail(name, f"refusal is not one line naming a field: {err.strip()[:300]!r}")
        if out_json and p.returncode == 0:
            try:
                doc = json.loads(out)
            except ValueError:
                return self.fail(name, "--json output is not JSON")
            if any(v < 0 for v in numbers(doc.get("peak", {}))):
                return self.fail(name, f"a negative byte count: {doc.get('peak')}")
        for v, fp in before.items():
            if fingerprint(v) != fp:
                return self.fail(name, f"{v} was changed")

    def fail(self, name, why):
        self.failures.append(f"{name}: {why}")

    def path(self, name):
        return os.path.join(self.root, name)

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return self.path(name)


def numbers(d):
    return [v for v in d.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]


def fingerprint(path):
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            return ("file", hashlib.sha256(f.read()).hexdigest())
    return (stat.S_IFMT(st.st_mode), st.st_rdev, os.readlink(path) if stat.S_ISLNK(st.st_mode) else "")


def config_cases(h):
    base = json.dumps(BASE)
    for field in CONFIG_FIELDS:
        for i, value in enumerate(BAD_VALUES):
            text = base[:-1] + f', "{field}": {value}}}' if field not in BASE else \
                base.replace(f'"{field}": {json.dumps(BASE[field])}', f'"{field}": {value}')
            path = h.write(f"config-{field}-{i}.json", text)
            h.run(f"config.json {field} = {value}", ["estimate", "--model", path, "--json"], out_json=True)


def yaml_cases(h):
    model = h.write("tiny.json", json.dumps(BASE))
    for key in YAML_KEYS:
        for i, value in enumerate(YAML_VALUES):
            text = f"base_model: {model}\nadapter: lora\n{key}: {value}\n" if key != "adapter" else \
                f"base_model: {model}\nadapter: {value}\n"
            path = h.write(f"recipe-{len(h.failures)}-{YAML_KEYS.index(key)}-{i}.yml", text)
            h.run(f"recipe {key}: {value}", ["estimate", "--from", path, "--json"], out_json=True)


def file_cases(h):
    fifo = h.path("fifo.json")
    os.mkfifo(fifo)
    secret = h.write("secret.txt", "root:x:0:0:secret\n")
    link = h.path("link.json")
    os.symlink(secret, link)
    big = h.path("big.json")
    with open(big, "wb") as f:
        f.truncate(80 << 20)  # sparse: its size is refused before a byte is read
    deep = h.write("deep.json", "[" * 100000 + "]" * 100000)
    nul = h.write("nul.json", b'{"model_type": "llama"\x00, "hidden_size": 64}')
    empty = h.write("empty.json", "")
    multi = h.write("multi.yml", "micro_batch_size: 2\n---\nmicro_batch_size: 4\n")
    deep_yaml = h.write("deep.yml", "a:\n" + "".join("  " * (i + 1) + "b:\n" for i in range(300)))
    os.mkdir(h.path("folder"))
    targets = [fifo, "/dev/zero", "/dev/null", h.path("folder"), link, big, deep, nul, empty, multi, deep_yaml,
               "/nonexistent/x.json", h.path("recipe-dir/../fifo.json")]
    for t in targets:
        for args in (["estimate", "--model", t], ["estimate", "--from", t], ["compare", t],
                     ["estimate", "--from-trace", t], ["timeline", "--model", t]):
            h.run(f"{' '.join(args[:-1])} {os.path.basename(t)}", args)


def flag_cases(h):
    for flag in FLAGS:
        for value in FLAG_VALUES:
            h.run(f"estimate {flag} {value!r}", ["estimate", "--model", "llama-3.2-1b", flag, value, "--json"],
                  out_json=True)


def out_cases(h):
    victim = h.write("victim.txt", "keep me\n")
    for name, make in (("link", lambda p: os.symlink(victim, p)), ("fifo", os.mkfifo), ("folder", os.mkdir)):
        target = h.path(f"out-{name}")
        make(target)
        for planted in ("", ".headroom-tmp"):
            if planted:
                os.symlink(victim, target + planted) if not os.path.lexists(target + planted) else None
            h.run(f"export --out {name}{planted}", ["export", "--model", "llama-3.2-1b", "--format", "axolotl",
                                                    "--out", target], victims=[victim] if name != "link" else [])
    h.run("export --out /dev/null", ["export", "--model", "llama-3.2-1b", "--format", "axolotl", "--out", "/dev/null"],
          victims=["/dev/null"])
    # A write that fails (the file-size limit at 0, as a full disk would): refused in one line, the
    # old file kept, no temporary left beside it.
    full = ["-c", "trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"", h.cli]
    kept = h.write("kept.yml", "keep me\n")
    h.run("export --out on a full disk", full + ["export", "--model", "llama-3.2-1b", "--format", "axolotl",
                                                  "--out", kept], exe="/bin/sh", victims=[kept])
    if any(n.startswith("kept.yml.") for n in os.listdir(h.root)):
        h.fail("export --out on a full disk", "a temporary was left beside the file")


def gui_cases(h, gui):
    """The explorer's files (--model, --config, --measurement, --timeline), rendered offscreen: the
    same kinds of not-a-file and hostile contents, each refused in one line or opened."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_RUNTIME_DIR=h.path("runtime"),
               XDG_CONFIG_HOME=h.path("gui-config"))
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    shot = h.path("shot.png")
    escape = "\u001b[2J\nheadroom: all good"
    contents = {
        "escaped-type.json": json.dumps(dict(BASE, model_type="\x1b[2J")).replace("\\x1b", "\\u001b"),
        "sheet-bad.json": '{"schema_version": 1, "kind": "budget_sheet", "scenario": {"model": 5}}',
        "sheet-escape.json": '{"schema_version": 1, "kind": "budget_sheet", "notes": "' + escape + '"}',
        "result-escape.json": '{"schema_version": 1, "event": "result", "device_name": "' + escape + '", "phases": []}',
        "timeline-huge.json": '{"schema_version": 1, "kind": "probe_timeline", "events": [[0, 1, 1e300]]}',
        "not-json.json": "<img src='/etc/hosts'>",
    }
    files = [h.write(n, t) for n, t in contents.items()]
    files += [h.path(n) for n in ("fifo.json", "link.json", "big.json", "deep.json", "nul.json", "empty.json", "folder")]
    files += ["/dev/zero", "/nonexistent/x.json"]
    for f in files:
        for opt in ("--model", "--config", "--measurement", "--timeline"):
            h.run(f"explorer {opt} {os.path.basename(f)}", [opt, f, "--screenshot", shot], exe=gui, timeout=30, env=env)
    kept = h.write("kept.png", "keep me\n")
    h.run("explorer --screenshot on a full disk",
          ["-c", "trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"", gui, "--model", "llama-3.2-1b", "--screenshot", kept],
          exe="/bin/sh", timeout=30, env=env, victims=[kept])
    # Wrong types in a sheet's fields, one leaf at a time (a raw nlohmann type_error reached the
    # explorer once, issue 32 row 15): the sheets of tests/data/sheets, about eight leaves each.
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "sheets")
    for name in sorted(os.listdir(root)):
        try:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                doc = json.load(f)
        except (ValueError, RecursionError):  # the deliberately broken ones
            continue
        paths = list(leaf_paths(doc))
        for path in paths[:: max(1, len(paths) // 8)]:
            for value in ({}, "x"):
                mutated = json.loads(json.dumps(doc))
                set_path(mutated, path, value)
                target = h.write("typed-sheet.json", json.dumps(mutated))
                h.run(f"explorer --config {name} {'/'.join(map(str, path))} = {json.dumps(value)}",
                      ["--config", target, "--screenshot", shot], exe=gui, timeout=30, env=env)


def leaf_paths(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaf_paths(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            yield from leaf_paths(v, path + (i,))
    else:
        yield path


def set_path(x, path, value):
    for p in path[:-1]:
        x = x[p]
    x[path[-1]] = value


def probe_cases(h, probe):
    """headroom-probe's --request: a tiny valid request with one field made hostile at a time, and
    the not-a-file kinds. Exit 0, 2 (refused), 3 (out of memory) or 4 (no such device) only."""
    base = {"schema_version": 1, "kind": "probe_request", "steps": 1, "device": "cpu",
            "model": {"headroom": {"id": "tiny", "name": "tiny"}, "config": BASE},
            "config": {"precision": "fp32", "optimizer": "adamw", "finetune": "full", "micro_batch": 1, "seq_len": 32}}
    text = json.dumps(base)
    fields = [("steps", json.dumps(1)), ("device", json.dumps("cpu")), ("micro_batch", json.dumps(1)),
              ("seq_len", json.dumps(32)), ("precision", json.dumps("fp32")), ("hidden_size", json.dumps(64)),
              ("kind", json.dumps("probe_request")), ("schema_version", json.dumps(1))]
    values = ["0", "-1", "18446744073709551615", "1e400", "\"\u001b[2J\\nforged\"", "null", "[]", "\"gpu\""]
    for field, current in fields:
        for i, value in enumerate(values):
            bad = text.replace(f'"{field}": {current}', f'"{field}": {value}', 1)
            path = h.write(f"request-{field}-{i}.json", bad)
            h.run(f"probe {field} = {value}", ["--request", path], exe=probe, timeout=30, codes=(0, 2, 3, 4))
    for f in [h.path(n) for n in ("fifo.json", "link.json", "big.json", "deep.json", "nul.json", "empty.json",
                                  "folder")] + ["/dev/zero", "/nonexistent/x.json"]:
        h.run(f"probe --request {os.path.basename(f)}", ["--request", f], exe=probe, timeout=30, codes=(0, 2, 3, 4))


def hub_cases(h):
    """Hub ids against tests/hub_server.py on loopback, with a token set: redirects to another host,
    loops, file:// targets, short bodies, a server that does not answer in time, odd ids. No request
    that reached the redirect's target (another host) may carry the token; the cache keeps nothing
    broken."""
    server = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "hub_server.py")
    log = h.path("hub.log")
    proc = subprocess.Popen([sys.executable, server, "--log", log], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        port = int(proc.stdout.readline())
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_TOKEN="hf_test_good",
                   HF_HUB_CACHE=h.path("hub-cache"), HEADROOM_HUB_TIMEOUT="2")
        env.pop("HF_HUB_OFFLINE", None)
        model = "TinyLlama-1.1B-Chat-v1.0"
        ids = [f"{org}/{model}" for org in ("elsewhere-org", "loop-org", "file-org", "short-org", "slow-org",
                                            "old-name", "gated-org", "TinyLlama", "nosuch-org")]
        ids += ["a--b/c", "a/b--c", "../etc/passwd", "org/..", "org/name\x1b[2J", "org/" + "n" * 300, "org/name.json"]
        for i in ids:
            h.run(f"hub {i[:60]}", ["estimate", "--model", i], env=env)
        # The redirect's target is localhost (another host than 127.0.0.1) on the same server, whose
        # log cannot tell the two apart: elsewhere-org runs alone, and its redirected requests (the
        # /TinyLlama/ paths) must carry no token.
        open(log, "w").close()
        h.run("hub elsewhere-org (token)", ["estimate", "--model", f"elsewhere-org/{model}"],
              env=dict(env, HF_HUB_CACHE=h.path("hub-cache-2")))
        with open(log, encoding="utf-8") as f:
            lines = [l.rstrip("\n") for l in f]
        for line in lines:
            if line.startswith("GET /TinyLlama/") and "Bearer" in line:
                h.fail("hub elsewhere-org (token)", f"the token went to the redirect's other host: {line}")
    finally:
        proc.stdin.close()
        proc.wait(timeout=5)


def main():
    cli = sys.argv[1] if len(sys.argv) > 1 else "build/dev/app/headroom-cli"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update({"HF_HUB_OFFLINE": "1"})
    os.environ.clear()
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as root:
        os.environ["HF_HUB_CACHE"] = os.path.join(root, "hub")
        os.environ["XDG_CACHE_HOME"] = os.path.join(root, "cache")
        h = Pass(cli, root)
        for cases in (config_cases, yaml_cases, file_cases, flag_cases, out_cases, hub_cases):
            cases(h)
        if len(sys.argv) > 2:
            gui_cases(h, sys.argv[2])
        if len(sys.argv) > 3:
            probe_cases(h, sys.argv[3])
    for f in h.failures:
        print(f)
    print(f"hostile: {h.cases} cases, {len(h.failures)} broke a promise")
    return 1 if h.failures or h.cases < 400 else 0


if __name__ == "__main__":
    sys.exit(main())
