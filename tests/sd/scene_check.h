/* What a picture of the default SD model's scenes shows, checked against its
 * caption's facts (the C form of tools/train-default-sd/analyse.py, same rules
 * and thresholds): each pixel takes the nearest palette colour within reach;
 * the background colour must cover most of the border; each named object's
 * colour forms a region (after a 3x3 opening that drops one-pixel seams
 * where two colours blend) of plausible area, whose fill of its bounding box
 * tells the shape; the first object's centre lies on the named side of the
 * second's. Header-only: used by test_sd_scene_check and the default model's
 * test. */
#ifndef RBEE_TEST_SCENE_CHECK_H
#define RBEE_TEST_SCENE_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SCENE_MAX_PALETTE 16

typedef enum scene_shape { SCENE_CIRCLE, SCENE_SQUARE, SCENE_TRIANGLE } scene_shape;
typedef enum scene_rel { SCENE_NONE = -1, SCENE_ABOVE, SCENE_BELOW, SCENE_LEFT_OF, SCENE_RIGHT_OF } scene_rel;

typedef struct scene_facts {
    int background;          /* palette index */
    int n_objects;           /* 1 or 2 */
    int colour[2];           /* palette indices */
    scene_shape shape[2];
    scene_rel relation;      /* SCENE_NONE with one object */
} scene_facts;

typedef struct scene_result {
    bool background, colour[2], shape[2], relation, all;
} scene_result;

/* rgb: w x h x 3 bytes. Returns false only when out of memory. */
static inline bool scene_check(const uint8_t *rgb, int w, int h, const float (*palette)[3], int n_palette,
                               const scene_facts *f, scene_result *res) {
    memset(res, 0, sizeof *res);
    const size_t n = (size_t)w * (size_t)h;
    signed char *lab = malloc(n);
    uint8_t *m = malloc(n), *e = malloc(n);
    if (!lab || !m || !e) {
        free(lab);
        free(m);
        free(e);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        float best = 1e30f;
        int bi = -1;
        for (int c = 0; c < n_palette; c++) {
            float d = 0.0f;
            for (int k = 0; k < 3; k++) {
                const float x = (float)rgb[i * 3 + (size_t)k] / 255.0f - palette[c][k];
                d += x * x;
            }
            if (d < best) {
                best = d;
                bi = c;
            }
        }
        lab[i] = best < 0.08f ? (signed char)bi : (signed char)-1;
    }
    int border = 0, border_bg = 0;
    for (int x = 0; x < w; x++) {
        border_bg += (lab[x] == f->background) + (lab[(size_t)(h - 1) * (size_t)w + (size_t)x] == f->background);
        border += 2;
    }
    for (int y = 0; y < h; y++) {
        border_bg += (lab[(size_t)y * (size_t)w] == f->background) + (lab[(size_t)y * (size_t)w + (size_t)(w - 1)] == f->background);
        border += 2;
    }
    res->background = (double)border_bg / border > 0.6;
    double cx[2] = {0}, cy[2] = {0};
    bool found[2] = {false, false};
    for (int o = 0; o < f->n_objects && o < 2; o++) {
        for (size_t i = 0; i < n; i++) m[i] = lab[i] == f->colour[o];
        /* opening: erode then dilate, 3x3, neighbours outside the image ignored */
        for (int pass = 0; pass < 2; pass++) {
            const uint8_t *src = pass == 0 ? m : e;
            uint8_t *dst = pass == 0 ? e : m;
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    uint8_t v = pass == 0 ? 1 : 0;
                    for (int dy = -1; dy <= 1; dy++)
                        for (int dx = -1; dx <= 1; dx++) {
                            const int yy = y + dy, xx = x + dx;
                            if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                            const uint8_t s = src[(size_t)yy * (size_t)w + (size_t)xx];
                            v = pass == 0 ? (uint8_t)(v & s) : (uint8_t)(v | s);
                        }
                    dst[(size_t)y * (size_t)w + (size_t)x] = v;
                }
        }
        size_t cnt = 0;
        int x0 = w, x1 = -1, y0 = h, y1 = -1;
        double sx = 0, sy = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                if (m[(size_t)y * (size_t)w + (size_t)x]) {
                    cnt++;
                    sx += x;
                    sy += y;
                    x0 = x < x0 ? x : x0;
                    x1 = x > x1 ? x : x1;
                    y0 = y < y0 ? y : y0;
                    y1 = y > y1 ? y : y1;
                }
        const double area = (double)cnt / (double)n;
        res->colour[o] = area > 0.015 && area < 0.35;
        if (!res->colour[o]) continue;
        const double fill = (double)cnt / ((double)(x1 - x0 + 1) * (double)(y1 - y0 + 1));
        const scene_shape got = fill > 0.88 ? SCENE_SQUARE : fill > 0.66 ? SCENE_CIRCLE : SCENE_TRIANGLE;
        res->shape[o] = got == f->shape[o];
        found[o] = true;
        cx[o] = sx / (double)cnt / w;
        cy[o] = sy / (double)cnt / h;
    }
    res->all = res->background;
    for (int o = 0; o < f->n_objects && o < 2; o++) res->all = res->all && res->colour[o] && res->shape[o];
    if (f->n_objects == 2) {
        if (found[0] && found[1]) {
            const double dx = cx[0] - cx[1], dy = cy[0] - cy[1];
            res->relation = f->relation == SCENE_ABOVE    ? dy < -0.1
                            : f->relation == SCENE_BELOW  ? dy > 0.1
                            : f->relation == SCENE_LEFT_OF ? dx < -0.1
                                                          : dx > 0.1;
        }
        res->all = res->all && res->relation;
    }
    free(lab);
    free(m);
    free(e);
    return true;
}

#endif
