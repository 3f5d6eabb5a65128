#!/usr/bin/env python3
"""Drives real OpenCode for scripts/e2e-agents.sh: `opencode serve` plus its HTTP API.

`opencode run` exits at the first idle, before a turn the agent-hub plugin injects there can
run; a server stays up, so the injected turn runs. This script:

1. starts `OPENCODE serve --hostname 127.0.0.1 --port 0` (its stderr is passed through; the
   port is read from its "opencode server listening on http://127.0.0.1:PORT" line) with a
   random basic-auth password ($OPENCODE_SERVER_PASSWORD), so no other local user can
   drive it;
2. creates a session (POST /session) and prompts it once (POST /session/ID/prompt_async);
3. polls the session (GET /session/status, GET /session/ID/message) until it has been idle,
   with no new message, for $E2E_OC_QUIET seconds (default 3) after at least
   $E2E_OC_TURNS user messages (default 2: the prompt and the turn a plugin injected), or
   for $E2E_OC_INJECT_WAIT seconds (default 30) with fewer;
4. prints one JSON object: {"port", "session", "user_messages", "final" (the text of the
   last assistant message), "messages" (the session's messages as the API returned them)};
5. stops the server (SIGTERM, then SIGKILL after 5 s) and exits 0, or 3 when fewer than
   $E2E_OC_TURNS user messages were seen, 1 on any other failure.

usage: e2e-opencode.py OPENCODE_BIN PROMPT      (run it in the project folder; loopback only)
"""
import base64
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request

QUIET = float(os.environ.get("E2E_OC_QUIET", "3"))
INJECT_WAIT = float(os.environ.get("E2E_OC_INJECT_WAIT", "30"))
TURNS = int(os.environ.get("E2E_OC_TURNS", "2"))


def say(msg):
    print("e2e-opencode: " + msg, file=sys.stderr, flush=True)


class Api:
    def __init__(self, port, password):
        self.base = "http://127.0.0.1:%d" % port
        cred = base64.b64encode(("opencode:" + password).encode()).decode()
        self.headers = {"Authorization": "Basic " + cred, "Content-Type": "application/json"}
        # Loopback only: never through a proxy from the environment.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=self.headers)
        with self.opener.open(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None


def start_server(binary, password):
    env = dict(os.environ, OPENCODE_SERVER_PASSWORD=password)
    proc = subprocess.Popen([binary, "serve", "--hostname", "127.0.0.1", "--port", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    found = {}
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            text = line.decode("utf-8", "replace").rstrip()
            print("opencode serve: " + text, file=sys.stderr, flush=True)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m and not ready.is_set():
                found["port"] = int(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(60)
    return proc, found.get("port")


def stop_server(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def user_messages(msgs):
    return sum(1 for m in msgs if m.get("info", {}).get("role") == "user")


def settled(msgs):
    """The last message is a finished assistant message."""
    if not msgs:
        return False
    info = msgs[-1].get("info", {})
    return info.get("role") == "assistant" and bool(info.get("time", {}).get("completed"))


def final_text(msgs):
    for m in reversed(msgs):
        if m.get("info", {}).get("role") == "assistant":
            return "".join(p.get("text", "") for p in m.get("parts", []) if p.get("type") == "text")
    return ""


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: e2e-opencode.py OPENCODE_BIN PROMPT")
    binary, prompt = sys.argv[1], sys.argv[2]
    password = secrets.token_hex(16)
    proc, port = start_server(binary, password)
    rc = 1
    try:
        if not port:
            say("opencode serve did not report its port (exit %s)" % proc.poll())
            return 1
        api = Api(port, password)
        sid = api.call("POST", "/session", {})["id"]
        say("server on 127.0.0.1:%d, session %s" % (port, sid))
        api.call("POST", "/session/%s/prompt_async" % sid, {"parts": [{"type": "text", "text": prompt}]})
        seen_busy = False
        last, since, msgs = None, time.monotonic(), []
        while True:
            if proc.poll() is not None:
                say("opencode serve exited %s" % proc.returncode)
                break
            busy = sid in (api.call("GET", "/session/status") or {})
            msgs = api.call("GET", "/session/%s/message" % sid) or []
            seen_busy = seen_busy or busy or bool(msgs)
            state = (busy, len(msgs), json.dumps(msgs[-1].get("info", {}) if msgs else None))
            now = time.monotonic()
            if state != last:
                last, since = state, now
            quiet = now - since
            if seen_busy and not busy and settled(msgs):
                if user_messages(msgs) >= TURNS and quiet >= QUIET:
                    rc = 0
                    break
                if quiet >= INJECT_WAIT:
                    say("only %d user message(s) after %.0f s idle" % (user_messages(msgs), quiet))
                    rc = 3
                    break
            time.sleep(0.2)
        print(json.dumps({"port": port, "session": sid, "user_messages": user_messages(msgs),
                          "final": final_text(msgs), "messages": msgs}))
        return rc
    except Exception as e:  # noqa: BLE001 - any failure is reported, the server still stopped
        say("failed: %r" % e)
        return 1
    finally:
        stop_server(proc)


if __name__ == "__main__":
    sys.exit(main())
