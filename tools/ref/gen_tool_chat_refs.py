#!/usr/bin/env python3
# Reference renders of conversations with tools, tool calls and tool results
# through Llama 3.1's official chat template (llama.cpp's
# models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja, from the
# node-llama-cpp npm bundle as scripts/fetch-chat-templates.sh gets the
# others), rendered by plain jinja2 configured as transformers renders
# templates (gen_chat_refs.JinjaRenderer). Each case has the messages twice:
# "messages_openai" as an OpenAI client sends them (tool-call arguments as a
# JSON string, content null) and "messages" as the template is given them by
# transformers' convention (arguments as a mapping); the worker must turn the
# first into the second. Writes tests/data/chat_tools/llama3_1.json.
#
# usage: gen_tool_chat_refs.py TEMPLATE.jinja OUT.json
#        gen_tool_chat_refs.py --templates LLAMA_CPP_GIT_DIR OUT.json  (see templates_main)
import copy
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_chat_refs import JinjaRenderer, WEATHER_TOOL  # noqa: E402

TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a time zone",
    "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC", "CET"]},
        "hours24": {"type": "boolean"}}, "required": ["zone"]}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    U = lambda c: {"role": "user", "content": c}  # noqa: E731
    paris = call("call_abc123", "get_weather", {"city": "Paris"})
    zone = call("call_zz9", "get_time", {"zone": "CET", "hours24": True})
    return [
        ([U("Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
        ([{"role": "system", "content": "Use tools."}, U("Weather and time?")], True,
         {"tools": [WEATHER_TOOL, TIME_TOOL]}),
        ([U("Weather in Paris?"), {"role": "assistant", "content": None, "tool_calls": [paris]},
          {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temp\": 21}"}], True,
         {"tools": [WEATHER_TOOL]}),
        ([U("Time?"), {"role": "assistant", "content": None, "tool_calls": [zone]},
          {"role": "tool", "tool_call_id": "call_zz9", "content": "14:05"},
          {"role": "assistant", "content": "It is 14:05 in CET."}, U("Thanks")], True,
         {"tools": [WEATHER_TOOL, TIME_TOOL]}),
        ([U("No tools here.")], True, {}),
    ]


def to_openai(msgs):
    out = copy.deepcopy(msgs)
    for m in out:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"], separators=(",", ":"))
    return out


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        template = f.read()
    r = JinjaRenderer()
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    cs = []
    for msgs, agp, extra in cases():
        hf = copy.deepcopy(msgs)
        for m in hf:  # transformers' convention: content None renders as the template sees it
            if m.get("content") is None:
                m["content"] = ""
        cs.append({"messages_openai": to_openai(msgs), "messages": hf, "add_generation_prompt": agp,
                   "extra": extra, "rendered": r.render(template, hf, agp, extra, special)})
    import jinja2
    doc = {"name": "llama3_1", "source": "node-llama-cpp@3.22.1 llama/gitRelease.bundle "
           "models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja",
           "template_sha256": hashlib.sha256(template.encode()).hexdigest(),
           "renderer": "jinja2 %s sandbox as gen_chat_refs.JinjaRenderer" % jinja2.__version__,
           "template": template, **special, "cases": cs}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__" and sys.argv[1:2] != ["--templates"]:
    main()


# `gen_tool_chat_refs.py --templates LLAMA_CPP_GIT_DIR OUT.json`: the official
# templates of more tool-calling models (llama.cpp's models/templates at the
# bundle's HEAD) with the family each one's call syntax belongs to, for the
# family detector's test (tests/data/chat_tools/templates.json).
TEMPLATE_FAMILIES = [
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
    ("Qwen-Qwen3-0.6B.jinja", "hermes"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"),
    ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral_args"),
    ("google-gemma-2-2b-it.jinja", "none"),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "none"),
]


def templates_main(git_dir, out):
    import subprocess
    rows = []
    for name, family in TEMPLATE_FAMILIES:
        text = subprocess.run(["git", "-C", git_dir, "show", "HEAD:models/templates/" + name], check=True,
                              capture_output=True).stdout.decode("utf-8")
        rows.append({"file": name, "sha256": hashlib.sha256(text.encode()).hexdigest(), "family": family,
                     "template": text})
    doc = {"source": "node-llama-cpp@3.22.1 llama/gitRelease.bundle models/templates/",
           "notes": "family: the tool-call syntax of the model's documented output (rb_tool_family_name)",
           "templates": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--templates":
    templates_main(sys.argv[2], sys.argv[3])
