#include "app/serve_command.h"

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <thread>

#include "app/backend_factory.h"
#include "app/drain.h"
#include "app/engine_monitor.h"
#include "app/serve_defaults.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mapped_file.h"
#include "chat/generation_config.h"
#include "chat/tool_call_format.h"
#include "kv/agent_index.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/model_fingerprint.h"
#include "kv/remote_store.h"
#include "kv/store_dir.h"
#include "models/model.h"
#include "server/http_server.h"

namespace akv {

namespace {

HttpServer* g_server = nullptr;
Drainer* g_drainer = nullptr;

void on_signal(int) {
  if (g_server != nullptr) g_server->stop();
}

void on_drain_signal(int) {
  if (g_drainer != nullptr) g_drainer->request_from_signal();
}

// End-of-turn ids: the config's and generation_config's eos ids, the tokenizer's eos (and a GGUF
// file's eot), and the chat templates' end-of-turn specials when the vocabulary has them.
std::vector<std::int32_t> stop_ids(const GenerationConfig& gen, const ModelConfig& c, const Tokenizer& tok) {
  std::vector<std::int32_t> ids = c.eos_token_ids;
  auto add = [&ids](std::int32_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  add(tok.eos_id());
  add(tok.eot_id());
  for (const std::int32_t id : gen.eos_token_ids) add(id);
  const auto channel = tok.find_token("<|channel|>");
  for (const std::string_view t : end_of_turn_tokens(/*harmony_vocabulary=*/channel && tok.is_special(*channel)))
    if (auto id = tok.find_token(t); id && tok.is_special(*id)) add(*id);
  return ids;
}

// "123", "512K", "64G", "2T" (binary multiples) -> bytes. Throws Error naming `flag` otherwise.
std::int64_t parse_byte_size(const std::string& text, const char* flag) {
  const auto bad = [&] {
    return Error(ErrorKind::InvalidArgument,
                 std::string(flag) + ": expected bytes, optionally with K, M, G or T (e.g. 512M, 40G), not '" +
                     text + "'");
  };
  std::size_t n_digits = 0;
  while (n_digits < text.size() && text[n_digits] >= '0' && text[n_digits] <= '9') ++n_digits;
  if (n_digits == 0 || n_digits > 18 || text.size() > n_digits + 1) throw bad();
  std::int64_t shift = 0;
  if (text.size() > n_digits) {
    const std::string_view units = "KMGT";
    const std::size_t u = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(text.back()))));
    if (u == std::string_view::npos) throw bad();
    shift = 10 * static_cast<std::int64_t>(u + 1);
  }
  const std::int64_t n = std::stoll(text.substr(0, n_digits));
  if (n > (std::numeric_limits<std::int64_t>::max() >> shift)) throw bad();
  return n << shift;
}

// The remote tier of --kv-remote for blocks of `value_bytes` and state blocks of
// `state_value_bytes` (0: none) (null without it). Redis that cannot be reached at start-up is
// not fatal: null, with a warning (the replica serves from its own tiers). Throws Error for a
// bad URL or size.
std::unique_ptr<RemoteStore> open_remote_tier(const ServeOptions& o, const Hash128& fingerprint,
                                              std::size_t value_bytes, std::size_t state_value_bytes) {
  RemoteStoreOptions r;
  r.url = parse_redis_url(o.kv_remote, "--kv-remote");
  if (!o.kv_remote_password_file.empty()) {
    if (!r.url.password.empty())
      throw Error(ErrorKind::InvalidArgument, "--kv-remote-password-file: the --kv-remote URL has a password too; give one");
    r.url.password = load_redis_password(o.kv_remote_password_file, "--kv-remote-password-file");
  }
  if (r.url.password.empty())
    if (const char* pw = std::getenv("REDISCLI_AUTH"); pw != nullptr) r.url.password = pw;  // as redis-cli
  r.fingerprint = fingerprint;
  r.value_bytes = value_bytes;
  r.state_value_bytes = state_value_bytes;
  r.max_bytes = parse_byte_size(o.kv_remote_bytes, "--kv-remote-bytes");
  try {
    return RemoteStore::open_or_throw(std::move(r));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Io) throw;
    log_warn("serving WITHOUT the KV remote tier (restart to join the fleet's): {}", e.what());
    return nullptr;
  }
}

// The KV disk tier of --kv-dir (null without it), and under it the remote tier of --kv-remote.
// A directory that cannot be created or written is not fatal: null, with the reason in
// `unavailable` and a warning. Throws Error for a bad codec, a directory in use, or a secret
// that cannot be read.
struct KvStores {
  std::unique_ptr<RemoteStore> remote;  // first: the disk tier's IO thread writes to it
  std::unique_ptr<DiskStore> disk;
};
KvStores open_disk_tier(const ServeOptions& o, const ModelConfig& config, const EngineConfig& e, SpillCodec codec,
                        const std::string& chat_template, std::string& unavailable) {
  const std::int64_t max_bytes = parse_byte_size(o.kv_disk_bytes, "--kv-disk-bytes");
  if (!o.kv_remote.empty() && o.kv_dir.empty())
    throw Error(ErrorKind::InvalidArgument, "--kv-remote needs --kv-dir: the remote tier sits under the disk tier");
  KvStores stores;
  if (o.kv_dir.empty()) return stores;
  if (const std::optional<std::string> problem = find_store_dir_problem(o.kv_dir)) {
    log_warn("serving WITHOUT the KV disk tier: --kv-dir {}: {}", o.kv_dir, *problem);
    unavailable = *problem;
    return stores;
  }
  const KvLayout layout = kv_layout_for(config, e.n_blocks, e.block_size, e.kv_dtype);
  DiskStoreOptions d;
  d.dir = o.kv_dir;
  WeightDigestStats w;
  d.fingerprint = model_fingerprint(
      {.model_dir = o.model_dir, .chat_template = chat_template, .kv = layout, .codec = codec, .cache_dir = o.kv_dir,
       .quantize = o.quantize},
      &w);
  log_info("model fingerprint: {} weight files, {} read ({} MiB in {:.1f} s), {} known from {}/{}", w.n_files, w.n_hashed,
           w.bytes_hashed >> 20, w.hash_seconds, w.n_cached, o.kv_dir, kWeightDigestCacheName);
  d.codec = codec;
  d.shape = block_shape_of(layout);
  d.block_size = e.block_size;
  d.max_bytes = max_bytes;
  if (!o.kv_remote.empty()) {
    const auto state_bytes = static_cast<std::size_t>(state_layout_for(config, 1).slot_floats()) * sizeof(float);
    stores.remote = open_remote_tier(o, d.fingerprint, kBlockHeaderBytes + encoded_bytes(d.codec, d.shape),
                                     state_bytes > 0 ? kBlockHeaderBytes + state_bytes : 0);
    d.remote = stores.remote.get();
  }
  stores.disk = DiskStore::open_or_throw(std::move(d));
  return stores;
}

// The context length at which one token's attention costs as much as its matmuls: the host
// tier's measure of how much dearer deep blocks are to recompute.
double attention_equal_tokens(const ModelConfig& c) {
  const double q_width = static_cast<double>(c.n_heads * c.head_dim);
  const double kv_width = static_cast<double>(c.n_kv_heads * c.head_dim);
  const double hidden = static_cast<double>(c.hidden_size);
  const double per_layer = hidden * (2.0 * q_width + 2.0 * kv_width) + 3.0 * hidden * c.intermediate_size;
  return std::max(1.0, per_layer / (2.0 * q_width));  // 2 * per_layer flops vs 4 * q_width per position
}

// The host-RAM tier of --kv-host-bytes (null when 0). Throws Error for a bad size or codec.
std::unique_ptr<HostStore> open_host_tier(const ServeOptions& o, const ModelConfig& config, const EngineConfig& e,
                                          const DiskStore* disk, Backend& backend) {
  const std::int64_t max_bytes = parse_byte_size(o.kv_host_bytes, "--kv-host-bytes");
  if (max_bytes == 0) return nullptr;
  HostStoreOptions h;
  h.max_bytes = static_cast<std::size_t>(max_bytes);
  h.codec = resolve_tier_codec("--kv-host-codec", o.kv_host_codec, backend);
  h.shape = block_shape_of(kv_layout_for(config, e.n_blocks, e.block_size, e.kv_dtype));
  h.block_size = e.block_size;
  h.attention_equal_tokens = attention_equal_tokens(config);
  if (disk != nullptr) h.on_disk = [disk](const Hash128& key) { return disk->has(key); };
  h.alloc = [&backend](std::size_t bytes) { return backend.alloc_host(bytes); };  // page-locked on CUDA
  h.allocate_ahead = true;
  if (h.max_bytes < encoded_bytes(h.codec, h.shape))
    throw Error(ErrorKind::InvalidArgument, "--kv-host-bytes: " + o.kv_host_bytes + " holds no KV block (one is " +
                                                std::to_string(encoded_bytes(h.codec, h.shape)) + " bytes)");
  return std::make_unique<HostStore>(std::move(h));
}

// Graceful stop with a disk tier, after the engine stopped (its last agents recorded): puts the
// agents' chain blocks not on disk yet ahead of the write-behind backlog, most recently used
// agent first, then writes the queue; both within `timeout_s`. Logs what reached the disk, what
// did not, and how many agents a restart restores whole.
void flush_disk_tier(Engine& engine, DiskStore& disk, RemoteStore* remote, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(timeout_s));
  const DiskStoreStats at_stop = disk.stats();
  const AgentSpill spill = engine.spill_agents_to_disk(deadline);  // the IO thread writes meanwhile
  const DiskDrain drained = disk.drain(deadline);
  const std::int64_t n_written = disk.stats().n_written - at_stop.n_written;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info(
      "KV disk tier: flushed in {:.1f} s: {} blocks written ({} were queued at stop; {} agents' "
      "chains first, most recent first: {} queued blocks moved ahead, {} added), {} dropped{}, {} "
      "not in memory (recomputed on return), {} manifests lost; {} of {} agents whole on disk",
      seconds, n_written, at_stop.queued_blocks, spill.n_agents, spill.n_moved, spill.n_queued,
      drained.n_dropped + spill.n_late,
      drained.in_time && spill.n_late == 0 ? "" : " (--kv-flush-timeout-s ran out or spilling was paused)",
      spill.n_missing, drained.n_manifests_lost, drained.n_agents_whole, drained.n_agents);
  const DiskStoreStats all = disk.stats();
  log_info(
      "KV disk tier since start: {} blocks written, {} dropped ({} queue full, {} paused, {} at "
      "stop); {} encoded to {} in {:.1f} s of thread time ({} encode workers; {} by the IO thread)",
      all.n_written, all.n_dropped, all.n_dropped_queue_full, all.n_dropped_paused,
      all.n_dropped_at_stop, all.n_encoded, spill_codec_name(disk.codec()),
      static_cast<double>(all.encode_us) / 1e6, all.encode_threads, all.n_encoded_on_io);
  if (remote == nullptr) return;
  const bool written = remote->flush(deadline);
  log_info("KV remote tier: {} at stop ({} blocks written in all)",
           written ? "queue written" : "queue NOT written (--kv-flush-timeout-s ran out)", remote->stats().n_written);
}

}  // namespace

int run_serve(const ServeOptions& o) {
  ServerOptions server_options = o.server;
  if (server_options.api_keys.empty() && server_options.host != "127.0.0.1" && server_options.host != "localhost" &&
      server_options.host != "::1")
    log_warn("serving on {} without --api-key: anyone who can reach it can use it", server_options.host);

  std::unique_ptr<Backend> backend = make_backend(o.backend, o.threads);
  std::unique_ptr<Model> model = load_model(o.model_dir, *backend, resolve_quantize(o.quantize));
  const ModelConfig config = model->config();
  const Tokenizer tokenizer = Tokenizer::load_or_throw(o.model_dir);
  PromptBuilderOptions prompt_options;
  if (!o.chat_template_file.empty()) prompt_options.template_override = read_file_or_throw(o.chat_template_file);
  prompt_options.encode_memo_capacity_bytes = static_cast<std::size_t>(o.prompt_memo_mb) << 20;
  const PromptBuilder prompts(tokenizer, prompt_options);

  EngineConfig engine_config;
  engine_config.block_size = o.block_size;
  engine_config.kv_dtype = resolve_kv_dtype(o.kv_dtype, *backend);
  const StepSizes steps = resolve_step_sizes(o.max_batch_tokens, o.prefill_chunk, *backend);
  const auto warm_start = std::chrono::steady_clock::now();
  backend->warm_up(steps.max_batch_tokens);  // before the KV pool takes the free memory
  log_info("warmed up for steps of up to {} tokens in {:.2f} s", steps.max_batch_tokens,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count());
  engine_config.scheduler.max_batch_tokens = steps.max_batch_tokens;
  engine_config.scheduler.max_prefill_chunk = steps.prefill_chunk;
  const std::int64_t block_bytes = kv_layout_for(config, 1, o.block_size, engine_config.kv_dtype).bytes();
  const KvPoolPlan pool = plan_kv_pool({.kv_cache_mb = o.kv_cache_mb,
                                        .gpu_memory_fraction = o.gpu_memory_fraction,
                                        .device = backend->device_memory(),
                                        .reserve_bytes = activation_reserve_bytes(config, steps.max_batch_tokens) +
                                                         state_layout_for(config, engine_config.scheduler.max_running).bytes(),
                                        .block_bytes = block_bytes});
  engine_config.n_blocks = pool.n_blocks;
  AgentIndex agents;
  std::string disk_unavailable;
  // Declared before the disk tier, so destroyed after it: the disk's IO thread still writes
  // blocks lent from host slots (DiskStore::put_lent) until it stops.
  std::unique_ptr<HostStore> host;
  const SpillCodec disk_codec = resolve_tier_codec("--kv-spill-codec", o.kv_spill_codec, *backend);
  KvStores stores = open_disk_tier(o, config, engine_config, disk_codec,
                                   prompt_options.template_override.value_or(""), disk_unavailable);
  std::unique_ptr<DiskStore>& disk = stores.disk;
  if (disk != nullptr)
    for (AgentRecord& r : disk->take_loaded_manifests()) agents.load(std::move(r));
  host = open_host_tier(o, config, engine_config, disk.get(), *backend);
  engine_config.agents = &agents;
  engine_config.host = host.get();
  engine_config.disk = disk.get();
  engine_config.restore_max_bytes =
      static_cast<std::size_t>(std::max<std::int64_t>(1, parse_byte_size(o.kv_restore_bytes, "--kv-restore-bytes")));
  engine_config.state_snapshot_bytes = parse_byte_size(o.state_snapshot_bytes, "--state-snapshot-bytes");
  engine_config.state_snapshot_interval = o.state_snapshot_interval;
  engine_config.state_codec = resolve_state_codec(o.kv_state_codec);
  Engine engine(std::move(model), *backend, engine_config);

  if (server_options.created_unix == 0) server_options.created_unix = static_cast<std::int64_t>(std::time(nullptr));
  const bool model_sampling = o.sampling_defaults == "model";
  const GenerationConfig generation = [&] {
    try {
      return read_generation_config(model_sidecar_dir(o.model_dir), model_sampling);
    } catch (const Error& e) {
      if (!model_sampling) throw;
      throw Error(e.kind(), std::string(e.what()) + " (--sampling-defaults api reads only its eos ids)");
    }
  }();
  if (model_sampling) {
    server_options.sampling_defaults = generation.sampling;
    if (!generation.sampling_fields.empty())
      log_info("sampling defaults from the model's generation_config.json: {} (--sampling-defaults api: the API's)",
               describe_sampling(generation));
  }
  ServingContext ctx{.engine = engine,
                     .tokenizer = tokenizer,
                     .prompts = prompts,
                     .options = server_options,
                     .stop_token_ids = stop_ids(generation, config, tokenizer),
                     .constraint_vocab = std::make_shared<const ConstraintVocab>(tokenizer),
                     .memory = {.agents = &agents, .host = host.get(), .disk = disk.get(), .remote = stores.remote.get(),
                                .device_block_bytes = block_bytes,
                                .disk_unavailable = disk_unavailable},
                     .connections = {}};
  Drainer drainer(ctx, disk.get(), stores.remote.get(), o.kv_flush_timeout_s);
  ctx.start_drain = [&drainer] { drainer.request(); };
  HttpServer server(ctx);
  const EngineMonitor monitor(engine, std::chrono::seconds(10));  // a log line every 10 s while busy
  server.bind();
  g_server = &server;
  g_drainer = &drainer;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGUSR1, on_drain_signal);
  log_info("serving {} ({}) on {} as '{}' on http://{}:{}", o.model_dir, config.architecture, backend->name(),
           server_options.served_model_name, server_options.host, server.port());
  log_info("KV cache: {} MiB of {} ({} blocks of {} tokens, {} bytes each; {}): {} tokens; model context {} tokens",
           pool.bytes >> 20, dtype_name(engine_config.kv_dtype), engine_config.n_blocks, engine_config.block_size,
           block_bytes, pool.how, engine.kv_capacity_tokens(), engine.model_context());
  log_info("engine steps: up to {} tokens, prompt chunks of up to {}", steps.max_batch_tokens, steps.prefill_chunk);
  if (host != nullptr)
    log_info("KV host tier: {} MiB, {} codec, {} bytes per block", host->stats().max_bytes >> 20,
             spill_codec_name(host->codec()), host->encoded_block_bytes());
  server.run();
  g_server = nullptr;
  g_drainer = nullptr;
  engine.stop();
  if (disk != nullptr) flush_disk_tier(engine, *disk, stores.remote.get(), o.kv_flush_timeout_s);
  log_info("stopped");
  return 0;
}

}  // namespace akv
