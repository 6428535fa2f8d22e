/* The scene check (scene_check.h) on pictures of known content: the
 * held-out scenes that tools/train-default-sd/scenes.py drew into
 * tests/data/sd/scenes (scenes.json: palette, captions and facts). Every true
 * description passes; each altered one (another background, another shape or
 * colour for the first object, the opposite relation) fails, so the check can
 * tell a picture that follows its caption from one that does not. */
#include "scene_check.h"
#include "testutil.h"

#include "rbee/image.h"

#include <jansson.h>
#include <stdio.h>

typedef struct scenes {
    json_t *root;
    float palette[SCENE_MAX_PALETTE][3];
    const char *names[SCENE_MAX_PALETTE];
    int n_palette;
} scenes;

static int colour_index(const scenes *s, const char *name) {
    for (int i = 0; i < s->n_palette; i++)
        if (strcmp(s->names[i], name) == 0) return i;
    fail_msg("unknown colour %s", name);
    return -1;
}

static scene_shape shape_of(const char *name) {
    if (strcmp(name, "circle") == 0) return SCENE_CIRCLE;
    if (strcmp(name, "square") == 0) return SCENE_SQUARE;
    if (strcmp(name, "triangle") == 0) return SCENE_TRIANGLE;
    fail_msg("unknown shape %s", name);
    return SCENE_CIRCLE;
}

static scene_rel rel_of(const json_t *r) {
    if (!json_is_string(r)) return SCENE_NONE;
    static const char *const names[] = {"above", "below", "left of", "right of"};
    for (int i = 0; i < 4; i++)
        if (strcmp(json_string_value(r), names[i]) == 0) return (scene_rel)i;
    fail_msg("unknown relation %s", json_string_value(r));
    return SCENE_NONE;
}

static void load(scenes *s) {
    char p[1024];
    json_error_t je;
    s->root = json_load_file(tu_data(p, sizeof p, "sd/scenes/scenes.json"), 0, &je);
    if (!s->root) fail_msg("scenes.json: %s", je.text);
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

static scene_facts facts_of(const scenes *s, const json_t *sc) {
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

static bool passes(const scenes *s, const rb_image *img, const scene_facts *f) {
    scene_result r;
    assert_true(scene_check(img->data, img->width, img->height, (const float(*)[3])s->palette, s->n_palette, f, &r));
    return r.all;
}

static void test_scenes(void **state) {
    (void)state;
    scenes s;
    load(&s);
    const json_t *list = json_object_get(s.root, "scenes");
    assert_int_equal(json_array_size(list), 16);
    int n_rel = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *sc = json_array_get(list, i);
        char rel[256], p[1024];
        snprintf(rel, sizeof rel, "sd/scenes/%s", json_string_value(json_object_get(sc, "file")));
        size_t len = 0;
        void *png = tu_read_file(tu_data(p, sizeof p, rel), &len);
        assert_non_null(png);
        rb_image img = {0};
        const rb_image_decode_opts o = {.channels = 3};
        TU_OK(rb_image_decode(png, len, &o, &img, NULL));
        const scene_facts f = facts_of(&s, sc);
        const char *cap = json_string_value(json_object_get(sc, "caption"));
        if (!passes(&s, &img, &f)) fail_msg("'%s' fails on its own picture", cap);
        scene_facts g = f; /* another background */
        g.background = (f.background + 1) % s.n_palette;
        if (g.background == f.colour[0] || (f.n_objects == 2 && g.background == f.colour[1]))
            g.background = (g.background + 1) % s.n_palette;
        assert_false(passes(&s, &img, &g));
        g = f; /* another shape */
        g.shape[0] = (scene_shape)((f.shape[0] + 1) % 3);
        assert_false(passes(&s, &img, &g));
        g = f; /* a colour the picture does not have */
        for (int c = 0; c < s.n_palette; c++)
            if (c != f.background && c != f.colour[0] && (f.n_objects < 2 || c != f.colour[1])) g.colour[0] = c;
        assert_false(passes(&s, &img, &g));
        if (f.relation != SCENE_NONE) { /* the opposite side */
            n_rel++;
            g = f;
            g.relation = (scene_rel)(f.relation ^ 1);
            assert_false(passes(&s, &img, &g));
        }
        rb_image_free(&img);
        free(png);
    }
    assert_int_equal(n_rel, 8);
    json_decref(s.root);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_scenes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
