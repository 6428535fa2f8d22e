/* The scene check (scene_check.h) on pictures of known content: the
 * held-out scenes that tools/train-default-sd/scenes.py drew into
 * tests/data/sd/scenes (scenes.json: palette, captions and facts). Every true
 * description passes; each altered one (another background, another shape or
 * colour for the first object, the opposite relation) fails, so the check can
 * tell a picture that follows its caption from one that does not. */
#include "scene_facts.h"

#include "rbee/image.h"

static bool passes(const scenes *s, const rb_image *img, const scene_facts *f) {
    scene_result r;
    assert_true(scene_check(img->data, img->width, img->height, (const float(*)[3])s->palette, s->n_palette, f, &r));
    return r.all;
}

static void test_scenes(void **state) {
    (void)state;
    scenes s;
    scenes_load(&s, "sd/scenes/scenes.json");
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
