/* Implementation of llm_prefix.h. */
#include "worker_llm/llm_prefix.h"

size_t llm_prefix_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    if (!a || !b) return 0;
    const size_t n = na < nb ? na : nb;
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

size_t llm_prefix_keep(const int32_t *tok, size_t n, const int32_t *prompt, size_t n_prompt, size_t min_run) {
    if (min_run < 1) min_run = 1;
    if (n_prompt < min_run) return 0;
    const size_t k = llm_prefix_lcp(tok, n, prompt, n_prompt);
    return k < n_prompt - min_run ? k : n_prompt - min_run;
}

int llm_prefix_pick(const llm_prefix_view *v, int n_slots, const int32_t *prompt, size_t n_prompt, size_t min_run,
                    size_t *keep) {
    int best = -1;
    size_t best_keep = 0;
    for (int s = 0; s < n_slots; s++) {
        if (!v[s].free) continue;
        const size_t k = prompt ? llm_prefix_keep(v[s].tok, v[s].n, prompt, n_prompt, min_run) : 0;
        if (best < 0 || k > best_keep || (k == best_keep && v[s].last_used < v[best].last_used)) {
            best = s;
            best_keep = k;
        }
    }
    if (keep) *keep = best_keep;
    return best;
}

int llm_prefix_donor(const llm_prefix_view *v, int n_slots, int self, const int32_t *prompt, size_t n_prompt,
                     size_t min_run, size_t than, size_t *keep) {
    int best = -1;
    size_t best_keep = than;
    for (int s = 0; s < n_slots; s++) {
        if (s == self) continue;
        const size_t k = llm_prefix_keep(v[s].tok, v[s].n, prompt, n_prompt, min_run);
        if (k > best_keep) {
            best = s;
            best_keep = k;
        }
    }
    if (keep) *keep = best < 0 ? than : best_keep;
    return best;
}
