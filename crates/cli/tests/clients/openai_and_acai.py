"""The OpenAI- and ACAI-compatible endpoints of a running `neuralcore serve`, spoken to
by the official `openai` package and by plain HTTP as ACAI's clients do.

    python openai_and_acai.py http://127.0.0.1:8080

Exits non-zero (with the reason) on the first thing that is not as documented.
"""

import json
import sys
import urllib.error
import urllib.request

import openai
from openai import OpenAI

base = sys.argv[1].rstrip("/")
client = OpenAI(base_url=f"{base}/v1", api_key=sys.argv[2] if len(sys.argv) > 2 else "unused")

# Models: neuralcore and one per collection.
ids = [m.id for m in client.models.list()]
assert "neuralcore" in ids and "neuralcore/default" in ids, ids

# A question answered with citations; the extension field holds the ask report.
c = client.chat.completions.create(
    model="neuralcore",
    messages=[{"role": "user", "content": "What causes the tides?"}],
)
text = c.choices[0].message.content
assert c.object == "chat.completion", c
assert c.choices[0].finish_reason == "stop", c
assert "[1]" in text and "Sources:" in text, text
assert "Moon" in text or "moon" in text, text
report = c.model_extra["neuralcore"]
assert report["schema"] == "neuralcore.ask/v1", report
assert report["citations"], report
assert c.usage.total_tokens > 0, c.usage

# Earlier messages are the conversation.
c = client.chat.completions.create(
    model="neuralcore/default",
    messages=[
        {"role": "system", "content": "Answer from the documents."},
        {"role": "user", "content": "What causes the tides?"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "What does the borrow checker enforce?"},
    ],
)
assert "borrow" in c.choices[0].message.content.lower(), c.choices[0].message.content

# Streaming: chunks whose content adds up to the answer, then the report.
parts, extra = [], None
stream = client.chat.completions.create(
    model="neuralcore",
    messages=[{"role": "user", "content": "What causes the tides?"}],
    stream=True,
)
for chunk in stream:
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
    if (chunk.model_extra or {}).get("neuralcore"):
        extra = chunk.model_extra["neuralcore"]
streamed = "".join(parts)
assert "[1]" in streamed, streamed
assert extra and extra["schema"] == "neuralcore.ask/v1", extra

# An unknown model is the client's NotFoundError; an empty conversation a BadRequestError.
try:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
try:
    client.chat.completions.create(model="neuralcore", messages=[])
    raise AssertionError("no messages was accepted")
except openai.BadRequestError:
    pass


# ACAI: the FastAPI app's shapes.
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if len(sys.argv) > 2:
        req.add_header("Authorization", f"Bearer {sys.argv[2]}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


status, root = call("GET", "/")
assert status == 200 and root["status"] == "online" and root["name"], root
status, health = call("GET", "/health")
assert status == 200 and health["status"] == "healthy" and "environment" in health, health
status, r = call("POST", "/api/chat", {"message": "What causes the tides?"})
assert status == 200, r
assert r["success"] is True and "Moon" in r["response"], r
assert r["mode"] == "rag" and r["retrieval"]["used"] is True, r
assert r["retrieval"]["context"] and isinstance(r["retrieval"]["context"][0], str), r
plan = r["plan"]
assert plan["task_type"] and plan["complexity"] and isinstance(plan["steps"], list), plan
for bad in ({"message": ""}, {"message": "x" * 10001}, {"msg": "hi"}, {"message": 3}):
    status, r = call("POST", "/api/chat", bad)
    assert status == 400, (bad, status, r)
print("ok")
