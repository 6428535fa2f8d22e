/* rb_tool_family_detect: tells a model's tool-call syntax from its chat
 * template's text (the markers the template writes for an assistant's
 * calls), never from the model's name, so a fine-tune that keeps its base's
 * template keeps its parser. See include/rbee/chat_tools.h for the rules. */
#include "rbee/chat_tools.h"

#include <string.h>

static bool has(const char *s, size_t len, const char *needle) {
    const size_t n = strlen(needle);
    if (n == 0 || n > len) return false;
    for (size_t i = 0; i + n <= len; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, n) == 0) return true;
    return false;
}

rb_tool_family rb_tool_family_detect(const char *tpl, size_t len) {
    if (!tpl) return RB_TOOLS_NONE;
    if (has(tpl, len, "<tool_call>")) return RB_TOOLS_HERMES;
    if (has(tpl, len, "[TOOL_CALLS]")) return has(tpl, len, "[ARGS]") ? RB_TOOLS_MISTRAL_ARGS : RB_TOOLS_MISTRAL;
    if (has(tpl, len, "<|python_tag|>")) return RB_TOOLS_LLAMA3;
    if (has(tpl, len, "<|start_header_id|>") && has(tpl, len, "parameters") && has(tpl, len, "tool_calls"))
        return RB_TOOLS_LLAMA3;
    return RB_TOOLS_NONE;
}

const char *rb_tool_family_name(rb_tool_family f) {
    switch (f) {
    case RB_TOOLS_LLAMA3: return "llama3";
    case RB_TOOLS_HERMES: return "hermes";
    case RB_TOOLS_MISTRAL: return "mistral";
    case RB_TOOLS_MISTRAL_ARGS: return "mistral_args";
    case RB_TOOLS_NONE: break;
    }
    return "none";
}

const char *rb_tool_family_marker(rb_tool_family f) {
    switch (f) {
    case RB_TOOLS_HERMES: return "<tool_call>";
    case RB_TOOLS_MISTRAL:
    case RB_TOOLS_MISTRAL_ARGS: return "[TOOL_CALLS]";
    case RB_TOOLS_LLAMA3:
    case RB_TOOLS_NONE: break;
    }
    return NULL;
}
