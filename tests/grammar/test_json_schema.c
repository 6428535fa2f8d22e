/* JSON schema -> grammar: the JSON Schema Test Suite's draft4 cases for the
 * supported keywords (tests/data/grammar/schema_suite.json; every invalid
 * document must be rejected, every valid one accepted unless it uses what the
 * grammar deliberately leaves out: whitespace, other member orders, numbers
 * written as 1.0), schemas with unsupported keywords refused naming them, and
 * hand-written cases: optional members and their commas, extra members with
 * declared names excluded, formats (leap years, month lengths), lengths
 * counted in characters, tuples, recursion through $defs, embedding the rules
 * in a larger grammar. */
#include "gram_testutil.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rb_grammar *compile(const char *schema_text, rb_error *err) {
    rb_grammar *g = NULL;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    if (!s) fail_msg("bad schema text in the test: %s", schema_text);
    rb_status st = rb_grammar_from_json_schema(s, &g, err);
    json_decref(s);
    if (st != RB_OK) assert_null(g);
    return g;
}

static rb_grammar *must(const char *schema_text) {
    rb_error err = {0};
    rb_grammar *g = compile(schema_text, &err);
    if (!g) fail_msg("schema %s: %s", schema_text, err.msg);
    return g;
}

/* Valid documents the grammar rejects on purpose ("group / test"): without
 * "type", object/array/string keywords make the value that type (a schema
 * with "properties" asks for an object; any other value would pass it
 * vacuously); without additionalProperties, an object with declared
 * properties gets no others (true must be said). */
static const char *const tighter[] = {
    "object properties validation / ignores non-objects",
    "a schema given for items / ignores non-arrays",
    "minItems validation / ignores non-arrays",
    "maxItems validation / ignores non-arrays",
    "minLength validation / ignores non-strings",
    "maxLength validation / ignores non-strings",
    "root pointer ref / match",           /* {"foo": false}: # is an object */
    "root pointer ref / recursive match", /* the same one level down */
    "object properties validation / doesn't invalidate other properties",
    "additionalProperties are allowed by default / additional properties are allowed",
    NULL,
};

static bool is_tighter(const char *group, const char *desc) {
    char key[512];
    snprintf(key, sizeof key, "%s / %s", group, desc);
    for (const char *const *t = tighter; *t; t++)
        if (!strcmp(*t, key)) return true;
    return false;
}

static void test_suite(void **state) {
    (void)state;
    char path[4096];
    json_error_t je;
    json_t *root = json_load_file(tu_data(path, sizeof path, "grammar/schema_suite.json"), 0, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    json_t *groups = json_object_get(root, "groups");
    size_t gi;
    json_t *grp;
    int n_valid = 0, n_invalid = 0, n_tight = 0, n_unsup = 0, n_groups = 0, n_bad = 0;
    json_array_foreach(groups, gi, grp) {
        const char *schema = json_string_value(json_object_get(grp, "schema"));
        const char *gdesc = json_string_value(json_object_get(grp, "description"));
        rb_error err = {0};
        rb_grammar *g = compile(schema, &err);
        if (!g) {
            /* only the unsupported keywords and schemas no value fits may fail */
            if (err.code != RB_E_UNSUPPORTED) fail_msg("group '%s' %s: %s", gdesc, schema, err.msg);
            print_message("unsupported: %s: %s\n", gdesc, err.msg);
            n_unsup++;
            continue;
        }
        n_groups++;
        size_t ti;
        json_t *t;
        json_array_foreach(json_object_get(grp, "tests"), ti, t) {
            const char *data = json_string_value(json_object_get(t, "data"));
            const char *desc = json_string_value(json_object_get(t, "description"));
            bool valid = json_is_true(json_object_get(t, "valid"));
            int acc = gt_accepts(g, data, strlen(data));
            if (!valid) {
                if (acc) fail_msg("group '%s' (%s): '%s' is invalid but accepted: %s", gdesc, schema, desc, data);
                n_invalid++;
            } else if (!acc) {
                if (!is_tighter(gdesc, desc)) {
                    print_error("group '%s' (%s): '%s' is valid but rejected: %s\n", gdesc, schema, desc, data);
                    n_bad++;
                }
                n_tight++;
            } else {
                n_valid++;
            }
        }
        rb_grammar_free(g);
    }
    print_message("schema suite: %d groups compiled, %d refused as unsupported; %d valid accepted, %d invalid "
                  "rejected, %d valid rejected on purpose\n",
                  n_groups, n_unsup, n_valid, n_invalid, n_tight);
    assert_int_equal(n_bad, 0);
    assert_int_equal(n_tight, 10); /* each listed case is still met (the list stays exact) */
    assert_true(n_groups >= 30);
    assert_true(n_invalid >= 40);
    json_decref(root);
}

#define ACC(g, s) assert_true(gt_accepts(g, s, strlen(s)))
#define REJ(g, s) assert_false(gt_accepts(g, s, strlen(s)))

static void test_objects(void **state) {
    (void)state;
    rb_grammar *g = must("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                         "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}");
    ACC(g, "{\"b\":\"x\"}");
    ACC(g, "{\"a\":1,\"b\":\"x\"}");
    ACC(g, "{\"a\":1,\"b\":\"x\",\"c\":true}");
    ACC(g, "{\"b\":\"x\",\"c\":false}");
    ACC(g, "{ \"a\": -12, \"b\": \"\",\n  \"c\": true }");
    REJ(g, "{}");                         /* b required */
    REJ(g, "{\"a\":1}");
    REJ(g, "{\"a\":1,,\"b\":\"x\"}");
    REJ(g, "{,\"b\":\"x\"}");
    REJ(g, "{\"b\":\"x\",}");
    REJ(g, "{\"b\":\"x\",\"d\":1}");      /* no extras without additionalProperties */
    REJ(g, "{\"b\":\"x\"}  ");            /* nothing after the value */
    REJ(g, "{\"b\":\"x\",   \"c\":true}"); /* at most one space */
    REJ(g, "{\"a\":01,\"b\":\"x\"}");
    rb_grammar_free(g);

    /* extra members: any name but the declared ones, values per the schema */
    g = must("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"null\"},\"a\":{\"type\":\"null\"}},"
             "\"additionalProperties\":{\"type\":\"integer\"}}");
    ACC(g, "{\"ab\":null,\"x\":1,\"abc\":2,\"b\":3,\"\":4}");
    ACC(g, "{\"aa\":5}");
    REJ(g, "{\"x\":null}");
    REJ(g, "{\"a\":null,\"ab\":5}"); /* declared names keep their own schema and order */
    REJ(g, "{\"ab\":1}");
    REJ(g, "{\"a\":1}");
    rb_grammar_free(g);
    /* two objects with declared names and extra members share one helper rule (a fuzz find) */
    g = must("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}},"
             "\"required\":[\"a\"],\"additionalProperties\":{\"type\":\"integer\"}}");
    ACC(g, "{\"a\":[{\"a\":[],\"b\":1}],\"ab\":2}");
    REJ(g, "{\"a\":[],\"a\":1}");
    rb_grammar_free(g);
    g = must("{\"type\":\"object\",\"additionalProperties\":false}");
    ACC(g, "{}");
    REJ(g, "{\"a\":1}");
    rb_grammar_free(g);
    g = must("{\"required\":[\"x\"]}"); /* required without properties: any value */
    ACC(g, "{\"x\":[1,{\"y\":null}]}");
    REJ(g, "{}");
    rb_grammar_free(g);
}

static void test_strings_and_formats(void **state) {
    (void)state;
    rb_grammar *g = must("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    ACC(g, "\"ab\"");
    ACC(g, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""); /* three characters, nine bytes */
    ACC(g, "\"\\u00e9\\n\"");                         /* escapes count as one each */
    REJ(g, "\"a\"");
    REJ(g, "\"abcd\"");
    REJ(g, "\"a\nb\""); /* raw control character */
    REJ(g, "\"\\x\"");
    REJ(g, "\"\\ud83d\\ude00\""); /* an escaped surrogate pair: one character to JSON Schema */
    ACC(g, "\"\\uD7FF\\uE000\"");
    rb_grammar_free(g);

    g = must("{\"type\":\"string\",\"format\":\"date\"}");
    ACC(g, "\"2024-02-29\""); /* leap year */
    ACC(g, "\"2000-02-29\""); /* divisible by 400 */
    ACC(g, "\"2023-12-31\"");
    ACC(g, "\"2023-04-30\"");
    REJ(g, "\"2023-02-29\"");
    REJ(g, "\"1900-02-29\""); /* divisible by 100, not 400 */
    REJ(g, "\"2023-04-31\"");
    REJ(g, "\"2023-13-01\"");
    REJ(g, "\"2023-00-10\"");
    REJ(g, "\"2023-01-00\"");
    rb_grammar_free(g);
    g = must("{\"type\":\"string\",\"format\":\"date-time\"}");
    ACC(g, "\"2023-01-02T23:59:59Z\"");
    ACC(g, "\"2023-01-02T00:00:00.123+05:30\"");
    REJ(g, "\"2023-01-02T24:00:00Z\"");
    REJ(g, "\"2023-01-02T10:60:00Z\"");
    REJ(g, "\"2023-01-02T10:00:00\""); /* an offset is required */
    rb_grammar_free(g);
    g = must("{\"format\":\"uuid\"}");
    ACC(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    REJ(g, "\"123e4567-e89b-12d3-a456-42661417400\"");
    REJ(g, "\"123e4567e89b-12d3-a456-426614174000\"");
    rb_grammar_free(g);
}

static void test_arrays_refs_types(void **state) {
    (void)state;
    rb_grammar *g = must("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],"
                         "\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":4}");
    ACC(g, "[1]");
    ACC(g, "[1,\"a\"]");
    ACC(g, "[1,\"a\",true,false]");
    REJ(g, "[]");
    REJ(g, "[\"a\"]");
    REJ(g, "[1,\"a\",true,false,true]");
    REJ(g, "[1,2]");
    rb_grammar_free(g);
    g = must("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"minItems\":2,\"maxItems\":3}");
    ACC(g, "[null,null]");
    ACC(g, "[ null, null, null ]");
    REJ(g, "[null]");
    REJ(g, "[null,null,null,null]");
    rb_grammar_free(g);
    /* recursion through $defs */
    g = must("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
             "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
             "\"additionalProperties\":false}}}");
    ACC(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}");
    REJ(g, "{\"v\":1,\"kids\":[{\"kids\":[]}]}");
    rb_grammar_free(g);
    g = must("{\"type\":[\"string\",\"null\"],\"maxLength\":1}");
    ACC(g, "null");
    ACC(g, "\"a\"");
    REJ(g, "\"ab\"");
    REJ(g, "1");
    rb_grammar_free(g);
    g = must("{\"type\":\"string\",\"enum\":[\"a\",1,\"b\\\"c\"]}");
    ACC(g, "\"a\"");
    ACC(g, "\"b\\\"c\"");
    REJ(g, "1"); /* not a string */
    rb_grammar_free(g);
    g = must("{\"anyOf\":[{\"type\":\"integer\"},{\"const\":{\"k\":[true]}}]}");
    ACC(g, "-3");
    ACC(g, "{\"k\":[true]}");
    REJ(g, "{\"k\":[false]}");
    rb_grammar_free(g);
    /* oneOf: only where no value can match two alternatives */
    g = must("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2},{\"enum\":[null,true]}]}");
    ACC(g, "7");
    ACC(g, "\"ab\"");
    ACC(g, "true");
    REJ(g, "false");
    rb_grammar_free(g);
    g = must("{\"oneOf\":[{\"$ref\":\"#/$defs/cat\"},{\"$ref\":\"#/$defs/dog\"}],\"$defs\":{"
             "\"cat\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},\"lives\":{\"type\":\"integer\"}},"
             "\"required\":[\"kind\"],\"additionalProperties\":false},"
             "\"dog\":{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"dog\",\"puppy\"]}},"
             "\"required\":[\"kind\"],\"additionalProperties\":false}}}");
    ACC(g, "{\"kind\":\"cat\",\"lives\":9}");
    ACC(g, "{\"kind\":\"puppy\"}");
    REJ(g, "{\"kind\":\"puppy\",\"lives\":9}");
    rb_grammar_free(g);
    g = must("{\"oneOf\":[{\"const\":[1]},{\"const\":[2]},{\"enum\":[3,\"x\"]}]}");
    ACC(g, "[2]");
    ACC(g, "\"x\"");
    rb_grammar_free(g);
    g = must("true");
    ACC(g, "[{\"a\":\"\\u12ab\"},-0.5e+10,false,null]");
    REJ(g, "[1,]");
    REJ(g, "nul");
    rb_grammar_free(g);
}

static void expect_refusal(const char *schema, rb_status code, const char *part) {
    rb_error err = {0};
    rb_grammar *g = compile(schema, &err);
    if (g || err.code != code || !strstr(err.msg, part))
        fail_msg("%s: got %d '%s', want %d with '%s'", schema, err.code, err.msg, code, part);
}

static void test_refusals(void **state) {
    (void)state;
    expect_refusal("{\"type\":\"string\",\"pattern\":\"a\"}", RB_E_UNSUPPORTED, "'pattern'");
    expect_refusal("{\"type\":\"object\",\"properties\":{\"x\":{\"minimum\":3}}}", RB_E_UNSUPPORTED,
                   "unsupported keyword 'minimum' (at /properties/x)");
    expect_refusal("{\"type\":\"array\",\"uniqueItems\":true}", RB_E_UNSUPPORTED, "uniqueItems");
    expect_refusal("{\"type\":\"string\",\"format\":\"email\"}", RB_E_UNSUPPORTED, "format 'email'");
    expect_refusal("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":2}]}", RB_E_UNSUPPORTED, "allOf");
    expect_refusal("{\"$ref\":\"other.json#/x\"}", RB_E_UNSUPPORTED, "$ref 'other.json#/x'");
    expect_refusal("{\"$ref\":\"#/$defs/missing\"}", RB_E_INVALID, "points nowhere");
    expect_refusal("{\"type\":\"strin\"}", RB_E_INVALID, "unknown type 'strin'");
    expect_refusal("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", RB_E_INVALID, "minLength > maxLength");
    expect_refusal("{\"type\":\"array\",\"maxItems\":-1}", RB_E_INVALID, "'maxItems' must be a non-negative integer");
    expect_refusal("{\"enum\":[]}", RB_E_INVALID, "'enum'");
    expect_refusal("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}", RB_E_UNSUPPORTED,
                   "oneOf whose alternatives may overlap");
    expect_refusal("{\"oneOf\":[{\"const\":[]},{\"const\":[]}]}", RB_E_UNSUPPORTED, "oneOf");
    expect_refusal("{\"oneOf\":[{\"enum\":[1,2]},{\"enum\":[2,3]}]}", RB_E_UNSUPPORTED, "oneOf");
    expect_refusal("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},"
                   "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":2}}}]}",
                   RB_E_UNSUPPORTED, "oneOf"); /* k not required: {} matches both */
    expect_refusal("false", RB_E_UNSUPPORTED, "schema false");
    expect_refusal("[1]", RB_E_INVALID, "must be an object or a boolean");
    /* a self-reference that consumes nothing would loop: refused as left recursion */
    expect_refusal("{\"$ref\":\"#\"}", RB_E_INVALID, "left");
    char *text = NULL;
    assert_int_equal(rb_json_schema_text_to_gbnf("{", 1, NULL, &text, NULL, NULL), RB_E_INVALID);
    assert_int_equal(rb_json_schema_text_to_gbnf("{}", 2, "bad name", &text, NULL, NULL), RB_E_INVALID);
    assert_null(text);
}

/* The schema's rules inside a larger grammar (a tool call's shape). */
static void test_embedding(void **state) {
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10}},"
                         "\"required\":[\"city\"],\"additionalProperties\":false}";
    char *rules = NULL;
    size_t n = 0;
    assert_int_equal(rb_json_schema_text_to_gbnf(schema, strlen(schema), "args", &rules, &n, NULL), RB_OK);
    assert_int_equal(strlen(rules), n);
    char *text = malloc(n + 200);
    assert_non_null(text);
    snprintf(text, n + 200, "root ::= \"<tool_call>{\\\"name\\\": \\\"weather\\\", \\\"arguments\\\": \" args \"}</tool_call>\"\n%s",
             rules);
    rb_grammar *g = gt_parse(text);
    ACC(g, "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\":\"Paris\"}}</tool_call>");
    REJ(g, "<tool_call>{\"name\": \"weather\", \"arguments\": {}}</tool_call>");
    rb_grammar_free(g);
    free(text);
    free(rules);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suite),    cmocka_unit_test(test_objects),  cmocka_unit_test(test_strings_and_formats),
        cmocka_unit_test(test_arrays_refs_types), cmocka_unit_test(test_refusals), cmocka_unit_test(test_embedding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
