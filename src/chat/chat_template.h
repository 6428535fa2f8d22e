/* Private layout of rb_chat_template, shared by the render entry points
 * (chat_template.c) and the tokenizer_config.json loader (chat_config.c). */
#ifndef RBEE_CHAT_TEMPLATE_PRIV_H
#define RBEE_CHAT_TEMPLATE_PRIV_H

#include "chat/jinja.h"
#include "rbee/chat_template.h"

struct rb_chat_template {
    jtemplate tpl;
    char *source;
    size_t source_len;
    void *defaults; /* json_t object: default variables */
};

#endif
