/* libFuzzer target: the tool-call parser on model output (untrusted: a model
 * writes whatever it samples). Input = FAMILY_BYTE TEXT; the byte picks the
 * family (mod 5) and whether the function names are restricted. Checks: an
 * output without calls is all content; with calls, content is a prefix of
 * the text and every call has a non-empty name and an arguments text that
 * is a JSON object; the stream hold-back, fed the text in pieces whose cut
 * points come from the text itself, only grows and always sends a prefix of
 * the final content. A breach aborts. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rbee/chat_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *const names[] = {"get_weather", "get_time", "f"};
    const rb_tool_family f = (rb_tool_family)(data[0] % 5);
    const bool restrict_names = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    rb_tool_parse p;
    rb_error e;
    if (rb_tool_calls_parse(f, text, len, restrict_names ? names : NULL, restrict_names ? 3 : 0, &p, &e) != RB_OK)
        return 0; /* out of memory only */
    const char *content = p.n_calls ? p.content : text;
    const size_t clen = p.n_calls ? p.content_len : len;
    if (p.n_calls == 0 && (p.content_len != len || (len && (!p.content || memcmp(p.content, text, len) != 0))))
        abort();
    if (p.n_calls && p.content && (p.content_len > len || memcmp(p.content, text, p.content_len) != 0)) abort();
    if (f == RB_TOOLS_NONE && p.n_calls) abort();
    for (size_t i = 0; i < p.n_calls; i++) {
        if (!p.calls[i].name[0]) abort();
        json_error_t je;
        json_t *a = json_loads(p.calls[i].arguments, 0, &je);
        if (!json_is_object(a)) abort();
        json_decref(a);
    }
    /* the stream: cut after every byte whose low bits are 0 */
    size_t sent = 0;
    bool started = false;
    for (size_t upto = 1; upto <= len && !started; upto++) {
        if (upto < len && ((unsigned char)text[upto - 1] & 3) != 0) continue;
        const size_t h = rb_tool_calls_hold(f, text, upto, sent, &started);
        if (h < sent || h > upto) abort();
        sent = h;
        if (sent > clen || (sent && memcmp(text, content, sent) != 0)) abort();
    }
    rb_tool_parse_free(&p);
    return 0;
}
