#!/usr/bin/env python3
"""A loopback stand-in for the Hugging Face Hub, for tst_cli and tst_gui: the Hub's URL layout
(/<org>/<name>/resolve/main/<file>) served from tests/data/hub, with its headers (X-Repo-Commit,
ETag) and its answers: 401/403 for a gated repo without/with a token lacking access, 404, a 307
for a renamed repo, and a repo that never answers in time. Hostile answers (issue 32, rows 1 and 13):
elsewhere-org redirects to another host of the same machine (localhost), loop-org redirects to
itself, file-org to a file:// URL, short-org sends less than its Content-Length. Prints its port, then serves until
stdin closes. Every request is appended to --log as one line: method, path, Authorization."""
import argparse
import hashlib
import http.server
import os
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hub")
GOOD_TOKEN = "hf_test_good"          # has access to gated-org/*
NO_ACCESS_TOKEN = "hf_test_noaccess"  # valid, but not granted


class Handler(http.server.BaseHTTPRequestHandler):
    log_path = None

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(f"GET {self.path} {auth}\n")
        parts = self.path.split("/")
        # ['', org, name, 'resolve', 'main', file]
        if len(parts) != 6 or parts[3] != "resolve" or parts[4] != "main":
            return self.reply(404, b"Entry not found", [("X-Error-Code", "EntryNotFound")])
        org, name, file = parts[1], parts[2], parts[5]
        if org == "old-name":  # a renamed repo: the Hub redirects
            return self.reply(307, b"", [("Location", f"/TinyLlama/{name}/resolve/main/{file}")])
        port = self.server.server_address[1]
        if org == "elsewhere-org":  # another host (same machine, same port): no token may follow
            return self.reply(307, b"", [("Location", f"http://localhost:{port}/TinyLlama/{name}/resolve/main/{file}")])
        if org == "loop-org":
            return self.reply(302, b"", [("Location", self.path)])
        if org == "file-org":
            return self.reply(302, b"", [("Location", "file:///etc/passwd")])
        if org == "short-org":  # promises more than it sends, then closes
            body = open(os.path.join(ROOT, "TinyLlama", name, file), "rb").read()
            self.send_response(200)
            self.send_header("X-Repo-Commit", hashlib.sha1(b"short").hexdigest())
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
            return
        if org == "slow-org":
            time.sleep(30)
            return self.reply(504)
        if org == "gated-org":
            token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
            if token == NO_ACCESS_TOKEN:
                return self.reply(403, b"Access to model is restricted", [("X-Error-Code", "GatedRepo")])
            if token != GOOD_TOKEN:
                return self.reply(401, b"Access to model is restricted", [("X-Error-Code", "GatedRepo")])
        path = os.path.join(ROOT, org, name, file)
        if not os.path.isfile(path):
            code = "EntryNotFound" if os.path.isdir(os.path.join(ROOT, org, name)) else "RepoNotFound"
            return self.reply(404, b"not found", [("X-Error-Code", code)])
        body = open(path, "rb").read()
        commit = hashlib.sha1(f"{org}/{name}".encode()).hexdigest()
        etag = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's blob id, as the Hub sends
        self.reply(200, body, [("X-Repo-Commit", commit), ("ETag", f'"{etag}"'),
                               ("Content-Type", "application/json")])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log")
    a = ap.parse_args()
    Handler.log_path = a.log
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(srv.server_address[1], flush=True)
    sys.stdin.read()  # until the test closes our stdin or ends
    srv.shutdown()


if __name__ == "__main__":
    main()
