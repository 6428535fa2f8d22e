/* The grammar that forces a tool call (tool_choice "required" or a named
 * function): GBNF text for the model family's call syntax (the form its
 * chat template shows the model, so the forced text is what the model
 * expects to write) around an arguments object compiled from each
 * function's `parameters` JSON schema by the grammar engine
 * (rb_json_schema_to_gbnf). Whatever the model samples under it parses
 * (rb_tool_calls_parse) into calls of the allowed functions whose arguments
 * validate against their schemas.
 *  - Llama 3: {"name": "N", "parameters": ARGS}; one call (the official
 *    template renders a single call per assistant turn).
 *  - Hermes: <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>,
 *    then with parallel_tool_calls more such blocks each after a "\n".
 * With parallel_tool_calls (the default) a forced output holds at most
 * LLM_MAX_FORCED_CALLS calls: a grammar that allowed any number would let a
 * model that never stops on its own write calls until max_tokens cut the
 * last one.
 *  - Mistral: [TOOL_CALLS][{"name": "N", "arguments": ARGS}, ...].
 *  - Mistral with [ARGS]: [TOOL_CALLS]N[ARGS]ARGS, repeated when parallel.
 * "required" allows any of the request's functions, a named choice only
 * that one. A parameters schema without "type" is taken as an object
 * schema; one whose type is not "object" is an error. */
#ifndef RBEE_LLM_TOOL_GRAMMAR_H
#define RBEE_LLM_TOOL_GRAMMAR_H

#include "rbee/status.h"
#include "worker_llm/llm_tools.h"

#define LLM_MAX_FORCED_CALLS 8

/* *gbnf: malloc'ed NUL-terminated GBNF with root rule "root". On an error
 * *bad_tool is the index of the function whose schema failed (-1 when the
 * problem is not one function's). */
rb_status llm_tool_grammar_gbnf(const llm_tools *t, char **gbnf, int *bad_tool, rb_error *err);

#endif
