"""A stdio MCP server with many tools, standard library only (tests of Claude Code's tool search).

`python mcp_many_tools.py [N]` serves N tools (default 40) named `probe_tool_00` … over
newline-delimited JSON-RPC 2.0 on stdin/stdout: `initialize`, `tools/list`, `tools/call`
(answers the tool's name and arguments, then `pages` lines of a document when the arguments
ask for them) and `ping`; anything else is "method not found".
Each tool has a description and a small input schema of the size real servers send.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL_VERSION = "2025-06-18"


def tools(n: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"probe_tool_{i:02d}",
            "description": (
                f"Probe tool number {i}: looks up record {i} in the test inventory and returns "
                "its fields. Use it when the user asks about that record; it never changes "
                "anything and answers with a short JSON document."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "record_id": {"type": "string", "description": "the record to look up"},
                    "fields": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "which fields to return (all when omitted)",
                    },
                    "verbose": {"type": "boolean", "description": "include history"},
                },
                "required": ["record_id"],
            },
        }
        for i in range(n)
    ]


def answer(msg: dict[str, Any], n: int) -> dict[str, Any] | None:
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None  # a notification (notifications/initialized, cancelled, …)
    if method == "initialize":
        result: Any = {
            "protocolVersion": msg.get("params", {}).get("protocolVersion", PROTOCOL_VERSION),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "many-tools", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": tools(n)}
    elif method == "tools/call":
        params = msg.get("params", {})
        args = params.get("arguments") or {}
        text = json.dumps({"tool": params.get("name"), "arguments": args})
        pages = args.get("pages") if isinstance(args, dict) else None
        if isinstance(pages, int) and 0 < pages <= 10_000:  # a long document, as a fetch returns
            text += "".join(f"\nsection {i}: details of the record, page {i}" for i in range(pages))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "not found"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        reply = answer(msg, n) if isinstance(msg, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
