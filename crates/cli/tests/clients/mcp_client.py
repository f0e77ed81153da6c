"""The official MCP Python SDK (`mcp` on PyPI) against neuralcore's MCP server.

    python mcp_client.py stdio NEURALCORE_BIN DATA_DIR
        launches `neuralcore --data-dir DATA_DIR mcp` and calls every tool, resource and
        prompt over stdio, with bad input;
    python mcp_client.py http URL KEY_A KEY_B KEY_A_READ
        calls the tools over streamable HTTP (URL ends in /mcp) as tenant A (KEY_A,
        write), tenant B (KEY_B, write) and A's read-only key: B never sees A's data;
        the read-only key lists and may call the read tools only; no key is a 401.

Exits non-zero with a message on the first check that fails. Prints one `timing` line
(stdio `search` round trips, for the record: not asserted).
"""

import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

ALL_TOOLS = {
    "search", "ask", "ingest_text", "job_status", "memory_add", "memory_search",
    "memory_get", "memory_signal", "memory_link", "memory_forget", "memory_tiers",
    "memory_graph", "answer_mark",
}
READ_TOOLS = {"search", "ask", "job_status", "memory_search", "memory_get", "memory_tiers",
              "memory_graph"}

TIDES = ("Tides are the regular rise and fall of the sea surface. They are caused by the "
         "gravitational pull of the Moon and the Sun acting on the rotating Earth.")


def check(cond, msg):
    if not cond:
        print(f"FAILED: {msg}", file=sys.stderr)
        sys.exit(1)


def text_of(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


async def call_ok(client, name, args, **kw):
    r = await client.call_tool(name, args, **kw)
    check(not r.is_error, f"{name}({args}) failed: {text_of(r)}")
    check(r.structured_content is not None, f"{name} returned no structured content")
    return r.structured_content


async def call_err(client, name, args, needle):
    r = await client.call_tool(name, args)
    check(r.is_error, f"{name}({args}) should fail, got {text_of(r)[:300]}")
    check(needle.lower() in text_of(r).lower(),
          f"{name}({args}): error {text_of(r)!r} does not say {needle!r}")
    return text_of(r)


async def ingest(client, text, title, collection, name=None):
    args = {"text": text, "title": title, "collection": collection}
    if name:
        args["name"] = name
    job = await call_ok(client, "ingest_text", args)
    check(job.get("id"), f"ingest_text returned no job id: {job}")
    st = None
    for _ in range(600):
        st = await call_ok(client, "job_status", {"job": job["id"]})
        if st["state"] in ("indexed", "failed", "cancelled"):
            check(st["state"] == "indexed", f"the job ended {st}")
            return job["id"]
        await asyncio.sleep(0.1)
    check(False, f"the ingest job did not finish in 60 s: {st}")


async def stdio(binary, data_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURALCORE_")}
    if "NEURALCORE_EMBEDDING_MODEL_DIR" in os.environ:
        env["NEURALCORE_EMBEDDING_MODEL_DIR"] = os.environ["NEURALCORE_EMBEDDING_MODEL_DIR"]
    params = StdioServerParameters(command=binary, args=["--data-dir", data_dir, "mcp"], env=env)
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        names = {t.name for t in tools}
        check(names == ALL_TOOLS, f"tools listed: {sorted(names)}")
        for t in tools:
            check(t.description and len(t.description) > 40, f"{t.name} has no real description")
            check(t.input_schema.get("type") == "object", f"{t.name}'s schema: {t.input_schema}")
        search = next(t for t in tools if t.name == "search")
        check("query" in search.input_schema["properties"]
              and "query" in search.input_schema.get("required", []),
              f"search's schema: {search.input_schema}")

        # Ingest, then search and ask with citations and progress.
        await ingest(client, TIDES, "Tides", "notes", name="tides")
        await ingest(client, "The borrow checker enforces Rust's ownership rules at compile "
                     "time: one mutable reference or many shared ones.", "Borrowing", "notes")
        hits = await call_ok(client, "search", {"query": "what causes tides", "collection": "notes",
                                                "k": 3, "mode": "keyword"})
        check(hits["hits"] and "Moon" in hits["hits"][0]["text"], f"search: {hits}")
        check(hits["hits"][0]["provenance"], f"a hit without provenance: {hits['hits'][0]}")
        progress = []

        async def on_progress(p, total, message):
            progress.append(message)

        report = await call_ok(client, "ask", {"question": "What causes the tides?",
                                               "collection": "notes"},
                               progress_callback=on_progress)
        check(not report["abstained"] and report["citations"], f"ask: {report}")
        check("Moon" in report["answer"], f"ask's answer: {report['answer']}")
        marked = await call_ok(client, "answer_mark", {"run_id": report["run_id"],
                                                       "verdict": "good"})
        check(marked["verdict"] == "good" and marked["passages"], f"answer_mark: {marked}")
        await call_err(client, "answer_mark", {"run_id": report["run_id"], "verdict": "meh"},
                       "unknown variant")
        await call_err(client, "answer_mark", {"run_id": report["run_id"], "verdict": "bad",
                                               "citations": [99]}, "no citation")
        await call_err(client, "answer_mark", {"run_id": "mcp-0-0", "verdict": "bad"},
                       "not_found")
        check(len(progress) >= 3 and any(m and "grade" in m.lower() or "verdict" in (m or "").lower()
                                         or "retriev" in (m or "").lower() for m in progress),
              f"progress notifications: {progress}")
        none = await call_ok(client, "ask", {"question": "Who won the 1987 chess olympiad?",
                                             "collection": "notes"})
        check(none["abstained"], f"ask should abstain: {none['answer']}")

        # Timing: search round trips over stdio (reported, not asserted).
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            await client.call_tool("search", {"query": "ownership rules", "collection": "notes",
                                              "k": 5, "mode": "keyword"})
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        print(f"timing stdio search p50 {times[len(times) // 2]:.2f} ms")

        # Memory.
        a = await call_ok(client, "memory_add", {"text": "The Atlas team deploys with blue-green releases.",
                                                 "kind": "decision", "project": "atlas"})
        b = await call_ok(client, "memory_add", {"text": "The Atlas team deploys with rolling releases.",
                                                 "kind": "decision", "project": "atlas"})
        ida, idb = a["memory"]["id"], b["memory"]["id"]
        found = await call_ok(client, "memory_search", {"query": "how do we deploy",
                                                        "project": "atlas"})
        check({h["memory"]["id"] for h in found["hits"]} >= {ida, idb}, f"memory_search: {found}")
        before = (await call_ok(client, "memory_get", {"id": ida}))["memory"]["trust"]
        after = (await call_ok(client, "memory_signal", {"id": ida, "signal": "confirmed"}))["trust"]
        check(after > before, f"confirmed: trust {before} -> {after}")
        link = await call_ok(client, "memory_link", {"from": ida, "kind": "CONTRADICTS",
                                                     "to": idb})
        check("CONTRADICTS" in json.dumps(link), f"memory_link: {link}")
        got = await call_ok(client, "memory_get", {"id": ida})
        check(any("CONTRADICTS" in json.dumps(r) for r in got["relations"]), f"relations: {got}")
        tiers = await call_ok(client, "memory_tiers", {"project": "atlas", "query": "deploy"})
        check("blue-green" in tiers["text"], f"tiers: {tiers['text']}")
        graph = await call_ok(client, "memory_graph", {"entity": "Atlas"})
        check(ida in json.dumps(graph["entities"]), f"memory_graph: {graph}")
        gone = await call_ok(client, "memory_forget", {"id": idb})
        check(gone["status"] != "active", f"forgotten: {gone}")

        # Resources and the prompt.
        res = (await client.list_resources()).resources
        uris = {str(r.uri) for r in res}
        check("neuralcore://collections" in uris and "neuralcore://collections/notes" in uris,
              f"resources: {uris}")
        templates = (await client.list_resource_templates()).resource_templates
        check(len(templates) >= 3, f"templates: {templates}")
        coll = json.loads((await client.read_resource("neuralcore://collections/notes"))
                          .contents[0].text)
        check(coll["collection"]["documents"] == 2, f"collection: {coll}")
        doc_id = hits["hits"][0]["doc_id"] if "doc_id" in hits["hits"][0] else hits["hits"][0]["id"].split(":")[0]
        doc = json.loads((await client.read_resource(
            f"neuralcore://collections/notes/documents/{doc_id}")).contents[0].text)
        check(doc["title"] == "Tides" or doc.get("record", {}).get("title") == "Tides"
              or "Tides" in json.dumps(doc), f"document: {doc}")
        mem = json.loads((await client.read_resource(f"neuralcore://memories/{ida}"))
                         .contents[0].text)
        check(mem["memory"]["id"] == ida, f"memory resource: {mem}")
        prompts = (await client.list_prompts()).prompts
        check([p.name for p in prompts] == ["memory_context"], f"prompts: {prompts}")
        pr = await client.get_prompt("memory_context", {"project": "atlas", "query": "deploy"})
        check("blue-green" in pr.messages[0].content.text, f"prompt: {pr}")

        # Bad input: clear tool errors, and the connection lives on.
        await call_err(client, "search", {"query": "  ", "collection": "notes"}, "empty")
        await call_err(client, "search", {"query": "x", "collection": "notes", "k": 0}, "k must")
        await call_err(client, "search", {"query": "x", "collection": "nope"}, "not_found")
        await call_err(client, "search", {"query": "x", "collection": "../etc"}, "invalid")
        await call_err(client, "memory_get", {"id": "0123456789abcdef"}, "not_found")
        await call_err(client, "job_status", {"job": "nope"}, "not")
        await call_err(client, "memory_signal", {"id": ida, "signal": "loved"}, "unknown variant")
        await call_err(client, "ask", {"question": "q" * 5000}, "4096")
        await call_err(client, "search", {"query": 5}, "expected a string")
        try:
            await client.call_tool("no_such_tool", {})
            check(False, "an unknown tool is an error")
        except MCPError as e:  # a protocol error: the tool does not exist
            check("no tool" in str(e), f"unknown tool: {e}")
        try:
            await client.read_resource("neuralcore://collections/notes/documents/ffffffffffffffff")
            check(False, "an unknown document is not found")
        except MCPError as e:
            check("no document" in str(e), f"unknown document: {e}")
        # Still answering after all that.
        again = await call_ok(client, "search", {"query": "tides", "collection": "notes"})
        check(again["hits"], "the server answers after bad input")
    print("stdio: ok")


def http_client(url, key):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)),
                  cache=None)


async def http(url, key_a, key_b, key_read):
    secret = "zanzibarquokka"
    async with http_client(url, key_a) as a:
        names = {t.name for t in (await a.list_tools()).tools}
        check(names == ALL_TOOLS, f"tools over HTTP: {sorted(names)}")
        job = await ingest(a, f"The vault code word is {secret}, kept by tenant A.", "Vault",
                           "private", name="vault")
        hits = await call_ok(a, "search", {"query": secret, "collection": "private"})
        check(hits["hits"] and secret in hits["hits"][0]["text"], f"A's search: {hits}")
        doc_id = hits["hits"][0].get("doc_id") or hits["hits"][0]["id"].split(":")[0]
        mem = await call_ok(a, "memory_add", {"text": f"The vault word is {secret}.",
                                              "project": "vault"})
        mem_id = mem["memory"]["id"]
        progress = []

        async def on_progress(p, total, message):
            progress.append(message)

        rep = await call_ok(a, "ask", {"question": "What is the vault code word?",
                                       "collection": "private"}, progress_callback=on_progress)
        check(secret in rep["answer"], f"A's answer: {rep['answer']}")
        check(progress, "progress notifications over HTTP")

    async with http_client(url, key_b) as b:
        seen = []
        cols = json.loads((await b.read_resource("neuralcore://collections")).contents[0].text)
        seen.append(json.dumps(cols))
        check(all(c["name"] != "private" for c in cols), f"B sees A's collection: {cols}")
        await call_err(b, "search", {"query": secret, "collection": "private"}, "not_found")
        r = await b.call_tool("ask", {"question": "What is the vault code word?",
                                      "collection": "private"})
        seen.append(text_of(r))
        check(r.is_error, "B asks in A's collection")
        found = await call_ok(b, "memory_search", {"query": secret})
        seen.append(json.dumps(found))
        seen.append(await call_err(b, "memory_get", {"id": mem_id}, "not_found"))
        seen.append(await call_err(b, "memory_signal", {"id": mem_id, "signal": "corrected"},
                                   "not_found"))
        seen.append(await call_err(b, "memory_forget", {"id": mem_id}, "not_found"))
        seen.append(await call_err(b, "answer_mark", {"run_id": rep["run_id"],
                                                      "verdict": "bad"}, "not_found"))
        seen.append(await call_err(b, "job_status", {"job": job}, "not"))
        tiers = await call_ok(b, "memory_tiers", {"project": "vault", "query": secret})
        seen.append(json.dumps(tiers))
        for uri in (f"neuralcore://memories/{mem_id}",
                    f"neuralcore://collections/private/documents/{doc_id}",
                    "neuralcore://collections/private"):
            try:
                rr = await b.read_resource(uri)
                seen.append(json.dumps(rr.model_dump()))
                check(False, f"B read {uri}")
            except Exception as e:
                seen.append(str(e))
        pr = await b.get_prompt("memory_context", {"project": "vault", "query": secret})
        seen.append(pr.messages[0].content.text)
        # B's own names never show A's.
        await ingest(b, "Tenant B keeps notes about gardening.", "Garden", "private", name="g")
        hits = await call_ok(b, "search", {"query": "vault code word", "collection": "private"})
        seen.append(json.dumps(hits))
        leak = [s for s in seen if secret in s]
        check(not leak, f"tenant B saw tenant A's data: {leak}")

    async with http_client(url, key_read) as ro:
        names = {t.name for t in (await ro.list_tools()).tools}
        check(names == READ_TOOLS, f"a read-only key lists {sorted(names)}")
        await call_err(ro, "memory_add", {"text": "no"}, "forbidden")
        await call_err(ro, "ingest_text", {"text": "no"}, "forbidden")
        await call_err(ro, "ask", {"question": "What is the vault code word?",
                                   "collection": "private", "memory": True}, "read")
        hits = await call_ok(ro, "search", {"query": secret, "collection": "private"})
        check(hits["hits"], "the read-only key of A reads A's collection")

    # No key, or a wrong one: a 401 problem before any MCP message is read, and the SDK
    # fails to connect.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for key in (None, "nck_wrong_key_0000000000000000"):
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            urllib.request.urlopen(req)
            check(False, f"key {key!r} was let in")
        except urllib.error.HTTPError as e:
            check(e.code == 401, f"key {key!r}: HTTP {e.code}")
            check("unauthorized" in e.read().decode(), "a 401 problem")
        try:
            async with http_client(url, key) as c:
                await c.list_tools()
            check(False, f"the SDK listed tools with key {key!r}")
        except BaseException as e:  # the SDK's task groups wrap the error
            check("SystemExit" not in repr(e), repr(e))
    print("http: ok")


def main():
    mode = sys.argv[1]
    if mode == "stdio":
        asyncio.run(stdio(sys.argv[2], sys.argv[3]))
    elif mode == "http":
        asyncio.run(http(*sys.argv[2:6]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
