#!/usr/bin/env python3
"""The official Python MCP SDK against `agent-hub mcp` (scripts/mcp-clients.sh; issue 12,
"Typed MCP tools"). Two identities, worker and orchestrator, each its own stdio server:

  1. lists the tools and checks every input schema is a valid JSON Schema (Draft 2020-12,
     via `jsonschema`, which the SDK depends on) whose every property has a `type`;
  2. validates sample arguments against those schemas: a structured send body is valid, an
     await timeout above the cap is not;
  3. worker sends orchestrator a structured body; orchestrator awaits it; the body arrives as
     a JSON object, equal to what was sent;
  4. worker's `status` with waitFor=acked reports acked by reader mcp-await.

usage: mcp-clients-sdk.py AGENT_HUB PORT WORKER_TOKEN_FILE ORCHESTRATOR_TOKEN_FILE
Prints one "PASS name" or "FAIL name: why" line per check; exits 1 if any failed.
"""
import asyncio
import json
import sys

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BIN, PORT, TOK_W, TOK_O = sys.argv[1:5]
failures = 0


def check(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS sdk-{name}")
    else:
        failures += 1
        print(f"FAIL sdk-{name}: {why}")


def params(name, token_file):
    return StdioServerParameters(
        command=BIN,
        args=["mcp", "--as", name, "--token-file", token_file, "--port", PORT],
    )


def text(result):
    return result.content[0].text


def input_schema(tool):
    # `inputSchema` in SDK 1.x, `input_schema` in 2.x.
    return getattr(tool, "input_schema", None) or getattr(tool, "inputSchema")


def is_error(result):
    # `isError` in SDK 1.x, `is_error` in 2.x.
    return getattr(result, "is_error", getattr(result, "isError", None))


async def main():
    async with stdio_client(params("worker", TOK_W)) as (rw, ww), stdio_client(
        params("orchestrator", TOK_O)
    ) as (ro, wo):
        async with ClientSession(rw, ww) as w, ClientSession(ro, wo) as o:
            await w.initialize()
            await o.initialize()
            tools = {t.name: t for t in (await w.list_tools()).tools}
            check("tools", "send" in tools and "status" in tools, sorted(tools))
            bad = []
            for name, t in tools.items():
                schema = input_schema(t)
                try:
                    jsonschema.Draft202012Validator.check_schema(schema)
                except jsonschema.SchemaError as e:
                    bad.append(f"{name}: {e.message}")
                for arg, prop in schema.get("properties", {}).items():
                    if "type" not in prop:
                        bad.append(f"{name}.{arg} has no type")
            check("schemas-typed", not bad, "; ".join(bad))

            body = {"task": "review", "files": ["a.rs", "b.rs"], "depth": 2, "urgent": False}
            send_args = {"to": "orchestrator", "kind": "task", "body": body}
            v = jsonschema.Draft202012Validator(input_schema(tools["send"]))
            errs = [e.message for e in v.iter_errors(send_args)]
            check("send-args-valid", not errs, "; ".join(errs))
            v = jsonschema.Draft202012Validator(input_schema(tools["await"]))
            check(
                "await-cap-in-schema",
                not v.is_valid({"timeoutSecs": 3600}) and v.is_valid({"timeoutSecs": 5}),
                "timeoutSecs bounds not declared",
            )

            sent = await w.call_tool("send", send_args)
            check("send", is_error(sent) is False, text(sent))
            msg_id = text(sent)
            got = await o.call_tool("await", {"timeoutSecs": 10})
            try:
                env = json.loads(text(got))
            except ValueError:
                env = {}
            check(
                "body-is-object",
                isinstance(env.get("body"), dict) and env["body"] == body,
                f"got {env.get('body')!r}",
            )
            st = await w.call_tool(
                "status", {"id": msg_id, "waitFor": "acked", "timeoutSecs": 10}
            )
            try:
                st = json.loads(text(st))
            except ValueError:
                st = {"raw": text(st)}
            check(
                "status-acked-by-mcp-await",
                (st.get("state"), st.get("reader"), st.get("wait"))
                == ("acked", "mcp-await", "reached"),
                json.dumps(st),
            )


asyncio.run(main())
sys.exit(1 if failures else 0)
