#!/usr/bin/env python3
"""The official OpenAI Python SDK's Responses client against `inferd serve`.

Usage: responses_api.py PORT MODEL PHASE [STATE_FILE]
  PHASE main:           plain, streamed (the SDK's stream helper, which checks the event
                        sequence), a tools loop with function_call_output on
                        previous_response_id, strict text.format, retrieve / input_items /
                        delete;
  PHASE before-restart: stores a response, writes its id to STATE_FILE;
  PHASE after-restart:  retrieves it and continues it (cached_tokens shows the KV came
                        back from the SSD tier).
Any failure raises (non-zero exit) naming the check. Run by crates/inferd/tests/protocols_sdk.rs.
"""

import json
import sys

from openai import NotFoundError, OpenAI

PORT, MODEL, PHASE = sys.argv[1], sys.argv[2], sys.argv[3]
STATE = sys.argv[4] if len(sys.argv) > 4 else None
client = OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="unused")

INSTRUCTIONS = (
    "You are a helpful assistant for travellers. You answer questions about cities, "
    "their weather and their sights, briefly and accurately."
)
ROME = "Name one sight in Rome, in one short sentence."
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]


def check(cond, what, shown=None):
    if not cond:
        raise AssertionError(f"CHECK FAILED: {what}" + (f"\n  got: {shown!r}" if shown is not None else ""))


def plain():
    r = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input=ROME,
        max_output_tokens=200, temperature=0,
    )
    check(r.id.startswith("resp_"), "plain: id", r.id)
    check(r.status in ("completed", "incomplete"), "plain: status", r.status)
    check(r.output_text.strip() != "", "plain: output_text", r.model_dump_json())
    check(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, "plain: usage", r.usage)
    got = client.responses.retrieve(r.id)
    check(got.output_text == r.output_text, "retrieve: same text", got.model_dump_json())
    items = client.responses.input_items.list(r.id)
    texts = [c.text for i in items.data for c in (i.content or [])]
    check(ROME in texts, "input_items: the input", items.model_dump_json())
    return r


def streamed(expected):
    kinds, seqs, deltas = [], [], []
    # The SDK's stream helper finishes on `response.completed`, so the reply must end
    # by itself (a cut one ends with `response.incomplete`).
    with client.responses.stream(
        model=MODEL, instructions=INSTRUCTIONS, input=ROME,
        max_output_tokens=200, temperature=0,
    ) as stream:
        for ev in stream:
            kinds.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    check(kinds[:2] == ["response.created", "response.in_progress"], "stream: opening events", kinds)
    check(kinds[-1] == "response.completed", "stream: last event", kinds)
    for k in ("response.output_item.added", "response.content_part.added",
              "response.output_text.delta", "response.output_item.done"):
        check(k in kinds, f"stream: has {k}", kinds)
    check(seqs == list(range(len(seqs))), "stream: sequence numbers 0..n-1", seqs)
    check("".join(deltas) == final.output_text, "stream: deltas make the final text",
          ("".join(deltas), final.output_text))
    check(final.output_text == expected.output_text, "stream: same text as whole",
          (final.output_text, expected.output_text))


def tools_loop():
    r = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input="What is the weather in Paris?",
        tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0,
        max_output_tokens=80,
    )
    calls = [o for o in r.output if o.type == "function_call"]
    check(len(calls) >= 1, "tools: a function_call item", r.model_dump_json())
    call = calls[0]
    check(call.name == "get_weather", "tools: name", call.name)
    args = json.loads(call.arguments)
    check(set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"),
          "tools: arguments follow the schema", args)
    check(call.call_id, "tools: call_id", call)
    # the same call streamed, through the SDK's helper
    with client.responses.stream(
        model=MODEL, instructions=INSTRUCTIONS, input="What is the weather in Paris?",
        tools=TOOLS, tool_choice="required", parallel_tool_calls=False, temperature=0,
        max_output_tokens=80,
    ) as stream:
        done = [ev.arguments for ev in stream if ev.type == "response.function_call_arguments.done"]
        final = stream.get_final_response()
    check(done and done[0] == call.arguments, "tools stream: same arguments", (done, call.arguments))
    check([o.type for o in final.output] == [o.type for o in r.output], "tools stream: same items",
          final.model_dump_json())
    r2 = client.responses.create(
        # instructions do not carry over to a continuation (as OpenAI): give them again
        model=MODEL, previous_response_id=r.id, instructions=INSTRUCTIONS, tools=TOOLS,
        tool_choice="none",
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature": 18, "unit": args["unit"], "sky": "sunny"})}],
        temperature=0, max_output_tokens=40,
    )
    check(r2.output_text.strip() != "", "tools: the result is answered", r2.model_dump_json())
    check(r2.previous_response_id == r.id, "tools: previous_response_id echoed", r2.previous_response_id)
    cached = r2.usage.input_tokens_details.cached_tokens
    check(cached >= 16, "tools: the continuation reuses the first turn's KV", r2.usage)


def structured():
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40},
                       "population": {"type": "integer", "minimum": 0}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model=MODEL, input="Give the largest city in France and its population.",
        text={"format": {"type": "json_schema", "name": "city", "strict": True, "schema": schema}},
        temperature=0, max_output_tokens=100,
    )
    check(r.status == "completed", "structured: completed", r.model_dump_json())
    v = json.loads(r.output_text)
    check(set(v) == {"city", "population"}, "structured: keys", v)
    check(isinstance(v["city"], str) and isinstance(v["population"], int) and v["population"] >= 0,
          "structured: types", v)


def delete(r):
    d = client.responses.delete(r.id)
    try:
        client.responses.retrieve(r.id)
    except NotFoundError:
        return
    raise AssertionError("CHECK FAILED: a deleted response is a 404")


if PHASE == "main":
    first = plain()
    print("plain ok")
    streamed(first)
    print("stream ok")
    tools_loop()
    print("tools loop ok")
    structured()
    print("structured ok")
    delete(first)
    print("delete ok")
elif PHASE == "before-restart":
    r = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS,
        input="I am planning a trip to Lisbon in May. What should I pack for the weather?",
        temperature=0, max_output_tokens=40,
    )
    check(r.output_text.strip() != "", "before restart: text", r.model_dump_json())
    with open(STATE, "w") as f:
        json.dump({"id": r.id, "text": r.output_text, "input_tokens": r.usage.input_tokens}, f)
    print("stored", r.id)
elif PHASE == "after-restart":
    with open(STATE) as f:
        before = json.load(f)
    got = client.responses.retrieve(before["id"])
    check(got.output_text == before["text"], "after restart: the stored response", got.model_dump_json())
    r = client.responses.create(
        model=MODEL, previous_response_id=before["id"], instructions=INSTRUCTIONS,
        input="And what about the evenings?",
        temperature=0, max_output_tokens=20,
    )
    check(r.output_text.strip() != "", "after restart: continued", r.model_dump_json())
    cached = r.usage.input_tokens_details.cached_tokens
    check(cached >= (before["input_tokens"] // 16) * 16,
          "after restart: the first turn's KV came back (cached_tokens)", (cached, before))
    print("continued after restart, cached", cached)
else:
    raise SystemExit(f"unknown phase {PHASE}")
