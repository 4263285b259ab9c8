// `agentkv pull ORG/REPO[:QUANT][@REV]` and `--model ORG/REPO`: make the files a model needs
// present in the huggingface_hub cache and return its snapshot directory (a model directory
// load_model reads). Files already there (ours or another tool's) are not downloaded again;
// new ones are fetched in parallel, resumed after dropped connections, verified (SHA-256 or
// git blob SHA-1) and renamed into the cache only when whole and right.
#pragma once

#include <cstdint>
#include <string>

#include "hub/hub_client.h"
#include "hub/model_ref.h"

namespace akv {

struct PullResult {
  std::string dir;     // CACHE/models--ORG--REPO/snapshots/<commit>
  std::string commit;
  int n_files = 0;           // files the model needs
  int n_downloaded = 0;      // of them fetched now (the rest were in the cache)
  std::int64_t bytes_downloaded = 0;
  bool offline = false;      // resolved from the cache alone (HF_HUB_OFFLINE=1, or the hub unreachable)
};

struct PullOptions {
  int parallel_files = 4;     // files downloaded at once
  bool progress_on_terminal;  // draw a progress bar (stderr is a terminal)
};

// Throws Error: the hub's refusals (hub_client.h), a missing quantization naming those present
// (file_selection.h), a corrupted download (checksum mismatch; nothing is left in the cache),
// offline with the model not in the cache (how to fetch it), a full disk.
PullResult pull_model(const HubRef& ref, const HubSettings& settings, const PullOptions& options);

// The model directory for a --model value: `value` itself when it is a directory or not a hub
// id, else the pulled snapshot (logging what was fetched).
std::string resolve_model_dir(const std::string& value);

}  // namespace akv
