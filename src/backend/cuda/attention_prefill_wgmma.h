// The Hopper (sm_90a, wgmma) prefill attention: same contract as launch_attention_prefill in
// kernels.h, for BF16 KV, head_dim 64 or 128 and an even GQA group. Built only when the CUDA
// architectures include 90 (AKV_HAVE_WGMMA); used only on a compute capability 9.0 device.
#pragma once

#include "backend/cuda/kernels.h"

namespace akv::cuda {

// True when this device runs the kernel and `a` is a shape it handles.
bool prefill_attention_wgmma_supported(const AttentionArgs& a);
// Query heads per block (the GQA group's heads sharing each K/V tile): 4 or 2.
int prefill_attention_wgmma_heads(const AttentionArgs& a);
void launch_attention_prefill_wgmma(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                                    int n_splits, float* partial, TensorRef out, Stream s);

}  // namespace akv::cuda
