// Where PromptBuilder::build spends its time (ms), read at its phase edges: the request path's
// share of prepare (server/prepare_timing.h). Kept apart so that timing readers need not include
// the builder.
#pragma once

namespace akv {

struct BuildTiming {
  double context_ms = 0;  // normalizing the request, the template variables, remembered turns found
  double render_ms = 0;   // the template (and its rendering without the generation prompt, when needed)
  double splice_ms = 0;   // finding remembered turns in the rendered text
  double encode_ms = 0;   // tokenizing the text not spliced from remembered ids
};

}  // namespace akv
