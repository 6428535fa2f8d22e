/* Included first by every noise and sampler source of src/sd: turns off the
 * compiler's contraction of a*b+c into fused multiply-adds, so each float
 * operation rounds on its own as in torch's elementwise kernels, on any target
 * and with either compiler (gcc ignores the standard pragma and has its own;
 * clang honours the standard one). Fused operations that a reference computes
 * are written out with fmaf. */
#ifndef RBEE_SCHED_FP_CONTRACT_H
#define RBEE_SCHED_FP_CONTRACT_H

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif
