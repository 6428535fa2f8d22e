/* Unit tests of the Jinja-subset interpreter: each template below is
 * rendered with the variables in VARS and compared byte for byte with the
 * output of jinja2 3.1.6 configured as transformers configures it
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * json.dumps-based tojson); entries with NULL are templates jinja2 rejects
 * (syntax, undefined, type and value errors), which must fail here too.
 * Further tests check error line numbers, status codes and whitespace rules
 * that need special variables. */
#include "chat_testutil.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char VARS[] = "{\"messages\": [{\"role\": \"system\", \"content\": \"Sys  \"}, {\"role\": \"user\", \"content\": \" hi there\\n\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nans\"}],  \"d\": {\"a\": 1, \"b\": [1, 2, {\"c\": \"x\"}], \"s\": \"h\\u00e9llo w\\u00f6rld\"}, \"n\": null, \"f\": 1.5, \"i\": 7, \"bt\": \"<s>\", \"add_generation_prompt\": true} ";

typedef struct jcase {
    const char *tpl;
    const char *expect; /* NULL: jinja2 raises */
} jcase;

static const jcase CASES[] = {
    {"a {{ 1 + 2 * 3 }} b", "a 7 b"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 10 / 5 }} {{ 2 ** -1 }}", "3 -4 -2 2 1024 0.25 2.0 0.5"},
    {"{{ \"a\" ~ 1 ~ none ~ true ~ u }}", "a1NoneTrue"},
    /* jinja2: TypeError */ {"{{ 1 + 2 ~ 3 }}|{{ 2 * 3 ~ 4 }}", NULL},
    {"{{ \"x\" if i > 3 else \"y\" }}{{ \"z\" if i < 3 }}|{{ \"a\" if n else \"b\" if i else \"c\" }}", "x|b"},
    {"{{ f }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789.0 * 10 }} {{ 1/3 }} {{ -0.0 }} {{ 2.0 ** 0.5 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1e22 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }}", "1.5 0.30000000000000004 1e+16 1234567890.0 0.3333333333333333 -0.0 1.4142135623730951 1e-05 0.0001 1e+22 5e-324 1.7976931348623157e+308"},
    {"{{ 1_000 + 0x10 + 0o7 + 0b11 }} {{ 2.5e3 }}", "1026 2500.0"},
    {"{{ [1, \"a\", none, true, 1.5, (\"x\",), (), {\"k\": \"v'\"}] }}", "[1, 'a', None, True, 1.5, ('x',), (), {'k': \"v'\"}]"},
    {"{{ \"a\tb\\\\\" }}|{{ [\"a\tb\\\\\", \"it's\", 'say \"hi\"', \"both ' \\\"\"] }}|{{ \"\\x41\\u00e9\\101\" }}", "a\tb\\|['a\\tb\\\\', \"it's\", 'say \"hi\"', 'both \\' \"']|A\303\251A"},
    {"{{ 'it\\'s' }} {{ \"a\" \"b\" 'c' }}", "it's abc"},
    {"{{ true and \"x\" }}|{{ false or \"y\" }}|{{ \"\" or none }}|{{ 0 and 1 }}|{{ not i }}|{{ not not \"\" }}", "x|y|None|0|False|False"},
    {"{{ -i }} {{ +f }} {{ -(1 + 2) }} {{ - 2 ** 2 }}", "-7 1.5 -3 4"},
    {"{{ \"a\" in \"cat\" }} {{ 1 in [1,2] }} {{ \"a\" in d }} {{ \"z\" not in d }} {{ not \"a\" in d }} {{ \"\" in \"x\" }} {{ 1 in u }}", "True True True True False True False"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ \"a\" < \"b\" }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ \"1\" == 1 }} {{ true == 1 }} {{ u == u }} {{ none == u }}", "True False True True True False True True False"},
    {"{{ [1,2] + [3] }}|{{ \"ab\" * 3 }}|{{ [0] * 3 }}|{{ 3 * \"x\" }}|{{ (1, 2) + (3,) }}", "[1, 2, 3]|ababab|[0, 0, 0]|xxx|(1, 2, 3)"},
    {"{{ d }} {{ messages[0] }} {{ {\"a\": (1, \"b\")} }}", "{'a': 1, 'b': [1, 2, {'c': 'x'}], 's': 'h\303\251llo w\303\266rld'} {'role': 'system', 'content': 'Sys  '} {'a': (1, 'b')}"},
    {"{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", "[0, 1, 2] [1, 4, 7] [5, 3, 1] []"},
    {"{{ dict(a=1, b=2) }} {{ namespace(x=1).x }} {{ dict({\"z\": 0}, y=1) }}", "{'a': 1, 'b': 2} 1 {'z': 0, 'y': 1}"},
    {"{{ d.b[-1].c }}|{{ d.b[5] }}|{{ d[\"a\"] }}|{{ d.b.1 }}|{{ d.s[1] }}|{{ d.s[-1] }}", "x||1|2|\303\251|d"},
    {"{{ [1,2,3][::-1] }} {{ \"abc\"[1:] }} {{ [1,2,3,4,5][1:4:2] }} {{ d.s[::-1] }} {{ [1,2,3][-2:] }} {{ [1,2,3][:-1] }} {{ \"abcdef\"[5:1:-2] }} {{ [1,2][5:] }}", "[3, 2, 1] bc [2, 4] dlr\303\266w oll\303\251h [2, 3] [1, 2] fd []"},
    {"{{ messages[1:]|length }} {{ (messages|first).role }} {{ messages[-1]['content'] }} {{ messages[1:][0].role }}", "2 system <think>\nr\n</think>\n\nans user"},
    {"  {% if true %}\n  yes\n  {% endif %}\n  end", "  yes\n  end"},
    {"{%- if true -%}\n  a  \n{%- endif -%}\n b", "ab"},
    {"x  {{- \" y \" -}}  z", "x y z"},
    {"{# comment #}\nA\n  {# c2 #}\nB", "A\nB"},
    {"line1\n{% set x = 5 %}\n{{ x }}\n", "line1\n5"},
    {"trailing newline kept once\n\n", "trailing newline kept once\n"},
    {"{% raw %}{{ not }}{% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |", "{{ not }}{% if %}|x|"},
    {"{%- for m in messages -%}\n  {{- m.role -}}\n{%- endfor %}", "systemuserassistant"},
    {"{% for m in messages %}\n    {{ m.role }}\n{% endfor %}", "    system\n    user\n    assistant\n"},
    {"{%+ if true %} x{% endif %}|\n  {%+ if true %} y{% endif %}", " x|\n   y"},
    {"a\n  {%- if true %}b{% endif %}", "ab"},
    {"a  \n\n  {% if true +%}\nb{% endif %}", "a  \n\n\nb"},
    {"x {% if true %}\ny{% endif %}\n  {{ \"v\" }}\n  {# c #}  tail", "x y  v\n  tail"},
    {"{%- set a = 1 %}\015\n{{ a }}\015\nline\015end", "1\nline\nend"},
    {"{{ \"{{\" }} {{ \"}}\" }} {{ {\"k\": {\"n\": 1}} }}", "{{ }} {'k': {'n': 1}}"},
    {"{% for m in messages %}{{ loop.index }}:{{ m.role }}|{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}\n{% endfor %}", "1:system|TrueFalse332\n2:user|FalseFalse321\n3:assistant|FalseTrue310\n"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in \"h\\u00e9\" %}[{{ c }}]{% endfor %}", "a=1;b=[1, 2, {'c': 'x'}];s=h\303\251llo w\303\266rld;|abs|[h][\303\251]"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "02"},
    {"{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in u %}x{% else %}undef-empty{% endfor %}|{% for i in [1] %}one{% else %}no{% endfor %}", "empty|undef-empty|one"},
    {"{% for i in range(6) if i is odd %}{{ i }}/{{ loop.length }}/{{ loop.index }} {% endfor %}", "1/3/1 3/3/2 5/3/3 "},
    {"{% for a in [1] %}{% for b in [2,3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", "121"},
    {"{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}", "37"},
    {"{% for i in [1,2,3] %}{{ loop.previtem|default(\"-\") }}{{ loop.nextitem|default(\"-\") }}{{ loop.cycle(\"a\", \"b\") }} {% endfor %}", "-2a 13b 2-a "},
    {"{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "231"},
    {"{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}", ",5,,"},
    {"{% set ns = namespace(a=1, b=\"x\") %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", "4x"},
    {"{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", "aus"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{{ t }}", "12|(3, 4)"},
    {"{% set x %}inner {{ 1 }}{% endset %}[{{ x }}]|{% set y | upper %}shout{% endset %}{{ y }}", "[inner 1]|SHOUT"},
    {"{% filter upper %}abc{{ \"d\" }}{% endfilter %}|{% filter replace(\"a\", \"o\") | upper %}banana{% endfilter %}", "ABCD|BONONO"},
    {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", "3"},
    {"{% macro f(a, b=\"B\") %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, \"c\") }}{{ f(b=3, a=4) }}{{ f() }}", "[1B][2c][43][B]"},
    {"{% macro greet(name) -%}\n  Hello {{ name }}!\n{%- endmacro %}{{ greet(\"x\") }}|{{ greet(\"y\")|upper }}", "Hello x!|HELLO Y!"},
    {"{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}", "4321"},
    {"{{ d.s|upper }} {{ d.s|length }} {{ \"  a b  \"|trim }}|{{ \"xxaxx\"|trim(\"x\") }}|{{ \"\\u00a0 x\\u3000\"|trim }}|{{ n|trim }}", "H\303\211LLO W\303\226RLD 11 a b|a|x|None"},
    {"{{ messages|length - 1 }} {{ messages[0].content|trim + \"!\" }} {{ d|length }} {{ u|length }} {{ \"h\\u00e9\"|count }}", "2 Sys! 3 0 2"},
    {"{{ messages|selectattr(\"role\", \"equalto\", \"user\")|list|length }}{{ messages|rejectattr(\"role\", \"equalto\", \"user\")|map(attribute=\"role\")|join(\",\") }}", "1system,assistant"},
    {"{{ messages|map(attribute=\"role\")|list }} {{ messages|map(attribute=\"nope\", default=\"?\")|list }} {{ [\"a\", \"b\"]|map(\"upper\")|join }}", "['system', 'user', 'assistant'] ['?', '?', '?'] AB"},
    {"{{ [0, 1, \"\", \"x\", none]|select|list }} {{ [1, 2, 3, 4]|reject(\"odd\")|list }} {{ [1, 2, 3]|select(\"gt\", 1)|list }} {{ messages|selectattr(\"role\", \"in\", [\"user\", \"system\"])|map(attribute=\"role\")|list }}", "[1, 'x'] [2, 4] [2, 3] ['system', 'user']"},
    {"{{ [\"a\",\"b\"]|join(\", \") }} {{ [1, 2]|join }} {{ messages|join(\"|\", attribute=\"role\") }}", "a, b 12 system|user|assistant"},
    {"{{ \"x\ny\n\nz\"|indent(2) }}|{{ \"x\ny\"|indent(2, true) }}|{{ \"x\n\ny\"|indent(first=true, blank=true) }}|{{ \"a\nb\"|indent(\">\") }}|{{ \"a\n\"|indent }}", "x\n  y\n\n  z|  x\n  y|    x\n    \n    y|a\n>b|a\n"},
    {"{{ \"Hello World\"|lower }} {{ \"hello world\"|title }} {{ \"hELLO\"|capitalize }} {{ \"they're bill's x-ray (a)b\"|title }}", "hello world Hello World Hello They're Bill's X-Ray (A)b"},
    {"{{ 3|string + \"x\" }} {{ \"42\"|int + 1 }} {{ \"4.7\"|int }} {{ \"abc\"|int }} {{ \"abc\"|int(9) }} {{ 3.9|int }} {{ \" 12 \"|int }} {{ \"1.5\"|float }} {{ \"z\"|float }} {{ 2|float }} {{ \"0x1A\"|int(0, 16) }}", "3x 43 4 0 9 3 12 1.5 0.0 2.0 26"},
    {"{{ u|default(\"dflt\") }}|{{ n|default(\"x\") }}|{{ \"\"|default(\"e\", true) }}|{{ u|d(\"short\") }}|{{ 0|default(5, boolean=true) }}|{{ u|default }}", "dflt|None|e|short|5|"},
    {"{{ d.b|first }} {{ d.b|last }} {{ \"abc\"|first }} {{ \"abc\"|last }} {{ []|first }} {{ d|first }}", "1 {'c': 'x'} a c  a"},
    {"{{ d|items|list }} {{ u|items|list }} {{ d.s|reverse }} {{ [1,2]|reverse|list }} {{ d.s|list }}", "[('a', 1), ('b', [1, 2, {'c': 'x'}]), ('s', 'h\303\251llo w\303\266rld')] [] dlr\303\266w oll\303\251h [2, 1] ['h', '\303\251', 'l', 'l', 'o', ' ', 'w', '\303\266', 'r', 'l', 'd']"},
    {"{{ \"abc\"|replace(\"b\", \"X\") }} {{ \"aaa\"|replace(\"a\", \"b\", 2) }} {{ \"ab\"|replace(\"\", \"-\") }} {{ 5|replace(\"5\", \"five\") }}", "aXc bba -a-b- five"},
    {"{{ \"<a&'\\\">\"|e }} {{ \"x\"|escape }} {{ \"<b>\"|safe }} {{ [1, 2, 1, 3]|unique|list }} {{ -3|abs }} {{ -2.5|abs }}", "&lt;a&amp;&#39;&#34;&gt; x <b> [1, 2, 3] 3 2.5"},
    {"{{ d|tojson }}", "{\"a\": 1, \"b\": [1, 2, {\"c\": \"x\"}], \"s\": \"h\303\251llo w\303\266rld\"}"},
    {"{{ d|tojson(indent=2) }}", "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2,\n    {\n      \"c\": \"x\"\n    }\n  ],\n  \"s\": \"h\303\251llo w\303\266rld\"\n}"},
    {"{{ {\"b\":1,\"a\":[1.0, 2.5e-7, 1e20, \"\\u00e9\n\\\"q\\\"\t\\u0001/\", none, true]}|tojson }}", "{\"b\": 1, \"a\": [1.0, 2.5e-07, 1e+20, \"\303\251\\n\\\"q\\\"\\t\\u0001/\", null, true]}"},
    {"{{ d|tojson(indent=4, sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}|{{ [[]] | tojson(indent=1) }}", "{\n    \"a\": 1,\n    \"b\": [\n        1,\n        2,\n        {\n            \"c\": \"x\"\n        }\n    ],\n    \"s\": \"h\303\251llo w\303\266rld\"\n}|[]|{}|[\n []\n]"},
    {"{{ {\"k\": \"v\"}|tojson(separators=(\",\", \":\")) }} {{ \"\\u00e9\\U0001F600\"|tojson(ensure_ascii=true) }} {{ (1, 2)|tojson }} {{ d|tojson(indent=\"\t\") }}", "{\"k\":\"v\"} \"\\u00e9\\ud83d\\ude00\" [1, 2] {\n\t\"a\": 1,\n\t\"b\": [\n\t\t1,\n\t\t2,\n\t\t{\n\t\t\t\"c\": \"x\"\n\t\t}\n\t],\n\t\"s\": \"h\303\251llo w\303\266rld\"\n}"},
    {"{% if i is number and f is float and i is integer and \"x\" is string and d is mapping and [] is iterable and [] is sequence and \"s\" is sequence %}ok{% endif %}", "ok"},
    {"{{ u is defined }} {{ u is undefined }} {{ n is none }} {{ n is defined }} {{ d.zz is defined }} {{ d.a is defined }} {{ true is boolean }} {{ 1 is boolean }}", "False True True True False True True False"},
    {"{{ i is divisibleby 7 }} {{ i is divisibleby(2) }} {{ i is even }} {{ i is odd }} {{ none is sameas none }} {{ i is eq 7 }} {{ i is equalto 8 }} {{ i is gt 3 }} {{ i is lt 3 }} {{ i is ne 7 }}", "True False False True True True False True False False"},
    {"{{ false is false }} {{ 0 is false }} {{ true is true }} {{ \"a\" is in \"cat\" }} {{ 3 is in [1, 2] }} {{ \"abc\" is lower }} {{ \"ABC\" is upper }} {{ \"a1\" is upper }}", "True False True True False True True False"},
    {"{{ d is not mapping }} {{ u is not defined }} {{ 1 is float }} {{ 1.0 is integer }} {{ true is number }} {{ none is string }} {{ f is callable }} {{ range is callable }}", "False True False False True False False True"},
    {"{{ \"a,b,,c\".split(\",\") }} {{ \" a  b \".split() }} {{ \"a b c\".split(\" \", 1) }} {{ \"a.b.c\".rsplit(\".\", 1) }} {{ \"  x y  \".rsplit(none, 1) }} {{ \"\".split() }} {{ \"\".split(\",\") }}", "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a.b', 'c'] ['  x', 'y'] [] ['']"},
    {"{{ \"hello\".startswith(\"he\") }}{{ \"hello\".endswith((\"x\",\"lo\")) }}{{ \"hello\".startswith(\"\") }}{{ \"hi\".endswith(\"hello\") }}", "TrueTrueTrueFalse"},
    {"{{ messages[2].content.split(\"</think>\")[-1].lstrip(\"\n\") }}|{{ messages[2].content.split(\"</think>\")[0].rstrip(\"\n\").split(\"<think>\")[-1].lstrip(\"\n\") }}", "ans|r"},
    {"{{ \"  xy  \".strip() }}|{{ \"  xy  \".lstrip() }}|{{ \"  xy  \".rstrip() }}|{{ \"abcxba\".strip(\"ab\") }}|{{ \"\n\nx\n\".strip(\"\n\") }}", "xy|xy  |  xy|cx|x"},
    {"{{ \"Hello World\".upper() }} {{ \"Hello World\".lower() }} {{ \"they're bill's x-ray\".title() }} {{ \"hELLO wORLD\".capitalize() }}", "HELLO WORLD hello world They'Re Bill'S X-Ray Hello world"},
    {"{{ \"abc\".replace(\"b\", \"X\") }} {{ \"abab\".replace(\"a\", \"-\", 1) }} {{ \"hello\".find(\"l\") }} {{ \"hello\".rfind(\"l\") }} {{ \"hello\".find(\"z\") }} {{ \"hello\".count(\"l\") }}", "aXc -bab 2 3 -1 2"},
    {"{{ \", \".join([\"a\", \"b\"]) }} {{ \"a\nb\015\nc\".splitlines() }} {{ \"123\".isdigit() }} {{ \"12a\".isdigit() }} {{ \" \t\".isspace() }} {{ \"abc\".isalpha() }} {{ \"ab1\".isalnum() }} {{ \"ab\".islower() }} {{ \"AB\".isupper() }}", "a, b ['a', 'b', 'c'] True False True True True True True"},
    {"{{ d.get(\"a\") }} {{ d.get(\"zz\", 5) }} {{ d.get(\"zz\") }} {{ d.keys()|list }} {{ d.values()|list|length }} {{ d.items()|list|length }}", "1 5 None ['a', 'b', 's'] 3 3"},
    {"{{ u }}|{{ u ~ \"x\" }}|{{ not u }}|{{ u|upper }}|{{ u|string }}|{{ d.missing }}|{{ d.missing is defined }}|{{ n.foo }}|{{ (n.foo) is defined }}|{{ \"abc\".foo }}|{{ [1][5] }}|{{ u is iterable }}", "|x|True||||False||False|||True"},
    {"{% if u %}T{% else %}F{% endif %}{% if d.missing %}T{% else %}F{% endif %}{% if messages %}T{% endif %}{% if [] %}T{% else %}F{% endif %}{% if {} %}T{% else %}F{% endif %}{% if 0.0 %}T{% else %}F{% endif %}", "FFTFFF"},
    {"{% set ns = namespace() %}{% set ns.x = [1] %}{% set ns.x = ns.x + [2] %}{{ ns.x }}{{ ns.y }}", "[1, 2]"},
    /* jinja2: UndefinedError */ {"{{ u.x }}", NULL},
    /* jinja2: UndefinedError */ {"{{ u + 1 }}", NULL},
    /* jinja2: TypeError */ {"{{ \"x\" + 1 }}", NULL},
    /* jinja2: TypeError */ {"{{ 1 - \"x\" }}", NULL},
    /* jinja2: UndefinedError */ {"{{ u[0] }}", NULL},
    /* jinja2: UndefinedError */ {"{{ u() }}", NULL},
    /* jinja2: ZeroDivisionError */ {"{{ 1 / 0 }}", NULL},
    /* jinja2: ZeroDivisionError */ {"{{ 5 // 0 }}", NULL},
    /* jinja2: TypeError */ {"{{ \"a\" < 1 }}", NULL},
    /* jinja2: TypeError */ {"{{ 1 in 5 }}", NULL},
    /* jinja2: TypeError */ {"{{ 1 in \"abc\" }}", NULL},
    /* jinja2: TypeError */ {"{{ n|length }}", NULL},
    /* jinja2: TypeError */ {"{{ d|tojson }}{{ u|tojson }}", NULL},
    /* jinja2: TemplateError */ {"{{ raise_exception(\"boom\") }}", NULL},
    /* jinja2: UndefinedError */ {"{{ d.s.nosuchmethod() }}", NULL},
    /* jinja2: TemplateRuntimeError */ {"{% set n.x = 1 %}", NULL},
    /* jinja2: TemplateAssertionError */ {"{{ i|nosuchfilter }}", NULL},
    /* jinja2: TemplateAssertionError */ {"{{ i is nosuchtest }}", NULL},
    /* jinja2: TypeError */ {"{% for a, b in [1, 2] %}{% endfor %}", NULL},
    /* jinja2: ValueError */ {"{{ range(1, 2, 0) }}", NULL},
    /* jinja2: ValueError */ {"{{ \"x\".split(\"\") }}", NULL},
    /* jinja2: TypeError */ {"{{ \"x\" * \"y\" }}", NULL},
    /* jinja2: TypeError */ {"{{ {[1]: 2} }}", NULL},
    /* jinja2: TypeError */ {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL},
    /* jinja2: TypeError */ {"{{ -\"x\" }}", NULL},
    {"{{ \"stra\303\237e \316\237\316\224\316\237\316\243 \317\203\316\277\317\206\317\214\317\202 \316\251\316\274\316\255\316\263\316\261 \320\277\321\200\320\270\320\262\320\265\321\202 \303\200\303\211\303\216\303\265\303\274 \305\201\303\223D\305\271 \304\260stanbul \303\277 \302\265\"|upper }}|{{ \"STRASSE \316\237\316\224\316\237\316\243 \316\243\316\237\316\246\316\237\316\243 \316\251\316\234\316\210\316\223\316\221 \320\237\320\240\320\230\320\222\320\225\320\242 \303\200\303\211\303\216\303\225\303\234 \305\201\303\223D\305\271 \304\260STANBUL \305\270\"|lower }}", "STRASSE \316\237\316\224\316\237\316\243 \316\243\316\237\316\246\316\214\316\243 \316\251\316\234\316\210\316\223\316\221 \320\237\320\240\320\230\320\222\320\225\320\242 \303\200\303\211\303\216\303\225\303\234 \305\201\303\223D\305\271 \304\260STANBUL \305\270 \316\234|strasse \316\277\316\264\316\277\317\202 \317\203\316\277\317\206\316\277\317\202 \317\211\316\274\316\255\316\263\316\261 \320\277\321\200\320\270\320\262\320\265\321\202 \303\240\303\251\303\256\303\265\303\274 \305\202\303\263d\305\272 i\314\207stanbul \303\277"},
    {"{{ \"\303\251lan vital\"|capitalize }}|{{ \"\303\251lan \303\211COLE\"|title }}|{{ \"\303\211COLE \303\251lan\".title() }}|{{ \"\303\211COLE \303\251lan\".capitalize() }}|{{ \"\316\243\"|lower }}|{{ \"A\316\243 B\"|lower }}", "\303\211lan vital|\303\211lan \303\211cole|\303\211cole \303\211lan|\303\211cole \303\251lan|\317\203|a\317\202 b"},
    {"{{ \"  a b c  \".split(none, 1) }}{{ \"  a b c  \".rsplit(none, 1) }}{{ \"a b\".split(none, 0) }}", "['a', 'b c  ']['  a b', 'c']['a b']"},
};

static void test_table(void **state) {
    (void)state;
    size_t n = sizeof(CASES) / sizeof(CASES[0]), bad = 0;
    for (size_t i = 0; i < n; i++) {
        ct_result r = ct_render(CASES[i].tpl, VARS, NULL);
        if (CASES[i].expect) {
            if (r.st != RB_OK) {
                print_error("case %zu: %s\n  template: %s\n", i, r.err.msg, CASES[i].tpl);
                bad++;
            } else if (r.len != strlen(CASES[i].expect) || memcmp(r.out, CASES[i].expect, r.len) != 0) {
                print_error("case %zu mismatch\n  template: %s\n  expected: [%s]\n  got:      [%s]\n", i, CASES[i].tpl,
                            CASES[i].expect, r.out);
                bad++;
            }
        } else if (r.st == RB_OK) {
            print_error("case %zu: expected an error, got [%s]\n  template: %s\n", i, r.out, CASES[i].tpl);
            bad++;
        } else if (strstr(r.err.msg, "line ") == NULL) {
            print_error("case %zu: error message without a line number: %s\n", i, r.err.msg);
            bad++;
        }
        ct_result_free(&r);
    }
    assert_int_equal(bad, 0);
    assert_true(n > 100);
}

/* Error status codes and line numbers of syntax and runtime errors. */
static void expect_error(const char *tpl, rb_status st, const char *needle) {
    ct_result r = ct_render(tpl, VARS, NULL);
    if (r.st != st || !strstr(r.err.msg, needle))
        fail_msg("template %s: got status %s, message '%s'; wanted %s and '%s'", tpl, rb_status_str(r.st), r.err.msg,
                 rb_status_str(st), needle);
    ct_result_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("line1\n{% if true %}\nno end\n", RB_E_FORMAT, "line 3: unexpected end of template");
    expect_error("a\nb\n{{ 1 + }}", RB_E_FORMAT, "line 3");
    expect_error("{% for x in [1] %}\n{% endif %}", RB_E_FORMAT, "line 2");
    expect_error("\n\n{% frobnicate %}", RB_E_FORMAT, "line 3: unknown or unsupported tag 'frobnicate'");
    expect_error("{{ 'unterminated }}", RB_E_FORMAT, "unterminated string");
    expect_error("x\n{# open comment", RB_E_FORMAT, "line 2: missing end of comment");
    expect_error("{{ (1 }}", RB_E_FORMAT, "line 1");
    expect_error("{% break %}", RB_E_FORMAT, "outside of a loop");
    expect_error("{{ x ]] }}", RB_E_FORMAT, "unexpected ']'");
    expect_error("{% for x in y recursive %}{% endfor %}", RB_E_FORMAT, "recursive");
    expect_error("{% include 'x' %}", RB_E_FORMAT, "unsupported tag 'include'");
    expect_error("one\ntwo\n{{ raise_exception('Roles must alternate') }}", RB_E_INVALID,
                 "line 3: raise_exception: Roles must alternate");
    expect_error("\n{{ nothere.attr }}", RB_E_INVALID, "line 2: 'nothere' is undefined");
    expect_error("{% set x = d.zz %}\n\n{{ x.y }}", RB_E_INVALID, "line 3");
    expect_error("{{ 'a' + 1 }}", RB_E_INVALID, "unsupported operand type(s) for +: 'str' and 'int'");
    expect_error("{{ i | bogus }}", RB_E_UNSUPPORTED, "no filter named 'bogus'");
    expect_error("{{ messages[0].content | tojson }}{{ messages | tojson }}{{ u | tojson }}", RB_E_INVALID,
                 "not JSON serializable");
}

/* transformers' {% generation %} marker renders its body unchanged. */
static void test_generation_block(void **state) {
    (void)state;
    ct_result r = ct_render("{% for m in messages %}{% generation %}[{{ m.role }}]{% endgeneration %}{% endfor %}",
                            VARS, NULL);
    TU_OK(r.st);
    assert_string_equal(r.out, "[system][user][assistant]");
    ct_result_free(&r);
}

/* strftime_now() uses the caller's clock (ct_render pins 1700000000 =
 * 2023-11-14 22:13:20 UTC); compare with the C library's own rendering. */
static void test_strftime_now(void **state) {
    (void)state;
    ct_result r = ct_render("{{ strftime_now('%Y-%m-%d|%d %b %Y') }}", VARS, NULL);
    TU_OK(r.st);
    time_t t = 1700000000;
    struct tm tmv;
    char want[64];
    assert_non_null(localtime_r(&t, &tmv));
    strftime(want, sizeof(want), "%Y-%m-%d|%d %b %Y", &tmv);
    assert_string_equal(r.out, want);
    assert_non_null(strstr(r.out, "2023-11-1"));
    ct_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_generation_block),
        cmocka_unit_test(test_strftime_now),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
