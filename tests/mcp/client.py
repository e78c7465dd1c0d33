"""A real MCP client (the `mcp` package from PyPI) driving `bl mcp` over stdio.

Usage: client.py BL WORKSPACE SCRIPT.json [EXTRA_ARGS.json]
EXTRA_ARGS.json (optional) is a list of further arguments to `bl mcp`.
SCRIPT.json is a list of [tool, arguments] calls ("$resource" {uri} reads
a resource, "$prompt" {name, arguments} gets a prompt, "$sleep" {seconds}
waits), or [tool, arguments,
{"until": TEXT}] to call again every 0.2 s (for at most 60 s) until the
answer holds TEXT; an argument written "$token:N" is replaced by the
confirm_token call N answered with, and "$run:N" by the run it named. The client initializes,
lists the tools, makes each call (following `_page.next_cursor` until a
paged result is whole), and prints one JSON report on stdout:
{"protocol_version", "server", "tools": [...], "calls": [{tool, arguments,
is_error, result (the text block parsed as JSON), pages, largest_page (in
bytes), meta (its _meta)}]}. With $MCP_URL set
it speaks Streamable HTTP to that endpoint instead (see `transport`). With
$MCP_PROGRESS set, each call's record is also appended to that file as one
JSON line as soon as it is made (a test acts on it while the session goes on).
"""
import json
import os
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def token_of(report, value):
    for mark, key in (("$token:", "confirm_token"), ("$run:", "run")):
        if isinstance(value, str) and value.startswith(mark):
            return report["calls"][int(value[len(mark):])]["result"][key]
    return value


def transport(bl, workspace, extra):
    """stdio to a `bl mcp` it starts; or, with $MCP_URL (and $MCP_TOKEN as
    the bearer token), Streamable HTTP to a `bl mcp --http` already serving."""
    if os.environ.get("MCP_URL"):
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
        headers = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"} if os.environ.get("MCP_TOKEN") else {}
        return streamable_http_client(os.environ["MCP_URL"], http_client=create_mcp_http_client(headers=headers))
    # The client passes the server only a safe part of its environment;
    # $MCP_SERVER_ENV (a JSON object) adds to it.
    env = json.loads(os.environ.get("MCP_SERVER_ENV", "null"))
    params = StdioServerParameters(command=bl, args=["mcp", "--workspace", workspace, *extra], cwd=workspace, env=env)
    return stdio_client(params)


async def main(bl, workspace, script, extra):
    report = {"calls": []}
    async with transport(bl, workspace, extra) as (read, write, *_):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["protocol_version"] = str(init.protocol_version)
            report["server"] = init.server_info.model_dump(mode="json", exclude_none=True)
            tools = await session.list_tools()
            report["tools"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools]
            dump = lambda items: [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items]
            report["resources"] = dump((await session.list_resources()).resources)
            report["resource_templates"] = dump((await session.list_resource_templates()).resource_templates)
            report["prompts"] = dump((await session.list_prompts()).prompts)
            for tool, arguments, *until in script:
                # "$sleep" {seconds}: wait (a token's lifetime, say).
                if tool == "$sleep":
                    await anyio.sleep(arguments["seconds"])
                    report["calls"].append({"tool": tool, "arguments": arguments, "result": None})
                    continue
                # "$resource" {uri} and "$prompt" {name, arguments}: read one,
                # or the protocol's error for it.
                if tool in ("$resource", "$prompt"):
                    try:
                        if tool == "$resource":
                            got = await session.read_resource(arguments["uri"])
                        else:
                            got = await session.get_prompt(arguments["name"], arguments.get("arguments"))
                        record = {"tool": tool, "arguments": arguments, "is_error": False,
                                  "result": got.model_dump(mode="json", by_alias=True, exclude_none=True)}
                    except Exception as e:  # the server's JSON-RPC error
                        record = {"tool": tool, "arguments": arguments, "is_error": True, "result": str(e)}
                    report["calls"].append(record)
                    continue
                arguments = {key: token_of(report, value) for key, value in arguments.items()}
                result = await session.call_tool(tool, arguments)
                text = result.content[0].text if result.content else ""
                waited = 0.0
                while until and until[0]["until"] not in text and waited < 60:
                    await anyio.sleep(0.2)
                    waited += 0.2
                    result = await session.call_tool(tool, arguments)
                    text = result.content[0].text if result.content else ""
                pages, largest = 1, len(text.encode())
                try:
                    value = json.loads(text)
                except ValueError:
                    value = text
                # A paged result: follow its cursor and join the slices.
                if isinstance(value, dict) and "_page" in value:
                    joined = value["text"]
                    seen = set()
                    while value["_page"]["next_cursor"] is not None:
                        cursor = value["_page"]["next_cursor"]
                        # A server that hands the same page again is a bug, not a wait.
                        if cursor in seen:
                            raise RuntimeError(f"{tool}: the cursor {cursor} came back twice")
                        seen.add(cursor)
                        more = await session.call_tool(tool, {**arguments, "cursor": cursor})
                        largest = max(largest, len(more.content[0].text.encode()))
                        value = json.loads(more.content[0].text)
                        joined += value["text"]
                        pages += 1
                    value = json.loads(joined)
                record = {"tool": tool, "arguments": arguments, "is_error": bool(result.is_error),
                          "result": value, "pages": pages, "largest_page": largest,
                          "meta": result.model_dump(mode="json", by_alias=True).get("_meta")}
                report["calls"].append(record)
                if os.environ.get("MCP_PROGRESS"):
                    with open(os.environ["MCP_PROGRESS"], "a") as progress:
                        progress.write(json.dumps(record) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    extra = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else []
    anyio.run(main, sys.argv[1], sys.argv[2], json.load(open(sys.argv[3])), extra)
