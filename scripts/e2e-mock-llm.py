#!/usr/bin/env python3
"""Runs the shared loopback mock LLM with two changes for scripts/e2e-agents.sh.

The shared mock (../shared/tools/mock_llm.py, not part of this repository and not edited
here) answers a user text holding CALL_TOOL:<name> with one call to the tool whose name
ends in <name>, always with the arguments {"text": "ping-from-mock"}. The hub's `send`
tool needs `to`, `kind` and `body`, and refuses those arguments. This wrapper loads the
mock unchanged and:

1. Replaces those placeholder arguments, wherever the mock writes them (Anthropic
   tool_use input, OpenAI Responses/Chat arguments, Gemini functionCall args), with the
   JSON object in $MOCK_TOOL_ARGS. It does this by giving the mock module a `json` whose
   `dumps` substitutes the placeholder object before encoding; nothing else changes.
2. If $MOCK_GATE_FILE is set, holds the answer to any request that carries a tool result
   until that file exists (at most $MOCK_GATE_SECS seconds, default 60). The e2e script
   uses it to send the other identity's reply *while the agent's turn is still running*,
   deterministically: the agent cannot reach its Stop hook before the reply is queued.
   A tool-search result is let through: Claude Code (2.1.2xx on) defers MCP tools behind
   its ToolSearch tool, which the mock calls first to load the hub's tool; holding that
   result would hold the agent before it ever calls the tool the gate is for.
3. If $MOCK_REQUEST_LOG is set, appends one JSON line per answered model request:
   {"n": the mock's answer number, "reply": [kind, value], "body": the whole request}. The
   mock's own $MOCK_LOG keeps only the last user text, and skips user text that starts
   with "<" (Codex's <hook_prompt> feedback); the checks need the whole request.

usage: e2e-mock-llm.py MOCK_LLM_PY PORT      (loopback only, like the mock itself)
"""
import importlib.util
import json as _json
import os
import sys
import threading
import time

PLACEHOLDER = {"text": "ping-from-mock"}


def load_mock(path):
    sys.dont_write_bytecode = True  # leave no __pycache__ beside the shared mock
    spec = importlib.util.spec_from_file_location("mock_llm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # the mock's own main() is guarded by __name__
    return mod


def substitute(obj, args):
    if obj == PLACEHOLDER:
        return args
    if isinstance(obj, dict):
        return {k: substitute(v, args) for k, v in obj.items()}
    if isinstance(obj, list):
        return [substitute(v, args) for v in obj]
    return obj


class JsonShim:
    """Stands in for the `json` module inside the mock: dumps substitutes, the rest is json."""

    def __init__(self, args):
        self.args = args

    def dumps(self, obj, *a, **kw):
        return _json.dumps(substitute(obj, self.args), *a, **kw)

    def __getattr__(self, name):
        return getattr(_json, name)


def carries_tool_result(body, is_search_tool=None):
    """True when the request returns a tool's result to the model, a tool search's aside."""
    if isinstance(body.get("messages"), list) and is_search_tool is not None:
        # Anthropic: tool_result blocks name their tool_use by id; the ids of the search
        # tool's uses (the tool the mock's own is_search_tool recognises) do not count.
        search = {t.get("name") for t in body.get("tools") or [] if is_search_tool(t)}
        blocks = [b for m in body["messages"] if isinstance(m.get("content"), list)
                  for b in m["content"] if isinstance(b, dict)]
        if any(b.get("type") == "tool_result" for b in blocks):
            search_ids = {b.get("id") for b in blocks
                          if b.get("type") == "tool_use" and b.get("name") in search}
            return any(b.get("type") == "tool_result" and b.get("tool_use_id") not in search_ids
                       for b in blocks)
    text = _json.dumps(body)
    # Anthropic, OpenAI Responses, Gemini, OpenAI Chat (OpenCode's provider).
    markers = ('"tool_result"', '"function_call_output"', '"functionResponse"', '"role": "tool"')
    return any(m in text for m in markers)


CURRENT = threading.local()  # the request body being answered, for the request log
LOG_LOCK = threading.Lock()


def wrap_handler(handler, gate, limit, is_search_tool):
    def wrapped(self, body, *a, **kw):
        if gate and carries_tool_result(body, is_search_tool):
            deadline = time.monotonic() + limit
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)
        CURRENT.body = body
        return handler(self, body, *a, **kw)

    return wrapped


def logging_decide(decide, path):
    def wrapped(*a, **kw):
        n, choice = decide(*a, **kw)
        line = _json.dumps({"n": n, "reply": list(choice), "body": getattr(CURRENT, "body", None)})
        with LOG_LOCK, open(path, "a") as f:
            f.write(line + "\n")
        return n, choice

    return wrapped


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: e2e-mock-llm.py MOCK_LLM_PY PORT")
    mock = load_mock(sys.argv[1])
    args = _json.loads(os.environ.get("MOCK_TOOL_ARGS", "null"))
    if args is not None:
        mock.json = JsonShim(args)
    gate = os.environ.get("MOCK_GATE_FILE")
    limit = float(os.environ.get("MOCK_GATE_SECS", "60"))
    for name in ("anthropic", "openai_responses", "openai_chat", "gemini"):
        setattr(mock.H, name, wrap_handler(getattr(mock.H, name), gate, limit,
                                           getattr(mock, "is_search_tool", None)))
    if os.environ.get("MOCK_REQUEST_LOG"):
        # The handlers call the module-level decide() by name, so replacing it is enough.
        mock.decide = logging_decide(mock.decide, os.environ["MOCK_REQUEST_LOG"])
    port = int(sys.argv[2])
    srv = mock.ThreadingHTTPServer(("127.0.0.1", port), mock.H)
    print("e2e mock llm on 127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
