/* Memory for the template interpreter: a chunked arena with a byte cap (so a
 * hostile template cannot grow a render without bound) and a growable output
 * buffer with its own size limit. */
#include "chat/jinja.h"

#include <stdlib.h>
#include <string.h>

struct jmem_chunk {
    jmem_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define JMEM_CHUNK 65536u

void jmem_init(jmem *m, size_t cap) {
    m->head = NULL;
    m->used = 0;
    m->cap = cap;
}

void *jmem_alloc(jmem *m, size_t n) {
    size_t need = (n + 15u) & ~(size_t)15u;
    if (need < n) return NULL;
    if (m->cap && (need > m->cap || m->used > m->cap - need)) return NULL;
    jmem_chunk *c = m->head;
    if (!c || c->size - c->used < need) {
        size_t sz = need > JMEM_CHUNK / 4 ? need : JMEM_CHUNK;
        if (sz > SIZE_MAX - sizeof(jmem_chunk)) return NULL;
        jmem_chunk *nc = malloc(sizeof(jmem_chunk) + sz);
        if (!nc) return NULL;
        nc->size = sz;
        nc->used = 0;
        if (need > JMEM_CHUNK / 4 && c) {
            /* big block: keep the current chunk at the head for small ones */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            m->head = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += need;
    m->used += need;
    memset(p, 0, need);
    return p;
}

char *jmem_strdup(jmem *m, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = jmem_alloc(m, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void jmem_release(jmem *m) {
    jmem_chunk *c = m->head;
    while (c) {
        jmem_chunk *next = c->next;
        free(c);
        c = next;
    }
    m->head = NULL;
    m->used = 0;
}

void jbuf_init(jbuf *b, size_t limit) {
    memset(b, 0, sizeof(*b));
    b->limit = limit;
}

bool jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (n == 0) return true;
    if (n > SIZE_MAX / 2 - b->n || (b->limit && b->n + n > b->limit)) {
        b->failed = true;
        b->over_limit = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) {
            b->failed = true;
            return false;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool jbuf_putc(jbuf *b, char c) { return jbuf_put(b, &c, 1); }

bool jbuf_puts(jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

void jbuf_free(jbuf *b) {
    free(b->p);
    free(b->tr);
    b->p = NULL;
    b->tr = NULL;
    b->n = b->cap = 0;
    b->tn = b->tcap = 0;
}
