#include "app/pull_command.h"

#include <unistd.h>

#include <cstdio>

#include "base/log.h"
#include "hub/pull.h"

namespace akv {

int run_pull(const std::string& model) {
  const HubRef ref = parse_hub_ref(model);
  const HubSettings s = hub_settings_from_env();
  const PullResult r = pull_model(ref, s, {.parallel_files = 4, .progress_on_terminal = ::isatty(2) == 1});
  log_info("{}: {} files at commit {}: {} downloaded ({} bytes), {} already in the cache{}", model, r.n_files, r.commit,
           r.n_downloaded, r.bytes_downloaded, r.n_files - r.n_downloaded, r.offline ? " (offline)" : "");
  std::printf("%s\n", r.dir.c_str());
  return 0;
}

}  // namespace akv
