#!/usr/bin/env python3
"""A tool-calling loop through the official OpenAI Python SDK against `inferd serve`.

Usage: tool_loop.py [PORT [MODEL]]   (or env INFERD_PORT / INFERD_MODEL; defaults 8080 / qwen)

Checks, in order:
  1. a forced tool call (tool_choice="required"), non-streamed;
  2. the same request streamed, its `delta.tool_calls` reassembled the way OpenAI clients
     do, equal to the non-streamed calls;
  3. the tool result sent back (role "tool"), answered in plain text;
  4. a `response_format` json_schema request whose content parses and fits the schema.
Any failure raises (non-zero exit) with a message that names the check and shows the reply.
Run by crates/inferd/tests/openai_sdk.rs.
"""

import json
import os
import sys

from openai import OpenAI

PORT = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INFERD_PORT", "8080")
MODEL = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("INFERD_MODEL", "qwen")

UNITS = ["celsius", "fahrenheit"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name, e.g. Paris"},
                    "unit": {"type": "string", "enum": UNITS},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris? Use the tool."},
]


class CheckFailed(AssertionError):
    pass


def check(cond, what, shown=None):
    if not cond:
        msg = f"CHECK FAILED: {what}"
        if shown is not None:
            msg += f"\n  got: {shown!r}"
        raise CheckFailed(msg)


def dump(obj):
    """A pydantic model from the SDK, as JSON for error messages."""
    try:
        return obj.model_dump_json(exclude_none=True)
    except AttributeError:
        return repr(obj)


def check_weather_call(call, where):
    check(call.type == "function", f"{where}: tool call type is 'function'", call.type)
    check(isinstance(call.id, str) and call.id != "", f"{where}: tool call id non-empty", call.id)
    check(
        call.function.name == "get_weather",
        f"{where}: function name is get_weather",
        call.function.name,
    )
    try:
        args = json.loads(call.function.arguments)
    except (TypeError, ValueError) as e:
        raise CheckFailed(
            f"CHECK FAILED: {where}: arguments are JSON ({e})\n  got: {call.function.arguments!r}"
        )
    check(isinstance(args, dict), f"{where}: arguments are an object", args)
    check(set(args) == {"city", "unit"}, f"{where}: arguments have exactly city and unit", args)
    check(isinstance(args["city"], str) and args["city"], f"{where}: city is a non-empty string", args)
    check(args["unit"] in UNITS, f"{where}: unit is one of {UNITS}", args)
    return args


def turn1(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=100,
    )
    check(len(r.choices) == 1, "turn 1: one choice", dump(r))
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", "turn 1: finish_reason is tool_calls", dump(r))
    calls = c.message.tool_calls or []
    check(len(calls) >= 1, "turn 1: at least one tool call", dump(r))
    for i, call in enumerate(calls):
        check_weather_call(call, f"turn 1 call {i}")
    ids = [call.id for call in calls]
    check(len(set(ids)) == len(ids), "turn 1: tool call ids are distinct", ids)
    return r


def turn1_streamed(client, expected):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=100,
        stream=True,
    )
    # Reassembly as OpenAI clients do it: calls keyed by `index`; the first delta of a
    # call brings id, type and function.name; `function.arguments` arrives in pieces that
    # are concatenated.
    calls = {}
    finish_reasons = []
    content = ""
    chunks = 0
    last_with_choice = None
    for chunk in stream:
        chunks += 1
        if not chunk.choices:
            continue  # a usage-only chunk
        ch = chunk.choices[0]
        last_with_choice = ch
        if ch.finish_reason is not None:
            finish_reasons.append(ch.finish_reason)
        d = ch.delta
        if d is None:
            continue
        if d.content:
            content += d.content
        for tc in d.tool_calls or []:
            check(tc.index is not None, "stream: each tool call delta has an index", dump(tc))
            slot = calls.setdefault(tc.index, {"id": None, "type": None, "name": "", "arguments": ""})
            if tc.id:
                check(
                    slot["id"] in (None, tc.id),
                    f"stream: call {tc.index} keeps one id",
                    (slot["id"], tc.id),
                )
                slot["id"] = tc.id
            if tc.type:
                slot["type"] = tc.type
            if tc.function is not None:
                if tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
    check(last_with_choice is not None, "stream: some chunk has a choice", chunks)
    check(
        last_with_choice.finish_reason == "tool_calls",
        "stream: the last chunk's finish_reason is tool_calls",
        (last_with_choice.finish_reason, finish_reasons),
    )
    check(finish_reasons == ["tool_calls"], "stream: exactly one finish_reason", finish_reasons)
    check(
        sorted(calls) == list(range(len(calls))),
        "stream: tool call indices are 0..n-1",
        sorted(calls),
    )
    got = [calls[i] for i in sorted(calls)]
    for i, g in enumerate(got):
        check(isinstance(g["id"], str) and g["id"], f"stream call {i}: id non-empty", g)
        check(g["type"] in (None, "function"), f"stream call {i}: type is function", g)
    want = [(c.function.name, c.function.arguments) for c in expected.choices[0].message.tool_calls]
    have = [(g["name"], g["arguments"]) for g in got]
    check(
        have == want,
        "stream: reassembled calls (name, arguments) equal the non-streamed ones",
        {"streamed": have, "non_streamed": want},
    )
    check(content.strip() == "", "stream: no text content beside the forced call", content)
    return got, chunks


def turn2(client, first):
    msg = first.choices[0].message
    assistant = {
        "role": "assistant",
        "content": msg.content,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in msg.tool_calls
        ],
    }
    result = json.dumps({"temperature": 18, "unit": "celsius", "condition": "sunny"})
    messages = MESSAGES + [assistant] + [
        {"role": "tool", "tool_call_id": c.id, "content": result} for c in msg.tool_calls
    ]
    r = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        tool_choice="none",
        temperature=0,
        max_tokens=60,
    )
    c = r.choices[0]
    check(c.finish_reason in ("stop", "length"), "turn 2: finish_reason is stop or length", dump(r))
    check(not c.message.tool_calls, "turn 2: no tool calls with tool_choice none", dump(r))
    check(
        isinstance(c.message.content, str) and c.message.content.strip() != "",
        "turn 2: content is a non-empty string",
        dump(r),
    )
    return r


def structured(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Give the name and population of the largest city in France."},
        ],
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "city",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "population": {"type": "integer", "minimum": 0},
                    },
                    "required": ["name", "population"],
                    "additionalProperties": False,
                },
            },
        },
        temperature=0,
        max_tokens=60,
    )
    c = r.choices[0]
    check(c.finish_reason == "stop", "json_schema: finish_reason is stop (the object closed)", dump(r))
    check(not c.message.tool_calls, "json_schema: no tool calls", dump(r))
    try:
        v = json.loads(c.message.content)
    except (TypeError, ValueError) as e:
        raise CheckFailed(f"CHECK FAILED: json_schema: content is JSON ({e})\n  got: {dump(r)}")
    check(isinstance(v, dict), "json_schema: an object", v)
    check(set(v) == {"name", "population"}, "json_schema: exactly the keys name and population", v)
    check(isinstance(v["name"], str), "json_schema: name is a string", v)
    check(
        isinstance(v["population"], int) and not isinstance(v["population"], bool),
        "json_schema: population is an integer",
        v,
    )
    check(v["population"] >= 0, "json_schema: population >= 0", v)
    return v


def main():
    client = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="none", max_retries=0, timeout=300)
    first = turn1(client)
    calls = first.choices[0].message.tool_calls
    print(f"turn 1: {len(calls)} call(s): " + "; ".join(f"{c.function.name}({c.function.arguments}) id={c.id}" for c in calls))
    got, chunks = turn1_streamed(client, first)
    print(f"turn 1 streamed: {chunks} chunks reassembled into {len(got)} identical call(s)")
    second = turn2(client, first)
    print(f"turn 2: finish={second.choices[0].finish_reason} content={second.choices[0].message.content!r}")
    v = structured(client)
    print(f"json_schema: {json.dumps(v)}")
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(e, file=sys.stderr)
        sys.exit(1)
