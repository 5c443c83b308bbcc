#!/usr/bin/env python3
"""The official Anthropic Python SDK against `inferd serve`.

Usage: anthropic_api.py PORT MODEL
Checks: a plain message, the same streamed (the SDK's stream helper), a forced tool call
(whole and streamed) and a tool_result turn, count_tokens. Any failure raises (non-zero
exit) naming the check. Run by crates/inferd/tests/protocols_sdk.rs.
"""

import sys

import anthropic

PORT, MODEL = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{PORT}", api_key="unused")

# This SDK version has no `temperature` argument; inferd reads it from the body.
SYSTEM = "You are a helpful assistant for travellers."
ASK = [{"role": "user", "content": "Name one sight in Rome."}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    }
]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def check(cond, what, shown=None):
    if not cond:
        raise AssertionError(f"CHECK FAILED: {what}" + (f"\n  got: {shown!r}" if shown is not None else ""))


def plain():
    m = client.messages.create(model=MODEL, max_tokens=30, system=SYSTEM, messages=ASK, extra_body={"temperature": 0})
    check(m.type == "message" and m.role == "assistant", "plain: a message", m)
    check(m.content and m.content[0].type == "text" and m.content[0].text.strip(), "plain: text", m)
    check(m.stop_reason in ("end_turn", "max_tokens"), "plain: stop_reason", m.stop_reason)
    check(m.usage.output_tokens > 0, "plain: usage", m.usage)
    return m


def streamed(expected):
    with client.messages.stream(model=MODEL, max_tokens=30, system=SYSTEM, messages=ASK,
                                extra_body={"temperature": 0}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(text == final.content[0].text, "stream: text_stream makes the final text", (text, final))
    check(text == expected.content[0].text, "stream: same text as whole", (text, expected))
    check(final.stop_reason == expected.stop_reason, "stream: same stop_reason", final)


def tool_call():
    m = client.messages.create(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=WEATHER, tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0},
    )
    check(m.stop_reason == "tool_use", "tool: stop_reason tool_use", m)
    uses = [b for b in m.content if b.type == "tool_use"]
    check(len(uses) >= 1, "tool: a tool_use block", m)
    u = uses[0]
    check(u.name == "get_weather" and u.id, "tool: name and id", u)
    check(set(u.input) == {"city", "unit"} and u.input["unit"] in ("celsius", "fahrenheit"),
          "tool: input follows the schema", u.input)
    with client.messages.stream(
        model=MODEL, max_tokens=100, system=SYSTEM, messages=WEATHER, tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0},
    ) as stream:
        final = stream.get_final_message()
    su = [b for b in final.content if b.type == "tool_use"]
    check(su and su[0].input == u.input, "tool stream: same input", (final, u))
    turn2 = WEATHER + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                      "content": "18 degrees and sunny"}]},
    ]
    m2 = client.messages.create(model=MODEL, max_tokens=40, system=SYSTEM, messages=turn2, tools=TOOLS,
                                tool_choice={"type": "none"}, extra_body={"temperature": 0})
    check(m2.stop_reason != "tool_use", "tool_result: answered in text", m2)
    check(m2.content and m2.content[0].type == "text" and m2.content[0].text.strip(),
          "tool_result: text", m2)


def count(expected):
    c = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=ASK)
    u = expected.usage
    total = u.input_tokens + (u.cache_read_input_tokens or 0)
    check(c.input_tokens == total, "count_tokens: the prompt's tokens", (c, u))


first = plain()
print("plain ok")
streamed(first)
print("stream ok")
tool_call()
print("tools ok")
count(first)
print("count_tokens ok")
try:
    client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    raise AssertionError("CHECK FAILED: an image is refused")
except anthropic.BadRequestError as e:
    check("image" in str(e), "image: the 400 says why", str(e))
print("errors ok")
