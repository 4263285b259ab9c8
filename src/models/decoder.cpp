#include "models/decoder.h"

#include <algorithm>


namespace akv {

DecoderModel::DecoderModel(ModelConfig config, SafetensorsReader reader, Backend& backend,
                           float norm_offset)
    : config_(std::move(config)),
      backend_(backend),
      norm_offset_(norm_offset),
      reader_(std::move(reader)),
      loader_(reader_, backend, "model"),
      ws_(backend) {
  const ModelConfig& c = config_;
  embed_ = loader_.get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  final_norm_ = loader_.get("model.norm.weight", {c.hidden_size});
  if (c.tie_word_embeddings && !loader_.has("lm_head.weight"))
    lm_head_ = embed_;
  else
    lm_head_ = loader_.get("lm_head.weight", {c.vocab_size, c.hidden_size});
  rope_full_ = rope_frequencies(c.rope, c.head_dim, c.max_position_embeddings, 1);
  rope_sliding_ = rope_frequencies(c.rope_sliding, c.head_dim, c.max_position_embeddings, 1);
}

void DecoderModel::update_rope(const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  if (!rope_depends_on_length(c.rope) && !rope_depends_on_length(c.rope_sliding)) return;
  std::int64_t seq_len = 1;
  for (const SequenceChunk& s : batch.sequences)
    seq_len = std::max<std::int64_t>(seq_len, s.start_pos + s.n_tokens);
  rope_full_ = rope_frequencies(c.rope, c.head_dim, c.max_position_embeddings, seq_len);
  rope_sliding_ = rope_frequencies(c.rope_sliding, c.head_dim, c.max_position_embeddings, seq_len);
}

void DecoderModel::forward(const ForwardBatch& batch, KvStorage& kv, std::span<float> logits) {
  AKV_CHECK(static_cast<std::int64_t>(logits.size()) ==
                static_cast<std::int64_t>(batch.logit_rows.size()) * config_.vocab_size,
            "logits buffer size");
  if (batch.tokens.empty()) return;
  const TensorRef out = run_to_logits(batch, kv, this);
  if (out.rows > 0) backend_.download(out, logits);
  if (recordable_) backend_.end_step();  // the logits are in place when it returns
}

void DecoderModel::forward_ids(const ForwardBatch& batch, KvStorage& kv, std::span<const float> temperature,
                               std::span<const double> u, std::span<std::int32_t> ids) {
  AKV_CHECK(ids.size() == batch.logit_rows.size() && temperature.size() == ids.size() && u.size() == ids.size(),
            "one id, temperature and uniform per logits row");
  if (batch.tokens.empty()) return;
  // Its own recording key: the step ends in sample_rows, not download (Backend::begin_step).
  const TensorRef out = run_to_logits(batch, kv, &ids_step_key_);
  if (out.rows > 0) backend_.sample_rows(out, temperature, u, ids);
  if (recordable_) backend_.end_step();  // the ids are in place when it returns
}

TensorRef DecoderModel::run_to_logits(const ForwardBatch& batch, KvStorage& kv, const void* step_key) {
  const ModelConfig& c = config_;
  const auto n = static_cast<std::int64_t>(batch.tokens.size());
  const auto n_logits = static_cast<std::int64_t>(batch.logit_rows.size());
  AKV_CHECK(static_cast<std::int64_t>(batch.positions.size()) == n, "one position per token");
  update_rope(batch);
  ws_.reserve(c, n);
  reserve_extra(n);
  if (n_logits > logits_capacity_) {  // before begin_step: a recorded step allocates nothing
    last_hidden_ = backend_.alloc(DType::F32, n_logits, c.hidden_size);
    logits_ = backend_.alloc(DType::F32, n_logits, c.vocab_size);
    logits_capacity_ = n_logits;
  }
  if (recordable_) backend_.begin_step(batch, kv, step_key);
  backend_.embed(embed_, batch.tokens, static_cast<float>(c.embedding_multiplier), ws_.x);

  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const bool sliding = c.layer_is_sliding[l];
    const RopeFrequencies& f = sliding ? rope_sliding_ : rope_full_;
    LayerContext ctx{
        .backend = backend_,
        .batch = batch,
        .kv = kv,
        .ws = ws_,
        .layer = l,
        .rope = {f.inv_freq, f.rotary_dim, f.attention_scaling},
        .attention = {.n_heads = c.n_heads,
                      .n_kv_heads = c.n_kv_heads,
                      .head_dim = c.head_dim,
                      .scale = c.attention_scale,
                      .window = sliding ? c.sliding_window : 0,
                      .logit_softcap = c.attn_logit_softcap},
        .qk_norm_eps = static_cast<float>(c.rms_norm_eps),
        .norm_offset = norm_offset_,
    };
    run_layer(ctx);
  }
  if (n_logits == 0) return {};
  TensorRef hidden = last_hidden_->tensor().rows_slice(0, n_logits);
  TensorRef out = logits_->tensor().rows_slice(0, n_logits);
  backend_.gather_rows(ws_.x, batch.logit_rows, hidden);
  backend_.rms_norm(hidden, final_norm_, static_cast<float>(c.rms_norm_eps), norm_offset_, hidden);
  backend_.matmul(hidden, lm_head_, nullptr, out);
  if (c.final_logit_softcap > 0) backend_.softcap(out, static_cast<float>(c.final_logit_softcap));
  return out;
}

KvLayout kv_layout_for(const ModelConfig& c, std::int64_t n_blocks, std::int64_t block_size, DType dtype) {
  // Hybrid models keep KV for their full-attention layers only (the others hold recurrent state).
  const std::vector<bool>& linear = c.hybrid.linear.layer_is_linear;
  const std::int64_t n_linear = std::count(linear.begin(), linear.end(), true);
  return {.n_layers = c.n_layers - n_linear,
          .n_blocks = n_blocks,
          .block_size = block_size,
          .n_kv_heads = c.n_kv_heads,
          .head_dim = c.head_dim,
          .dtype = dtype};
}

KvStorage alloc_model_kv(Backend& backend, const ModelConfig& c, std::int64_t n_blocks, std::int64_t block_size,
                         DType dtype, std::int64_t n_state_slots) {
  KvStorage kv = backend.alloc_kv(kv_layout_for(c, n_blocks, block_size, dtype));
  alloc_state_arrays(backend, kv, state_layout_for(c, n_state_slots));
  return kv;
}

}  // namespace akv
