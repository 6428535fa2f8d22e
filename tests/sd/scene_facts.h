/* The scene fixtures' JSON (palette, captions and facts, written by
 * tools/train-default-sd/make_scene_fixtures.py) read into scene_check.h's
 * types, for the tests that judge pictures by their captions. Test-only
 * (cmocka fails on a malformed file). */
#ifndef RBEE_TEST_SCENE_FACTS_H
#define RBEE_TEST_SCENE_FACTS_H

#include "scene_check.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>

typedef struct scenes {
    json_t *root;
    float palette[SCENE_MAX_PALETTE][3];
    const char *names[SCENE_MAX_PALETTE];
    int n_palette;
} scenes;

static inline int colour_index(const scenes *s, const char *name) {
    for (int i = 0; i < s->n_palette; i++)
        if (strcmp(s->names[i], name) == 0) return i;
    fail_msg("unknown colour %s", name);
    return -1;
}

static inline scene_shape shape_of(const char *name) {
    if (strcmp(name, "circle") == 0) return SCENE_CIRCLE;
    if (strcmp(name, "square") == 0) return SCENE_SQUARE;
    if (strcmp(name, "triangle") == 0) return SCENE_TRIANGLE;
    fail_msg("unknown shape %s", name);
    return SCENE_CIRCLE;
}

static inline scene_rel rel_of(const json_t *r) {
    if (!json_is_string(r)) return SCENE_NONE;
    static const char *const names[] = {"above", "below", "left of", "right of"};
    for (int i = 0; i < 4; i++)
        if (strcmp(json_string_value(r), names[i]) == 0) return (scene_rel)i;
    fail_msg("unknown relation %s", json_string_value(r));
    return SCENE_NONE;
}

/* rel: a file under tests/data. */
static inline void scenes_load(scenes *s, const char *rel) {
    char p[1024];
    json_error_t je;
    s->root = json_load_file(tu_data(p, sizeof p, rel), 0, &je);
    if (!s->root) fail_msg("%s: %s", rel, je.text);
    const char *k;
    json_t *v;
    s->n_palette = 0;
    json_object_foreach(json_object_get(s->root, "palette"), k, v) {
        assert_true(s->n_palette < SCENE_MAX_PALETTE);
        s->names[s->n_palette] = k;
        for (int c = 0; c < 3; c++) s->palette[s->n_palette][c] = (float)json_number_value(json_array_get(v, (size_t)c));
        s->n_palette++;
    }
    assert_int_equal(s->n_palette, 8);
}

static inline scene_facts facts_of(const scenes *s, const json_t *sc) {
    scene_facts f = {.background = colour_index(s, json_string_value(json_object_get(sc, "background")))};
    const json_t *objs = json_object_get(sc, "objects");
    f.n_objects = (int)json_array_size(objs);
    for (int o = 0; o < f.n_objects; o++) {
        f.colour[o] = colour_index(s, json_string_value(json_array_get(json_array_get(objs, (size_t)o), 0)));
        f.shape[o] = shape_of(json_string_value(json_array_get(json_array_get(objs, (size_t)o), 1)));
    }
    f.relation = rel_of(json_object_get(sc, "relation"));
    return f;
}

#endif
