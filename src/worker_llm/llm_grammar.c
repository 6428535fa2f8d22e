/* Implementation of llm_grammar.h. */
#include "worker_llm/llm_grammar.h"

#include <string.h>

static bool present(const json_t *v) { return v && !json_is_null(v); }

/* The compiler's message without its own "grammar: " / "json schema: " lead. */
static const char *bare(const char *msg) {
    if (!strncmp(msg, "grammar: ", 9)) return msg + 9;
    if (!strncmp(msg, "json schema: ", 13)) return msg + 13;
    return msg;
}

static void schema_grammar(json_t *schema, const char *field, llm_gen_request *req, wk_errors *errs) {
    rb_error err;
    rb_error_clear(&err);
    json_t *owned = NULL;
    if (json_is_string(schema)) { /* vLLM takes the schema as JSON text too */
        json_error_t je;
        owned = json_loadb(json_string_value(schema), json_string_length(schema), 0, &je);
        if (!owned) {
            wk_errors_add(errs, field, "invalid_json_schema", "%s is not JSON: %s", field, je.text);
            return;
        }
        schema = owned;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        wk_errors_add(errs, field, "invalid_json_schema", "%s must be a JSON schema object", field);
    } else if (rb_grammar_from_json_schema(schema, &req->grammar, &err) != RB_OK) {
        wk_errors_add(errs, field,
                      err.code == RB_E_NOMEM         ? "memory"
                      : err.code == RB_E_UNSUPPORTED ? "unsupported_parameter"
                                                     : "invalid_json_schema",
                      "%s: %s", field, bare(err.msg));
    }
    json_decref(owned);
}

static void gbnf_grammar(json_t *text, const char *field, llm_gen_request *req, wk_errors *errs) {
    if (!json_is_string(text)) {
        wk_errors_add(errs, field, "type:string", "%s must be a string holding a GBNF grammar", field);
        return;
    }
    rb_error err;
    rb_error_clear(&err);
    if (rb_grammar_parse(json_string_value(text), json_string_length(text), "root", &req->grammar, &err) != RB_OK)
        wk_errors_add(errs, field, err.code == RB_E_NOMEM ? "memory" : "invalid_grammar", "%s: %s", field, bare(err.msg));
}

static void response_format(json_t *rf, llm_gen_request *req, wk_errors *errs) {
    json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    const char *t = json_string_value(type);
    if (!t) {
        wk_errors_add(errs, "response_format", "type:object", "response_format must be an object with a string type");
    } else if (!strcmp(t, "text")) {
        /* plain text: no grammar */
    } else if (!strcmp(t, "json_object")) {
        json_t *schema = json_object_get(rf, "schema"); /* llama-server's extension */
        rb_error err;
        rb_error_clear(&err);
        if (present(schema)) schema_grammar(schema, "response_format.schema", req, errs);
        else if (rb_grammar_json_object(&req->grammar, &err) != RB_OK)
            wk_errors_add(errs, "response_format", "memory", "%s", err.msg);
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
        if (!json_is_object(js))
            wk_errors_add(errs, "response_format.json_schema", "type:object",
                          "response_format.json_schema must be an object {name, schema, strict}");
        else if (!present(schema))
            wk_errors_add(errs, "response_format.json_schema.schema", "required",
                          "response_format.json_schema.schema is required");
        else
            schema_grammar(schema, "response_format.json_schema.schema", req, errs);
    } else {
        wk_errors_add(errs, "response_format", "enum:text,json_object,json_schema",
                      "response_format.type must be text, json_object or json_schema, got '%s'", t);
    }
}

void llm_grammar_read(json_t *body, llm_api api, llm_gen_request *req, wk_errors *errs) {
    if (api != LLM_API_COMPLETION && api != LLM_API_CHAT) return;
    static const char *const fields[] = {"response_format", "grammar", "json_schema", "guided_json", "guided_grammar"};
    const char *given = NULL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (!present(v)) continue;
        if (i == 0 && json_is_object(v) && json_is_string(json_object_get(v, "type")) &&
            !strcmp(json_string_value(json_object_get(v, "type")), "text"))
            continue; /* asks for nothing */
        if (given) {
            wk_errors_add(errs, fields[i], "conflict", "%s and %s both ask for structured output: give one", given,
                          fields[i]);
            return;
        }
        given = fields[i];
    }
    if (!given) return;
    json_t *v = json_object_get(body, given);
    if (!strcmp(given, "response_format")) response_format(v, req, errs);
    else if (!strcmp(given, "grammar") || !strcmp(given, "guided_grammar")) gbnf_grammar(v, given, req, errs);
    else schema_grammar(v, given, req, errs);
}
