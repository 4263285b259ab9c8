#include "backend/cpu/attention_fast.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "backend/cpu/host_buffer.h"

namespace akv {
namespace {

constexpr std::int32_t kQueryTile = 32;  // queries per work item
constexpr std::int64_t kKeyChunk = 128;  // keys per online-softmax step

// One thread's working set for a task; rows = queries x heads of the kv group.
struct TaskBuffers {
  float* q;  // [rows, hd] queries pre-multiplied by the scale
  float* o;  // [rows, hd] unnormalised output
  float* s;  // [rows, kKeyChunk] scores, then probabilities
  float* k;  // [kKeyChunk, hd] gathered keys
  float* v;  // [kKeyChunk, hd] gathered values
  float* m;  // [rows] running max
  float* l;  // [rows] running sum
};

struct Job {
  const Kernels& kernels;
  TensorRef q;
  const KvStorage& kv;
  std::int64_t layer;
  const ForwardBatch& batch;
  const AttentionParams& p;
  TensorRef out;
  std::int64_t group;  // query heads per kv head
};

std::size_t scratch_floats(const AttentionParams& p, std::int64_t group) {
  const std::int64_t rows = kQueryTile * group;
  return static_cast<std::size_t>(2 * rows * p.head_dim + rows * kKeyChunk +
                                  2 * kKeyChunk * p.head_dim + 2 * rows);
}

TaskBuffers carve(float* base, const AttentionParams& p, std::int64_t group) {
  const std::int64_t rows = kQueryTile * group, hd = p.head_dim;
  TaskBuffers b;
  b.q = base;
  b.o = b.q + rows * hd;
  b.s = b.o + rows * hd;
  b.k = b.s + rows * kKeyChunk;
  b.v = b.k + kKeyChunk * hd;
  b.m = b.v + kKeyChunk * hd;
  b.l = b.m + rows;
  return b;
}

// Copies keys and values [j0, j0 + nk) of the task's kv head into b.k, b.v as f32.
void gather_kv(const Job& job, const SequenceChunk& s, std::int64_t kv_head, std::int64_t j0,
               std::int64_t nk, TaskBuffers& b) {
  const KvLayout& L = job.kv.layout;
  const std::int64_t hd = job.p.head_dim;
  const std::size_t off = static_cast<std::size_t>(kv_head * hd) * dtype_size(L.dtype);
  const TensorRef& K = job.kv.k[job.layer];
  const TensorRef& V = job.kv.v[job.layer];
  const auto k_row_bytes = static_cast<std::int64_t>(K.stride * dtype_size(K.dtype));
  const auto v_row_bytes = static_cast<std::int64_t>(V.stride * dtype_size(V.dtype));
  const char* k0 = K.row<char>(0) + off;
  const char* v0 = V.row<char>(0) + off;
  for (std::int64_t j = 0; j < nk; ++j) {
    const std::int64_t row = kv_row(L, s.block_table, j0 + j);
    job.kernels.to_f32(k0 + row * k_row_bytes, L.dtype, hd, b.k + j * hd);
    job.kernels.to_f32(v0 + row * v_row_bytes, L.dtype, hd, b.v + j * hd);
  }
}

// Masks, softcaps and exponentiates score row `sr` (keys j0..j0+nk) for a query at qpos, and
// rescales the running output row. Returns false when no key of the chunk is visible.
bool softmax_step(const Job& job, std::int64_t qpos, std::int64_t j0, std::int64_t nk, float* sr,
                  float& m, float& l, float* o_row) {
  const AttentionParams& p = job.p;
  const std::int64_t first = std::max<std::int64_t>(j0, p.window > 0 ? qpos - p.window + 1 : 0);
  const std::int64_t last = std::min<std::int64_t>(qpos, j0 + nk - 1);
  if (first > last) {
    std::fill(sr, sr + nk, 0.0f);
    return false;
  }
  for (std::int64_t j = 0; j < first - j0; ++j) sr[j] = -INFINITY;
  for (std::int64_t j = last - j0 + 1; j < nk; ++j) sr[j] = -INFINITY;
  float mx = -INFINITY;
  const float cap = static_cast<float>(p.logit_softcap);
  for (std::int64_t j = first - j0; j <= last - j0; ++j) {
    if (cap > 0) sr[j] = cap * std::tanh(sr[j] / cap);
    mx = std::max(mx, sr[j]);
  }
  const float m_new = std::max(m, mx);
  const float alpha = m == -INFINITY ? 0.0f : std::exp(m - m_new);
  const float sum = job.kernels.exp_sum(sr, nk, m_new);
  l = l * alpha + sum;
  m = m_new;
  if (alpha != 1.0f)
    for (std::int64_t d = 0; d < p.head_dim; ++d) o_row[d] *= alpha;
  return true;
}

// Floats of one partial slot: a split part's o [rows, hd], m [rows], l [rows] (rows at most
// kQueryTile x group).
std::size_t partial_floats(const AttentionParams& p, std::int64_t group) {
  return static_cast<std::size_t>(kQueryTile * group * (p.head_dim + 2));
}

// Writes the task's queries' outputs: o / l per row, with the attention sink's term (if any)
// joining the sum.
void write_output(const Job& job, const AttentionTask& task, const float* o, const float* m,
                  const float* l) {
  const SequenceChunk& s = job.batch.sequences[task.seq];
  const std::int64_t hd = job.p.head_dim, group = job.group;
  for (std::int64_t qi = 0; qi < task.q_count; ++qi) {
    float* dst = job.out.row<float>(s.first_row + task.q_begin + qi) + task.kv_head * group * hd;
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t i = qi * group + g;
      float inv = 1.0f / l[i];
      if (!job.p.sinks.empty()) {  // the sink's term joins the sum: rescale both to the larger max
        const float sink = load_f32(job.p.sinks.data, job.p.sinks.dtype, task.kv_head * group + g);
        const float mx = std::max(m[i], sink);
        const float f = std::exp(m[i] - mx);
        inv = f / (l[i] * f + std::exp(sink - mx));
      }
      for (std::int64_t d = 0; d < hd; ++d) dst[g * hd + d] = o[i * hd + d] * inv;
    }
  }
}

void run_task(const Job& job, const AttentionTask& task, TaskBuffers& b, float* partials) {
  const SequenceChunk& s = job.batch.sequences[task.seq];
  const std::int64_t hd = job.p.head_dim, group = job.group;
  const std::int64_t rows = task.q_count * group;
  const float scale = static_cast<float>(job.p.scale);
  for (std::int64_t qi = 0; qi < task.q_count; ++qi) {
    const float* src = job.q.row<float>(s.first_row + task.q_begin + qi) + task.kv_head * group * hd;
    for (std::int64_t d = 0; d < group * hd; ++d) b.q[qi * group * hd + d] = src[d] * scale;
  }
  std::fill(b.o, b.o + rows * hd, 0.0f);
  std::fill(b.m, b.m + rows, -INFINITY);
  std::fill(b.l, b.l + rows, 0.0f);

  const std::int64_t pos0 = s.start_pos + task.q_begin;
  for (std::int64_t j0 = task.key_begin; j0 < task.key_end; j0 += kKeyChunk) {
    const std::int64_t nk = std::min(kKeyChunk, task.key_end - j0);
    gather_kv(job, s, task.kv_head, j0, nk, b);
    // s[rows, nk] = q[rows, hd] @ k[nk, hd]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(nk), int(hd), 1.0f, b.q,
                int(hd), b.k, int(hd), 0.0f, b.s, int(kKeyChunk));
    bool any = false;
    for (std::int64_t i = 0; i < rows; ++i)
      any |= softmax_step(job, pos0 + i / group, j0, nk, b.s + i * kKeyChunk, b.m[i], b.l[i], b.o + i * hd);
    if (!any) continue;
    // o[rows, hd] += p[rows, nk] @ v[nk, hd]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(hd), int(nk), 1.0f, b.s,
                int(kKeyChunk), b.v, int(hd), 1.0f, b.o, int(hd));
  }
  if (task.part < 0) return write_output(job, task, b.o, b.m, b.l);
  float* slot = partials + static_cast<std::size_t>(task.part) * partial_floats(job.p, group);
  std::copy(b.o, b.o + rows * hd, slot);
  std::copy(b.m, b.m + rows, slot + kQueryTile * group * hd);
  std::copy(b.l, b.l + rows, slot + kQueryTile * group * (hd + 1));
}

// Combines a split item's partial states into b.o, b.m, b.l (running max M = max of the
// parts', sum and output rescaled by exp(m_part - M)) and writes its outputs.
void merge_parts(const Job& job, const AttentionMerge& mg, const float* partials, TaskBuffers& b) {
  const std::int64_t hd = job.p.head_dim, group = job.group;
  const std::int64_t rows = mg.task.q_count * group;
  const std::size_t slot_floats = partial_floats(job.p, group);
  for (std::int64_t i = 0; i < rows; ++i) {
    float mx = -INFINITY;
    for (std::int32_t k = 0; k < mg.n_parts; ++k) {
      const float* slot = partials + static_cast<std::size_t>(mg.first_part + k) * slot_floats;
      mx = std::max(mx, slot[kQueryTile * group * hd + i]);
    }
    float l = 0.0f;
    float* o = b.o + i * hd;
    std::fill(o, o + hd, 0.0f);
    for (std::int32_t k = 0; k < mg.n_parts; ++k) {
      const float* slot = partials + static_cast<std::size_t>(mg.first_part + k) * slot_floats;
      const float m = slot[kQueryTile * group * hd + i];
      if (m == -INFINITY) continue;  // no key of this part visible to this row
      const float f = std::exp(m - mx);
      l += slot[kQueryTile * group * (hd + 1) + i] * f;
      for (std::int64_t d = 0; d < hd; ++d) o[d] += slot[i * hd + d] * f;
    }
    b.m[i] = mx;
    b.l[i] = l;
  }
  write_output(job, mg.task, b.o, b.m, b.l);
}

// Splits each item's keys into ceil(kAttentionSplitItems / items) parts (of at least
// kAttentionMinPartKeys keys) when there are fewer than kAttentionSplitItems items; records the
// merges. The split does not depend on the thread count, so neither do the results.
void split_keys(AttentionScratch& work) {
  work.merges.clear();
  const auto n_items = static_cast<std::int64_t>(work.tasks.size());
  if (n_items == 0 || n_items >= kAttentionSplitItems) return;
  const std::int64_t want = (kAttentionSplitItems + n_items - 1) / n_items;
  std::int32_t slots = 0;
  for (std::int64_t i = 0; i < n_items; ++i) {
    const AttentionTask whole = work.tasks[static_cast<std::size_t>(i)];
    const std::int64_t keys = whole.key_end - whole.key_begin;
    const std::int64_t parts = std::min(want, keys / kAttentionMinPartKeys);
    if (parts < 2) continue;
    const std::int64_t per = (keys + parts - 1) / parts;
    work.merges.push_back({whole, slots, static_cast<std::int32_t>(parts)});
    for (std::int64_t k = 0; k < parts; ++k) {
      AttentionTask part = whole;
      part.key_begin = whole.key_begin + k * per;
      part.key_end = std::min(whole.key_end, part.key_begin + per);
      part.cost = std::int64_t{whole.q_count} * (part.key_end - part.key_begin);
      part.part = slots++;
      if (k == 0)
        work.tasks[static_cast<std::size_t>(i)] = part;
      else
        work.tasks.push_back(part);
    }
  }
}

}  // namespace

void attention_fast(ThreadPool& pool, const Kernels& kernels, ThreadScratch& scratch,
                    AttentionScratch& work, TensorRef q, const KvStorage& kv, std::int64_t layer,
                    const ForwardBatch& batch, const AttentionParams& p, TensorRef out) {
  AKV_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "attention: heads per kv head");
  AKV_CHECK(q.cols == p.n_heads * p.head_dim && out.cols == q.cols, "attention shape");
  AKV_CHECK(kv.layout.head_dim == p.head_dim && kv.layout.n_kv_heads == p.n_kv_heads, "attention kv layout");
  const std::int64_t group = p.n_heads / p.n_kv_heads;
  std::vector<AttentionTask>& tasks = work.tasks;
  tasks.clear();
  for (std::size_t si = 0; si < batch.sequences.size(); ++si) {
    const SequenceChunk& s = batch.sequences[si];
    for (std::int32_t q0 = 0; q0 < s.n_tokens; q0 += kQueryTile) {
      const std::int32_t n = std::min(kQueryTile, s.n_tokens - q0);
      const std::int64_t first = s.start_pos + q0, last = first + n - 1;
      const std::int64_t lo = p.window > 0 ? std::max<std::int64_t>(0, first - p.window + 1) : 0;
      for (std::int32_t h = 0; h < p.n_kv_heads; ++h)
        tasks.push_back({.seq = static_cast<std::int32_t>(si), .kv_head = h, .q_begin = q0, .q_count = n,
                         .cost = std::int64_t{n} * (last + 1 - lo), .key_begin = lo, .key_end = last + 1});
    }
  }
  split_keys(work);
  std::sort(tasks.begin(), tasks.end(),
            [](const AttentionTask& a, const AttentionTask& b) { return a.cost > b.cost; });
  std::size_t n_slots = 0;
  for (const AttentionMerge& mg : work.merges) n_slots += static_cast<std::size_t>(mg.n_parts);
  work.partials.resize(n_slots * partial_floats(p, group));
  float* partials = work.partials.data();

  const Job job{kernels, q, kv, layer, batch, p, out, group};
  const std::size_t floats = scratch_floats(p, group);
  std::atomic<std::size_t> next{0};
  run_per_thread(pool, [&](int t) {
    TaskBuffers b = carve(scratch.get(t, floats), p, group);
    for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < tasks.size();)
      run_task(job, tasks[i], b, partials);
  });
  if (work.merges.empty()) return;
  TaskBuffers b = carve(scratch.get(0, floats), p, group);
  for (const AttentionMerge& mg : work.merges) merge_parts(job, mg, partials, b);
}

}  // namespace akv
